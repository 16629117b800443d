//! The model's calls back into the server, each a frame from the worker
//! answered with a `reply` (or `bls_response` frames): custom metrics
//! (`pb_utils.MetricFamily`), model control (`pb_utils.load_model` and
//! friends), and BLS requests run on the server's engine (`Host`).

use std::sync::Arc;

use serde_json::{json, Value};

use super::{Link, Outgoing};
use crate::core::backend::python::frame::{code_name, Frame};
use crate::core::backend::ModelControl;
use crate::core::error::{Error, Result};
use crate::core::metrics::custom;
use crate::core::types::{InferRequest, RequestedOutput, SequenceId, SequenceParams, TraceContext};

/// A `metric` frame (pb_utils.MetricFamily / Metric): makes, updates, reads
/// or lets go of one; `family`, `metric` and `value` answer with a `reply`.
pub(super) fn metric(link: &Arc<Link>, frame: &Frame) {
    let mut held = link.metrics.lock().unwrap_or_else(|p| p.into_inner());
    let id = frame.u64("id");
    let number = frame
        .header
        .get("value")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let answer: Option<Result<Value>> = match frame.str("op") {
        "family" => Some(
            custom::Kind::from_code(frame.u64("metric_kind"))
                .ok_or_else(|| Error::invalid_arg("unknown metric kind"))
                .and_then(|kind| custom::family(frame.str("name"), frame.str("description"), kind))
                .map(|handle| {
                    let id = link.next_id();
                    held.insert(id, handle);
                    json!(id)
                }),
        ),
        "metric" => Some((|| {
            let family = match held.get(&frame.u64("family")) {
                Some(custom::Handle::Family(name)) => name.clone(),
                _ => return Err(Error::invalid_arg("the metric's family is gone")),
            };
            let labels = frame
                .header
                .get("labels")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                        .collect()
                })
                .unwrap_or_default();
            let buckets = frame
                .header
                .get("buckets")
                .and_then(Value::as_array)
                .map(|b| b.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect());
            let handle = custom::metric(&family, labels, buckets)?;
            let id = link.next_id();
            held.insert(id, handle);
            Ok(json!(id))
        })()),
        "value" => Some(match held.get(&id) {
            Some(handle) => custom::value(handle).map(|v| json!(v)),
            None => Err(Error::invalid_arg("the metric is gone")),
        }),
        op @ ("increment" | "set" | "observe") => {
            let update = match op {
                "increment" => custom::Update::Increment(number),
                "set" => custom::Update::Set(number),
                _ => custom::Update::Observe(number),
            };
            // Checked in the worker already: an error here is logged.
            if let Some(Err(e)) = held.get(&id).map(|h| custom::update(h, update)) {
                crate::core::logging::log('W', &format!("model instance '{}': {e}", link.instance));
            }
            None
        }
        "drop" => {
            held.remove(&id);
            None
        }
        _ => Some(Err(Error::invalid_arg("unknown metric operation"))),
    };
    drop(held);
    if let Some(answer) = answer {
        let (value, error) = match answer {
            Ok(v) => (v, Value::Null),
            Err(e) => (Value::Null, json!(e.message)),
        };
        let reply = Frame::new(json!({
            "kind": "reply",
            "bid": frame.u64("bid"),
            "value": value,
            "error": error,
        }));
        link.post(Outgoing::Frame(reply));
    }
}

/// A `model_control` frame (pb_utils.load_model / unload_model /
/// is_model_ready): runs on the server's model control, answered with a
/// `reply` (`value`: true, or whether the model is ready).
pub(super) fn model_control(link: &Arc<Link>, frame: &Frame) {
    let bid = frame.u64("bid");
    let reply = {
        let link = Arc::clone(link);
        move |answer: Result<bool>| {
            let (value, error) = match answer {
                Ok(v) => (json!(v), Value::Null),
                Err(e) => (Value::Null, json!(e.message)),
            };
            link.post(Outgoing::Frame(Frame::new(json!({
                "kind": "reply",
                "bid": bid,
                "value": value,
                "error": error,
            }))));
        }
    };
    let name = frame.str("model").to_string();
    let op = match frame.str("op") {
        "load" => {
            // The files' bytes follow one another in the body, in the
            // order of `files` (each with its name and size).
            let mut files = Vec::new();
            let mut at = 0usize;
            for f in frame
                .header
                .get("files")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let size = f.get("size").and_then(Value::as_u64).unwrap_or(0) as usize;
                let Some(bytes) = at.checked_add(size).and_then(|end| frame.body.get(at..end))
                else {
                    return reply(Err(Error::invalid_arg("a file's bytes are missing")));
                };
                at += size;
                let key = f.get("name").and_then(Value::as_str).unwrap_or_default();
                let path = key.strip_prefix("file:").unwrap_or(key);
                files.push((path.to_string(), bytes.to_vec()));
            }
            ModelControl::Load {
                name,
                config: frame.str("config").to_string(),
                files,
            }
        }
        "unload" => ModelControl::Unload {
            name,
            dependents: frame.bool("unload_dependents"),
        },
        "ready" => ModelControl::Ready {
            name,
            version: frame.str("version").to_string(),
        },
        other => {
            return reply(Err(Error::invalid_arg(format!(
                "unknown model control operation '{other}'"
            ))))
        }
    };
    match link.host.clone() {
        Some(host) => host.control(op, Box::new(reply)),
        None => reply(Err(Error::unavailable(
            "this server runs no model control for models",
        ))),
    }
}

