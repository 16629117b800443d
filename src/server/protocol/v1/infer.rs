//! v1 inference: an `InferRequestHeader` and its raw input data → an engine
//! `InferRequest` (TRTIS 1.11's checks and messages), and the engine's
//! answer → an `InferResponseHeader` and the raw outputs.
//!
//! Inputs come as one HTTP body (each input's whole batch back to back, in
//! header order) or as gRPC `raw_input` entries (one per input). A v1
//! request gives dims without the batch dimension and sizes per batch.
//! Classification is done here, not by the engine's classification
//! extension: v1 answers each class's value as the element itself (a float),
//! not as v2's formatted `"value:index:label"` string.

use crate::core::classify::top_k;
use crate::core::config::pb::ModelConfig;
use crate::core::engine::Engine;
use crate::core::error::{Error, Result};
use crate::core::repository::LoadedModel;
use crate::core::types::{
    element::to_f64s, DataType, InferRequest, InferResponse, RequestedOutput, SequenceId,
    SequenceParams, ShmRef, Tensor,
};

use super::pb::{
    infer_request_header, infer_response_header, InferRequestHeader, InferResponseHeader,
    InferSharedMemory,
};

/// Where a request's input data is.
pub enum InputData<'a> {
    /// One HTTP body: the inputs back to back in header order.
    Body(&'a [u8]),
    /// gRPC `raw_input`: one entry per header input, in header order (an
    /// input in shared memory has an empty entry, or none when every other
    /// input has its entry).
    Raw(Vec<Vec<u8>>),
}

/// What the response must hold: the outputs the header asked for, in its
/// order.
#[derive(Debug, Clone)]
pub struct Plan {
    id: u64,
    batch_size: u32,
    batching: bool,
    outputs: Vec<Planned>,
}

#[derive(Debug, Clone)]
struct Planned {
    name: String,
    classes: Option<usize>,
    shm_size: Option<u64>,
}

fn bad(message: impl Into<String>) -> Error {
    Error::invalid_arg(message)
}

fn shm_ref(shm: &InferSharedMemory) -> Result<ShmRef> {
    let size = |v: u64| {
        usize::try_from(v)
            .map_err(|_| bad(format!("shared memory size or offset {v} is too large")))
    };
    Ok(ShmRef {
        region: shm.name.clone(),
        offset: size(shm.offset)?,
        byte_size: size(shm.byte_size)?,
    })
}

