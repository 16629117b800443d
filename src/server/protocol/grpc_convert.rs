//! Conversions between the gRPC messages (`pb::inference`) and engine types:
//! inference requests (typed `contents` or `raw_input_contents`) and
//! responses (always `raw_output_contents`, as Triton answers), metadata and
//! statistics.

use crate::core::engine::{ModelMetadata, TensorMetadata};
use crate::core::error::{Error, Result};
use crate::core::repository::LoadedModel;
use crate::core::types::{
    DataType, InferRequest, InferResponse, RequestedOutput, SequenceId, SequenceParams, ShmRef,
    Tensor,
};

use super::pb::inference::{
    infer_parameter::ParameterChoice, model_infer_response::InferOutputTensor,
    model_metadata_response, InferBatchStatistics, InferParameter, InferStatistics,
    InferTensorContents, MemoryUsage, ModelInferRequest, ModelInferResponse, ModelMetadataResponse,
    ModelStatistics, StatisticDuration,
};

fn bad(message: impl Into<String>) -> Error {
    Error::invalid_arg(message)
}

/// A gRPC inference request → an engine request (Triton's
/// `InferGRPCToInput` checks and messages).
pub fn infer_request(req: ModelInferRequest) -> Result<InferRequest> {
    reserved_params(&req.parameters)?;
    let model = req.model_name;
    let using_raw = !req.raw_input_contents.is_empty();
    let raw_given = req.raw_input_contents.len();
    let mut raw = req.raw_input_contents.into_iter();
    let mut inputs = Vec::with_capacity(req.inputs.len());
    let mut shm_inputs = Vec::new();
    for (i, input) in req.inputs.into_iter().enumerate() {
        let datatype = DataType::from_name(&input.datatype).ok_or_else(|| {
            bad(format!(
                "invalid datatype for input '{}': '{}'",
                input.name, input.datatype
            ))
        })?;
        if let Some(shm) = shm_ref(&input.parameters, &input.name)? {
            if input.contents.is_some() {
                return Err(bad(format!(
                    "unexpected 'content' provided when using shared memory for input tensor '{}' for model '{model}'",
                    input.name
                )));
            }
            shm_inputs.push((i, shm));
            inputs.push(Tensor {
                name: input.name,
                datatype,
                shape: input.shape,
                data: Vec::new(),
            });
            continue;
        }
        let data = match input.contents {
            Some(_) if using_raw => {
                return Err(bad(format!(
                    "contents field must not be specified when using raw_input_contents for '{}' for model '{model}'",
                    input.name
                )))
            }
            Some(contents) => typed_contents(&input.name, &model, datatype, contents)?,
            None => raw.next().ok_or_else(|| {
                bad(format!(
                    "unable to find data for input tensor '{}' for model '{model}' in request.",
                    input.name
                ))
            })?,
        };
        inputs.push(Tensor {
            name: input.name,
            datatype,
            shape: input.shape,
            data,
        });
    }
    if raw.len() > 0 {
        return Err(bad(format!(
            "raw_input_contents has {raw_given} entries but the request's inputs use {} for model '{model}'",
            raw_given - raw.len()
        )));
    }
    let mut outputs = Vec::with_capacity(req.outputs.len());
    for out in req.outputs {
        let classification = match out
            .parameters
            .get("classification")
            .and_then(|p| p.parameter_choice.as_ref())
        {
            None => None,
            Some(ParameterChoice::Int64Param(n)) if *n >= 1 => Some(*n as usize),
            Some(ParameterChoice::Int64Param(_)) => {
                return Err(bad(
                    "invalid value for 'classification' parameter, expected >= 1",
                ))
            }
            Some(_) => {
                return Err(bad(
                    "invalid value type for 'classification' parameter, expected int64_param",
                ))
            }
        };
        let shm = shm_ref(&out.parameters, &out.name)?;
        if shm.is_some() && classification.is_some() {
            return Err(bad(
                "output can't set both 'shared_memory_region' and 'classification'",
            ));
        }
        outputs.push(RequestedOutput {
            name: out.name,
            classification,
            shm,
        });
    }
    let (priority, timeout_us) = schedule_params(&req.parameters)?;
    let sequence = sequence_params(&req.parameters)?;
    Ok(InferRequest {
        id: req.id,
        inputs,
        shm_inputs,
        outputs,
        priority,
        timeout_us,
        sequence,
        parameters: backend_params(&req.parameters),
        trace_context: None,
    })
}

