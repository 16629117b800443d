//! The KServe v2 HTTP/REST API with Triton's routes and extensions (binary
//! tensor data, classification, model configuration, statistics, model
//! repository). A thin adapter: parse, call the engine, encode.

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine as _;
use serde_json::{json, Value};

use super::load_override;
use crate::core::engine::{Engine, TensorMetadata, EXTENSIONS};
use crate::core::error::{Error, ErrorKind};
use crate::core::logging::{self, Setting};
use crate::core::protocol::{config_json, kserve_json};
use crate::core::repository::LoadedModel;

/// The header that carries the JSON part's length in binary requests.
pub const HEADER_LENGTH: &str = "inference-header-content-length";

/// Shared state of the handlers.
#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    /// `--http-max-input-size`: the largest request body accepted.
    pub max_input_size: usize,
}

/// The one table from engine error kinds to HTTP status (Triton's
/// `HttpCodeFromError`).
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
        ErrorKind::Unknown
        | ErrorKind::InvalidArg
        | ErrorKind::AlreadyExists
        | ErrorKind::Cancelled => StatusCode::BAD_REQUEST,
    }
}

/// An engine error as `{"error": "..."}`.
pub struct ApiError(pub Error);

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            status_of(self.0.kind),
            axum::Json(json!({ "error": self.0.message })),
        )
            .into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// The metrics service (`/metrics` on `--metrics-port`).
pub fn metrics_router(engine: Engine) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(engine): State<Engine>| async move {
                let body = crate::core::metrics::render(&engine.loaded_models());
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    body,
                )
            }),
        )
        .with_state(engine)
}

/// The router: every route Triton serves that trtis implements.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .route("/v2", get(server_metadata))
        .route("/v2/models/stats", get(all_stats))
        .route("/v2/models/{model}", get(model_metadata))
        .route("/v2/models/{model}/versions/{version}", get(model_metadata))
        .route("/v2/models/{model}/ready", get(model_ready))
        .route(
            "/v2/models/{model}/versions/{version}/ready",
            get(model_ready),
        )
        .route("/v2/models/{model}/config", get(model_config))
        .route(
            "/v2/models/{model}/versions/{version}/config",
            get(model_config),
        )
        .route("/v2/models/{model}/stats", get(model_stats))
        .route(
            "/v2/models/{model}/versions/{version}/stats",
            get(model_stats),
        )
        .route("/v2/models/{model}/infer", post(infer))
        .route("/v2/models/{model}/versions/{version}/infer", post(infer))
        .route("/v2/systemsharedmemory/status", get(shm_status))
        .route(
            "/v2/systemsharedmemory/region/{region}/status",
            get(shm_status),
        )
        .route(
            "/v2/systemsharedmemory/region/{region}/register",
            post(shm_register),
        )
        .route(
            "/v2/systemsharedmemory/region/{region}/unregister",
            post(shm_unregister),
        )
        .route("/v2/systemsharedmemory/unregister", post(shm_unregister))
        .route("/v2/cudasharedmemory/status", get(cuda_shm_status))
        .route(
            "/v2/cudasharedmemory/region/{region}/status",
            get(cuda_shm_status),
        )
        .route(
            "/v2/cudasharedmemory/region/{region}/register",
            post(cuda_shm_register),
        )
        .route(
            "/v2/cudasharedmemory/region/{region}/unregister",
            post(cuda_shm_unregister),
        )
        .route("/v2/cudasharedmemory/unregister", post(cuda_shm_unregister))
        .route("/v2/logging", get(log_settings).post(update_log_settings))
        .route(
            "/v2/trace/setting",
            get(trace_settings).post(update_trace_settings),
        )
        .route(
            "/v2/models/{model}/trace/setting",
            get(trace_settings).post(update_trace_settings),
        )
        .route("/v2/repository/index", post(repository_index))
        .route("/v2/repository/models/{model}/load", post(repository_load))
        .route(
            "/v2/repository/models/{model}/unload",
            post(repository_unload),
        )
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                axum::Json(json!({ "error": "Not Found" })),
            )
        })
        .method_not_allowed_fallback(|| async {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                axum::Json(json!({ "error": "Method Not Allowed" })),
            )
        })
        .with_state(state)
}

