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

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::StreamExt;
use serde_json::{json, Map, Value};

use super::answers::{answers, Answers};
use super::http::{
    forward_headers, sse_event, sse_response, status_of, trace_context, AppState, Forward,
};
use crate::core::error::{Error, ErrorKind, Result};
use crate::core::openai::OpenAiModel;
use crate::core::protocol::generate::bytes_input;
use crate::core::protocol::kserve_json::json_values;
use crate::core::repository::LoadedModel;
use crate::core::types::{DataType, InferRequest, InferResponse, Tensor};

/// `max_tokens` when the request gives none (Triton's OpenAI frontend's
/// `--default-max-tokens`; OpenAI's own for completions).
const DEFAULT_MAX_TOKENS: i64 = 16;

/// The OpenAI routes, to merge into the HTTP router.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/models", get(list_models))
        .route("/v1/models/{model}", get(get_model))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/embeddings", post(embeddings))
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

/// The first element of a one-element tensor as an integer.
fn count_of(t: &Tensor) -> Option<u64> {
    match json_values(t).ok()? {
        Value::Array(v) => v.first()?.as_u64(),
        _ => None,
    }
}

/// What one response of the model adds: its text and its token counts.
struct Piece {
    text: String,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

fn piece(r: &InferResponse, spec: &OpenAiModel) -> Piece {
    let named = |name: &str| r.outputs.iter().find(|t| t.name == name);
    let text = spec
        .text_output
        .as_deref()
        .and_then(named)
        .filter(|t| t.datatype == DataType::Bytes)
        .and_then(|t| {
            Tensor::bytes_elements(&t.data).ok().map(|e| {
                e.iter()
                    .map(|b| String::from_utf8_lossy(b))
                    .collect::<String>()
            })
        })
        .unwrap_or_default();
    Piece {
        text,
        input_tokens: named("num_input_tokens").and_then(count_of),
        output_tokens: named("num_output_tokens").and_then(count_of),
    }
}

/// The token counts of a request so far.
#[derive(Default)]
struct Usage {
    prompt: u64,
    completion: u64,
}

impl Usage {
    fn add(&mut self, p: &Piece) {
        self.prompt = self.prompt.max(p.input_tokens.unwrap_or(0));
        self.completion += p.output_tokens.unwrap_or(0);
    }

    fn json(&self, counted: bool) -> Value {
        if !counted {
            return Value::Null;
        }
        json!({
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": self.prompt + self.completion,
        })
    }

    /// `length` when the model made all the tokens it was allowed.
    fn finish_reason(&self, counted: bool, max_tokens: i64) -> &'static str {
        if counted && self.completion >= max_tokens.max(0) as u64 {
            "length"
        } else {
            "stop"
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Completion,
    Chat,
}

/// The parts of a completion every chunk repeats.
struct Head {
    kind: Kind,
    id: String,
    created: u64,
    model: String,
}

impl Head {
    /// A new completion's: a fresh id (`cmpl-`, `chatcmpl-`), made now.
    fn new(kind: Kind, model: &str) -> Head {
        let prefix = match kind {
            Kind::Completion => "cmpl-",
            Kind::Chat => "chatcmpl-",
        };
        Head {
            kind,
            id: new_id(prefix),
            created: unix_now(),
            model: model.to_string(),
        }
    }

    fn object(&self, stream: bool) -> &'static str {
        match (self.kind, stream) {
            (Kind::Completion, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        }
    }

    fn envelope(&self, stream: bool, choices: Value) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("id".into(), Value::from(self.id.as_str()));
        m.insert("object".into(), Value::from(self.object(stream)));
        m.insert("created".into(), Value::from(self.created));
        m.insert("model".into(), Value::from(self.model.as_str()));
        m.insert("system_fingerprint".into(), Value::Null);
        m.insert("choices".into(), choices);
        m
    }

