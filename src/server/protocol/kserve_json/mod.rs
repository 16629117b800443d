//! The KServe v2 REST protocol with Triton's binary tensor data extension:
//! request bodies (JSON, JSON + binary tail, raw single input) into engine
//! requests, and engine responses into JSON or JSON + binary.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::core::config::ModelConfig;
use crate::core::error::{request_prefix, Error, Result};
use crate::core::types::element::{elements, Element, ElementFn, Scalar};
use crate::core::types::{
    element_count, DataType, InferRequest, InferResponse, RequestedOutput, SequenceId,
    SequenceParams, ShmRef, Tensor,
};

/// How the client wants each output back.
#[derive(Debug, Clone, Default)]
pub struct OutputFormat {
    /// `binary_data_output` request parameter: the default for the
    /// outputs the request does not list.
    pub binary_default: bool,
    /// Each listed output's `binary_data` parameter (false when it has
    /// none, as in Triton).
    pub binary: BTreeMap<String, bool>,
    /// Outputs written to shared memory (no data in the response).
    pub shm: BTreeMap<String, ShmRef>,
}

impl OutputFormat {
    fn is_binary(&self, name: &str) -> bool {
        self.binary
            .get(name)
            .copied()
            .unwrap_or(self.binary_default)
    }
}

fn bad(message: impl Into<String>) -> Error {
    Error::invalid_arg(message)
}

/// Parses an inference request body. `header_length` is the
/// `Inference-Header-Content-Length` header: the JSON part's size, the rest
/// being binary tensor data; `Some(0)` is a raw request holding the data of
/// the model's single input.
pub fn parse_request(
    body: &[u8],
    header_length: Option<usize>,
    config: &ModelConfig,
) -> Result<(InferRequest, OutputFormat)> {
    if header_length == Some(0) {
        return raw_request(Binary::Borrowed(body), config);
    }
    let json_len = header_length.unwrap_or(body.len());
    if json_len > body.len() {
        return Err(bad(format!(
            "Inference-Header-Content-Length {json_len} is larger than the request body ({} bytes)",
            body.len()
        )));
    }
    let (head, binary) = body.split_at(json_len);
    parse_parts(head, Binary::Borrowed(binary), config)
}

/// `parse_request` for a body read in its two parts: `head` the JSON part
/// (`Inference-Header-Content-Length` bytes, not 0), `binary` the rest. The
/// first binary input takes `binary`'s own buffer (a request of one large
/// tensor is not copied again); the others are copied out of it.
pub fn parse_binary_request(
    head: &[u8],
    binary: Vec<u8>,
    config: &ModelConfig,
) -> Result<(InferRequest, OutputFormat)> {
    parse_parts(head, Binary::Owned(binary), config)
}

/// `parse_request` of a raw binary request (`Inference-Header-Content-Length:
/// 0`), taking the body's own buffer as the input's data.
pub fn parse_raw_request(
    body: Vec<u8>,
    config: &ModelConfig,
) -> Result<(InferRequest, OutputFormat)> {
    raw_request(Binary::Owned(body), config)
}

/// The binary part of a request: borrowed from a body read whole (each
/// input's bytes are copied out), or a buffer of its own (the bytes of the
/// first input taken are moved out of it).
enum Binary<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl Binary<'_> {
    fn len(&self) -> usize {
        match self {
            Binary::Borrowed(b) => b.len(),
            Binary::Owned(b) => b.len(),
        }
    }

    /// The next `size` bytes (`size <= len()`).
    fn take(&mut self, size: usize) -> Vec<u8> {
        match self {
            Binary::Borrowed(b) => {
                let (mine, rest) = b.split_at(size);
                *b = rest;
                mine.to_vec()
            }
            Binary::Owned(b) if size == b.len() => std::mem::take(b),
            Binary::Owned(b) => {
                let rest = b.split_off(size);
                std::mem::replace(b, rest)
            }
        }
    }
}

