//! The legacy TRTIS v1 HTTP API under `/api/`, on the same port as v2:
//! health, status (text, JSON or binary `ServerStatus`), inference with
//! `NV-InferRequest` and raw tensors, model control, system shared memory,
//! the repository index, and 0.12's profile command.
//!
//! As TRTIS 1.11 answers: every answer carries `NV-Status` (the one-line
//! text of a `RequestStatus`); success is 200 and every failure 400 (405
//! for a wrong method); a path that does not match, or an inference whose
//! `NV-InferRequest` does not parse, is a bare 400 without `NV-Status`.

use std::collections::HashMap;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;

use super::AppState;
use crate::core::engine::Engine;
use crate::core::error::{Error, Result};
use crate::server::protocol::v1::{self, infer, pb, text, Api, API_STATS};

const NV_STATUS: &str = "nv-status";
const NV_INFER_REQUEST: &str = "nv-inferrequest";
const NV_INFER_RESPONSE: &str = "nv-inferresponse";

/// The v1 routes, to merge into the v2 router.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/health/{mode}", get(health))
        .route("/api/status", get(status))
        .route("/api/status/{model}", get(status))
        .route("/api/infer/{model}", post(infer_handler))
        .route("/api/infer/{model}/{version}", post(infer_handler))
        .route("/api/modelcontrol/{action}/{model}", post(model_control))
        .route("/api/sharedmemorycontrol/{*rest}", any(shm_control))
        .route("/api/repository/index", get(repository_index))
        .route("/api/profile", get(profile))
        .route("/api", any(no_route))
        .route("/api/{*rest}", any(no_route))
}

/// A path under `/api/` that matches no route: a bare 400, as TRTIS.
async fn no_route() -> StatusCode {
    StatusCode::BAD_REQUEST
}

fn status_value(engine: &Engine, result: std::result::Result<(), &Error>) -> HeaderValue {
    let status = v1::request_status(engine, result);
    HeaderValue::from_str(&text::request_status_line(&status))
        .unwrap_or_else(|_| HeaderValue::from_static("code: INTERNAL"))
}

/// An answer with `NV-Status`: 200 with `body` on success, else 400.
fn answer(engine: &Engine, result: Result<(HeaderMap, Bytes)>) -> Response {
    match result {
        Ok((headers, body)) => {
            let mut resp = (StatusCode::OK, headers, Body::from(body)).into_response();
            resp.headers_mut()
                .insert(NV_STATUS, status_value(engine, Ok(())));
            resp
        }
        Err(e) => {
            let mut resp = StatusCode::BAD_REQUEST.into_response();
            resp.headers_mut()
                .insert(NV_STATUS, status_value(engine, Err(&e)));
            resp
        }
    }
}

fn empty() -> (HeaderMap, Bytes) {
    (HeaderMap::new(), Bytes::new())
}

async fn health(State(s): State<AppState>, Path(mode): Path<String>) -> Response {
    let start = Instant::now();
    let healthy = match mode.as_str() {
        "live" => s.engine.live(),
        "ready" => s.engine.ready(),
        _ => return StatusCode::BAD_REQUEST.into_response(),
    };
    API_STATS.record(Api::Health, start.elapsed());
    let mut resp = answer(&s.engine, Ok(empty()));
    if !healthy {
        *resp.status_mut() = StatusCode::BAD_REQUEST;
    }
    resp
}

/// How a message goes out: `format=binary` / `json` / text (the default;
/// `Accept: application/json` without `format` asks for JSON).
#[derive(Clone, Copy, PartialEq)]
enum Format {
    Text,
    Json,
    Binary,
}

fn format_of(query: &HashMap<String, String>, headers: &HeaderMap, json_allowed: bool) -> Format {
    match query.get("format").map(String::as_str) {
        Some("binary") => Format::Binary,
        Some("json") if json_allowed => Format::Json,
        Some(_) => Format::Text,
        None if json_allowed
            && headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("application/json")) =>
        {
            Format::Json
        }
        None => Format::Text,
    }
}

