//! Triton's request normalization (`InferenceRequest::Normalize`): a
//! request's inputs and outputs checked against the model's config, in
//! Triton's order and with its messages. Beneath the engine, which runs it
//! on every request, and warmup, which runs it on its samples.

use crate::core::config::ModelConfig;
use crate::core::error::{request_prefix, Error, Result};
use crate::core::types::{element_count, DataType, RequestedOutput, Tensor};

mod input_order;

fn dims_string(dims: &[i64]) -> String {
    let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(","))
}

/// Triton's message for a request whose inputs are too few or too many
/// (`ValidateRequestInputs`): `given` the request's inputs in Triton's
/// order, `missing` the required ones it lacks in config order.
fn input_count_message(
    model: &str,
    required: usize,
    total: usize,
    given: &[&str],
    missing: &[&str],
) -> String {
    let list = |names: &[&str]| {
        let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
        format!("[{}]", quoted.join(","))
    };
    let expected = if required == total {
        format!("expected {total} inputs")
    } else {
        format!("expected number of inputs between {required} and {total}")
    };
    format!(
        "{expected} but got {} inputs for model '{model}'. Got input(s) {}, but missing required input(s) {}. Please provide all required input(s).",
        given.len(),
        list(given),
        list(missing)
    )
}

/// Triton's walk of a BYTES input's elements (`ValidateBytesInputs`):
/// each a 4-byte little-endian length and that many bytes, `count` of
/// them. The message names the first fault as Triton does; a last element
/// cut short is not one (Triton leaves it to the backend).
fn check_string_elements(
    data: &[u8],
    count: usize,
    name: &str,
    model: &str,
) -> std::result::Result<(), String> {
    let mut rest = data;
    let mut seen = 0usize;
    while !rest.is_empty() {
        if rest.len() < 4 {
            return Err(format!(
                "incomplete string length indicator for inference input '{name}' for model '{model}', expecting 4 bytes but only {} bytes available. Please make sure the string length indicator is in one buffer.",
                rest.len()
            ));
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        seen += 1;
        if seen > count {
            return Err(format!(
                "unexpected number of string elements {seen} for inference input '{name}' for model '{model}', expecting {count}"
            ));
        }
        rest = &rest[4..];
        rest = &rest[len.min(rest.len())..];
    }
    if seen != count {
        return Err(format!(
            "expected {count} string elements for inference input '{name}' for model '{model}', got {seen}"
        ));
    }
    Ok(())
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
    // Triton keeps the requested outputs in a `std::set`: checked by name.
    let mut wanted: Vec<&str> = requested.iter().map(|o| o.name.as_str()).collect();
    wanted.sort_unstable();
    for name in wanted {
        if !config.output.iter().any(|spec| spec.name == name) {
            return Err(Error::invalid_arg(format!(
                "unexpected inference output '{name}' for model '{model}'"
            )));
        }
    }
    // Triton walks the inputs in its hash map's order (`input_order`).
    let order = input_order::triton_order(inputs.iter().map(|t| t.name.as_str()));
    let required = config.input.iter().filter(|i| !i.optional).count();
    let missing: Vec<&str> = config
        .input
        .iter()
        .filter(|spec| !spec.optional && !inputs.iter().any(|t| t.name == spec.name))
        .map(|spec| spec.name.as_str())
        .collect();
    let count_error = || {
        let given: Vec<&str> = order.iter().map(|&i| inputs[i].name.as_str()).collect();
        Error::invalid_arg(format!(
            "{lr}{}",
            input_count_message(model, required, config.input.len(), &given, &missing)
        ))
    };
    if inputs.len() > config.input.len() || inputs.len() < required {
        return Err(count_error());
    }
    let mut batch: Option<i64> = None;
    for t in order.iter().map(|&i| &inputs[i]) {
        if !config.input.iter().any(|i| i.name == t.name) {
            return Err(Error::invalid_arg(format!(
                "unexpected inference input '{}' for model '{model}'",
                t.name
            )));
        }
        if !batching {
            continue;
        }
        let Some(&b) = t.shape.first() else {
            return Err(Error::invalid_arg(format!(
                "{lr}input '{}' has no shape but model requires batch dimension for '{model}'",
                t.name
            )));
        };
        match batch {
            None => batch = Some(b),
            Some(first) if first != b => {
                return Err(Error::invalid_arg(format!(
                    "{lr}input '{}' batch size does not match other inputs for '{model}'",
                    t.name
                )))
            }
            Some(_) => {}
        }
    }
    // Beyond Triton (whose backend would fail the request): the count is
    // in range but a required input is missing, an optional one given in
    // its place.
    if !missing.is_empty() {
        return Err(count_error());
    }
    let mut batch_size = 1usize;
    if batching {
        let b = batch.unwrap_or(0);
        if b < 1 || b > config.max_batch_size as i64 {
            return Err(Error::invalid_arg(format!(
                "{lr}inference request batch-size must be <= {} for '{model}'",
                config.max_batch_size
            )));
        }
        batch_size = b as usize;
    }
    // Each input in turn: its data type, its shape, then its data's size.
    for t in order.iter().map(|&i| &inputs[i]) {
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
        let all_specified = || {
            Error::invalid_arg(format!(
                "{lr}All input dimensions should be specified for input '{}' for model '{model}', got {}",
                t.name,
                dims_string(&t.shape)
            ))
        };
        let dims = &spec.dims;
        let rest = if batching {
            &t.shape[1..]
        } else {
            &t.shape[..]
        };
        let mut matches = rest.len() == dims.len();
        if matches {
            for (&s, &d) in rest.iter().zip(dims) {
                if s < 0 {
                    return Err(all_specified());
                }
                if d != -1 && d != s {
                    matches = false;
                    break;
                }
            }
        }
        if !matches {
            let full: Vec<i64> = if batching {
                std::iter::once(-1).chain(dims.iter().copied()).collect()
            } else {
                dims.clone()
            };
            let note = if batching {
                "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be \
                 prepended to each input shape. If you want to specify the full shape including the batch dim in \
                 your input dims config, try setting max_batch_size to zero. See the model configuration docs for \
                 more info on max_batch_size."
            } else {
                ""
            };
            return Err(Error::invalid_arg(format!(
                "{lr}unexpected shape for input '{}' for model '{model}'. Expected {}, got {}. {note}",
                t.name,
                dims_string(&full),
                dims_string(&t.shape)
            )));
        }
        if t.shape.iter().any(|&d| d < 0) {
            return Err(all_specified());
        }
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
                check_string_elements(&t.data, count, &t.name, model)
                    .map_err(|m| Error::invalid_arg(format!("{lr}{m}")))?;
                // Triton leaves a last element cut short to its backends.
                Tensor::bytes_elements(&t.data).map_err(|e| {
                    Error::invalid_arg(format!("{lr}input '{}': {}", t.name, e.message))
                })?;
            }
        }
    }
    let outputs = if requested.is_empty() {
        config
            .output
            .iter()
            .map(|o| RequestedOutput::named(o.name.clone()))
            .collect()
    } else {
        requested.to_vec()
    };
    inputs.sort_by_key(|t| config.input.iter().position(|i| i.name == t.name));
    Ok((inputs, outputs, batch_size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> ModelConfig {
        crate::core::config::parse_config(text.as_bytes())
            .unwrap()
            .config
    }

    fn fp32(name: &str, shape: &[i64]) -> Tensor {
        let count = element_count(shape).unwrap();
        Tensor {
            name: name.into(),
            datatype: DataType::Fp32,
            shape: shape.to_vec(),
            data: vec![0; count * 4],
        }
    }

    fn strings(name: &str, shape: &[i64], n: usize) -> Tensor {
        let elements: Vec<Vec<u8>> = (0..n).map(|i| i.to_string().into_bytes()).collect();
        Tensor {
            name: name.into(),
            datatype: DataType::Bytes,
            shape: shape.to_vec(),
            data: Tensor::serialize_bytes(elements.iter().map(Vec::as_slice)),
        }
    }

    fn three_required(optional: bool) -> ModelConfig {
        config(&format!(
            r#"name: "m" max_batch_size: 0
            input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }},
                    {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 1 ] }},
                    {{ name: "INPUT2" data_type: TYPE_FP32 dims: [ 1 ] }}{} ]
            output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]"#,
            if optional {
                r#", { name: "INPUT3" data_type: TYPE_FP32 dims: [ 1 ] optional: true }"#
            } else {
                ""
            }
        ))
    }

    /// qa/L0_input_validation's texts, word for word.
    #[test]
    fn missing_inputs_are_named_in_tritons_words() {
        let e = validate(&three_required(false), "", vec![fp32("INPUT0", &[1])], &[]).unwrap_err();
        assert_eq!(
            e.message,
            "[request id: <id_unknown>] expected 3 inputs but got 1 inputs for model 'm'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1','INPUT2']. Please provide all required input(s)."
        );
        let e = validate(&three_required(true), "r1", vec![], &[]).unwrap_err();
        assert_eq!(
            e.message,
            "[request id: r1] expected number of inputs between 3 and 4 but got 0 inputs for model 'm'. Got input(s) [], but missing required input(s) ['INPUT0','INPUT1','INPUT2']. Please provide all required input(s)."
        );
        // In range, but an optional input stands in for a required one.
        let given = vec![
            fp32("INPUT0", &[1]),
            fp32("INPUT1", &[1]),
            fp32("INPUT3", &[1]),
        ];
        let e = validate(&three_required(true), "", given, &[]).unwrap_err();
        assert_eq!(
            e.message,
            "[request id: <id_unknown>] expected number of inputs between 3 and 4 but got 3 inputs for model 'm'. Got input(s) ['INPUT3','INPUT1','INPUT0'], but missing required input(s) ['INPUT2']. Please provide all required input(s)."
        );
    }

    /// qa/L0_input_validation `test_input_string_shape_validation`: both
    /// inputs are wrong and Triton names INPUT1, the first in its map.
    #[test]
    fn string_counts_are_checked_in_tritons_input_order() {
        let cfg = config(
            r#"name: "s" max_batch_size: 8
            input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] },
                    { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]
            output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] } ]"#,
        );
        let given = |n| {
            vec![
                strings("INPUT0", &[1, 16], n),
                strings("INPUT1", &[1, 16], n),
            ]
        };
        let e = validate(&cfg, "", given(14), &[]).unwrap_err();
        assert_eq!(
            e.message,
            "[request id: <id_unknown>] expected 16 string elements for inference input 'INPUT1' for model 's', got 14"
        );
        let e = validate(&cfg, "", given(18), &[]).unwrap_err();
        assert_eq!(
            e.message,
            "[request id: <id_unknown>] unexpected number of string elements 17 for inference input 'INPUT1' for model 's', expecting 16"
        );
        let mut short = strings("INPUT0", &[1, 16], 16);
        short.data.extend_from_slice(&[1, 0]);
        let e = validate(&cfg, "", vec![short, strings("INPUT1", &[1, 16], 16)], &[]).unwrap_err();
        assert!(
            e.message
                .contains("expecting 4 bytes but only 2 bytes available"),
            "{}",
            e.message
        );
        assert!(validate(&cfg, "", given(16), &[]).is_ok());
    }

    #[test]
    fn unknown_outputs_are_named_before_input_counts() {
        let wanted = [RequestedOutput::named("NOPE")];
        let e = validate(&three_required(false), "", vec![], &wanted).unwrap_err();
        assert_eq!(
            e.message,
            "unexpected inference output 'NOPE' for model 'm'"
        );
    }

    #[test]
    fn a_shape_mismatch_without_batching_ends_as_tritons() {
        let given = vec![
            fp32("INPUT0", &[2]),
            fp32("INPUT1", &[1]),
            fp32("INPUT2", &[1]),
        ];
        let e = validate(&three_required(false), "", given, &[]).unwrap_err();
        assert_eq!(
            e.message,
            "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'm'. Expected [1], got [2]. "
        );
    }
}
