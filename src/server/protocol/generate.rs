//! Triton's `generate` extension (`POST .../generate` and
//! `.../generate_stream`): a flat JSON object whose keys are the model's
//! inputs and the request's parameters, and one flat JSON object per
//! response. Triton's rules (`HandleGenerate`, `GenerateRequestClass`):
//!
//! - a key naming a model input becomes that input, its datatype from the
//!   config, its value a scalar or a 1-D array (BYTES as strings); its
//!   shape is the input's shape with the innermost variable dimension
//!   taking the element count and the other variable ones (the batch) 1;
//! - any other key becomes a request parameter (string, bool, int, double);
//! - `parameters` (an object) holds more of the same; `id` is also the
//!   request id; the `/infer` keys (`sequence_id`, `priority`, ...) are
//!   ordinary parameters here;
//! - a response is `id` (when set), `model_name`, `model_version` and every
//!   output under its name (one element as a scalar), keys in alphabetical
//!   order.

use std::collections::BTreeMap;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

use super::kserve_json::{elements_to_bytes, json_values};
use crate::core::config::pb::{ModelConfig, ModelInput};
use crate::core::error::{Error, Result};
use crate::core::types::{DataType, InferRequest, InferResponse, Tensor};

fn bad(message: impl Into<String>) -> Error {
    Error::invalid_arg(message)
}

/// A JSON object's members in order, repeats kept (serde_json's `Map`
/// would keep only the last, and Triton refuses an input given twice).
struct Members(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Members, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    out.push((k, v));
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A generate request body (an empty body is `{}`) as an engine request
/// for `config`'s model. `max_input` is `--http-max-input-size`, which
/// bounds the inputs' bytes together.
pub fn parse_request(body: &[u8], config: &ModelConfig, max_input: usize) -> Result<InferRequest> {
    let members = if body.iter().all(u8::is_ascii_whitespace) {
        Vec::new()
    } else {
        serde_json::from_slice::<Members>(body)
            .map_err(|e| bad(format!("failed to parse the request JSON buffer: {e}")))?
            .0
    };
    if config.input.iter().any(|i| i.name == "parameters")
        && members.iter().any(|(k, _)| k == "parameters")
    {
        return Err(bad(
            "Keyword 'parameters' for nested schema also given as input tensor name",
        ));
    }
    let mut builder = Builder {
        config,
        request: InferRequest::default(),
        input_bytes: 0,
        max_input,
    };
    for (key, value) in members {
        match key.as_str() {
            "parameters" => {
                let Value::Object(nested) = value else {
                    return Err(bad("Expected JSON object for keyword: 'parameters'"));
                };
                // Triton's words for a failure inside the nested object.
                for (k, v) in nested {
                    builder.member(k, v).map_err(|mut e| {
                        e.message = format!("Converting keyword: 'parameters': {}", e.message);
                        e
                    })?;
                }
            }
            "id" => {
                let Value::String(id) = &value else {
                    return Err(bad("Unable to parse 'id'"));
                };
                builder.request.id = id.clone();
                builder.member(key, value)?;
            }
            _ => builder.member(key, value)?,
        }
    }
    Ok(builder.request)
}

struct Builder<'a> {
    config: &'a ModelConfig,
    request: InferRequest,
    input_bytes: usize,
    max_input: usize,
}

impl Builder<'_> {
    /// One member: an input when the model has one of that name, else a
    /// parameter.
    fn member(&mut self, key: String, value: Value) -> Result<()> {
        let Some(input) = self.config.input.iter().find(|i| i.name == key) else {
            return self.parameter(key, value);
        };
        if self.request.inputs.iter().any(|t| t.name == key) {
            return Err(bad(format!("input '{key}' already exists in request")));
        }
        let datatype = DataType::from_config(input.data_type).ok_or_else(|| {
            bad(format!(
                "input '{key}' has a datatype the server cannot take"
            ))
        })?;
        let elements: Vec<&Value> = match &value {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        if let Some(v) = elements.iter().find(|v| v.is_array() || v.is_object()) {
            return Err(bad(format!(
                "unable to parse '{v}' as {} for input '{key}': {} (a generate input is a scalar or a 1-D array)",
                datatype.name(),
                json_type_error(datatype)
            )));
        }
        let data = elements_to_bytes(datatype, &elements).map_err(|v| {
            bad(format!(
                "unable to parse '{v}' as {} for input '{key}': {}",
                datatype.name(),
                json_type_error(datatype)
            ))
        })?;
        let shape = derive_shape(&key, &metadata_dims(self.config, input), elements.len())?;
        self.input_bytes += data.len();
        if self.input_bytes > self.max_input {
            return Err(bad(format!(
                "request size of {} bytes with input '{key}' of size {} bytes exceeds the maximum allowed input size of {}. Use --http-max-input-size to increase the limit.",
                self.input_bytes,
                data.len(),
                self.max_input
            )));
        }
        self.request.inputs.push(Tensor {
            name: key,
            datatype,
            shape,
            data,
        });
        Ok(())
    }

    fn parameter(&mut self, key: String, value: Value) -> Result<()> {
        let value = match value {
            Value::String(_) | Value::Bool(_) => value,
            // An integer that fits int64 stays one; other numbers are doubles.
            Value::Number(n) => match n.as_i64() {
                Some(i) => Value::from(i),
                None => n.as_f64().map(Value::from).unwrap_or(Value::Null),
            },
            _ => {
                return Err(bad(format!(
                    "parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
                )))
            }
        };
        self.request.parameters.insert(key, value);
        Ok(())
    }
}

