//! `/v1/completions` and `/v1/chat/completions`: a request as one
//! inference (for chat, the messages rendered by the model's template),
//! each response of the model a chunk of the text, answered whole or
//! streamed as Server-Sent Events; `usage` from the model's token counts.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{json, Map, Value};

use super::super::answers::{answers, Answers};
use super::super::http::{
    forward_headers, sse_event, sse_response, trace_context, AppState, Forward,
};
use super::*;
use crate::core::error::Result;
use crate::core::openai::OpenAiModel;
use crate::core::repository::LoadedModel;
use crate::core::types::{DataType, InferRequest, InferResponse, Tensor};
use crate::server::protocol::generate::bytes_input;
use crate::server::protocol::kserve_json::json_values;

/// The first element of a one-element tensor as an integer.
pub(super) fn count_of(t: &Tensor) -> Option<u64> {
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

pub(super) async fn completions(
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

pub(super) async fn chat_completions(
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