fn parse_parts(
    head: &[u8],
    mut binary: Binary<'_>,
    config: &ModelConfig,
) -> Result<(InferRequest, OutputFormat)> {
    let doc: Value = serde_json::from_slice(head)
        .map_err(|e| bad(format!("failed to parse the request JSON buffer: {e}")))?;
    let obj = doc
        .as_object()
        .ok_or_else(|| bad("the request JSON must be an object"))?;

    let id = match obj.get("id") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(bad("'id' must be a string")),
    };
    let mut format = OutputFormat::default();
    let (mut priority, mut timeout_us) = (0, 0);
    let mut sequence = SequenceParams::default();
    let mut parameters = serde_json::Map::new();
    if let Some(params) = obj.get("parameters") {
        let params = params
            .as_object()
            .ok_or_else(|| bad("'parameters' must be an object"))?;
        if let Some(v) = params.get("binary_data_output") {
            format.binary_default = v
                .as_bool()
                .ok_or_else(|| bad("'binary_data_output' must be a boolean"))?;
        }
        for (key, slot) in [("priority", &mut priority), ("timeout", &mut timeout_us)] {
            if let Some(v) = params.get(key) {
                *slot = v.as_u64().ok_or_else(|| {
                    bad(format!(
                        "Unable to parse '{key}': attempt to access JSON non-unsigned-integer as unsigned-integer"
                    ))
                })?;
            }
        }
        sequence = sequence_params(params)?;
        if params.keys().any(|k| k.starts_with("triton_")) {
            return Err(bad(
                "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
            ));
        }
        parameters = params
            .iter()
            .filter(|(k, _)| !crate::core::types::reserved_parameter(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
    }
    let inputs_json = obj
        .get("inputs")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("the request must have an 'inputs' array"))?;
    let mut inputs = Vec::with_capacity(inputs_json.len());
    let mut shm_inputs = Vec::new();
    for (i, input) in inputs_json.iter().enumerate() {
        let (tensor, shm) = parse_input(input, &mut binary, &config.name)?;
        inputs.push(tensor);
        if let Some(shm) = shm {
            shm_inputs.push((i, shm));
        }
    }
    if binary.len() != 0 {
        return Err(bad(format!(
            "unexpected additional input data for model '{}'",
            config.name
        )));
    }
    let mut outputs = Vec::new();
    if let Some(outs) = obj.get("outputs") {
        let outs = outs
            .as_array()
            .ok_or_else(|| bad("'outputs' must be an array"))?;
        for out in outs {
            let name = out
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("each requested output needs a 'name'"))?
                .to_string();
            check_parameters(out, "output", &name)?;
            let mut classification = None;
            let mut shm = None;
            if let Some(params) = out.get("parameters").and_then(Value::as_object) {
                shm = shm_ref(params, &name)?;
                if let Some(r) = &shm {
                    if params.contains_key("classification") {
                        return Err(bad(
                            "Output can't set both 'shared_memory_region' and 'classification'",
                        ));
                    }
                    if params.get("binary_data").and_then(Value::as_bool) == Some(true) {
                        return Err(bad(
                            "Output can't set both 'shared_memory_region' and 'binary_data'",
                        ));
                    }
                    format.shm.insert(name.clone(), r.clone());
                }
                if let Some(b) = params.get("binary_data") {
                    let b = b
                        .as_bool()
                        .ok_or_else(|| bad("'binary_data' must be a boolean"))?;
                    format.binary.insert(name.clone(), b);
                }
                if let Some(c) = params.get("classification") {
                    let n = c.as_u64().filter(|&n| n > 0).ok_or_else(|| {
                        bad(format!(
                            "'classification' of output '{name}' must be a positive integer"
                        ))
                    })?;
                    classification = Some(n as usize);
                }
            }
            // As Triton: an output listed without its own `binary_data` is
            // JSON; `binary_data_output` is for the outputs not listed.
            format.binary.entry(name.clone()).or_insert(false);
            outputs.push(RequestedOutput {
                name,
                classification,
                shm,
            });
        }
    }
    Ok((
        InferRequest {
            id,
            inputs,
            shm_inputs,
            outputs,
            priority,
            timeout_us,
            sequence,
            parameters,
            trace_context: None,
        },
        format,
    ))
}

/// The sequence extension's parameters, with Triton's parse errors:
/// `sequence_id` an unsigned integer or a string, `sequence_start` and
/// `sequence_end` booleans.
fn sequence_params(params: &Map<String, Value>) -> Result<SequenceParams> {
    let mut sequence = SequenceParams::default();
    if let Some(v) = params.get("sequence_id") {
        sequence.id = match v {
            Value::Number(n) if n.as_u64().is_some() => SequenceId::Number(n.as_u64().unwrap_or(0)),
            Value::String(s) => SequenceId::Text(s.clone()),
            _ => {
                return Err(bad(
                    "Unable to parse 'sequence_id': attempt to access JSON non-string as string",
                ))
            }
        };
    }
    for (key, slot) in [
        ("sequence_start", &mut sequence.start),
        ("sequence_end", &mut sequence.end),
    ] {
        if let Some(v) = params.get(key) {
            *slot = v.as_bool().ok_or_else(|| {
                bad(format!(
                    "Unable to parse '{key}': attempt to access JSON non-boolean as boolean"
                ))
            })?;
        }
    }
    Ok(sequence)
}

