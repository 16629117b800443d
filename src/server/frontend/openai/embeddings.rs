//! `/v1/embeddings`: a list of texts (or one) in, one vector each out,
//! the texts sent in batches of the model's `max_batch_size`, a few at
//! once, within bounds on how many and how long.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::super::answers::answers;
use super::super::http::{forward_headers, trace_context, AppState, Forward};
use super::completions::count_of;
use super::*;
use crate::core::error::{Error, Result};
use crate::core::types::{DataType, InferRequest, InferResponse, Tensor};
use crate::server::protocol::generate::bytes_input;
use crate::server::protocol::kserve_json::json_values;
use futures_util::TryStreamExt;

pub(super) async fn embeddings(
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