/// Triton's words (its JSON reader's) for a JSON value that is not of the
/// input's type.
fn json_type_error(datatype: DataType) -> &'static str {
    match datatype {
        DataType::Bytes => "attempt to access JSON non-string as string",
        DataType::Bool => "attempt to access JSON non-boolean as boolean",
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            "attempt to access JSON non-signed-integer as signed-integer"
        }
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 | DataType::Uint64 => {
            "attempt to access JSON non-unsigned-integer as unsigned-integer"
        }
        _ => "attempt to access JSON non-number as double",
    }
}

/// A one-element BYTES input `name` of `config`'s model holding `value`,
/// shaped as a generate request shapes it (`[1, 1]` for a batching model's
/// `dims: [ 1 ]`). The OpenAI API sends its prompts so.
pub fn bytes_input(config: &ModelConfig, name: &str, value: &[u8]) -> Result<Tensor> {
    let input = config
        .input
        .iter()
        .find(|i| i.name == name)
        .ok_or_else(|| bad(format!("the model has no input '{name}'")))?;
    Ok(Tensor {
        name: name.to_string(),
        datatype: DataType::Bytes,
        shape: derive_shape(name, &metadata_dims(config, input), 1)?,
        data: Tensor::serialize_bytes([value]),
    })
}

/// An input's shape as the model metadata reports it: the batch dimension
/// (-1) first when the model batches.
fn metadata_dims(config: &ModelConfig, input: &ModelInput) -> Vec<i64> {
    let batch = (config.max_batch_size > 0).then_some(-1);
    batch
        .into_iter()
        .chain(input.dims.iter().copied())
        .collect()
}

/// The shape of `count` elements for an input of shape `dims` (-1:
/// variable): every fixed dimension must divide the count; the innermost
/// variable dimension takes what is left and the others are 1.
fn derive_shape(name: &str, dims: &[i64], count: usize) -> Result<Vec<i64>> {
    let wrong = || {
        bad(format!(
            "The schema can not convert input '{name}' to tensor with proper shape"
        ))
    };
    let mut left = count as i64;
    for &d in dims.iter().filter(|&&d| d > 0) {
        if left % d != 0 {
            return Err(wrong());
        }
        left /= d;
    }
    if dims.contains(&0) && count != 0 {
        return Err(wrong());
    }
    let innermost = dims.iter().rposition(|&d| d < 0);
    if innermost.is_none() && left != 1 && count != 0 {
        return Err(wrong());
    }
    Ok(dims
        .iter()
        .enumerate()
        .map(|(i, &d)| match (d < 0, Some(i) == innermost) {
            (false, _) => d,
            (true, true) => left,
            (true, false) => 1,
        })
        .collect())
}

/// One response as the generate routes write it: keys in alphabetical
/// order; the reserved keys win over an output of the same name.
pub fn response_json(response: &InferResponse) -> Result<Vec<u8>> {
    let mut out: BTreeMap<&str, Value> = BTreeMap::new();
    if !response.id.is_empty() {
        out.insert("id", Value::from(response.id.as_str()));
    }
    out.insert("model_name", Value::from(response.model_name.as_str()));
    out.insert(
        "model_version",
        Value::from(response.model_version.as_str()),
    );
    for t in &response.outputs {
        if out.contains_key(t.name.as_str()) {
            continue;
        }
        let value = match json_values(t)? {
            Value::Array(mut items) if items.len() == 1 => items.pop().unwrap_or(Value::Null),
            other => other,
        };
        out.insert(t.name.as_str(), value);
    }
    serde_json::to_vec(&out).map_err(|e| Error::internal(format!("writing the response: {e}")))
}

