//! The KServe v2 HTTP/REST API with Triton's routes and extensions (binary
//! tensor data, classification, model configuration, statistics, model
//! repository, `generate` and its Server-Sent Events stream). A thin
//! adapter: parse, call the engine, encode.

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

mod admin;
mod encoding;
mod generate;
pub(crate) use generate::{sse_event, sse_response};
pub mod v1;

use crate::core::engine::{Engine, TensorMetadata};
use crate::core::error::{Error, ErrorKind};
use crate::core::repository::LoadedModel;
use crate::server::protocol::{config_json, kserve_json};
use admin::*;

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

/// The metrics service (`/metrics` on `--metrics-port`): the machine's
/// readings are taken every `--metrics-interval-ms` on a thread that lives
/// as long as the router.
pub fn metrics_router(engine: Engine) -> Router {
    let sampler = crate::server::prometheus::Sampler::start(&engine.config().metrics);
    Router::new()
        .route(
            "/metrics",
            get(|State(engine): State<Engine>| async move {
                let mut body = crate::server::prometheus::render_with(
                    &engine.loaded_models(),
                    &engine.config().metrics,
                    &sampler.readings(),
                );
                if engine.config().trace.mode == crate::core::trace::TraceMode::OpenTelemetry {
                    body.push_str(&crate::core::trace::otel::metrics_text());
                }
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

/// The router: every route Triton serves that trtis implements, the
/// legacy v1 API's (`v1`), and `extra` (the OpenAI-compatible API's, when
/// it shares the port: `frontend::router`).
pub fn router_with(state: AppState, extra: Router<AppState>) -> Router {
    let routes = Router::new()
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .route("/v2", get(server_metadata))
        .route("/v2/trtis/devices", get(devices))
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
        .route("/v2/models/{model}/generate", post(generate::generate))
        .route(
            "/v2/models/{model}/versions/{version}/generate",
            post(generate::generate),
        )
        .route(
            "/v2/models/{model}/generate_stream",
            post(generate::generate_stream),
        )
        .route(
            "/v2/models/{model}/versions/{version}/generate_stream",
            post(generate::generate_stream),
        )
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
        .merge(v1::routes())
        .merge(extra);
    routes
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
/// chunked body passes the limit; always with a JSON error. A compressed
/// body (`Content-Encoding: gzip|deflate`) is decompressed, its output held
/// to the same limit; another coding is refused (415).
struct ApiBody(Bytes);

impl FromRequest<AppState> for ApiBody {
    type Rejection = Response;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, Response> {
        let coding =
            encoding::request_coding(req.headers()).map_err(IntoResponse::into_response)?;
        let declared = declared_length(req.headers(), s.max_input_size)
            .map_err(IntoResponse::into_response)?;
        match coding {
            None => axum::body::to_bytes(req.into_body(), s.max_input_size)
                .await
                .map(ApiBody)
                .map_err(|_| too_large(None, s.max_input_size).into_response()),
            Some(_) => read_parts(
                req.into_body(),
                usize::MAX,
                declared,
                s.max_input_size,
                coding,
            )
            .await
            .map(|(body, _)| ApiBody(Bytes::from(body)))
            .map_err(IntoResponse::into_response),
        }
    }
}

/// The refusal of a body larger than `--http-max-input-size` (`size`: its
/// declared length, when known).
fn too_large(size: Option<usize>, max: usize) -> ApiError {
    let what = match size {
        Some(n) => format!("Request JSON size of {n} bytes"),
        None => "Request body size".to_string(),
    };
    ApiError(Error::invalid_arg(format!(
        "{what} exceeds the maximum allowed value of {max} bytes. Use --http-max-input-size to increase the limit."
    )))
}

/// The body's declared Content-Length, when it has a readable one.
pub(crate) fn content_length(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
}

/// The body's Content-Length, refused at once when it says more than `max`.
fn declared_length(headers: &HeaderMap, max: usize) -> Result<Option<usize>, ApiError> {
    let declared = content_length(headers);
    if declared.is_some_and(|n| n > max) {
        return Err(too_large(declared, max));
    }
    Ok(declared)
}

/// An inference request's body read off the connection in two parts: its
/// first `split` bytes (the JSON part) and the rest (the binary tensors),
/// each copied once from the connection's buffers into a buffer of its own
/// sized from Content-Length, so the binary part can become a tensor's data
/// as it is (reading the body whole and copying the tensors out of it cost
/// a second copy of every byte: measured 37 against 65 infer/s for the bare
/// echo floor with a 16 MB input). Refused as `ApiBody` is past `max`.
///
/// A compressed body (`coding`) is decompressed as it arrives and the split
/// applies to the decompressed bytes (Inference-Header-Content-Length
/// counts them, as tritonclient computes it before compressing); both the
/// body as sent and its decompressed bytes are held to `max`.
async fn read_parts(
    body: Body,
    split: usize,
    declared: Option<usize>,
    max: usize,
    coding: Option<encoding::Coding>,
) -> Result<(Vec<u8>, Vec<u8>), ApiError> {
    use futures_util::StreamExt;
    // Room for what Content-Length says (at most `max`, checked before):
    // reserved, not touched, so a client that declares more than it sends
    // costs address space, not memory. A compressed body's decompressed
    // size is not known: its buffers grow.
    let expected = if coding.is_none() {
        declared.unwrap_or(0).min(max)
    } else {
        0
    };
    let mut parts = BodyParts {
        head: Vec::with_capacity(split.min(expected)),
        tail: Vec::with_capacity(expected.saturating_sub(split)),
        split,
        max,
        inflated: coding.is_some(),
    };
    let mut inflater = coding.map(encoding::Inflater::new);
    let mut total = 0usize;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError(Error::invalid_arg(format!(
                "failed to read the request body: {e}"
            )))
        })?;
        total += chunk.len();
        if total > max {
            return Err(too_large(None, max));
        }
        match &mut inflater {
            None => parts.push(&chunk)?,
            Some(inflater) => inflater.feed(&chunk, &mut |out| parts.push(out))?,
        }
    }
    if let Some(inflater) = &inflater {
        inflater.finish()?;
    }
    Ok((parts.head, parts.tail))
}

/// Where `read_parts` puts a body: its first `split` bytes in `head`, the
/// rest in `tail`, at most `max` in all (`inflated`: decompressed bytes).
struct BodyParts {
    head: Vec<u8>,
    tail: Vec<u8>,
    split: usize,
    max: usize,
    inflated: bool,
}

impl BodyParts {
    fn push(&mut self, mut rest: &[u8]) -> Result<(), ApiError> {
        if self.head.len() + self.tail.len() + rest.len() > self.max {
            return Err(if self.inflated {
                ApiError(Error::invalid_arg(format!(
                    "Decompressed request body size exceeds the maximum allowed value of {} bytes. Use --http-max-input-size to increase the limit.",
                    self.max
                )))
            } else {
                too_large(None, self.max)
            });
        }
        if self.head.len() < self.split {
            let n = (self.split - self.head.len()).min(rest.len());
            self.head.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
        }
        self.tail.extend_from_slice(rest);
        Ok(())
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
        "extensions": s.engine.extensions(),
    }))
}