/// The path parameters; a path that cannot be decoded (not UTF-8) is a 400
/// with a JSON error, like every other client mistake.
struct Params(HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map(|Path(p)| Params(p))
            .map_err(|e| ApiError(Error::invalid_arg(e.body_text())))
    }
}

/// A request body, read up to `--http-max-input-size`: refused at once when
/// its Content-Length says more (before any of it is read), or as soon as a
/// chunked body passes the limit; always with a JSON error.
struct ApiBody(Bytes);

impl FromRequest<AppState> for ApiBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, ApiError> {
        let too_large = |size: Option<usize>| {
            let what = match size {
                Some(n) => format!("Request JSON size of {n} bytes"),
                None => "Request body size".to_string(),
            };
            ApiError(Error::invalid_arg(format!(
                "{what} exceeds the maximum allowed value of {} bytes. Use --http-max-input-size to increase the limit.",
                s.max_input_size
            )))
        };
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > s.max_input_size) {
            return Err(too_large(declared));
        }
        axum::body::to_bytes(req.into_body(), s.max_input_size)
            .await
            .map(ApiBody)
            .map_err(|_| too_large(None))
    }
}

fn model_and_version(p: &HashMap<String, String>) -> (String, String) {
    (
        p.get("model").cloned().unwrap_or_default(),
        p.get("version").cloned().unwrap_or_default(),
    )
}

async fn live(State(s): State<AppState>) -> StatusCode {
    if s.engine.live() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    }
}

async fn ready(State(s): State<AppState>) -> StatusCode {
    if s.engine.ready() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    }
}

async fn server_metadata(State(s): State<AppState>) -> axum::Json<Value> {
    axum::Json(json!({
        "name": s.engine.config().id,
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": EXTENSIONS,
    }))
}

async fn model_ready(State(s): State<AppState>, Params(p): Params) -> Response {
    let (model, version) = model_and_version(&p);
    if s.engine.model_ready(&model, &version) {
        StatusCode::OK.into_response()
    } else {
        (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({ "error": "Model version not ready" })),
        )
            .into_response()
    }
}

async fn model_metadata(
    State(s): State<AppState>,
    Params(p): Params,
) -> ApiResult<axum::Json<Value>> {
    let (name, version) = model_and_version(&p);
    let meta = s.engine.model_metadata(&name, &version)?;
    let tensor =
        |t: &TensorMetadata| json!({ "name": t.name, "datatype": t.datatype, "shape": t.shape });
    Ok(axum::Json(json!({
        "name": meta.name,
        "versions": meta.versions,
        "platform": meta.platform,
        "inputs": meta.inputs.iter().map(tensor).collect::<Vec<_>>(),
        "outputs": meta.outputs.iter().map(tensor).collect::<Vec<_>>(),
    })))
}

async fn model_config(
    State(s): State<AppState>,
    Params(p): Params,
) -> ApiResult<axum::Json<Value>> {
    let (name, version) = model_and_version(&p);
    let model = s.engine.model(&name, &version)?;
    Ok(axum::Json(config_json::to_json(&model.config)?))
}

fn duration((count, ns): (u64, u64)) -> Value {
    json!({ "count": count, "ns": ns })
}

