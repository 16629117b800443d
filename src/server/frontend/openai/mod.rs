//! The OpenAI-compatible API, served in-process on the HTTP port (or on a
//! port of its own, `--openai-port`): `GET /v1/models[/{m}]`,
//! `POST /v1/completions`, `POST /v1/chat/completions` (each streamed as
//! Server-Sent Events with `"stream": true`, ending `data: [DONE]`) and
//! `POST /v1/embeddings`, for the models whose config opts in
//! (`core::openai`: which tensors carry the text, the chat template).
//!
//! A request becomes one inference: the prompt (for chat, the messages
//! rendered by the model's template) in the text input; `max_tokens`
//! (default 16, as Triton's OpenAI frontend), `temperature`, `top_p`,
//! `seed`, `stop` (a JSON array as a string), `frequency_penalty`,
//! `presence_penalty` and `stream` as request parameters, for the model to
//! honour. Each response of the model is a chunk of the text; token counts
//! (`usage`) come from its `num_input_tokens` / `num_output_tokens`
//! outputs. What the server cannot honour (`n` > 1, `best_of` > 1,
//! `suffix`, `logprobs`, `logit_bias`, tools, a non-text
//! `response_format`) is refused, as is any field OpenAI does not define;
//! `user` is accepted and not used. Errors have OpenAI's shape, `{"error":
//! {"message", "type", "param", "code"}}`. A client that closes the stream
//! cancels the request.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Map, Value};

use super::http::{status_of, AppState};
use crate::core::error::{Error, ErrorKind};
use crate::core::openai::OpenAiModel;
use crate::core::repository::LoadedModel;

mod completions;
mod embeddings;

/// `max_tokens` when the request gives none (Triton's OpenAI frontend's
/// `--default-max-tokens`; OpenAI's own for completions).
const DEFAULT_MAX_TOKENS: i64 = 16;

/// The OpenAI routes, to merge into the HTTP router.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/models", get(list_models))
        .route("/v1/models/{model}", get(get_model))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/chat/completions", post(completions::chat_completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
}

/// The OpenAI API alone (`--openai-port`).
pub fn router(state: AppState) -> Router {
    routes()
        .fallback(|| async { OaiError::new(StatusCode::NOT_FOUND, "Not Found".to_string()) })
        .method_not_allowed_fallback(|| async {
            OaiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "Method Not Allowed".to_string(),
            )
        })
        .with_state(state)
}

/// An error as OpenAI sends one.
#[derive(Debug)]
pub struct OaiError {
    status: StatusCode,
    message: String,
    param: Option<String>,
    code: Option<&'static str>,
}

impl OaiError {
    fn new(status: StatusCode, message: String) -> Self {
        OaiError {
            status,
            message,
            param: None,
            code: None,
        }
    }

    fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message.into())
    }

    fn param(mut self, param: &str) -> Self {
        self.param = Some(param.to_string());
        self
    }

    fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    fn body(&self) -> Value {
        let kind = if self.status.is_server_error() {
            "server_error"
        } else {
            "invalid_request_error"
        };
        json!({ "error": {
            "message": self.message,
            "type": kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl From<Error> for OaiError {
    fn from(e: Error) -> Self {
        OaiError::new(status_of(e.kind), e.message)
    }
}

impl IntoResponse for OaiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

type OaiResult<T> = std::result::Result<T, OaiError>;

/// The request body as a JSON object, read up to `--http-max-input-size`.
async fn read_json(s: &AppState, headers: &HeaderMap, body: Body) -> OaiResult<Fields> {
    if let Some(coding) = headers.get(header::CONTENT_ENCODING) {
        if !coding.as_bytes().eq_ignore_ascii_case(b"identity") {
            return Err(OaiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "Content-Encoding '{}' is not supported",
                    String::from_utf8_lossy(coding.as_bytes())
                ),
            ));
        }
    }
    let too_large = || {
        OaiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "Request content size exceeds the maximum allowed value of {} bytes. Use --http-max-input-size to increase the limit.",
                s.max_input_size
            ),
        )
        .code("content_too_large")
    };
    // A body declared over the limit is refused before any of it is read.
    if super::http::content_length(headers).is_some_and(|n| n > s.max_input_size) {
        return Err(too_large());
    }
    let bytes = axum::body::to_bytes(body, s.max_input_size)
        .await
        .map_err(|_| too_large())?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(Fields(map)),
        Ok(_) => Err(OaiError::invalid("the request body must be a JSON object")),
        Err(e) => Err(OaiError::invalid(format!(
            "We could not parse the JSON body of your request: {e}"
        ))),
    }
}