/// trtis's own (not Triton's): the GPUs found, which the server uses, and
/// why there is none. `trtis status` shows it.
async fn devices(State(s): State<AppState>) -> axum::Json<Value> {
    let (found, used) = s.engine.gpus();
    let gpus: Vec<Value> = found
        .gpus
        .iter()
        .map(|g| {
            json!({
                "id": g.id,
                "name": g.name,
                "uuid": g.uuid,
                "memory_total": g.memory_total,
                "compute_capability": format!("{}.{}", g.compute_capability.0, g.compute_capability.1),
                "used": used.contains(&g.id),
            })
        })
        .collect();
    axum::Json(json!({ "gpus": gpus, "no_gpu_reason": found.none_because }))
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
        "memory_usage": st
            .memory_usage
            .iter()
            .map(|u| json!({ "type": u.kind, "id": u.id, "byte_size": u.byte_size }))
            .collect::<Vec<Value>>(),
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

/// `--http-header-forward-pattern`, when given.
pub(crate) type Forward = Option<axum::Extension<std::sync::Arc<super::forward::HeaderForward>>>;

/// `--http-header-forward-pattern`: matching headers become parameters
/// (those the request sets win).
/// The caller's W3C trace context (`traceparent`, `tracestate`), if any.
pub(crate) fn trace_context(headers: &HeaderMap) -> Option<crate::core::types::TraceContext> {
    crate::core::types::TraceContext::from_headers(|name| headers.get(name).map(|v| v.as_bytes()))
}

pub(crate) fn forward_headers(
    forward: Forward,
    headers: &HeaderMap,
    parameters: &mut serde_json::Map<String, Value>,
) {
    if let Some(axum::Extension(forward)) = forward {
        forward.apply(
            headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())),
            parameters,
        );
    }
}