    /// A streamed chunk: `text` (chat: the delta's content; `role` on the
    /// first) and the finish reason on the last.
    fn chunk(&self, text: Option<&str>, role: bool, finish: Option<&str>) -> Bytes {
        let choice = match self.kind {
            Kind::Completion => json!({
                "index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish,
            }),
            Kind::Chat => {
                let mut delta = Map::new();
                if role {
                    delta.insert("role".into(), Value::from("assistant"));
                }
                if let Some(t) = text {
                    delta.insert("content".into(), Value::from(t));
                }
                json!({ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish })
            }
        };
        event(&Value::Object(self.envelope(true, json!([choice]))))
    }
}

fn event(v: &Value) -> Bytes {
    sse_event(v.to_string().as_bytes())
}

/// A completion request made ready to run: the prompt, what to ask, and
/// how to answer.
struct Job {
    model: Arc<LoadedModel>,
    spec: Arc<OpenAiModel>,
    prompt: String,
    sampling: Sampling,
    head: Head,
    /// Completions' `echo`: the prompt starts the text.
    echo: bool,
}

async fn run(s: AppState, job: Job, headers: &HeaderMap, forward: Forward) -> OaiResult<Response> {
    let text_input = &job.spec.text_input;
    let mut request = InferRequest {
        inputs: vec![bytes_input(
            &job.model.config,
            text_input,
            job.prompt.as_bytes(),
        )?],
        parameters: job.sampling.parameters.clone(),
        ..Default::default()
    };
    // --http-header-forward-pattern: matching headers become parameters.
    forward_headers(forward, headers, &mut request.parameters);
    request.trace_context = trace_context(headers);
    let mut stream = answers(s.engine.clone(), Arc::clone(&job.model), request);
    if job.sampling.stream {
        // The first response sets the status: an error before any text is
        // an ordinary error answer.
        let first = stream.next().await;
        if let Some(Err(e)) = first {
            return Err(e.into());
        }
        return Ok(sse(job, first, stream));
    }
    let mut usage = Usage::default();
    let mut text = if job.echo {
        job.prompt.clone()
    } else {
        String::new()
    };
    while let Some(answer) = stream.next().await {
        let p = piece(&answer?, &job.spec);
        usage.add(&p);
        text.push_str(&p.text);
    }
    let counted = job.spec.counts_tokens;
    let finish = usage.finish_reason(counted, job.sampling.max_tokens);
    let choice = match job.head.kind {
        Kind::Completion => {
            json!({ "index": 0, "text": text, "logprobs": null, "finish_reason": finish })
        }
        Kind::Chat => json!({
            "index": 0,
            "message": { "role": "assistant", "content": text },
            "logprobs": null,
            "finish_reason": finish,
        }),
    };
    let mut body = job.head.envelope(false, json!([choice]));
    body.insert("usage".into(), usage.json(counted));
    Ok(axum::Json(Value::Object(body)).into_response())
}

/// The streamed answer: a chunk per response, a last chunk with the
/// finish reason, the usage chunk when asked, then `[DONE]`; an error
/// after the first chunk as an `{"error": ...}` event that ends it.
fn sse(job: Job, first: Option<Result<InferResponse>>, rest: Answers) -> Response {
    struct State {
        job: Job,
        first: Option<Result<InferResponse>>,
        rest: Answers,
        usage: Usage,
        opened: bool,
        over: bool,
    }
    let state = State {
        job,
        first,
        rest,
        usage: Usage::default(),
        opened: false,
        over: false,
    };
    let events = futures_util::stream::unfold(state, |mut st| async move {
        if st.over {
            return None;
        }
        let mut out: Vec<Bytes> = Vec::new();
        if !st.opened {
            st.opened = true;
            let head = &st.job.head;
            if head.kind == Kind::Chat {
                out.push(head.chunk(Some(""), true, None));
            }
            if st.job.echo && !st.job.prompt.is_empty() {
                out.push(head.chunk(Some(&st.job.prompt), false, None));
            }
        }
        let next = match st.first.take() {
            Some(a) => Some(a),
            None => st.rest.next().await,
        };
        let head = &st.job.head;
        let counted = st.job.spec.counts_tokens;
        match next {
            Some(Ok(r)) => {
                let p = piece(&r, &st.job.spec);
                st.usage.add(&p);
                if !p.text.is_empty() {
                    out.push(head.chunk(Some(&p.text), false, None));
                }
            }
            Some(Err(e)) => {
                out.push(event(&OaiError::from(e).body()));
                st.over = true;
            }
            None => {
                let finish = st.usage.finish_reason(counted, st.job.sampling.max_tokens);
                out.push(head.chunk(None, false, Some(finish)));
                if st.job.sampling.include_usage {
                    let mut last = head.envelope(true, json!([]));
                    last.insert("usage".into(), st.usage.json(counted));
                    out.push(event(&Value::Object(last)));
                }
                out.push(Bytes::from_static(b"data: [DONE]\n\n"));
                st.over = true;
            }
        }
        Some((out, st))
    })
    .flat_map(futures_util::stream::iter);
    sse_response(StatusCode::OK, events)
}

/// What a text request needs of its model: a text output.
fn needs_text(f: &Fields, spec: &OpenAiModel) -> OaiResult<()> {
    if spec.text_output.is_none() {
        let name = f.string("model")?.unwrap_or_default();
        return Err(OaiError::invalid(format!(
            "The model '{name}' makes embeddings only: its config has no 'openai_text_output' parameter"
        ))
        .param("model")
        .code("model_not_supported"));
    }
    Ok(())
}

async fn completions(
    State(s): State<AppState>,
    headers: HeaderMap,
    forward: Forward,
    body: Body,
) -> OaiResult<Response> {
    let f = read_json(&s, &headers, body).await?;
    let mut known = COMMON.to_vec();
    known.extend(["prompt", "echo", "suffix", "logprobs", "best_of"]);
    f.only(&known)?;
    let (model, spec) = resolve(&s, &f)?;
    needs_text(&f, &spec)?;
    let prompt = match f.get("prompt") {
        Some(Value::String(p)) => p.clone(),
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
            items[0].as_str().unwrap_or_default().to_string()
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
            return Err(OaiError::invalid(
                "'prompt' must be one string: batches of prompts are not supported",
            )
            .param("prompt"))
        }
        Some(_) => {
            return Err(OaiError::invalid(
                "'prompt' must be a string: token arrays are not supported",
            )
            .param("prompt"))
        }
        None => return Err(OaiError::invalid("'prompt' is required").param("prompt")),
    };
    if f.string("suffix")?.is_some_and(|s| !s.is_empty()) {
        return Err(OaiError::invalid("suffix is not supported").param("suffix"));
    }
    if f.get("logprobs").is_some() {
        return Err(OaiError::invalid("logprobs are not supported").param("logprobs"));
    }
    if f.int("best_of")?.is_some_and(|n| n != 1) {
        return Err(OaiError::invalid("only best_of = 1 is supported").param("best_of"));
    }
    let sampling = sampling(&f, &["max_tokens"])?;
    let echo = f.bool("echo")?.unwrap_or(false);
    let job = Job {
        head: Head::new(Kind::Completion, &model.name),
        model,
        spec,
        prompt,
        sampling,
        echo,
    };
    run(s, job, &headers, forward).await
}