/// The request parameters Triton keeps for itself (`triton_` keys), as its
/// gRPC frontend checks them: only `triton_enable_empty_final_response`,
/// a `bool_param`.
fn reserved_params(params: &std::collections::HashMap<String, InferParameter>) -> Result<()> {
    const ALLOWED: &str = "triton_enable_empty_final_response";
    for (key, value) in params {
        if !key.starts_with("triton_") {
            continue;
        }
        if key != ALLOWED {
            return Err(bad(format!(
                "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: {ALLOWED}"
            )));
        }
        if !matches!(value.parameter_choice, Some(ParameterChoice::BoolParam(_))) {
            return Err(bad(format!(
                "invalid value type for '{key}' parameter, expected bool_param."
            )));
        }
    }
    Ok(())
}

/// The request parameters that are not Triton's own, as JSON values.
fn backend_params(
    params: &std::collections::HashMap<String, InferParameter>,
) -> serde_json::Map<String, serde_json::Value> {
    let mut keys: Vec<&String> = params
        .keys()
        .filter(|k| !crate::core::types::reserved_parameter(k))
        .collect();
    keys.sort();
    keys.into_iter()
        .filter_map(|k| {
            let v = match params[k].parameter_choice.as_ref()? {
                ParameterChoice::BoolParam(b) => serde_json::Value::from(*b),
                ParameterChoice::Int64Param(v) => serde_json::Value::from(*v),
                ParameterChoice::Uint64Param(v) => serde_json::Value::from(*v),
                ParameterChoice::DoubleParam(v) => serde_json::Value::from(*v),
                ParameterChoice::StringParam(v) => serde_json::Value::from(v.clone()),
            };
            Some((k.clone(), v))
        })
        .collect()
}

/// The sequence extension's parameters with Triton's gRPC checks:
/// `sequence_id` as `int64_param` or `string_param`, `sequence_start` and
/// `sequence_end` as `bool_param`.
fn sequence_params(
    params: &std::collections::HashMap<String, InferParameter>,
) -> Result<SequenceParams> {
    let choice = |key: &str| params.get(key).and_then(|p| p.parameter_choice.as_ref());
    let id = match choice("sequence_id") {
        None => SequenceId::None,
        Some(ParameterChoice::Int64Param(v)) => SequenceId::Number(*v as u64),
        Some(ParameterChoice::StringParam(s)) => SequenceId::Text(s.clone()),
        Some(_) => return Err(bad(
            "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
        )),
    };
    let flag = |key: &str| match choice(key) {
        None => Ok(false),
        Some(ParameterChoice::BoolParam(b)) => Ok(*b),
        Some(_) => Err(bad(format!(
            "invalid value type for '{key}' parameter, expected bool_param."
        ))),
    };
    Ok(SequenceParams {
        id,
        start: flag("sequence_start")?,
        end: flag("sequence_end")?,
    })
}