/// The largest response compressed on an async worker; a larger one is
/// compressed on the blocking pool.
const COMPRESS_INLINE: usize = 64 * 1024;

async fn infer(
    State(s): State<AppState>,
    Params(p): Params,
    headers: HeaderMap,
    forward: Forward,
    body: Body,
) -> ApiResult<Response> {
    let coding = match encoding::request_coding(&headers) {
        Ok(coding) => coding,
        Err(refusal) => return Ok(refusal.into_response()),
    };
    let declared = declared_length(&headers, s.max_input_size)?;
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
    if model.decoupled() {
        return Err(ApiError(Error::unsupported(
            "HTTP end point doesn't support models with decoupled transaction policy",
        )));
    }
    let (mut request, format) = match header_length {
        Some(0) => {
            let (_, body) = read_parts(body, 0, declared, s.max_input_size, coding).await?;
            kserve_json::parse_raw_request(body, &model.config)?
        }
        Some(split) => {
            let (head, binary) =
                read_parts(body, split, declared, s.max_input_size, coding).await?;
            if head.len() < split {
                // parse_request words it.
                kserve_json::parse_request(&head, Some(split), &model.config)?
            } else {
                kserve_json::parse_binary_request(&head, binary, &model.config)?
            }
        }
        None => {
            let (body, _) =
                read_parts(body, usize::MAX, declared, s.max_input_size, coding).await?;
            kserve_json::parse_request(&body, None, &model.config)?
        }
    };
    forward_headers(forward, &headers, &mut request.parameters);
    request.trace_context = trace_context(&headers);
    s.engine.admit(&request)?;
    let response = s.engine.infer_on(model, request).await?;
    let (pieces, json_len) = kserve_json::build_response(response, &format)?;
    let mut length: usize = pieces.iter().map(|p| p.len()).sum();
    let answer_in = encoding::response_coding(&headers);
    let body = if let Some(coding) = answer_in {
        // Compressed as Accept-Encoding asks, as Triton does; a large body
        // off the async workers. Inference-Header-Content-Length still
        // counts the JSON part of the decompressed body.
        let packed = if length > COMPRESS_INLINE {
            tokio::task::spawn_blocking(move || encoding::compress(&pieces, coding))
                .await
                .map_err(|e| ApiError(Error::internal(format!("compressing the response: {e}"))))?
        } else {
            encoding::compress(&pieces, coding)
        }
        .map_err(|e| ApiError(Error::internal(format!("compressing the response: {e}"))))?;
        length = packed.len();
        Body::from(packed)
    } else if pieces.len() == 1 {
        Body::from(pieces.into_iter().next().unwrap_or_default())
    } else {
        // The pieces go out one after the other (a binary output is sent
        // from the tensor's own buffer); the length is known up front.
        Body::from_stream(futures_util::stream::iter(
            pieces.into_iter().map(Ok::<_, std::convert::Infallible>),
        ))
    };
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    if let Some(coding) = answer_in {
        h.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static(coding.name()),
        );
        h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
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