/// A message's content as text (a string, or text parts).
fn message_text(content: &Value) -> OaiResult<String> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        text.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""))
                    }
                    other => {
                        return Err(OaiError::invalid(format!(
                            "only text message is supported, but got {}",
                            other.unwrap_or("a part without a type")
                        ))
                        .param("messages"))
                    }
                }
            }
            Ok(text)
        }
        _ => Err(Fields::wrong(
            "messages[].content",
            "a string or an array of parts",
        )),
    }
}

async fn chat_completions(
    State(s): State<AppState>,
    headers: HeaderMap,
    forward: Forward,
    body: Body,
) -> OaiResult<Response> {
    let f = read_json(&s, &headers, body).await?;
    let mut known = COMMON.to_vec();
    known.extend([
        "messages",
        "max_completion_tokens",
        "logprobs",
        "top_logprobs",
        "response_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "functions",
        "function_call",
    ]);
    f.only(&known)?;
    let (model, spec) = resolve(&s, &f)?;
    needs_text(&f, &spec)?;
    for key in [
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "parallel_tool_calls",
    ] {
        if f.get(key).is_some() {
            return Err(OaiError::invalid("tools and function calls are not supported").param(key));
        }
    }
    if f.bool("logprobs")?.unwrap_or(false) || f.get("top_logprobs").is_some() {
        return Err(OaiError::invalid("logprobs are not supported").param("logprobs"));
    }
    if let Some(format) = f.get("response_format") {
        if format.get("type").and_then(Value::as_str) != Some("text") {
            return Err(
                OaiError::invalid("only the 'text' response_format is supported")
                    .param("response_format"),
            );
        }
    }
    let Some(template) = spec.chat_template.as_ref() else {
        return Err(OaiError::invalid(format!(
            "The model '{}' has no chat template: its config has no 'openai_chat_template' parameter",
            model.name
        ))
        .param("model")
        .code("model_not_supported"));
    };
    let Some(Value::Array(messages)) = f.get("messages") else {
        return Err(OaiError::invalid("'messages' must be an array of messages").param("messages"));
    };
    if messages.is_empty() {
        return Err(OaiError::invalid("'messages' must not be empty").param("messages"));
    }
    let mut conversation = Vec::with_capacity(messages.len());
    for m in messages {
        let Some(role) = m.get("role").and_then(Value::as_str) else {
            return Err(OaiError::invalid("each message needs a 'role'").param("messages"));
        };
        let mut message = Map::new();
        message.insert("role".into(), Value::from(role));
        message.insert(
            "content".into(),
            Value::from(message_text(m.get("content").unwrap_or(&Value::Null))?),
        );
        if let Some(name) = m.get("name").and_then(Value::as_str) {
            message.insert("name".into(), Value::from(name));
        }
        conversation.push(Value::Object(message));
    }
    let prompt = template
        .render(&Value::Array(conversation))
        .map_err(|e| OaiError::invalid(e).param("messages"))?;
    let sampling = sampling(&f, &["max_completion_tokens", "max_tokens"])?;
    let job = Job {
        head: Head::new(Kind::Chat, &model.name),
        model,
        spec,
        prompt,
        sampling,
        echo: false,
    };
    run(s, job, &headers, forward).await
}

