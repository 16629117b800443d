//! Engine data types: tensors and inference requests/responses, independent
//! of any wire format, and a request's cancellation token (`CancelToken`).
//! Tensor data is raw little-endian, row-major bytes; BYTES elements are
//! serialized as Triton does (4-byte little-endian length, then the bytes),
//! which is also the binary-tensor wire form. [`element`] maps the
//! fixed-size datatypes to Rust types.

mod cancel;
pub(crate) mod element;
pub mod hooks;

pub use cancel::CancelToken;

use crate::core::config::pb::DataType as ConfigType;
use crate::core::error::{Error, Result};

/// A tensor element type, by its protocol name (`FP32`, `BYTES`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Fp32,
    Fp64,
    Bytes,
    Bf16,
}

impl DataType {
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bytes,
        DataType::Bf16,
    ];

    /// The protocol name.
    pub fn name(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bytes => "BYTES",
            DataType::Bf16 => "BF16",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element; None for BYTES (variable).
    pub const fn size(self) -> Option<usize> {
        Some(match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => 1,
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => 2,
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => 4,
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => 8,
            DataType::Bytes => return None,
        })
    }

    /// From the config enum value (`TYPE_FP32` → FP32).
    pub fn from_config(dt: i32) -> Option<Self> {
        Some(match ConfigType::try_from(dt).ok()? {
            ConfigType::TypeBool => DataType::Bool,
            ConfigType::TypeUint8 => DataType::Uint8,
            ConfigType::TypeUint16 => DataType::Uint16,
            ConfigType::TypeUint32 => DataType::Uint32,
            ConfigType::TypeUint64 => DataType::Uint64,
            ConfigType::TypeInt8 => DataType::Int8,
            ConfigType::TypeInt16 => DataType::Int16,
            ConfigType::TypeInt32 => DataType::Int32,
            ConfigType::TypeInt64 => DataType::Int64,
            ConfigType::TypeFp16 => DataType::Fp16,
            ConfigType::TypeFp32 => DataType::Fp32,
            ConfigType::TypeFp64 => DataType::Fp64,
            ConfigType::TypeString => DataType::Bytes,
            ConfigType::TypeBf16 => DataType::Bf16,
            ConfigType::TypeInvalid => return None,
        })
    }

    /// The config enum value.
    pub fn to_config(self) -> ConfigType {
        match self {
            DataType::Bool => ConfigType::TypeBool,
            DataType::Uint8 => ConfigType::TypeUint8,
            DataType::Uint16 => ConfigType::TypeUint16,
            DataType::Uint32 => ConfigType::TypeUint32,
            DataType::Uint64 => ConfigType::TypeUint64,
            DataType::Int8 => ConfigType::TypeInt8,
            DataType::Int16 => ConfigType::TypeInt16,
            DataType::Int32 => ConfigType::TypeInt32,
            DataType::Int64 => ConfigType::TypeInt64,
            DataType::Fp16 => ConfigType::TypeFp16,
            DataType::Fp32 => ConfigType::TypeFp32,
            DataType::Fp64 => ConfigType::TypeFp64,
            DataType::Bytes => ConfigType::TypeString,
            DataType::Bf16 => ConfigType::TypeBf16,
        }
    }
}

/// The next value of a small xorshift generator: repeatable pseudo-random
/// numbers for generated data and load schedules (not for anything secret).
pub fn xorshift64(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// The number of elements of a shape (None on overflow or a negative dim).
pub fn element_count(shape: &[i64]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
    })
}

/// A tensor: name, type, shape and raw data.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    /// Little-endian row-major elements; BYTES as length-prefixed elements.
    pub data: Vec<u8>,
}

impl Tensor {
    /// Splits serialized BYTES data into its elements.
    pub fn bytes_elements(data: &[u8]) -> Result<Vec<&[u8]>> {
        let mut out = Vec::new();
        let mut rest = data;
        while !rest.is_empty() {
            if rest.len() < 4 {
                return Err(Error::invalid_arg("truncated BYTES element length"));
            }
            let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            rest = &rest[4..];
            if rest.len() < len {
                return Err(Error::invalid_arg("BYTES element is longer than the data"));
            }
            out.push(&rest[..len]);
            rest = &rest[len..];
        }
        Ok(out)
    }

    /// Serializes BYTES elements (length-prefixed).
    pub fn serialize_bytes<'a>(elements: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
        let mut out = Vec::new();
        for e in elements {
            out.extend_from_slice(&(e.len() as u32).to_le_bytes());
            out.extend_from_slice(e);
        }
        out
    }
}

/// A place in a registered shared memory region (system shared memory
/// extension): `byte_size` bytes at `offset` from the region's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmRef {
    pub region: String,
    pub byte_size: usize,
    pub offset: usize,
}

/// An output the client asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestedOutput {
    pub name: String,
    /// Top-N classification instead of the tensor (classification extension).
    pub classification: Option<usize>,
    /// Write the output into shared memory instead of the response.
    pub shm: Option<ShmRef>,
}