/// The shared memory parameters of a tensor, if it names a region (HTTP:
/// a missing byte size is 0, which the size check then rejects, as Triton).
fn shm_ref(params: &Map<String, Value>, _tensor: &str) -> Result<Option<ShmRef>> {
    let Some(region) = params.get("shared_memory_region") else {
        return Ok(None);
    };
    let region = region
        .as_str()
        .ok_or_else(|| bad("Unable to parse 'shared_memory_region'"))?;
    let number = |key: &str| -> Result<usize> {
        match params.get(key) {
            None => Ok(0),
            Some(v) => v
                .as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| bad(format!("Unable to parse '{key}'"))),
        }
    };
    Ok(Some(ShmRef {
        region: region.to_string(),
        byte_size: number("shared_memory_byte_size")?,
        offset: number("shared_memory_offset")?,
    }))
}

/// A tensor's `parameters`, when given, must be an object (an array or a
/// string is refused rather than ignored).
fn check_parameters(tensor: &Value, what: &str, name: &str) -> Result<()> {
    match tensor.get("parameters") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(bad(format!(
            "'parameters' of {what} '{name}' must be an object"
        ))),
    }
}

fn parse_input(
    input: &Value,
    binary: &mut Binary<'_>,
    model: &str,
) -> Result<(Tensor, Option<ShmRef>)> {
    let name = input
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("each input needs a 'name'"))?
        .to_string();
    check_parameters(input, "input", &name)?;
    let dt_name = input
        .get("datatype")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("input '{name}' needs a 'datatype'")))?;
    let datatype = DataType::from_name(dt_name)
        .ok_or_else(|| bad(format!("invalid datatype for input '{name}': '{dt_name}'")))?;
    let shape: Vec<i64> = input
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| bad(format!("input '{name}' needs a 'shape'")))?
        .iter()
        .map(|d| d.as_i64())
        .collect::<Option<Vec<i64>>>()
        .ok_or_else(|| bad(format!("the shape of input '{name}' must be integers")))?;
    if shape.iter().any(|&d| d < 0) {
        // The engine reports it with Triton's message.
        let tensor = Tensor {
            name,
            datatype,
            shape,
            data: Vec::new(),
        };
        return Ok((tensor, None));
    }
    let params = input.get("parameters").and_then(Value::as_object);
    let set: Vec<&str> = [
        (input.get("data").is_some(), "'data'"),
        (
            params.is_some_and(|p| p.contains_key("binary_data_size")),
            "'binary_data_size'",
        ),
        (
            params.is_some_and(|p| p.contains_key("shared_memory_region")),
            "'shared_memory_region'",
        ),
    ]
    .into_iter()
    .filter_map(|(present, field)| present.then_some(field))
    .collect();
    if set.len() != 1 {
        let found = if set.is_empty() {
            "But no field is set".to_string()
        } else {
            format!("But set {}", set.join(" "))
        };
        return Err(bad(format!(
            "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. {found}"
        )));
    }
    if let Some(shm) = params.map(|p| shm_ref(p, &name)).transpose()?.flatten() {
        let tensor = Tensor {
            name,
            datatype,
            shape,
            data: Vec::new(),
        };
        return Ok((tensor, Some(shm)));
    }
    let binary_size = input
        .get("parameters")
        .and_then(|p| p.get("binary_data_size"))
        .map(|v| {
            v.as_u64().ok_or_else(|| {
                bad(format!(
                    "'binary_data_size' of input '{name}' must be a non-negative integer"
                ))
            })
        })
        .transpose()?;
    let data = match (binary_size, input.get("data")) {
        (Some(_), Some(_)) => {
            return Err(bad(format!(
                "input '{name}' has both 'data' and 'binary_data_size'"
            )));
        }
        (Some(size), None) => {
            let size = size as usize;
            if size > binary.len() {
                return Err(bad(format!(
                    "unexpected size for input '{name}', expecting {} additional bytes for model '{model}'",
                    size - binary.len()
                )));
            }
            binary.take(size)
        }
        (None, Some(data)) => json_data(&name, datatype, &shape, data)?,
        (None, None) => {
            return Err(bad(format!(
                "input '{name}' must have 'data' or 'binary_data_size'"
            )))
        }
    };
    Ok((
        Tensor {
            name,
            datatype,
            shape,
            data,
        },
        None,
    ))
}

/// Flattens a (possibly nested) JSON array.
fn flatten<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
        other => out.push(other),
    }
}