/// The schedule policy extension's request parameters with Triton's
/// checks: `priority` as `int64_param` (not negative) or `uint64_param`,
/// `timeout` as `int64_param`.
fn schedule_params(
    params: &std::collections::HashMap<String, InferParameter>,
) -> Result<(u64, u64)> {
    let choice = |key: &str| params.get(key).and_then(|p| p.parameter_choice.as_ref());
    let priority = match choice("priority") {
        None => 0,
        Some(ParameterChoice::Int64Param(v)) if *v < 0 => {
            return Err(bad("invalid value for 'priority', expected value >= 0."))
        }
        Some(ParameterChoice::Int64Param(v)) => *v as u64,
        Some(ParameterChoice::Uint64Param(v)) => *v,
        Some(_) => return Err(bad(
            "invalid value type for 'priority' parameter, expected int64_param or uint64_param.",
        )),
    };
    let timeout = match choice("timeout") {
        None => 0,
        Some(ParameterChoice::Int64Param(v)) => *v as u64,
        Some(_) => {
            return Err(bad(
                "invalid value type for 'timeout' parameter, expected int64_param.",
            ))
        }
    };
    Ok((priority, timeout))
}

/// The shared memory parameters of a tensor, if it names a region, with
/// Triton's gRPC checks and messages.
fn shm_ref(
    params: &std::collections::HashMap<String, InferParameter>,
    tensor: &str,
) -> Result<Option<ShmRef>> {
    let choice = |key: &str| params.get(key).and_then(|p| p.parameter_choice.as_ref());
    let int = |key: &str| -> Result<Option<usize>> {
        match choice(key) {
            None => Ok(None),
            Some(ParameterChoice::Int64Param(v)) => Ok(Some(*v as usize)),
            Some(_) => Err(bad(format!(
                "invalid value type for '{key}' parameter for tensor '{tensor}', expected int64_param."
            ))),
        }
    };
    let offset = int("shared_memory_offset")?;
    let byte_size = int("shared_memory_byte_size")?;
    let Some(region) = choice("shared_memory_region") else {
        for (key, value) in [
            ("shared_memory_offset", offset),
            ("shared_memory_byte_size", byte_size),
        ] {
            if value.is_some() {
                return Err(bad(format!(
                    "'{key}' can not be specified without 'shared_memory_region' parameter for tensor '{tensor}'"
                )));
            }
        }
        return Ok(None);
    };
    let ParameterChoice::StringParam(region) = region else {
        return Err(bad(format!(
            "invalid value type for 'shared_memory_region' parameter for tensor '{tensor}', expected string_param."
        )));
    };
    let byte_size = byte_size.ok_or_else(|| {
        bad(format!(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor '{tensor}'"
        ))
    })?;
    Ok(Some(ShmRef {
        region: region.clone(),
        byte_size,
        offset: offset.unwrap_or(0),
    }))
}

/// The list a typed `contents` uses, by the datatype name Triton reports for
/// it; None when empty, Err when more than one list is used.
fn contents_type(c: &InferTensorContents) -> Result<Option<&'static str>, ()> {
    let used: Vec<&'static str> = [
        (!c.bool_contents.is_empty(), "BOOL"),
        (!c.int_contents.is_empty(), "INT32"),
        (!c.int64_contents.is_empty(), "INT64"),
        (!c.uint_contents.is_empty(), "UINT32"),
        (!c.uint64_contents.is_empty(), "UINT64"),
        (!c.fp32_contents.is_empty(), "FP32"),
        (!c.fp64_contents.is_empty(), "FP64"),
        (!c.bytes_contents.is_empty(), "BYTES"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect();
    match used.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        _ => Err(()),
    }
}

