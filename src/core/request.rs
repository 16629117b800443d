//! Triton's request normalization (`InferenceRequest::Normalize`): a
//! request's inputs and outputs checked against the model's config, in
//! Triton's order and with its messages. Beneath the engine, which runs it
//! on every request, and warmup, which runs it on its samples.

use crate::core::config::ModelConfig;
use crate::core::error::{request_prefix, Error, Result};
use crate::core::types::{element_count, DataType, RequestedOutput, Tensor};

fn dims_string(dims: &[i64]) -> String {
    let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(","))
}

/// Checks a request's inputs as an inference request's are (warmup
/// samples); returns them in config order.
pub(crate) fn check_inputs(config: &ModelConfig, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
    validate(config, "", inputs, &[]).map(|(inputs, _, _)| inputs)
}

/// Triton's request checks (`InferenceRequest::Normalize`), in Triton's
/// order and with its messages. Returns the inputs in config order, the
/// outputs to produce (all when none were requested) and the batch size.
pub(crate) fn validate(
    config: &ModelConfig,
    id: &str,
    mut inputs: Vec<Tensor>,
    requested: &[RequestedOutput],
) -> Result<(Vec<Tensor>, Vec<RequestedOutput>, usize)> {
    let model = &config.name;
    let lr = request_prefix(id);
    let batching = config.max_batch_size > 0;
    for (i, t) in inputs.iter().enumerate() {
        if inputs[..i].iter().any(|o| o.name == t.name) {
            return Err(Error::invalid_arg(format!(
                "{lr}input '{}' already exists in request",
                t.name
            )));
        }
    }
    for (i, o) in requested.iter().enumerate() {
        if requested[..i].iter().any(|r| r.name == o.name) {
            return Err(Error::invalid_arg(format!(
                "{lr}output '{}' already exists in request",
                o.name
            )));
        }
    }
    let required = config.input.iter().filter(|i| !i.optional).count();
    let missing: Vec<String> = config
        .input
        .iter()
        .filter(|spec| !spec.optional && !inputs.iter().any(|t| t.name == spec.name))
        .map(|spec| format!("'{}'", spec.name))
        .collect();
    if inputs.len() > config.input.len() || inputs.len() < required {
        let got: Vec<String> = inputs.iter().map(|t| format!("'{}'", t.name)).collect();
        let expected = if required == config.input.len() {
            format!("expected {required} inputs")
        } else {
            format!(
                "expected number of inputs between {required} and {}",
                config.input.len()
            )
        };
        return Err(Error::invalid_arg(format!(
            "{lr}{expected} but got {} inputs for model '{model}'. Got inputs [{}], but missing required inputs [{}]. Please provide all required inputs.",
            inputs.len(),
            got.join(","),
            missing.join(",")
        )));
    }
    for t in &inputs {
        if !config.input.iter().any(|i| i.name == t.name) {
            return Err(Error::invalid_arg(format!(
                "unexpected inference input '{}' for model '{model}'",
                t.name
            )));
        }
    }
    if !missing.is_empty() {
        let got: Vec<String> = inputs.iter().map(|t| format!("'{}'", t.name)).collect();
        return Err(Error::invalid_arg(format!(
            "{lr}expected {required} inputs but got {} inputs for model '{model}'. Got inputs [{}], but missing required inputs [{}]. Please provide all required inputs.",
            inputs.len(),
            got.join(","),
            missing.join(",")
        )));
    }
    let mut batch = 1usize;
    if batching {
        let mut first: Option<i64> = None;
        for t in &inputs {
            let b = t.shape.first().copied().unwrap_or(0);
            match first {
                None => first = Some(b),
                Some(f) if f != b => {
                    return Err(Error::invalid_arg(format!(
                        "{lr}input '{}' batch size does not match other inputs for '{model}'",
                        t.name
                    )))
                }
                Some(_) => {}
            }
        }
        let b = first.unwrap_or(0);
        if b < 1 || b > config.max_batch_size as i64 {
            return Err(Error::invalid_arg(format!(
                "{lr}inference request batch-size must be <= {} for '{model}'",
                config.max_batch_size
            )));
        }
        batch = b as usize;
    }
    for t in &inputs {
        let spec = config
            .input
            .iter()
            .find(|i| i.name == t.name)
            .expect("checked above");
        let expected = DataType::from_config(spec.data_type);
        if expected != Some(t.datatype) {
            return Err(Error::invalid_arg(format!(
                "{lr}inference input '{}' data-type is '{}', but model '{model}' expects '{}'",
                t.name,
                t.datatype.name(),
                expected.map(|d| d.name()).unwrap_or("INVALID")
            )));
        }
        if t.shape.iter().any(|&d| d < 0) {
            return Err(Error::invalid_arg(format!(
                "{lr}All input dimensions should be specified for input '{}' for model '{model}', got {}",
                t.name,
                dims_string(&t.shape)
            )));
        }
        let dims = &spec.dims;
        let rest = if batching {
            &t.shape[1..]
        } else {
            &t.shape[..]
        };
        let matches =
            rest.len() == dims.len() && rest.iter().zip(dims).all(|(&s, &d)| d == -1 || s == d);
        if !matches {
            let full: Vec<i64> = if batching {
                std::iter::once(-1).chain(dims.iter().copied()).collect()
            } else {
                dims.clone()
            };
            let note = if batching {
                ". NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be \
                 prepended to each input shape. If you want to specify the full shape including the batch dim in \
                 your input dims config, try setting max_batch_size to zero. See the model configuration docs for \
                 more info on max_batch_size."
            } else {
                ""
            };
            return Err(Error::invalid_arg(format!(
                "{lr}unexpected shape for input '{}' for model '{model}'. Expected {}, got {}{note}",
                t.name,
                dims_string(&full),
                dims_string(&t.shape)
            )));
        }
    }
    for t in &inputs {
        let count = element_count(&t.shape).ok_or_else(|| {
            Error::invalid_arg(format!("{lr}shape of input '{}' is too large", t.name))
        })?;
        match t.datatype.size() {
            Some(size) => {
                let expected = count.saturating_mul(size);
                if t.data.len() != expected {
                    return Err(Error::invalid_arg(format!(
                        "{lr}input byte size mismatch for input '{}' for model '{model}'. Expected {expected}, got {}",
                        t.name,
                        t.data.len()
                    )));
                }
            }
            None => {
                let n = Tensor::bytes_elements(&t.data)
                    .map_err(|e| {
                        Error::invalid_arg(format!("{lr}input '{}': {}", t.name, e.message))
                    })?
                    .len();
                if n != count {
                    return Err(Error::invalid_arg(format!(
                        "{lr}expected {count} string elements for inference input '{}' for model '{model}', got {n}",
                        t.name
                    )));
                }
            }
        }
    }
    for o in requested {
        if !config.output.iter().any(|spec| spec.name == o.name) {
            return Err(Error::invalid_arg(format!(
                "unexpected inference output '{}' for model '{model}'",
                o.name
            )));
        }
    }
    let outputs = if requested.is_empty() {
        config
            .output
            .iter()
            .map(|o| RequestedOutput {
                name: o.name.clone(),
                classification: None,
                shm: None,
            })
            .collect()
    } else {
        requested.to_vec()
    };
    inputs.sort_by_key(|t| config.input.iter().position(|i| i.name == t.name));
    Ok((inputs, outputs, batch))
}