fn json_data(name: &str, dt: DataType, shape: &[i64], data: &Value) -> Result<Vec<u8>> {
    if matches!(dt, DataType::Fp16 | DataType::Bf16) {
        return Err(bad(format!(
            "receiving {} data via JSON is not supported. Please use the binary data format for input {name}",
            dt.name()
        )));
    }
    let mut elements = Vec::new();
    flatten(data, &mut elements);
    let expected = element_count(shape)
        .ok_or_else(|| bad(format!("the shape of input '{name}' is too large")))?;
    if elements.len() != expected {
        return Err(bad(
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ));
    }
    elements_to_bytes(dt, &elements).map_err(|v| {
        bad(format!(
            "unable to parse '{v}' as {} for input '{name}'",
            dt.name()
        ))
    })
}

/// JSON elements → raw little-endian bytes of `dt` (BYTES as strings,
/// length-prefixed; FP16/BF16 from numbers). Err carries the element that
/// does not fit. Shared by the server, the client and `trtis infer`.
pub(crate) fn elements_to_bytes(
    dt: DataType,
    elements: &[&Value],
) -> std::result::Result<Vec<u8>, Value> {
    /// Each element as `T`, or the first that is not one.
    struct FromJson<'a, 'v>(&'a [&'v Value]);
    impl ElementFn for FromJson<'_, '_> {
        type Output = std::result::Result<Vec<u8>, Value>;
        fn call<T: Element>(self) -> Self::Output {
            let mut out = Vec::with_capacity(self.0.len() * T::SIZE);
            for &v in self.0 {
                let x = scalar_of(v)
                    .and_then(T::from_scalar)
                    .ok_or_else(|| v.clone())?;
                x.write_le(&mut out);
            }
            Ok(out)
        }
    }
    if let Some(numbers) = dt.with_element(FromJson(elements)) {
        return numbers;
    }
    // BYTES: strings.
    let mut out = Vec::with_capacity(elements.len() * 8);
    for v in elements {
        let s = v.as_str().ok_or_else(|| (*v).clone())?;
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    Ok(out)
}

/// A JSON number or boolean as a scalar (integers as integers).
fn scalar_of(v: &Value) -> Option<Scalar> {
    match v {
        Value::Bool(b) => Some(Scalar::Bool(*b)),
        Value::Number(n) => n
            .as_u64()
            .map(Scalar::Uint)
            .or_else(|| n.as_i64().map(Scalar::Int))
            .or_else(|| n.as_f64().map(Scalar::Float)),
        _ => None,
    }
}

/// A scalar as a JSON value (a NaN or infinite float as null).
fn scalar_json(s: Scalar) -> Value {
    match s {
        Scalar::Bool(b) => Value::Bool(b),
        Scalar::Int(i) => Value::from(i),
        Scalar::Uint(u) => Value::from(u),
        Scalar::Float(f) => Value::from(f),
    }
}

/// Flattens a (possibly nested) JSON array into its elements.
pub(crate) fn flat_elements(v: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    flatten(v, &mut out);
    out
}

/// A raw request: the body is the data of the model's only input, batch 1
/// (Triton's `InferenceRequest::Normalize` deduction, with its messages).
fn raw_request(mut body: Binary<'_>, config: &ModelConfig) -> Result<(InferRequest, OutputFormat)> {
    let lr = request_prefix("");
    let [input] = config.input.as_slice() else {
        return Err(bad(format!(
            "{lr}Raw request must only have 1 input (found 1) to be deduced but got {} inputs in '{}' model configuration",
            config.input.len(),
            config.name
        )));
    };
    let dt = DataType::from_config(input.data_type).ok_or_else(|| bad("invalid input datatype"))?;
    let mut shape = input.dims.clone();
    let variable = shape.iter().filter(|&&d| d == -1).count();
    if variable > 1 {
        return Err(bad(format!(
            "{lr}The shape of the raw input '{}' can not be deduced because there are more than one variable-sized dimension",
            input.name
        )));
    }
    let (data, shape) = match dt.size() {
        None => {
            // One element: no -1 and the dims multiply to 1 (checked, as
            // dims may be huge).
            let one = shape.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d)) == Some(1);
            if variable != 0 || !one {
                return Err(bad(format!(
                    "{lr}For BYTE datatype raw input '{}', the model must have input shape [1]",
                    input.name
                )));
            }
            let len = body.len();
            (Tensor::serialize_bytes([body.take(len).as_slice()]), shape)
        }
        Some(size) => {
            // None: the fixed dims multiply past i64, more than any body holds.
            let fixed = shape
                .iter()
                .filter(|&&d| d != -1)
                .try_fold(1i64, |acc, &d| acc.checked_mul(d));
            let elements = (body.len() / size) as i64;
            if variable == 1 {
                let missing = match fixed {
                    Some(fixed) if fixed > 0 => elements / fixed,
                    _ => 0,
                };
                for d in shape.iter_mut().filter(|d| **d == -1) {
                    *d = missing;
                }
            }
            let len = body.len();
            (body.take(len), shape)
        }
    };
    let shape = if config.max_batch_size > 0 {
        std::iter::once(1).chain(shape).collect()
    } else {
        shape
    };
    let request = InferRequest {
        id: String::new(),
        inputs: vec![Tensor {
            name: input.name.clone(),
            datatype: dt,
            shape,
            data,
        }],
        ..InferRequest::default()
    };
    let format = OutputFormat {
        binary_default: true,
        ..Default::default()
    };
    Ok((request, format))
}