/// An error as the generate routes write it, `{"error":"..."}`.
pub fn error_json(e: &Error) -> Vec<u8> {
    serde_json::to_vec(&Map::from_iter([(
        "error".to_string(),
        Value::from(e.message.as_str()),
    )]))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> ModelConfig {
        crate::core::config::parse_config(text.as_bytes())
            .unwrap()
            .config
    }

    fn llm() -> ModelConfig {
        config(
            r#"name: "m" max_batch_size: 4
               input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
                       { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] optional: true },
                       { name: "ids" data_type: TYPE_INT64 dims: [ -1 ] optional: true } ]
               output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]"#,
        )
    }

    #[test]
    fn keys_become_inputs_or_parameters() {
        let r = parse_request(
            br#"{"id":"42","text_input":"hi","max_tokens":8,"ids":[1,2,3],
                "temperature":0.5,"stream":true,"seed":7,"sequence_id":3,
                "parameters":{"top_p":1,"tag":"x"}}"#,
            &llm(),
            1 << 20,
        )
        .unwrap();
        assert_eq!(r.id, "42");
        let names: Vec<_> = r
            .inputs
            .iter()
            .map(|t| (t.name.as_str(), t.shape.clone()))
            .collect();
        assert_eq!(
            names,
            [
                ("text_input", vec![1, 1]),
                ("max_tokens", vec![1, 1]),
                ("ids", vec![1, 3])
            ]
        );
        assert_eq!(r.inputs[0].data, [&2u32.to_le_bytes()[..], b"hi"].concat());
        assert_eq!(r.inputs[1].data, 8i32.to_le_bytes());
        let p = &r.parameters;
        assert_eq!(p["temperature"], 0.5);
        assert_eq!(p["stream"], true);
        assert_eq!(p["seed"], 7);
        assert_eq!(p["sequence_id"], 3);
        assert_eq!(p["top_p"], 1);
        assert_eq!(p["tag"], "x");
        assert_eq!(p["id"], "42");
        assert!(r.sequence.id.is_none());
    }

    #[test]
    fn triton_refusals() {
        let err = |body: &str| {
            parse_request(body.as_bytes(), &llm(), 1 << 20)
                .unwrap_err()
                .message
        };
        assert_eq!(err(r#"{"id":5}"#), "Unable to parse 'id'");
        assert_eq!(
            err(r#"{"parameters":[1]}"#),
            "Expected JSON object for keyword: 'parameters'"
        );
        assert_eq!(
            err(r#"{"stop":["a"]}"#),
            "parameter 'stop' has invalid type. It should be either 'int', 'bool', or 'string'."
        );
        assert_eq!(
            err(r#"{"text_input":"a","text_input":"b"}"#),
            "input 'text_input' already exists in request"
        );
        assert!(err(r#"{"max_tokens":"x"}"#).contains("as INT32 for input 'max_tokens'"));
        assert!(err(r#"[1]"#).starts_with("failed to parse the request JSON buffer"));
        assert!(parse_request(b"{\"text_input\":\"a\"}", &llm(), 4)
            .unwrap_err()
            .message
            .contains("exceeds the maximum allowed input size of 4"));
        assert!(parse_request(b"  ", &llm(), 4).unwrap().inputs.is_empty());
    }

    #[test]
    fn shapes_from_the_metadata() {
        assert_eq!(derive_shape("x", &[-1, 2, -1], 6).unwrap(), [1, 2, 3]);
        assert_eq!(derive_shape("x", &[-1, 1], 1).unwrap(), [1, 1]);
        assert_eq!(derive_shape("x", &[4], 4).unwrap(), [4]);
        assert!(derive_shape("x", &[4], 3).is_err());
        assert!(derive_shape("x", &[2, 2], 2).is_err());
        assert_eq!(derive_shape("x", &[-1], 0).unwrap(), [0]);
    }

    #[test]
    fn responses_sorted_scalars_unwrapped() {
        let r = InferResponse {
            parameters: Default::default(),
            last: true,
            model_name: "m".into(),
            model_version: "1".into(),
            id: String::new(),
            outputs: vec![
                Tensor {
                    name: "text_output".into(),
                    datatype: DataType::Bytes,
                    shape: vec![1, 1],
                    data: Tensor::serialize_bytes([&b"yo"[..]]),
                },
                Tensor {
                    name: "a".into(),
                    datatype: DataType::Int32,
                    shape: vec![2],
                    data: [1i32.to_le_bytes(), 2i32.to_le_bytes()].concat(),
                },
                Tensor {
                    name: "model_name".into(),
                    datatype: DataType::Int32,
                    shape: vec![1],
                    data: 9i32.to_le_bytes().to_vec(),
                },
            ],
        };
        assert_eq!(
            String::from_utf8(response_json(&r).unwrap()).unwrap(),
            r#"{"a":[1,2],"model_name":"m","model_version":"1","text_output":"yo"}"#
        );
    }
}
