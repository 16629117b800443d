//! `POST /v2/models/{m}[/versions/{v}]/generate` and `.../generate_stream`:
//! Triton's `generate` extension (`protocol::generate` maps the JSON), for
//! any model, decoupled ones included.
//!
//! - `generate` answers once the request has ended: the one response (or
//!   error) as the body; with none or several, Triton's error `generate
//!   expects model to produce exactly 1 response ...`, under the status the
//!   first response set (200 when it succeeded), as Triton does.
//! - `generate_stream` answers with Server-Sent Events: each response as
//!   `data: <json>\n\n` the moment it comes, an error as `data:
//!   {"error":"..."}`, no `[DONE]`; the status is the first response's. An
//!   error before the model ran (a bad body, an unknown model, a missing
//!   input) is a plain JSON error. A client that closes the stream cancels
//!   the request.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;

use super::{
    forward_headers, model_and_version, status_of, trace_context, ApiBody, ApiError, ApiResult,
    AppState, Forward, Params,
};
use crate::core::error::{Error, Result};
use crate::core::types::InferResponse;
use crate::server::frontend::answers::{answers, Answers};
use crate::server::protocol::generate::{error_json, parse_request, response_json};

/// Triton's words when `generate` gets other than one response.
const NOT_ONE: &str = "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses";

fn json_body(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A response or an error as its JSON object.
fn answer_json(answer: &Result<InferResponse>) -> Vec<u8> {
    match answer {
        Ok(r) => response_json(r).unwrap_or_else(|e| error_json(&e)),
        Err(e) => error_json(e),
    }
}

fn status_for(answer: &Result<InferResponse>) -> StatusCode {
    match answer {
        Ok(_) => StatusCode::OK,
        Err(e) => status_of(e.kind),
    }
}

/// An error the model did not send: the request never ran (or the
/// backend failed under it).
fn refused(answer: &Result<InferResponse>) -> Option<&Error> {
    answer.as_ref().err().filter(|e| !e.answered)
}

/// The request a generate body makes for the path's model, running.
fn start(
    s: &AppState,
    p: &std::collections::HashMap<String, String>,
    headers: &HeaderMap,
    forward: Forward,
    body: &[u8],
) -> ApiResult<Answers> {
    let (name, version) = model_and_version(p);
    let model = s.engine.model(&name, &version)?;
    let mut request = parse_request(body, &model.config, s.max_input_size)?;
    forward_headers(forward, headers, &mut request.parameters);
    request.trace_context = trace_context(headers);
    Ok(answers(s.engine.clone(), model, request))
}

pub(super) async fn generate(
    State(s): State<AppState>,
    Params(p): Params,
    headers: HeaderMap,
    forward: Forward,
    ApiBody(body): ApiBody,
) -> ApiResult<Response> {
    let mut stream = start(&s, &p, &headers, forward, &body)?;
    let Some(first) = stream.next().await else {
        return Ok(json_body(
            StatusCode::OK,
            error_json(&Error::internal(NOT_ONE)),
        ));
    };
    let status = status_for(&first);
    // A second response decides the answer: dropping the stream cancels
    // the request, so a runaway decoupled model is not waited out (nor
    // its responses kept).
    if stream.next().await.is_some() {
        drop(stream);
        return Ok(json_body(status, error_json(&Error::internal(NOT_ONE))));
    }
    Ok(json_body(status, answer_json(&first)))
}

pub(super) async fn generate_stream(
    State(s): State<AppState>,
    Params(p): Params,
    headers: HeaderMap,
    forward: Forward,
    ApiBody(body): ApiBody,
) -> ApiResult<Response> {
    let mut stream = start(&s, &p, &headers, forward, &body)?;
    // The first response sets the status; until it comes nothing is sent.
    let first = stream.next().await;
    if let Some(e) = first.as_ref().and_then(refused) {
        return Err(ApiError(e.clone()));
    }
    let status = first.as_ref().map(status_for).unwrap_or(StatusCode::OK);
    let events = futures_util::stream::iter(first)
        .chain(stream)
        .map(|answer| sse_event(&answer_json(&answer)));
    Ok(sse_response(status, events))
}

/// A Server-Sent Events answer: `events` written as they come.
pub(crate) fn sse_response(
    status: StatusCode,
    events: impl futures_util::Stream<Item = Bytes> + Send + 'static,
) -> Response {
    let events = events.map(Ok::<_, std::convert::Infallible>);
    let mut r = Response::new(Body::from_stream(events));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// One Server-Sent Event carrying `json`.
pub(crate) fn sse_event(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}