impl RequestedOutput {
    /// The tensor itself, in the response (no classification, no shared
    /// memory).
    pub fn named(name: impl Into<String>) -> Self {
        RequestedOutput {
            name: name.into(),
            classification: None,
            shm: None,
        }
    }
}

/// A validated-later inference request, as the engine receives it.
#[derive(Debug, Clone, Default)]
pub struct InferRequest {
    pub id: String,
    pub inputs: Vec<Tensor>,
    /// Inputs whose data is in shared memory: (index into `inputs`, where).
    pub shm_inputs: Vec<(usize, ShmRef)>,
    /// Empty: every output of the model.
    pub outputs: Vec<RequestedOutput>,
    /// The schedule policy parameters: `priority` (0: the model's default
    /// level) and `timeout` in microseconds (0: the model's default).
    pub priority: u64,
    pub timeout_us: u64,
    /// The sequence extension's parameters.
    pub sequence: SequenceParams,
    /// The request's other `parameters` (not Triton's reserved keys), for
    /// the backend: a Python model reads them as `request.parameters()`.
    pub parameters: serde_json::Map<String, serde_json::Value>,
    /// The caller's W3C trace context, when it sent one.
    pub trace_context: Option<TraceContext>,
}

/// A caller's W3C trace context (the `traceparent` and `tracestate`
/// headers, or gRPC metadata): in OpenTelemetry mode the request is traced
/// and its spans are children of the caller's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: String,
    pub tracestate: Option<String>,
    /// Set on a request the server makes for a traced one (an ensemble's
    /// step): the parent's trace id. Its spans then hang under the
    /// parent's model span, with no `InferRequest` of their own.
    pub parent_trace: Option<u64>,
}

impl TraceContext {
    /// From a request's headers (`get` looks one up by its lower-case
    /// name); none without a valid `traceparent`. An invalid one is ignored
    /// entirely, as if absent, and its `tracestate` with it (W3C Trace
    /// Context: a vendor must not continue a trace it cannot parse).
    pub fn from_headers<'a>(get: impl Fn(&str) -> Option<&'a [u8]>) -> Option<TraceContext> {
        let text = |name: &str| {
            get(name)
                .and_then(|v| std::str::from_utf8(v).ok())
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let traceparent = text("traceparent").filter(|t| valid_traceparent(t))?;
        Some(TraceContext {
            traceparent,
            tracestate: text("tracestate"),
            parent_trace: None,
        })
    }
}

/// Whether `value` is a `traceparent` W3C Trace Context level 1 accepts:
/// `version-traceid-parentid-flags` in lower-case hex; version 2 digits and
/// not `ff`; trace id 32 digits and parent id 16, neither all zeros; flags
/// 2 digits. Version `00` has exactly these 4 fields; a later version may
/// add fields after a `-`, which are ignored.
pub fn valid_traceparent(value: &str) -> bool {
    let hex = |field: &str, len: usize| {
        field.len() == len
            && field
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let nonzero = |field: &str| field.bytes().any(|b| b != b'0');
    let mut fields = value.split('-');
    let (Some(version), Some(trace), Some(parent), Some(flags)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    let rest_ok = if version == "00" {
        fields.next().is_none()
    } else {
        // A later version's own fields: only the 4 known ones are read.
        true
    };
    hex(version, 2)
        && version != "ff"
        && rest_ok
        && hex(trace, 32)
        && nonzero(trace)
        && hex(parent, 16)
        && nonzero(parent)
        && hex(flags, 2)
}

/// Whether a request parameter is one of Triton's own (the sequence and
/// schedule policy extensions, the HTTP output format, `headers`, any
/// `triton_*`), not passed to the backend.
pub fn reserved_parameter(key: &str) -> bool {
    matches!(
        key,
        "sequence_id"
            | "sequence_start"
            | "sequence_end"
            | "priority"
            | "timeout"
            | "headers"
            | "binary_data_output"
    ) || key.starts_with("triton_")
}

/// What a backend that takes requests apart reads of a request besides its
/// tensors (Triton's request accessors).
#[derive(Debug, Clone, Default)]
pub struct RequestInfo {
    pub id: String,
    pub correlation_id: SequenceId,
    /// Sequence start 1, sequence end 2.
    pub flags: u32,
    pub timeout_us: u64,
    pub parameters: serde_json::Map<String, serde_json::Value>,
    /// Set when nobody waits for the request's answers any more (Triton's
    /// `is_cancelled()`); never set for a request made by `Default`.
    pub cancel: CancelToken,
    /// When the request is traced (OpenTelemetry mode): the context a BLS
    /// call made for it takes (`request.trace()`), so its spans are
    /// children of this request's.
    pub trace: Option<TraceContext>,
}

/// A sequence's correlation id: the `sequence_id` request parameter, a
/// number or a string (0 and "" mean no sequence).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum SequenceId {
    #[default]
    None,
    Number(u64),
    Text(String),
}

impl SequenceId {
    pub fn is_none(&self) -> bool {
        match self {
            SequenceId::None => true,
            SequenceId::Number(n) => *n == 0,
            SequenceId::Text(s) => s.is_empty(),
        }
    }
}

impl std::fmt::Display for SequenceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SequenceId::None => f.write_str("0"),
            SequenceId::Number(n) => write!(f, "{n}"),
            SequenceId::Text(s) => f.write_str(s),
        }
    }
}