/// Checks a v1 request against the model's config and builds the engine's
/// request; returns it with the plan of the answer.
pub fn request(
    header: &InferRequestHeader,
    data: InputData<'_>,
    model: &LoadedModel,
) -> Result<(InferRequest, Plan)> {
    let config = &model.config;
    let name = &model.name;
    let batching = config.max_batch_size > 0;
    let batch = header.batch_size;
    if batch == 0 {
        return Err(bad(format!(
            "inference request batch-size must be >= 1 for '{name}'"
        )));
    }
    if (!batching && batch != 1) || (batching && batch > config.max_batch_size as u32) {
        return Err(bad(format!(
            "inference request batch-size must be <= {} for '{name}'",
            config.max_batch_size.max(1)
        )));
    }
    let required = config.input.iter().filter(|i| !i.optional).count();
    if header.input.len() < required || header.input.len() > config.input.len() {
        return Err(bad(format!(
            "expected {} inputs but got {} inputs for model '{name}'",
            config.input.len(),
            header.input.len()
        )));
    }
    let (mut raw, mut body) = match data {
        InputData::Body(b) => (None, b),
        InputData::Raw(r) => (Some(r), &[][..]),
    };
    let in_shm = header
        .input
        .iter()
        .filter(|i| i.shared_memory.is_some())
        .count();
    // gRPC: the entries of the inputs in shared memory may be left out.
    let raw_for_all = raw.as_ref().map(|r| r.len() == header.input.len());
    let mut raw_iter = raw.take().map(|r| r.into_iter());
    let mut inputs = Vec::with_capacity(header.input.len());
    let mut shm_inputs = Vec::new();
    for (i, input) in header.input.iter().enumerate() {
        let Some(ci) = config.input.iter().find(|c| c.name == input.name) else {
            return Err(bad(format!(
                "unexpected inference input '{}' for model '{name}'",
                input.name
            )));
        };
        if header.input[..i].iter().any(|o| o.name == input.name) {
            return Err(bad(format!(
                "input '{}' is given more than once for model '{name}'",
                input.name
            )));
        }
        let datatype = DataType::from_config(ci.data_type)
            .ok_or_else(|| bad(format!("input '{}' has no valid data type", input.name)))?;
        let dims = input_dims(input, &ci.dims, name)?;
        let mut shape = Vec::with_capacity(dims.len() + 1);
        if batching {
            shape.push(i64::from(batch));
        }
        shape.extend_from_slice(&dims);
        let expected = match datatype.size() {
            Some(size) => {
                let per = crate::core::types::element_count(&dims)
                    .and_then(|n| n.checked_mul(size))
                    .and_then(|n| n.checked_mul(batch as usize))
                    .ok_or_else(|| bad(format!("input '{}' is too large", input.name)))?;
                if input.batch_byte_size != 0 && input.batch_byte_size != per as u64 {
                    return Err(bad(format!(
                        "unexpected size {} for input '{}', expecting {per} for model '{name}'",
                        input.batch_byte_size, input.name
                    )));
                }
                per
            }
            None if input.shared_memory.is_some() => 0,
            None => usize::try_from(input.batch_byte_size)
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    bad(format!(
                        "input '{}' of type TYPE_STRING must give its batch_byte_size for model '{name}'",
                        input.name
                    ))
                })?,
        };
        let tensor = |data: Vec<u8>| Tensor {
            name: input.name.clone(),
            datatype,
            shape: shape.clone(),
            data,
        };
        if let Some(shm) = &input.shared_memory {
            shm_inputs.push((i, shm_ref(shm)?));
            inputs.push(tensor(Vec::new()));
            if raw_for_all == Some(true) {
                let entry = raw_iter.as_mut().and_then(|r| r.next()).unwrap_or_default();
                if !entry.is_empty() {
                    return Err(bad(format!(
                        "input '{}' is in shared memory and also has raw_input data for model '{name}'",
                        input.name
                    )));
                }
            }
            continue;
        }
        let data = match raw_iter.as_mut() {
            None => {
                if body.len() < expected {
                    return Err(bad(format!(
                        "unexpected size for input '{}', expecting {expected} bytes for model '{name}'",
                        input.name
                    )));
                }
                let (this, rest) = body.split_at(expected);
                body = rest;
                this.to_vec()
            }
            Some(entries) => {
                let entry = entries.next().ok_or_else(|| {
                    bad(format!(
                        "expected {} raw_input entries but got fewer for model '{name}'",
                        header.input.len() - if raw_for_all == Some(true) { 0 } else { in_shm }
                    ))
                })?;
                if entry.len() != expected {
                    return Err(bad(format!(
                        "unexpected size for input '{}', expecting {expected} bytes for model '{name}'",
                        input.name
                    )));
                }
                entry
            }
        };
        inputs.push(tensor(data));
    }
    let extra = !body.is_empty() || raw_iter.is_some_and(|mut r| r.next().is_some());
    if extra {
        return Err(bad(format!(
            "unexpected additional input data for model '{name}'"
        )));
    }

    let mut outputs = Vec::with_capacity(header.output.len());
    let mut planned = Vec::with_capacity(header.output.len());
    for (i, output) in header.output.iter().enumerate() {
        let Some(co) = config.output.iter().find(|c| c.name == output.name) else {
            return Err(bad(format!(
                "unexpected inference output '{}' for model '{name}'",
                output.name
            )));
        };
        if header.output[..i].iter().any(|o| o.name == output.name) {
            return Err(bad(format!(
                "output '{}' is requested more than once for model '{name}'",
                output.name
            )));
        }
        let classes = match &output.cls {
            None => None,
            Some(cls) => {
                let datatype = DataType::from_config(co.data_type);
                if matches!(
                    datatype,
                    None | Some(DataType::Bool | DataType::Fp16 | DataType::Bytes | DataType::Bf16)
                ) {
                    return Err(bad(format!(
                        "class result not available for output '{}' due to unsupported type '{}'",
                        output.name,
                        type_name(co.data_type)
                    )));
                }
                if cls.count == 0 {
                    return Err(bad(format!(
                        "class count must be >= 1 for output '{}' of model '{name}'",
                        output.name
                    )));
                }
                Some(cls.count as usize)
            }
        };
        let shm = output.shared_memory.as_ref().map(shm_ref).transpose()?;
        if shm.is_some() && classes.is_some() {
            return Err(bad(format!(
                "output '{}' cannot be both a classification and in shared memory",
                output.name
            )));
        }
        planned.push(Planned {
            name: output.name.clone(),
            classes,
            shm_size: shm.as_ref().map(|s| s.byte_size as u64),
        });
        outputs.push(RequestedOutput {
            name: output.name.clone(),
            classification: None,
            shm,
        });
    }
    let request = InferRequest {
        id: if header.id == 0 {
            String::new()
        } else {
            header.id.to_string()
        },
        inputs,
        shm_inputs,
        // No output asked for: the model still runs, every output is
        // computed and none is answered.
        outputs,
        sequence: SequenceParams {
            id: if header.correlation_id == 0 {
                SequenceId::None
            } else {
                SequenceId::Number(header.correlation_id)
            },
            start: header.flags & 1 != 0,
            end: header.flags & 2 != 0,
        },
        ..Default::default()
    };
    let plan = Plan {
        id: header.id,
        batch_size: batch,
        batching,
        outputs: planned,
    };
    Ok((request, plan))
}