/// A request's fields; a JSON null counts as absent.
struct Fields(Map<String, Value>);

impl Fields {
    /// Refuses a field the endpoint does not define, in OpenAI's words.
    fn only(&self, known: &[&str]) -> OaiResult<()> {
        match self.0.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(OaiError::invalid(format!(
                "Unrecognized request argument supplied: {k}"
            ))
            .param(k)),
            None => Ok(()),
        }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    fn wrong(key: &str, what: &str) -> OaiError {
        OaiError::invalid(format!("Invalid type for '{key}': expected {what}")).param(key)
    }

    fn string(&self, key: &str) -> OaiResult<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(Self::wrong(key, "a string")),
        }
    }

    fn bool(&self, key: &str) -> OaiResult<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(Self::wrong(key, "a boolean")),
        }
    }

    fn int(&self, key: &str) -> OaiResult<Option<i64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| Self::wrong(key, "an integer")),
        }
    }

    /// A number within `range`.
    fn number(&self, key: &str, range: std::ops::RangeInclusive<f64>) -> OaiResult<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => {
                let x = v.as_f64().ok_or_else(|| Self::wrong(key, "a number"))?;
                if !range.contains(&x) {
                    return Err(OaiError::invalid(format!(
                        "'{key}' must be between {} and {}, got {x}",
                        range.start(),
                        range.end()
                    ))
                    .param(key));
                }
                Ok(Some(x))
            }
        }
    }
}

/// The fields both completions and chat take.
const COMMON: [&str; 13] = [
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "n",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "user",
];

/// What a completion or chat request asks of the model.
struct Sampling {
    parameters: Map<String, Value>,
    max_tokens: i64,
    stream: bool,
    include_usage: bool,
}

fn sampling(f: &Fields, max_tokens_keys: &[&str]) -> OaiResult<Sampling> {
    let mut parameters = Map::new();
    let mut max_tokens = DEFAULT_MAX_TOKENS;
    for key in max_tokens_keys {
        if let Some(n) = f.int(key)? {
            if n < 0 {
                return Err(OaiError::invalid(format!("'{key}' must be at least 0")).param(key));
            }
            max_tokens = n;
            break;
        }
    }
    parameters.insert("max_tokens".into(), Value::from(max_tokens));
    for (key, range) in [
        ("temperature", 0.0..=2.0),
        ("top_p", 0.0..=1.0),
        ("frequency_penalty", -2.0..=2.0),
        ("presence_penalty", -2.0..=2.0),
    ] {
        if let Some(x) = f.number(key, range)? {
            // Nucleus sampling over no probability mass samples nothing
            // (vLLM refuses it too): a client mistake, not a model error.
            if key == "top_p" && x == 0.0 {
                return Err(OaiError::invalid(
                    "'top_p' must be greater than 0 and at most 1, got 0",
                )
                .param(key));
            }
            parameters.insert(key.into(), Value::from(x));
        }
    }
    if let Some(seed) = f.int("seed")? {
        parameters.insert("seed".into(), Value::from(seed));
    }
    let stop: Vec<&str> = match f.get("stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| Fields::wrong("stop", "a string or an array of strings"))
            })
            .collect::<OaiResult<_>>()?,
        Some(_) => return Err(Fields::wrong("stop", "a string or an array of strings")),
    };
    if stop.len() > 4 {
        return Err(OaiError::invalid("'stop' takes at most 4 sequences").param("stop"));
    }
    if !stop.is_empty() {
        // Triton's request parameters are strings, numbers or booleans.
        parameters.insert("stop".into(), Value::from(json!(stop).to_string()));
    }
    let stream = f.bool("stream")?.unwrap_or(false);
    parameters.insert("stream".into(), Value::from(stream));
    let include_usage = match f.get("stream_options") {
        None => false,
        Some(_) if !stream => {
            return Err(OaiError::invalid(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            )
            .param("stream_options"))
        }
        Some(Value::Object(o)) => {
            if let Some(k) = o.keys().find(|k| *k != "include_usage") {
                return Err(
                    OaiError::invalid(format!("Unrecognized stream option: {k}"))
                        .param("stream_options"),
                );
            }
            match o.get("include_usage") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(Fields::wrong("stream_options.include_usage", "a boolean")),
            }
        }
        Some(_) => return Err(Fields::wrong("stream_options", "an object")),
    };
    if f.int("n")?.is_some_and(|n| n != 1) {
        return Err(
            OaiError::invalid("only n = 1 is supported: one choice per request").param("n"),
        );
    }
    if f.get("logit_bias")
        .is_some_and(|b| b.as_object().is_none_or(|o| !o.is_empty()))
    {
        return Err(OaiError::invalid("logit_bias is not supported").param("logit_bias"));
    }
    f.string("user")?;
    Ok(Sampling {
        parameters,
        max_tokens,
        stream,
        include_usage,
    })
}