use futures_util::TryStreamExt as _;

async fn embeddings(
    State(s): State<AppState>,
    headers: HeaderMap,
    forward: Forward,
    body: Body,
) -> OaiResult<Response> {
    let f = read_json(&s, &headers, body).await?;
    f.only(&["model", "input", "encoding_format", "dimensions", "user"])?;
    let (model, spec) = resolve(&s, &f)?;
    let Some(output) = spec.embedding_output.clone() else {
        return Err(OaiError::invalid(format!(
            "The model '{}' does not make embeddings: its config has no 'openai_embedding_output' parameter",
            model.name
        ))
        .param("model")
        .code("model_not_supported"));
    };
    let inputs: Vec<String> = match f.get("input") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(items)) if items.len() > MAX_EMBEDDING_INPUTS => {
            return Err(OaiError::invalid(format!(
                "'input' may hold at most {MAX_EMBEDDING_INPUTS} texts, got {}",
                items.len()
            ))
            .param("input"))
        }
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_string) => {
            items
                .iter()
                .map(|v| v.as_str().unwrap_or_default().to_string())
                .collect()
        }
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(OaiError::invalid("'input' must not be empty").param("input"))
        }
        Some(_) => {
            return Err(OaiError::invalid(
                "'input' must be a string or an array of strings: token arrays are not supported",
            )
            .param("input"))
        }
        None => return Err(OaiError::invalid("'input' is required").param("input")),
    };
    if let Some(i) = inputs.iter().position(|t| t.len() > MAX_EMBEDDING_TEXT) {
        return Err(OaiError::invalid(format!(
            "input {i} is {} bytes long; an input may be at most {MAX_EMBEDDING_TEXT} bytes",
            inputs[i].len()
        ))
        .param("input"));
    }
    let base64 = match f.string("encoding_format")? {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(OaiError::invalid(format!(
                "encoding_format must be 'float' or 'base64', got '{other}'"
            ))
            .param("encoding_format"))
        }
    };
    let width: i64 = model
        .config
        .output
        .iter()
        .find(|o| o.name == output)
        .map(|o| o.dims.iter().product())
        .unwrap_or(-1);
    if let Some(d) = f.int("dimensions")? {
        if d != width {
            return Err(OaiError::invalid(format!(
                "The model '{}' makes embeddings of {width} dimensions: 'dimensions' must be {width} or absent",
                model.name
            ))
            .param("dimensions"));
        }
    }
    f.string("user")?;
    // The inputs go to the model in requests of up to its max_batch_size
    // texts (one text each when it does not batch), a few requests at a
    // time, so a long list neither floods the model's queue nor counts
    // as many requests.
    let per_request = usize::try_from(model.config.max_batch_size)
        .unwrap_or(0)
        .max(1);
    let chunks: Vec<Vec<String>> = inputs.chunks(per_request).map(<[String]>::to_vec).collect();
    let runs = chunks.into_iter().map(|texts: Vec<String>| {
        let engine = s.engine.clone();
        let model = Arc::clone(&model);
        let request = batch_of_texts(&model.config, &spec.text_input, &texts).map(|t| {
            let mut r = InferRequest {
                inputs: vec![t],
                ..Default::default()
            };
            forward_headers(forward.clone(), &headers, &mut r.parameters);
            r.trace_context = trace_context(&headers);
            r
        });
        let n = texts.len();
        async move {
            let mut stream = answers(engine, model, request?);
            let r = match stream.next().await {
                Some(answer) => answer?,
                None => return Err(Error::internal("the model sent no response")),
            };
            split_rows(r, n)
        }
    });
    let results: Vec<Vec<Vec<Tensor>>> = futures_util::stream::iter(runs)
        .buffered(EMBEDDING_REQUESTS_AT_ONCE)
        .try_collect::<Vec<_>>()
        .await?;
    let mut data = Vec::with_capacity(inputs.len());
    let mut tokens = 0u64;
    for (index, outputs) in results.into_iter().flatten().enumerate() {
        let t = outputs.iter().find(|t| t.name == output).ok_or_else(|| {
            OaiError::from(Error::internal(format!(
                "the model sent no '{output}' output"
            )))
        })?;
        if t.datatype != DataType::Fp32 {
            return Err(Error::internal(format!("output '{output}' is not FP32")).into());
        }
        tokens += outputs
            .iter()
            .find(|t| t.name == "num_input_tokens")
            .and_then(count_of)
            .unwrap_or(0);
        let embedding = if base64 {
            use base64::Engine as _;
            Value::from(base64::engine::general_purpose::STANDARD.encode(&t.data))
        } else {
            json_values(t)?
        };
        data.push(json!({ "object": "embedding", "index": index, "embedding": embedding }));
    }
    Ok(axum::Json(json!({
        "object": "list",
        "data": data,
        "model": model.name,
        "usage": { "prompt_tokens": tokens, "total_tokens": tokens },
    }))
    .into_response())
}