/// Typed `contents` → raw little-endian bytes. Like Triton, INT8/INT16 come
/// in `int_contents` and UINT8/UINT16 in `uint_contents`, narrowed to their
/// low bytes.
fn typed_contents(
    name: &str,
    model: &str,
    dt: DataType,
    c: InferTensorContents,
) -> Result<Vec<u8>> {
    let expected_list = match dt {
        DataType::Int8 | DataType::Int16 | DataType::Int32 => "INT32",
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 => "UINT32",
        other => other.name(),
    };
    match contents_type(&c) {
        Err(()) => {
            return Err(bad(format!(
                "unexpected explicit tensor data for input tensor '{name}' for model '{model}', binary data was already supplied."
            )))
        }
        Ok(Some(found)) if found != expected_list => {
            return Err(bad(format!(
                "unexpected explicit tensor data for input tensor '{name}' for model '{model}' of type '{found}', expected datatype '{}'",
                dt.name()
            )))
        }
        _ => {}
    }
    Ok(match dt {
        DataType::Bool => c.bool_contents.iter().map(|&b| b as u8).collect(),
        DataType::Int8 => c.int_contents.iter().map(|&v| v as i8 as u8).collect(),
        DataType::Int16 => c.int_contents.iter().flat_map(|&v| (v as i16).to_le_bytes()).collect(),
        DataType::Int32 => c.int_contents.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DataType::Int64 => c.int64_contents.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DataType::Uint8 => c.uint_contents.iter().map(|&v| v as u8).collect(),
        DataType::Uint16 => c.uint_contents.iter().flat_map(|&v| (v as u16).to_le_bytes()).collect(),
        DataType::Uint32 => c.uint_contents.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DataType::Uint64 => c.uint64_contents.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DataType::Fp32 => c.fp32_contents.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DataType::Fp64 => c.fp64_contents.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DataType::Bytes => Tensor::serialize_bytes(c.bytes_contents.iter().map(|b| b.as_slice())),
        DataType::Fp16 | DataType::Bf16 => {
            return Err(bad(format!(
                "unexpected explicit tensor data for input tensor '{name}' for model '{model}': {} must be sent in raw_input_contents",
                dt.name()
            )))
        }
    })
}

/// An engine response → a gRPC response with raw output contents.
pub fn infer_response(resp: InferResponse) -> ModelInferResponse {
    let mut outputs = Vec::with_capacity(resp.outputs.len());
    let mut raw = Vec::with_capacity(resp.outputs.len());
    for t in resp.outputs {
        outputs.push(InferOutputTensor {
            name: t.name,
            datatype: t.datatype.name().to_string(),
            shape: t.shape,
            parameters: Default::default(),
            contents: None,
        });
        raw.push(t.data);
    }
    ModelInferResponse {
        model_name: resp.model_name,
        model_version: resp.model_version,
        id: resp.id,
        parameters: response_parameters(resp.parameters),
        outputs,
        raw_output_contents: raw,
    }
}

/// Response parameters as gRPC's: strings, booleans, integers (unsigned
/// past i64's range) and doubles.
fn response_parameters(
    parameters: crate::core::types::ResponseParameters,
) -> std::collections::HashMap<String, InferParameter> {
    parameters
        .into_iter()
        .filter_map(|(key, value)| {
            let choice = match value {
                serde_json::Value::Bool(b) => ParameterChoice::BoolParam(b),
                serde_json::Value::String(s) => ParameterChoice::StringParam(s),
                serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                    (Some(i), _, _) => ParameterChoice::Int64Param(i),
                    (None, Some(u), _) => ParameterChoice::Uint64Param(u),
                    (None, None, Some(f)) => ParameterChoice::DoubleParam(f),
                    _ => return None,
                },
                _ => return None,
            };
            Some((
                key,
                InferParameter {
                    parameter_choice: Some(choice),
                },
            ))
        })
        .collect()
}

pub fn model_metadata(meta: ModelMetadata) -> ModelMetadataResponse {
    let tensor = |t: TensorMetadata| model_metadata_response::TensorMetadata {
        name: t.name,
        datatype: t.datatype,
        shape: t.shape,
    };
    ModelMetadataResponse {
        name: meta.name,
        versions: meta.versions,
        platform: meta.platform,
        inputs: meta.inputs.into_iter().map(tensor).collect(),
        outputs: meta.outputs.into_iter().map(tensor).collect(),
    }
}

fn duration((count, ns): (u64, u64)) -> Option<StatisticDuration> {
    Some(StatisticDuration { count, ns })
}