/// An input's dims: the request's (checked against the config's, -1 a
/// wildcard), or the config's when the request gives none.
fn input_dims(
    input: &infer_request_header::Input,
    config: &[i64],
    model: &str,
) -> Result<Vec<i64>> {
    if input.dims.is_empty() {
        if config.iter().any(|&d| d < 0) {
            return Err(bad(format!(
                "input '{}' has variable-size dims {config:?} in the config of model '{model}'; the request must give its dims",
                input.name
            )));
        }
        return Ok(config.to_vec());
    }
    let matches = input.dims.len() == config.len()
        && input
            .dims
            .iter()
            .zip(config)
            .all(|(&d, &c)| d >= 0 && (c < 0 || c == d));
    if !matches {
        return Err(bad(format!(
            "unexpected shape for input '{}' for model '{model}'. Expected {config:?}, got {:?}",
            input.name, input.dims
        )));
    }
    Ok(input.dims.clone())
}

fn type_name(data_type: i32) -> String {
    crate::core::config::pb::DataType::try_from(data_type)
        .map(|t| t.as_str_name().to_string())
        .unwrap_or_else(|_| data_type.to_string())
}

/// One v1 inference on `model` (`version` empty: the latest), both
/// frontends' path: the model looked up (not there: UNAVAILABLE, as TRTIS),
/// a decoupled one refused, the request checked and admitted, run, and
/// answered as a response header and raw outputs.
pub async fn run(
    engine: &Engine,
    model: &str,
    version: &str,
    header: &InferRequestHeader,
    data: InputData<'_>,
) -> Result<(InferResponseHeader, Vec<Vec<u8>>)> {
    let model = engine
        .model(model, version)
        .map_err(|e| Error::unavailable(e.message))?;
    if model.decoupled() {
        return Err(Error::unsupported(format!(
            "model '{}' is decoupled: the v1 API cannot serve it",
            model.name
        )));
    }
    let (request, plan) = request(header, data, &model)?;
    engine.admit(&request)?;
    let answer = engine.infer_on(model.clone(), request).await?;
    response(answer, &plan, &model)
}