fn render(message: &impl prost::Message, name: &str, format: Format) -> (HeaderMap, Bytes) {
    let (content_type, body) = match format {
        Format::Binary => ("application/octet-stream", message.encode_to_vec()),
        Format::Json => ("application/json", text::json(message, name).into_bytes()),
        Format::Text => ("text/plain", text::pretty(message, name).into_bytes()),
    };
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    (headers, Bytes::from(body))
}

async fn status(
    State(s): State<AppState>,
    model: Option<Path<String>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let start = Instant::now();
    let result = v1::server_status(&s.engine, model.as_ref().map(|Path(m)| m.as_str()))
        .map(|st| render(&st, "ServerStatus", format_of(&query, &headers, true)));
    if result.is_ok() {
        API_STATS.record(Api::Status, start.elapsed());
    }
    answer(&s.engine, result)
}

async fn repository_index(
    State(s): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let start = Instant::now();
    let result = v1::repository_index(&s.engine).map(|index| {
        render(
            &index,
            "ModelRepositoryIndex",
            format_of(&query, &headers, false),
        )
    });
    if result.is_ok() {
        API_STATS.record(Api::Repository, start.elapsed());
    }
    answer(&s.engine, result)
}

async fn profile(
    State(s): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let cmd = query.get("cmd").map(String::as_str).unwrap_or("");
    answer(&s.engine, v1::profile(cmd).map(|()| empty()))
}

async fn model_control(
    State(s): State<AppState>,
    Path((action, model)): Path<(String, String)>,
) -> Response {
    let start = Instant::now();
    let result = match action.as_str() {
        "load" => s.engine.load(&model).await,
        "unload" => s.engine.unload(&model).await,
        _ => return StatusCode::BAD_REQUEST.into_response(),
    };
    if result.is_ok() {
        API_STATS.record(Api::ModelControl, start.elapsed());
    }
    answer(&s.engine, result.map(|()| empty()))
}