fn stats_json(m: &LoadedModel) -> Value {
    let st = m.stats.snapshot();
    let batch_stats: Vec<Value> = st
        .batches
        .iter()
        .map(|&(size, count, input, infer, output)| {
            json!({
                "batch_size": size,
                "compute_input": duration((count, input)),
                "compute_infer": duration((count, infer)),
                "compute_output": duration((count, output)),
            })
        })
        .collect();
    json!({
        "name": m.name,
        "version": m.version.to_string(),
        "last_inference": st.last_inference,
        "inference_count": st.inference_count,
        "execution_count": st.execution_count,
        "inference_stats": {
            "success": duration(st.success),
            "fail": duration(st.fail),
            "queue": duration(st.queue),
            "compute_input": duration(st.compute_input),
            "compute_infer": duration(st.compute_infer),
            "compute_output": duration(st.compute_output),
            "cache_hit": duration(st.cache_hit),
            "cache_miss": duration(st.cache_miss),
        },
        "batch_stats": batch_stats,
        "memory_usage": [],
    })
}

async fn model_stats(State(s): State<AppState>, Params(p): Params) -> ApiResult<axum::Json<Value>> {
    let (name, version) = model_and_version(&p);
    let stats: Vec<Value> = s
        .engine
        .model_stats(&name, &version)?
        .iter()
        .map(|m| stats_json(m))
        .collect();
    Ok(axum::Json(json!({ "model_stats": stats })))
}

async fn all_stats(State(s): State<AppState>) -> axum::Json<Value> {
    let stats: Vec<Value> = s
        .engine
        .loaded_models()
        .iter()
        .map(|m| stats_json(m))
        .collect();
    axum::Json(json!({ "model_stats": stats }))
}

/// Reads a JSON body that may be empty (the repository routes).
/// A request document's `parameters`: absent, or an object (anything else
/// is refused rather than ignored).
fn parameters_of(req: &Value) -> ApiResult<Option<&serde_json::Map<String, Value>>> {
    if !req.is_object() {
        return Err(ApiError(Error::invalid_arg(
            "the request body must be a JSON object",
        )));
    }
    match req.get("parameters") {
        None => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(_) => Err(ApiError(Error::invalid_arg(
            "'parameters' must be an object",
        ))),
    }
}

fn optional_json(body: &Bytes) -> ApiResult<Value> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(json!({}));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError(Error::invalid_arg(format!(
            "failed to parse the request JSON buffer: {e}"
        )))
    })
}

async fn repository_index(
    State(s): State<AppState>,
    ApiBody(body): ApiBody,
) -> ApiResult<axum::Json<Value>> {
    let req = optional_json(&body)?;
    let ready_only = req.get("ready").and_then(Value::as_bool).unwrap_or(false);
    let entries: Vec<Value> = s
        .engine
        .index(ready_only)?
        .into_iter()
        .map(|e| {
            // Triton lists a model that was never loaded by name only.
            if e.version.is_empty() && e.reason.is_empty() {
                return json!({ "name": e.name });
            }
            let mut v = json!({ "name": e.name, "state": e.state.name(), "reason": e.reason });
            if !e.version.is_empty() {
                v["version"] = json!(e.version);
            }
            v
        })
        .collect();
    Ok(axum::Json(Value::Array(entries)))
}

async fn repository_load(
    State(s): State<AppState>,
    Params(p): Params,
    ApiBody(body): ApiBody,
) -> ApiResult<StatusCode> {
    let req = optional_json(&body)?;
    let (name, _) = model_and_version(&p);
    let mut config = None;
    let mut files = Vec::new();
    for (key, value) in parameters_of(&req)?.into_iter().flatten() {
        if key == "config" {
            let text = value.as_str().ok_or_else(|| {
                ApiError(Error::invalid_arg(
                    "failed to parse the load parameter 'config': expected a string",
                ))
            })?;
            config = Some(text.to_string());
        } else if let Some(path) = key.strip_prefix("file:") {
            let bytes = value
                .as_str()
                .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
                .ok_or_else(|| {
                    ApiError(Error::invalid_arg(format!(
                        "failed to parse the load parameter '{key}': expected base64-encoded file contents"
                    )))
                })?;
            files.push((path.to_string(), bytes));
        } else {
            return Err(ApiError(Error::invalid_arg(format!(
                "unrecognized load parameter '{key}'."
            ))));
        }
    }
    let over = load_override(&name, config, files)?;
    s.engine.load_with(&name, over).await?;
    Ok(StatusCode::OK)
}