/// `sequence_id`, `sequence_start` and `sequence_end` of a request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SequenceParams {
    pub id: SequenceId,
    pub start: bool,
    pub end: bool,
}

/// The engine's answer.
#[derive(Debug, Clone, Default)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: String,
    pub id: String,
    pub outputs: Vec<Tensor>,
    /// The response parameters the model set (Triton's
    /// `TRITONBACKEND_ResponseSet*Parameter`): strings, integers, booleans
    /// and doubles.
    pub parameters: ResponseParameters,
    /// The model sent the final flag with this response: a one-answer
    /// model's response always; a decoupled model's last response, unless
    /// its final flag came bare, after it.
    pub last: bool,
}

/// A response's parameters, in the order the model set them.
pub type ResponseParameters = serde_json::Map<String, serde_json::Value>;

/// A tensor of model metadata: name, protocol datatype, full shape (with -1
/// for the batch dimension and variable dimensions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMetadata {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

/// What the model metadata endpoints report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelMetadata {
    pub name: String,
    /// Ready versions.
    pub versions: Vec<String>,
    /// The platform, or the backend when the config names none (as Triton).
    pub platform: String,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
}

#[cfg(test)]
mod traceparent_tests {
    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";

    #[test]
    fn valid_traceparents_are_taken() {
        assert!(valid_traceparent(&format!("00-{TRACE}-{SPAN}-01")));
        assert!(valid_traceparent(&format!("00-{TRACE}-{SPAN}-00")));
        // A later version may carry more fields; the first 4 are read.
        assert!(valid_traceparent(&format!("01-{TRACE}-{SPAN}-01")));
        assert!(valid_traceparent(&format!(
            "cc-{TRACE}-{SPAN}-01-what-ever"
        )));
    }

    #[test]
    fn invalid_traceparents_are_refused() {
        let cases = [
            // Version ff is forbidden.
            format!("ff-{TRACE}-{SPAN}-01"),
            // Upper-case hex, in each field.
            format!("00-{}-{SPAN}-01", TRACE.to_uppercase()),
            format!("00-{TRACE}-{}-01", "00F067AA0BA902B7"),
            format!("0A-{TRACE}-{SPAN}-01"),
            format!("00-{TRACE}-{SPAN}-0A"),
            // All-zero trace id, all-zero parent (span) id.
            format!("00-{}-{SPAN}-01", "0".repeat(32)),
            format!("00-{TRACE}-{}-01", "0".repeat(16)),
            // Bad flags: wrong length, not hex, missing.
            format!("00-{TRACE}-{SPAN}-1"),
            format!("00-{TRACE}-{SPAN}-001"),
            format!("00-{TRACE}-{SPAN}-zz"),
            format!("00-{TRACE}-{SPAN}-"),
            // Three fields.
            format!("00-{TRACE}-{SPAN}"),
            // An extra field on version 00.
            format!("00-{TRACE}-{SPAN}-01-extra"),
            format!("00-{TRACE}-{SPAN}-01-"),
            // Wrong lengths.
            format!("0-{TRACE}-{SPAN}-01"),
            format!("000-{TRACE}-{SPAN}-01"),
            format!("00-{}-{SPAN}-01", &TRACE[1..]),
            format!("00-{TRACE}0-{SPAN}-01"),
            format!("00-{TRACE}-{}-01", &SPAN[1..]),
            format!("00-{TRACE}-{SPAN}0-01"),
            // Non-hex.
            format!("00-{}g-{SPAN}-01", &TRACE[1..]),
            format!("00-{TRACE}-{}x-01", &SPAN[1..]),
            format!("0g-{TRACE}-{SPAN}-01"),
            // Garbage.
            String::new(),
            "-".to_string(),
            "hello".to_string(),
        ];
        for case in &cases {
            assert!(!valid_traceparent(case), "{case:?} was taken");
        }
    }

    #[test]
    fn an_invalid_traceparent_drops_the_tracestate_too() {
        let context = |parent: String| {
            let headers = [("traceparent", parent), ("tracestate", "a=b".to_string())];
            TraceContext::from_headers(|name| {
                headers
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.as_bytes())
            })
        };
        let good = context(format!("00-{TRACE}-{SPAN}-01")).expect("a valid context");
        assert_eq!(good.tracestate.as_deref(), Some("a=b"));
        assert_eq!(context(format!("ff-{TRACE}-{SPAN}-01")), None);
        assert_eq!(context(format!("00-{}-{SPAN}-01", "0".repeat(32))), None);
    }
}