/// The response header of a failed request: only the request's `id`.
pub fn failed_header(id: u64) -> InferResponseHeader {
    InferResponseHeader {
        id,
        ..Default::default()
    }
}

/// The engine's answer → the response header and one raw entry per header
/// output (empty for a classification or an output in shared memory).
pub fn response(
    response: InferResponse,
    plan: &Plan,
    model: &LoadedModel,
) -> Result<(InferResponseHeader, Vec<Vec<u8>>)> {
    let mut header = InferResponseHeader {
        model_name: response.model_name,
        model_version: response.model_version.parse().unwrap_or(model.version),
        batch_size: plan.batch_size,
        output: Vec::with_capacity(plan.outputs.len()),
        id: plan.id,
    };
    let mut tensors = response.outputs;
    let mut raw = Vec::with_capacity(plan.outputs.len());
    for want in &plan.outputs {
        let at = tensors
            .iter()
            .position(|t| t.name == want.name)
            .ok_or_else(|| Error::internal(format!("the model gave no output '{}'", want.name)))?;
        let tensor = tensors.swap_remove(at);
        let mut out = infer_response_header::Output {
            name: tensor.name.clone(),
            ..Default::default()
        };
        let dims = if plan.batching && !tensor.shape.is_empty() {
            tensor.shape[1..].to_vec()
        } else {
            tensor.shape.clone()
        };
        match want.classes {
            Some(k) => {
                out.batch_classes = classes(&tensor, k, plan, model)?;
                raw.push(Vec::new());
            }
            None => {
                // In shared memory the data left the answer: its size is
                // the output's own (from its shape), not the region's.
                let size = match want.shm_size {
                    None => tensor.data.len() as u64,
                    Some(region) => tensor
                        .datatype
                        .size()
                        .and_then(|s| {
                            crate::core::types::element_count(&tensor.shape).map(|n| (n * s) as u64)
                        })
                        .unwrap_or(region),
                };
                out.raw = Some(infer_response_header::output::Raw {
                    dims,
                    batch_byte_size: size,
                });
                raw.push(tensor.data);
            }
        }
        header.output.push(out);
    }
    Ok((header, raw))
}

/// Top-`k` classes of each batch entry of an output.
fn classes(
    tensor: &Tensor,
    k: usize,
    plan: &Plan,
    model: &LoadedModel,
) -> Result<Vec<infer_response_header::output::Classes>> {
    let values = to_f64s(tensor.datatype, &tensor.data).ok_or_else(|| {
        bad(format!(
            "class result not available for output '{}' due to unsupported type '{}'",
            tensor.name,
            tensor.datatype.name()
        ))
    })?;
    let rows = if plan.batching {
        plan.batch_size.max(1) as usize
    } else {
        1
    };
    let per_row = (values.len() / rows).max(1);
    let labels = model.labels.get(&tensor.name);
    Ok(values
        .chunks(per_row)
        .take(rows)
        .map(|row| infer_response_header::output::Classes {
            cls: top_k(row, k)
                .into_iter()
                .map(|i| infer_response_header::output::Class {
                    idx: i as i32,
                    value: row[i] as f32,
                    label: labels.and_then(|l| l.get(i)).cloned().unwrap_or_default(),
                })
                .collect(),
        })
        .collect())
}

/// The v1 view of a model's config: today's config re-read with the v1
/// schema (the same field numbers; newer fields drop out), with the backend
/// as the platform when the config names none.
pub fn v1_config(config: &ModelConfig) -> super::pb::ModelConfig {
    use prost::Message;
    let mut v1 =
        super::pb::ModelConfig::decode(config.encode_to_vec().as_slice()).unwrap_or_else(|_| {
            super::pb::ModelConfig {
                name: config.name.clone(),
                ..Default::default()
            }
        });
    if v1.platform.is_empty() {
        v1.platform = config.backend.clone();
    }
    v1
}