/// How many of one embeddings call's requests run at once.
const EMBEDDING_REQUESTS_AT_ONCE: usize = 8;

/// OpenAI's bound on the texts of one embeddings call.
const MAX_EMBEDDING_INPUTS: usize = 2048;

/// The longest text one embeddings input may be, in bytes: eight times
/// the 8,192 tokens OpenAI's embedding models take, at about 4 bytes a
/// token. A longer text is refused rather than tying the model up.
const MAX_EMBEDDING_TEXT: usize = 256 * 1024;

/// The texts as one input of a request: a batch of them when the model
/// batches (the batch dimension their count), else the one text.
fn batch_of_texts(
    config: &crate::core::config::ModelConfig,
    name: &str,
    texts: &[String],
) -> Result<Tensor> {
    let first = texts.first().map(String::as_bytes).unwrap_or_default();
    let mut t = bytes_input(config, name, first)?;
    if texts.len() > 1 {
        // bytes_input gives one text the shape [1, ...dims].
        t.shape[0] = texts.len() as i64;
        t.data = Tensor::serialize_bytes(texts.iter().map(String::as_bytes));
    }
    Ok(t)
}

/// A response of `n` texts' rows as each text's outputs (its row of every
/// output).
fn split_rows(r: InferResponse, n: usize) -> Result<Vec<Vec<Tensor>>> {
    if n == 1 {
        return Ok(vec![r.outputs]);
    }
    let mut rows: Vec<Vec<Tensor>> = (0..n).map(|_| Vec::new()).collect();
    for t in r.outputs {
        let size = t.datatype.size().ok_or_else(|| {
            Error::internal(format!("output '{}' has no fixed element size", t.name))
        })?;
        if t.shape.first() != Some(&(n as i64)) || t.data.len() % n != 0 {
            return Err(Error::internal(format!(
                "output '{}' has shape {:?}, not a row for each of the {n} texts",
                t.name, t.shape
            )));
        }
        let row = t.data.len() / n;
        debug_assert_eq!(row % size, 0);
        for (i, chunk) in t.data.chunks(row.max(1)).take(n).enumerate() {
            let mut shape = t.shape.clone();
            shape[0] = 1;
            rows[i].push(Tensor {
                name: t.name.clone(),
                datatype: t.datatype,
                shape,
                data: chunk.to_vec(),
            });
        }
    }
    Ok(rows)
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