pub fn model_statistics(m: &LoadedModel) -> ModelStatistics {
    let st = m.stats.snapshot();
    ModelStatistics {
        name: m.name.clone(),
        version: m.version.to_string(),
        last_inference: st.last_inference,
        inference_count: st.inference_count,
        execution_count: st.execution_count,
        inference_stats: Some(InferStatistics {
            success: duration(st.success),
            fail: duration(st.fail),
            queue: duration(st.queue),
            compute_input: duration(st.compute_input),
            compute_infer: duration(st.compute_infer),
            compute_output: duration(st.compute_output),
            cache_hit: duration(st.cache_hit),
            cache_miss: duration(st.cache_miss),
        }),
        batch_stats: st
            .batches
            .iter()
            .map(
                |&(batch_size, count, input, infer, output)| InferBatchStatistics {
                    batch_size,
                    compute_input: duration((count, input)),
                    compute_infer: duration((count, infer)),
                    compute_output: duration((count, output)),
                },
            )
            .collect(),
        memory_usage: st
            .memory_usage
            .iter()
            .map(|u| MemoryUsage {
                r#type: u.kind.to_string(),
                id: u.id,
                byte_size: u.byte_size,
            })
            .collect(),
        response_stats: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::protocol::pb::inference::model_infer_request::{
        InferInputTensor, InferRequestedOutputTensor,
    };
    use crate::server::protocol::pb::inference::InferParameter;

    /// qa/L0_parameters: `triton_` keys are Triton's own; only
    /// `triton_enable_empty_final_response` (a bool) may be sent.
    #[test]
    fn reserved_triton_parameters_are_refused() {
        let with = |key: &str, choice: ParameterChoice| ModelInferRequest {
            model_name: "m".into(),
            parameters: [(
                key.to_string(),
                InferParameter {
                    parameter_choice: Some(choice),
                },
            )]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let e = infer_request(with("triton_", ParameterChoice::BoolParam(true))).unwrap_err();
        assert_eq!(
            e.message,
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response"
        );
        let e = infer_request(with(
            "triton_enable_empty_final_response",
            ParameterChoice::Int64Param(1),
        ))
        .unwrap_err();
        assert_eq!(
            e.message,
            "invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param."
        );
        assert!(infer_request(with(
            "triton_enable_empty_final_response",
            ParameterChoice::BoolParam(true)
        ))
        .is_ok());
        assert!(infer_request(with("key2", ParameterChoice::StringParam("v".into()))).is_ok());
    }

    #[test]
    fn typed_and_raw_contents() {
        let req = ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![InferInputTensor {
                name: "A".into(),
                datatype: "INT16".into(),
                shape: vec![1, 2],
                contents: Some(InferTensorContents {
                    int_contents: vec![-2, 300],
                    ..Default::default()
                }),
                ..Default::default()
            }],
            outputs: vec![InferRequestedOutputTensor {
                name: "B".into(),
                parameters: [(
                    "classification".to_string(),
                    InferParameter {
                        parameter_choice: Some(ParameterChoice::Int64Param(3)),
                    },
                )]
                .into_iter()
                .collect(),
            }],
            ..Default::default()
        };
        let r = infer_request(req).unwrap();
        assert_eq!(
            r.inputs[0].data,
            [(-2i16).to_le_bytes(), 300i16.to_le_bytes()].concat()
        );
        assert_eq!(r.outputs[0].classification, Some(3));

        let req = ModelInferRequest {
            inputs: vec![InferInputTensor {
                name: "A".into(),
                datatype: "INT8".into(),
                shape: vec![1],
                contents: Some(InferTensorContents {
                    int_contents: vec![300],
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        // Triton keeps the low byte.
        assert_eq!(
            infer_request(req).unwrap().inputs[0].data,
            vec![300i32 as i8 as u8]
        );

        let req = ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![InferInputTensor {
                name: "A".into(),
                datatype: "INT32".into(),
                shape: vec![1],
                contents: Some(InferTensorContents {
                    fp32_contents: vec![1.0],
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            infer_request(req).unwrap_err().message,
            "unexpected explicit tensor data for input tensor 'A' for model 'm' of type 'FP32', expected datatype 'INT32'"
        );
    }
}