/// Builds the response body, in pieces to send one after the other: the
/// JSON part, then each binary output's bytes, which are the tensors' own
/// (moved, not copied: a large output crosses no extra copy). Returns them
/// and, when any output is binary, the length of the JSON part (the
/// `Inference-Header-Content-Length`).
pub fn build_response(
    response: InferResponse,
    format: &OutputFormat,
) -> Result<(Vec<bytes::Bytes>, Option<usize>)> {
    let mut tail: Vec<bytes::Bytes> = Vec::new();
    let mut outputs = Vec::with_capacity(response.outputs.len());
    for t in response.outputs {
        let mut out = Map::new();
        out.insert("name".into(), json!(t.name));
        out.insert("datatype".into(), json!(t.datatype.name()));
        out.insert("shape".into(), json!(t.shape));
        if format.shm.contains_key(&t.name) {
            // Written to shared memory: the response names the tensor only
            // (perf_analyzer reads `parameters` as binary-data metadata).
        } else if format.is_binary(&t.name) {
            out.insert(
                "parameters".into(),
                json!({ "binary_data_size": t.data.len() }),
            );
            tail.push(bytes::Bytes::from(t.data));
        } else {
            if t.datatype == DataType::Bytes {
                utf8_elements(&t)?;
            }
            out.insert("data".into(), json_values(&t)?);
        }
        outputs.push(Value::Object(out));
    }
    let mut doc = Map::new();
    doc.insert("model_name".into(), json!(response.model_name));
    doc.insert("model_version".into(), json!(response.model_version));
    if !response.id.is_empty() {
        doc.insert("id".into(), json!(response.id));
    }
    if !response.parameters.is_empty() {
        doc.insert("parameters".into(), Value::Object(response.parameters));
    }
    doc.insert("outputs".into(), Value::Array(outputs));
    let body =
        serde_json::to_vec(&Value::Object(doc)).map_err(|e| Error::internal(e.to_string()))?;
    let header = body.len();
    let binary = !tail.is_empty();
    let mut pieces = Vec::with_capacity(1 + tail.len());
    pieces.push(bytes::Bytes::from(body));
    pieces.extend(tail.into_iter().filter(|b| !b.is_empty()));
    Ok((pieces, binary.then_some(header)))
}

/// Refuses a BYTES output asked for as JSON whose elements are not all
/// UTF-8: a JSON string can not carry them, and replacing them would hand
/// the client other bytes than the model's. (Triton writes the bytes as
/// they are, making JSON that its client then refuses to decode.)
fn utf8_elements(t: &Tensor) -> Result<()> {
    for e in Tensor::bytes_elements(&t.data)? {
        if std::str::from_utf8(e).is_err() {
            return Err(bad(format!(
                "output '{}' holds BYTES that are not valid UTF-8, which JSON can not carry: request it with the 'binary_data' parameter true",
                t.name
            )));
        }
    }
    Ok(())
}

/// A tensor's elements as a flat JSON array (BYTES as lossy UTF-8 strings,
/// FP16/BF16 as numbers).
pub fn json_values(t: &Tensor) -> Result<Value> {
    struct ToJson<'a>(&'a [u8]);
    impl ElementFn for ToJson<'_> {
        type Output = Vec<Value>;
        fn call<T: Element>(self) -> Vec<Value> {
            elements::<T>(self.0)
                .map(|x| scalar_json(x.to_scalar()))
                .collect()
        }
    }
    let values = match t.datatype.with_element(ToJson(&t.data)) {
        Some(values) => values,
        None => Tensor::bytes_elements(&t.data)?
            .into_iter()
            .map(|e| json!(String::from_utf8_lossy(e)))
            .collect(),
    };
    Ok(Value::Array(values))
}

#[cfg(test)]
mod tests;