async fn repository_unload(
    State(s): State<AppState>,
    Params(p): Params,
    ApiBody(body): ApiBody,
) -> ApiResult<StatusCode> {
    let req = optional_json(&body)?;
    let mut dependents = false;
    for (key, value) in parameters_of(&req)?.into_iter().flatten() {
        match (key.as_str(), value.as_bool()) {
            ("unload_dependents", Some(b)) => dependents = b,
            ("unload_dependents", None) => {
                return Err(ApiError(Error::invalid_arg(
                    "invalid value type for 'unload_dependents' parameter, expected boolean.",
                )))
            }
            _ => {
                return Err(ApiError(Error::invalid_arg(format!(
                    "unrecognized unload parameter '{key}'."
                ))))
            }
        }
    }
    let (name, _) = model_and_version(&p);
    s.engine.unload_with(&name, dependents).await?;
    Ok(StatusCode::OK)
}

async fn shm_status(State(s): State<AppState>, Params(p): Params) -> ApiResult<axum::Json<Value>> {
    let regions = s.engine.shm_status(p.get("region").map(String::as_str))?;
    Ok(axum::Json(Value::Array(
        regions
            .into_iter()
            .map(|r| json!({ "name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size }))
            .collect(),
    )))
}

async fn shm_register(
    State(s): State<AppState>,
    Params(p): Params,
    ApiBody(body): ApiBody,
) -> ApiResult<StatusCode> {
    let region = p.get("region").cloned().unwrap_or_default();
    let req = optional_json(&body)?;
    let key = req.get("key").and_then(Value::as_str).ok_or_else(|| {
        ApiError(Error::invalid_arg(
            "Shared memory register request has no 'key' field",
        ))
    })?;
    let number = |field: &str, required: bool| -> ApiResult<u64> {
        match req.get(field) {
            None if !required => Ok(0),
            None => Err(ApiError(Error::invalid_arg(format!(
                "Shared memory register request has no '{field}' field"
            )))),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| ApiError(Error::invalid_arg(format!("Unable to parse '{field}'")))),
        }
    };
    let offset = number("offset", false)?;
    let byte_size = number("byte_size", true)?;
    s.engine.shm_register(&region, key, offset, byte_size)?;
    Ok(StatusCode::OK)
}

async fn shm_unregister(State(s): State<AppState>, Params(p): Params) -> StatusCode {
    s.engine.shm_unregister(p.get("region").map(String::as_str));
    StatusCode::OK
}

// CUDA shared memory: no GPU support in this build (Triton's CPU-only answers).
async fn cuda_shm_status(Params(p): Params) -> ApiResult<axum::Json<Value>> {
    if let Some(name) = p.get("region") {
        return Err(ApiError(Error::not_found(format!(
            "Unable to find cuda shared memory region: '{name}'"
        ))));
    }
    Ok(axum::Json(json!([])))
}

async fn cuda_shm_register(Params(p): Params) -> ApiResult<StatusCode> {
    Err(ApiError(crate::core::shm::cuda_unsupported(
        p.get("region").map(String::as_str).unwrap_or(""),
    )))
}

async fn cuda_shm_unregister() -> StatusCode {
    StatusCode::OK
}

fn trace_json(s: &crate::core::trace::TraceSettings) -> Value {
    let mut doc = serde_json::Map::new();
    for (key, values) in s.to_map() {
        // Triton answers lists for trace_level, single strings otherwise.
        let v = if key == "trace_level" {
            json!(values)
        } else {
            json!(values[0])
        };
        doc.insert(key.to_string(), v);
    }
    Value::Object(doc)
}

async fn trace_settings(
    State(s): State<AppState>,
    Params(p): Params,
) -> ApiResult<axum::Json<Value>> {
    let settings = s
        .engine
        .trace_settings(p.get("model").map(String::as_str))?;
    Ok(axum::Json(trace_json(&settings)))
}

async fn update_trace_settings(
    State(s): State<AppState>,
    Params(p): Params,
    ApiBody(body): ApiBody,
) -> ApiResult<axum::Json<Value>> {
    let req = optional_json(&body)?;
    let obj = req
        .as_object()
        .ok_or_else(|| ApiError(Error::invalid_arg("trace settings must be a JSON object")))?;
    let mut updates = std::collections::BTreeMap::new();
    for (key, value) in obj {
        let values = match value {
            Value::Null => None,
            Value::String(v) => Some(vec![v.clone()]),
            Value::Number(n) => Some(vec![n.to_string()]),
            Value::Array(items) => Some(
                items
                    .iter()
                    .map(|i| {
                        i.as_str().map(str::to_string).ok_or_else(|| {
                            ApiError(Error::invalid_arg(format!(
                                "invalid value for trace setting '{key}'"
                            )))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            _ => {
                return Err(ApiError(Error::invalid_arg(format!(
                    "invalid value for trace setting '{key}'"
                ))))
            }
        };
        updates.insert(key.clone(), values);
    }
    let settings = s
        .engine
        .update_trace_settings(p.get("model").map(String::as_str), &updates)?;
    Ok(axum::Json(trace_json(&settings)))
}

fn log_settings_json() -> Value {
    let mut doc = serde_json::Map::new();
    for (key, value) in logging::settings() {
        let v = match value {
            Setting::Bool(b) => json!(b),
            Setting::Uint(n) => json!(n),
            Setting::String(s) => json!(s),
        };
        doc.insert(key.to_string(), v);
    }
    Value::Object(doc)
}

async fn log_settings() -> axum::Json<Value> {
    axum::Json(log_settings_json())
}

async fn update_log_settings(ApiBody(body): ApiBody) -> ApiResult<axum::Json<Value>> {
    let req = optional_json(&body)?;
    let obj = req
        .as_object()
        .ok_or_else(|| ApiError(Error::invalid_arg("log settings must be a JSON object")))?;
    let mut updates = Vec::new();
    for (key, value) in obj {
        let setting = match value {
            Value::Bool(b) => Setting::Bool(*b),
            Value::Number(n) if n.as_u64().is_some_and(|n| n <= u32::MAX as u64) => {
                Setting::Uint(n.as_u64().unwrap() as u32)
            }
            Value::String(s) => Setting::String(s.clone()),
            _ => {
                return Err(ApiError(Error::invalid_arg(format!(
                    "invalid value for log setting '{key}'"
                ))))
            }
        };
        updates.push((key.clone(), setting));
    }
    logging::update(&updates)?;
    Ok(axum::Json(log_settings_json()))
}

async fn infer(
    State(s): State<AppState>,
    Params(p): Params,
    headers: HeaderMap,
    ApiBody(body): ApiBody,
) -> ApiResult<Response> {
    let (name, version) = model_and_version(&p);
    let header_length = match headers.get(HEADER_LENGTH) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or_else(|| {
                    ApiError(Error::invalid_arg(
                        "Inference-Header-Content-Length must be a non-negative integer",
                    ))
                })?,
        ),
    };
    let model = s.engine.model(&name, &version)?;
    let (request, format) = kserve_json::parse_request(&body, header_length, &model.config)?;
    s.engine.admit(&request)?;
    let response = s.engine.infer_on(model, request).await?;
    let (bytes, json_len) = kserve_json::build_response(&response, &format)?;
    let mut resp = Response::new(Body::from(bytes));
    let h = resp.headers_mut();
    match json_len {
        Some(len) => {
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            h.insert(HEADER_LENGTH, HeaderValue::from(len));
        }
        None => {
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
    }
    Ok(resp)
}