/// A `bls` frame: the request runs on the server; its answers go back as
/// `bls_response` frames.
pub(super) fn bls(link: &Arc<Link>, frame: Frame) {
    let id = frame.u64("bid");
    let model = frame.str("model").to_string();
    let reply = {
        let link = Arc::clone(link);
        move |header: Value, tensors: Vec<crate::core::types::Tensor>| {
            let mut f = Frame::new(header);
            let list = f.add_owned_tensors(tensors);
            f.header.insert("tensors".into(), list);
            link.post(Outgoing::Frame(f));
        }
    };
    let error = {
        let model = model.clone();
        move |e: Error| {
            json!({"kind": "bls_response", "bid": id, "final": true, "error": {
                "message": format!("Model {model} - Error when running inference: {}", e.message),
                "code": code_name(e.kind),
            }})
        }
    };
    let request = match bls_request(&frame) {
        Ok(r) => r,
        Err(e) => return reply(error(e), Vec::new()),
    };
    let Some(host) = link.host.clone() else {
        return reply(
            error(Error::unavailable(
                "this server runs no inference for models",
            )),
            Vec::new(),
        );
    };
    let decoupled = frame.bool("decoupled");
    let mut answered = 0usize;
    // Whether the last reply ended the call: as Triton's iterator, a
    // decoupled call yields exactly the responses the model sent, and an
    // empty one only for a final flag sent bare.
    let mut ended = false;
    let each = move |answer: Option<Result<crate::core::types::InferResponse>>| match answer {
        Some(Ok(response)) => {
            answered += 1;
            ended = !decoupled || response.last;
            reply(
                json!({"kind": "bls_response", "bid": id, "final": ended, "error": null}),
                response.outputs,
            );
        }
        Some(Err(e)) => {
            answered += 1;
            ended = true;
            reply(error(e), Vec::new());
        }
        None => {
            if !ended || answered == 0 {
                reply(
                    json!({"kind": "bls_response", "bid": id, "final": true, "error": null}),
                    Vec::new(),
                );
            }
        }
    };
    host.infer(
        model.clone(),
        frame.str("version").to_string(),
        request,
        Box::new(each),
    );
}

/// The server request of a `bls` frame.
fn bls_request(frame: &Frame) -> Result<InferRequest> {
    let list = frame.header.get("inputs").cloned().unwrap_or(Value::Null);
    let inputs = frame.tensors_at(&list, &mut 0)?;
    let outputs = frame
        .header
        .get("outputs")
        .and_then(Value::as_array)
        .map(|o| {
            o.iter()
                .filter_map(Value::as_str)
                .map(|name| RequestedOutput::named(name.to_string()))
                .collect()
        })
        .unwrap_or_default();
    let flags = frame.u64("flags");
    let id = match frame.header.get("correlation_id") {
        Some(Value::String(s)) if !s.is_empty() => SequenceId::Text(s.clone()),
        Some(Value::Number(n)) if n.as_u64().unwrap_or(0) != 0 => {
            SequenceId::Number(n.as_u64().unwrap_or(0))
        }
        _ => SequenceId::None,
    };
    Ok(InferRequest {
        id: frame.str("id").to_string(),
        inputs,
        shm_inputs: Vec::new(),
        outputs,
        priority: 0,
        timeout_us: frame.u64("timeout"),
        sequence: SequenceParams {
            id,
            start: flags & 1 != 0,
            end: flags & 2 != 0,
        },
        parameters: frame
            .header
            .get("parameters")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
        // `InferenceRequest(..., trace=request.trace())`: the call's spans
        // hang under the calling request's.
        trace_context: frame.header.get("trace").and_then(|t| {
            Some(TraceContext {
                traceparent: t.get("traceparent")?.as_str()?.to_string(),
                tracestate: None,
                parent_trace: t.get("parent_trace").and_then(Value::as_u64),
            })
        }),
    })
}