/// `register/<name>/<key>/<offset>/<byte_size>` (the key keeps its leading
/// `/`), `cudaregister/<name>/<byte_size>/<device_id>` (as TRTIS 1.x's
/// client sends it), `unregister/<name>`,
/// `unregisterall` (POST), `status` (GET).
async fn shm_control(
    State(s): State<AppState>,
    Path(rest): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    request: Request,
) -> Response {
    let start = Instant::now();
    let is_get = request.method() == axum::http::Method::GET;
    let is_post = request.method() == axum::http::Method::POST;
    let headers = request.headers().clone();
    let (action, args) = rest.split_once('/').unwrap_or((rest.as_str(), ""));
    let method_ok = if action == "status" { is_get } else { is_post };
    if !method_ok {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let result: Result<(HeaderMap, Bytes)> = match action {
        "register" => {
            let Some((name, key, offset, size)) = register_args(args) else {
                return StatusCode::BAD_REQUEST.into_response();
            };
            s.engine
                .shm_register(name, key, offset, size)
                .map(|()| empty())
        }
        "cudaregister" => {
            // The body is the cudaIpcMemHandle_t itself.
            let Some((name, device_id, size)) = cuda_register_args(args) else {
                return StatusCode::BAD_REQUEST.into_response();
            };
            match axum::body::to_bytes(request.into_body(), 4096).await {
                Ok(handle) => s
                    .engine
                    .cuda_shm_register(name, &handle, device_id, size)
                    .map(|()| empty()),
                Err(_) => Err(crate::core::error::Error::invalid_arg(
                    "the CUDA IPC handle (the request body) could not be read",
                )),
            }
        }
        "unregister" if !args.is_empty() && !args.contains('/') => {
            s.engine.shm_unregister_any(Some(args)).map(|()| empty())
        }
        "unregisterall" if args.is_empty() => s.engine.shm_unregister_any(None).map(|()| empty()),
        "status" if args.is_empty() => v1::shm_regions(&s.engine).map(|regions| {
            let status = pb::SharedMemoryStatus {
                shared_memory_region: regions,
            };
            render(
                &status,
                "SharedMemoryStatus",
                format_of(&query, &headers, false),
            )
        }),
        _ => return StatusCode::BAD_REQUEST.into_response(),
    };
    if result.is_ok() {
        API_STATS.record(Api::ShmControl, start.elapsed());
    }
    answer(&s.engine, result)
}

/// `<name>/<byte_size>/<device_id>`.
fn cuda_register_args(args: &str) -> Option<(&str, i64, u64)> {
    let mut parts = args.split('/');
    let (name, size, device) = (parts.next()?, parts.next()?, parts.next()?);
    if name.is_empty() || parts.next().is_some() {
        return None;
    }
    Some((name, device.parse().ok()?, size.parse().ok()?))
}

fn register_args(args: &str) -> Option<(&str, &str, u64, u64)> {
    let (name, rest) = args.split_once('/')?;
    let (rest, size) = rest.rsplit_once('/')?;
    let (key, offset) = rest.rsplit_once('/')?;
    if name.is_empty() || key.is_empty() {
        return None;
    }
    Some((name, key, offset.parse().ok()?, size.parse().ok()?))
}

async fn infer_handler(
    State(s): State<AppState>,
    Path(path): Path<HashMap<String, String>>,
    Query(query): Query<HashMap<String, String>>,
    request: Request,
) -> Response {
    let model = path.get("model").cloned().unwrap_or_default();
    let version = path.get("version").cloned().unwrap_or_default();
    if !version.chars().all(|c| c.is_ascii_digit()) {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let Some(header) = request
        .headers()
        .get(NV_INFER_REQUEST)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| text::parse::<pb::InferRequestHeader>(v, "InferRequestHeader").ok())
    else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let binary = query.get("format").is_some_and(|f| f == "binary");
    let id = header.id;
    let result = async {
        // A gzip or deflate body (`Content-Encoding`) is decompressed, held
        // to --http-max-input-size as the v2 API holds it; another coding
        // is refused.
        let coding = super::encoding::request_coding(request.headers())
            .map_err(super::encoding::Unsupported::into_error)?;
        let body = match coding {
            None => axum::body::to_bytes(request.into_body(), s.max_input_size)
                .await
                .map_err(|_| {
                    Error::invalid_arg(format!(
                        "request body exceeds the maximum allowed size of {} bytes. Use --http-max-input-size to increase the limit.",
                        s.max_input_size
                    ))
                })?,
            Some(_) => {
                let declared = super::declared_length(request.headers(), s.max_input_size)
                    .map_err(|e| e.0)?;
                let (body, _) = super::read_parts(
                    request.into_body(),
                    usize::MAX,
                    declared,
                    s.max_input_size,
                    coding,
                )
                .await
                .map_err(|e| e.0)?;
                Bytes::from(body)
            }
        };
        infer::run(&s.engine, &model, &version, &header, infer::InputData::Body(&body)).await
    }
    .await;
    match result {
        Ok((response_header, raw)) => {
            let short = text::short(&response_header, "InferResponseHeader");
            let trailer = if binary {
                prost::Message::encode_to_vec(&response_header)
            } else {
                short.clone().into_bytes()
            };
            let mut body =
                Vec::with_capacity(raw.iter().map(Vec::len).sum::<usize>() + trailer.len());
            for r in raw {
                body.extend_from_slice(&r);
            }
            body.extend_from_slice(&trailer);
            let mut headers = HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            if let Ok(v) = HeaderValue::from_str(&short) {
                headers.insert(NV_INFER_RESPONSE, v);
            }
            answer(&s.engine, Ok((headers, Bytes::from(body))))
        }
        Err(e) => {
            let mut resp = answer(&s.engine, Err(e));
            let failed = text::short(&infer::failed_header(id), "InferResponseHeader");
            if let Ok(v) = HeaderValue::from_str(&failed) {
                resp.headers_mut().insert(NV_INFER_RESPONSE, v);
            }
            resp
        }
    }
}
