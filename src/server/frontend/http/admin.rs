//! The HTTP handlers of the server's administration extensions: the model
//! repository (index, load with overrides, unload), system and CUDA shared
//! memory, trace and logging settings.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use base64::Engine as _;
use serde_json::{json, Value};

use super::super::load_override;
use super::{model_and_version, ApiBody, ApiError, ApiResult, AppState, Params};
use crate::core::error::Error;
use crate::core::logging::{self, Setting};

/// Reads a JSON body that may be empty (the repository routes).
/// A request document's `parameters`: absent, or an object (anything else
/// is refused rather than ignored).
pub(super) fn parameters_of(req: &Value) -> ApiResult<Option<&serde_json::Map<String, Value>>> {
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

pub(super) fn optional_json(body: &Bytes) -> ApiResult<Value> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(json!({}));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError(Error::invalid_arg(format!(
            "failed to parse the request JSON buffer: {e}"
        )))
    })
}

pub(super) async fn repository_index(
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

pub(super) async fn repository_load(
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

pub(super) async fn repository_unload(
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

pub(super) async fn shm_status(
    State(s): State<AppState>,
    Params(p): Params,
) -> ApiResult<axum::Json<Value>> {
    let regions = s.engine.shm_status(p.get("region").map(String::as_str))?;
    Ok(axum::Json(Value::Array(
        regions
            .into_iter()
            .map(|r| json!({ "name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size }))
            .collect(),
    )))
}

/// A shared memory register request's `field`, or Triton's error for its
/// absence.
fn register_field<'a>(req: &'a Value, field: &str) -> ApiResult<&'a Value> {
    req.get(field).ok_or_else(|| no_field(field))
}

fn no_field(field: &str) -> ApiError {
    ApiError(Error::invalid_arg(format!(
        "Shared memory register request has no '{field}' field"
    )))
}

fn unable_to_parse(field: &str) -> ApiError {
    ApiError(Error::invalid_arg(format!("Unable to parse '{field}'")))
}

pub(super) async fn shm_register(
    State(s): State<AppState>,
    Params(p): Params,
    ApiBody(body): ApiBody,
) -> ApiResult<StatusCode> {
    let region = p.get("region").cloned().unwrap_or_default();
    let req = optional_json(&body)?;
    // Triton reads the key as a string member: anything else is absent.
    let key = req
        .get("key")
        .and_then(Value::as_str)
        .ok_or_else(|| no_field("key"))?;
    let offset = match req.get("offset") {
        None => 0,
        Some(v) => v.as_u64().ok_or_else(|| unable_to_parse("offset"))?,
    };
    let byte_size = register_field(&req, "byte_size")?
        .as_u64()
        .ok_or_else(|| unable_to_parse("byte_size"))?;
    s.engine.shm_register(&region, key, offset, byte_size)?;
    Ok(StatusCode::OK)
}

pub(super) async fn shm_unregister(
    State(s): State<AppState>,
    Params(p): Params,
) -> ApiResult<StatusCode> {
    s.engine
        .shm_unregister(p.get("region").map(String::as_str))?;
    Ok(StatusCode::OK)
}

// CUDA shared memory: regions on this server's GPUs; without a GPU,
// registration gets Triton's CPU-only answer and status lists none.
pub(super) async fn cuda_shm_status(
    State(s): State<AppState>,
    Params(p): Params,
) -> ApiResult<axum::Json<Value>> {
    let regions = s
        .engine
        .cuda_shm_status(p.get("region").map(String::as_str))?;
    Ok(axum::Json(Value::Array(
        regions
            .into_iter()
            .map(|r| json!({ "name": r.name, "device_id": r.device_id, "byte_size": r.byte_size }))
            .collect(),
    )))
}

pub(super) async fn cuda_shm_register(
    State(s): State<AppState>,
    Params(p): Params,
    ApiBody(body): ApiBody,
) -> ApiResult<StatusCode> {
    use base64::Engine as _;
    let region = p.get("region").cloned().unwrap_or_default();
    if s.engine.config().gpus.is_empty() {
        // Triton's CPU-only answer, whatever the body.
        return Err(ApiError(crate::core::shm::cuda_unsupported(&region)));
    }
    let req = optional_json(&body)?;
    let handle = register_field(&req, "raw_handle")?
        .get("b64")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ApiError(Error::invalid_arg(
                "Unable to parse 'raw_handle': expected {\"b64\": \"...\"}",
            ))
        })?;
    let handle = base64::engine::general_purpose::STANDARD
        .decode(handle)
        .map_err(|_| {
            ApiError(Error::invalid_arg(
                "Unable to parse 'raw_handle': not base64",
            ))
        })?;
    let device_id = register_field(&req, "device_id")?
        .as_i64()
        .ok_or_else(|| unable_to_parse("device_id"))?;
    let byte_size = register_field(&req, "byte_size")?
        .as_u64()
        .ok_or_else(|| unable_to_parse("byte_size"))?;
    s.engine
        .cuda_shm_register(&region, &handle, device_id, byte_size)?;
    Ok(StatusCode::OK)
}

pub(super) async fn cuda_shm_unregister(
    State(s): State<AppState>,
    Params(p): Params,
) -> ApiResult<StatusCode> {
    s.engine
        .cuda_shm_unregister(p.get("region").map(String::as_str))?;
    Ok(StatusCode::OK)
}

pub(super) fn trace_json(s: &crate::core::trace::TraceSettings) -> Value {
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

pub(super) async fn trace_settings(
    State(s): State<AppState>,
    Params(p): Params,
) -> ApiResult<axum::Json<Value>> {
    let settings = s
        .engine
        .trace_settings(p.get("model").map(String::as_str))?;
    Ok(axum::Json(trace_json(&settings)))
}

pub(super) async fn update_trace_settings(
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

pub(super) fn log_settings_json() -> Value {
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

pub(super) async fn log_settings() -> axum::Json<Value> {
    axum::Json(log_settings_json())
}

pub(super) async fn update_log_settings(ApiBody(body): ApiBody) -> ApiResult<axum::Json<Value>> {
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