/// The model a request names, with what it serves of the API.
fn resolve(s: &AppState, f: &Fields) -> OaiResult<(Arc<LoadedModel>, Arc<OpenAiModel>)> {
    let name = f
        .string("model")?
        .ok_or_else(|| OaiError::invalid("you must provide a model parameter").param("model"))?;
    let model = s.engine.model(name, "").map_err(|e| match e.kind {
        ErrorKind::NotFound => OaiError::new(
            StatusCode::NOT_FOUND,
            format!("The model '{name}' does not exist"),
        )
        .param("model")
        .code("model_not_found"),
        _ => e.into(),
    })?;
    let spec = model.openai.clone().ok_or_else(|| {
        OaiError::invalid(format!(
            "The model '{name}' is not served through the OpenAI API: its config has no 'openai_text_input' parameter"
        ))
        .param("model")
        .code("model_not_supported")
    })?;
    Ok((model, spec))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A fresh id: `prefix` and 24 random hex digits.
fn new_id(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    let a = h.finish();
    h.write_u64(a);
    format!("{prefix}{a:016x}{:08x}", h.finish() as u32)
}

fn model_entry(name: &str, created: u64) -> Value {
    json!({ "id": name, "object": "model", "created": created, "owned_by": "trtis" })
}

fn started(s: &AppState) -> u64 {
    unix_now().saturating_sub(s.engine.uptime().as_secs())
}

async fn list_models(State(s): State<AppState>) -> axum::Json<Value> {
    let created = started(&s);
    let mut names: Vec<String> = s
        .engine
        .loaded_models()
        .iter()
        .filter(|m| m.openai.is_some())
        .map(|m| m.name.clone())
        .collect();
    names.dedup();
    axum::Json(json!({
        "object": "list",
        "data": names.iter().map(|n| model_entry(n, created)).collect::<Vec<_>>(),
    }))
}

async fn get_model(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> OaiResult<axum::Json<Value>> {
    match s.engine.model(&name, "") {
        Ok(m) if m.openai.is_some() => Ok(axum::Json(model_entry(&name, started(&s)))),
        _ => Err(OaiError::new(
            StatusCode::NOT_FOUND,
            format!("The model '{name}' does not exist"),
        )
        .param("model")
        .code("model_not_found")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ_and_have_the_prefix() {
        let (a, b) = (new_id("cmpl-"), new_id("cmpl-"));
        assert!(a.starts_with("cmpl-") && a.len() == 5 + 24, "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn sampling_fields_become_parameters() {
        let f = Fields(
            json!({"model": "m", "max_tokens": 5, "temperature": 0.5, "seed": 3,
                   "stop": "\n", "stream": true, "stream_options": {"include_usage": true}})
            .as_object()
            .unwrap()
            .clone(),
        );
        let s = sampling(&f, &["max_tokens"]).unwrap();
        assert_eq!(s.max_tokens, 5);
        assert!(s.stream && s.include_usage);
        assert_eq!(
            Value::Object(s.parameters),
            json!({"max_tokens": 5, "temperature": 0.5, "seed": 3, "stop": "[\"\\n\"]", "stream": true})
        );
        let refuse = |v: Value| {
            sampling(&Fields(v.as_object().unwrap().clone()), &["max_tokens"])
                .err()
                .unwrap()
                .message
        };
        assert!(refuse(json!({"n": 2})).contains("only n = 1"));
        assert!(refuse(json!({"temperature": 3})).contains("between 0 and 2"));
        assert!(refuse(json!({"stream_options": {"include_usage": true}}))
            .contains("only allowed when 'stream'"));
        assert!(refuse(json!({"logit_bias": {"1": 2}})).contains("logit_bias"));
        assert!(refuse(json!({"stop": [1]})).contains("Invalid type for 'stop'"));
    }
}
