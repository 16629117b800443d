//! The frames between the server and a Python worker (PROTOCOL.md beside
//! this file): a u32 header length, a u64 body length, a JSON header, then
//! the bytes of the tensors the header lists. Pure: reads from any `Read`,
//! writes to any `Write`.

use std::io::{Read, Write};
use std::ops::Range;

use serde_json::{json, Map, Value};

use crate::core::error::{Error, ErrorKind, Result};
use crate::core::types::{DataType, Tensor};

/// The largest header a worker may send (a header lists names and shapes;
/// the data is in the body).
const MAX_HEADER: u32 = 64 << 20;

/// Below this many bytes a frame is copied into one buffer and written with
/// one system call; above it, its tensors are written from where they are.
const GATHER: usize = 64 << 10;

/// One frame: its JSON header and its body. A frame being written may keep
/// tensor data it was given in `parts`: they follow `body` on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub header: Map<String, Value>,
    pub body: Vec<u8>,
    pub parts: Vec<Vec<u8>>,
}

impl Frame {
    /// A frame with no tensors.
    pub fn new(header: Value) -> Self {
        Frame {
            header: match header {
                Value::Object(m) => m,
                _ => Map::new(),
            },
            body: Vec::new(),
            parts: Vec::new(),
        }
    }

    /// The header's `kind`.
    pub fn kind(&self) -> &str {
        self.header
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    pub fn str(&self, key: &str) -> &str {
        self.header.get(key).and_then(Value::as_str).unwrap_or("")
    }

    pub fn u64(&self, key: &str) -> u64 {
        self.header.get(key).and_then(Value::as_u64).unwrap_or(0)
    }

    pub fn bool(&self, key: &str) -> bool {
        self.header
            .get(key)
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// The frame's error object (`{"message", "code"}`), if any.
    pub fn error(&self) -> Option<Error> {
        match self.header.get("error") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(Error::internal(s.clone())),
            Some(e) => {
                let message = e.get("message").and_then(Value::as_str).unwrap_or("");
                let code = e.get("code").and_then(Value::as_str).unwrap_or("INTERNAL");
                Some(Error::new(error_kind(code), message.to_string()))
            }
        }
    }

    /// The tensors listed under `key` (an array of `{name, datatype, shape,
    /// size}`), cut from the body starting at `*offset`.
    pub fn tensors_at(&self, list: &Value, offset: &mut usize) -> Result<Vec<Tensor>> {
        Ok(self.filled(self.describe(list, offset)?))
    }

    /// Described tensors with their bytes copied out of the body.
    fn filled(&self, described: Vec<(Tensor, Range<usize>)>) -> Vec<Tensor> {
        described
            .into_iter()
            .map(|(mut t, range)| {
                t.data = self.body[range].to_vec();
                t
            })
            .collect()
    }

    /// The tensors of `list` without their data, each with where its data
    /// lies in the body.
    fn describe(&self, list: &Value, offset: &mut usize) -> Result<Vec<(Tensor, Range<usize>)>> {
        let bad = |why: String| {
            Error::internal(format!("a malformed frame from the Python worker: {why}"))
        };
        let Some(items) = list.as_array() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(items.len());
        for t in items {
            let name = t.get("name").and_then(Value::as_str).unwrap_or("");
            let datatype = t.get("datatype").and_then(Value::as_str).unwrap_or("");
            let datatype = DataType::from_name(datatype)
                .ok_or_else(|| bad(format!("tensor '{name}' has datatype '{datatype}'")))?;
            let shape = t
                .get("shape")
                .and_then(Value::as_array)
                .map(|s| {
                    s.iter()
                        .map(|d| d.as_i64().unwrap_or(-1))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            let size = t.get("size").and_then(Value::as_u64).unwrap_or(0) as usize;
            let end = offset
                .checked_add(size)
                .filter(|&e| e <= self.body.len())
                .ok_or_else(|| bad(format!("tensor '{name}' runs past the frame's body")))?;
            let tensor = Tensor {
                name: name.to_string(),
                datatype,
                shape,
                data: Vec::new(),
            };
            out.push((tensor, *offset..end));
            *offset = end;
        }
        Ok(out)
    }

    /// The tensors of a `response`-like frame, taking the body: a lone
    /// tensor that is the whole body keeps its bytes where they are (no
    /// copy of a large output).
    pub fn take_tensors(&mut self) -> Result<Vec<Tensor>> {
        let list = self.header.get("tensors").unwrap_or(&Value::Null);
        let mut described = self.describe(list, &mut 0)?;
        if let [(one, range)] = described.as_mut_slice() {
            if *range == (0..self.body.len()) {
                one.data = std::mem::take(&mut self.body);
                return Ok(described.into_iter().map(|(t, _)| t).collect());
            }
        }
        Ok(self.filled(described))
    }

    /// Takes the tensors' data into the frame (written from where it is,
    /// no copy) and returns their header entries.
    pub fn add_owned_tensors(&mut self, tensors: Vec<Tensor>) -> Value {
        let mut list = Vec::with_capacity(tensors.len());
        for t in tensors {
            list.push(json!({
                "name": t.name,
                "datatype": t.datatype.name(),
                "shape": t.shape,
                "size": t.data.len(),
            }));
            if !t.data.is_empty() {
                self.parts.push(t.data);
            }
        }
        Value::Array(list)
    }

    /// Writes the frame: a small one in one write, a large one with its
    /// tensors written from where they are.
    pub fn write_to(&self, w: &mut impl Write) -> std::io::Result<()> {
        let header = serde_json::to_vec(&self.header)?;
        let body_len = self.body.len() + self.parts.iter().map(Vec::len).sum::<usize>();
        let small = body_len < GATHER;
        let mut head = Vec::with_capacity(12 + header.len() + if small { body_len } else { 0 });
        head.extend_from_slice(&(header.len() as u32).to_le_bytes());
        head.extend_from_slice(&(body_len as u64).to_le_bytes());
        head.extend_from_slice(&header);
        if small {
            head.extend_from_slice(&self.body);
            for part in &self.parts {
                head.extend_from_slice(part);
            }
            w.write_all(&head)?;
        } else {
            w.write_all(&head)?;
            w.write_all(&self.body)?;
            for part in &self.parts {
                w.write_all(part)?;
            }
        }
        w.flush()
    }

    /// Reads one frame; `Ok(None)` at a clean end of the stream.
    pub fn read_from(r: &mut impl Read) -> std::io::Result<Option<Frame>> {
        let mut lengths = [0u8; 12];
        match r.read_exact(&mut lengths[..1]) {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            other => other?,
        }
        r.read_exact(&mut lengths[1..])?;
        let header_len = u32::from_le_bytes(lengths[..4].try_into().expect("4 bytes"));
        let body_len = u64::from_le_bytes(lengths[4..].try_into().expect("8 bytes"));
        if header_len > MAX_HEADER {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a frame header of {header_len} bytes"),
            ));
        }
        let mut header = vec![0u8; header_len as usize];
        r.read_exact(&mut header)?;
        let header: Map<String, Value> = serde_json::from_slice(&header)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        // Room for the whole body up front (bounded: the length is the
        // worker's word), so a large body is not copied as it grows.
        let mut body = Vec::with_capacity(body_len.min(1 << 30) as usize);
        r.take(body_len).read_to_end(&mut body)?;
        if body.len() as u64 != body_len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(Some(Frame {
            header,
            body,
            parts: Vec::new(),
        }))
    }
}

/// `pb_utils.TritonError`'s code names as the server's error kinds.
pub fn error_kind(code: &str) -> ErrorKind {
    match code {
        "INTERNAL" => ErrorKind::Internal,
        "NOT_FOUND" => ErrorKind::NotFound,
        "INVALID_ARG" => ErrorKind::InvalidArg,
        "UNAVAILABLE" => ErrorKind::Unavailable,
        "UNSUPPORTED" => ErrorKind::Unsupported,
        "ALREADY_EXISTS" => ErrorKind::AlreadyExists,
        "CANCELLED" => ErrorKind::Cancelled,
        _ => ErrorKind::Unknown,
    }
}

/// The server's error kinds as `pb_utils.TritonError`'s code names.
pub fn code_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Internal => "INTERNAL",
        ErrorKind::NotFound => "NOT_FOUND",
        ErrorKind::InvalidArg => "INVALID_ARG",
        ErrorKind::Unavailable => "UNAVAILABLE",
        ErrorKind::Unsupported => "UNSUPPORTED",
        ErrorKind::AlreadyExists => "ALREADY_EXISTS",
        ErrorKind::Cancelled => "CANCELLED",
        ErrorKind::Unknown => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_with_its_tensors() {
        let mut f = Frame::new(json!({"kind": "response", "rid": 7}));
        let tensors = vec![
            Tensor {
                name: "A".into(),
                datatype: DataType::Fp32,
                shape: vec![1, 2],
                data: [1f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect(),
            },
            Tensor {
                name: "S".into(),
                datatype: DataType::Bytes,
                shape: vec![1],
                data: vec![2, 0, 0, 0, b'h', b'i'],
            },
        ];
        let list = f.add_owned_tensors(tensors.clone());
        f.header.insert("tensors".into(), list);
        let mut wire = Vec::new();
        f.write_to(&mut wire).unwrap();
        let mut r = wire.as_slice();
        let back = Frame::read_from(&mut r).unwrap().unwrap();
        // Read back, the parts are one body.
        assert_eq!(back.header, f.header);
        assert_eq!(back.body, f.parts.concat());
        assert_eq!(back.kind(), "response");
        assert_eq!(back.u64("rid"), 7);
        assert_eq!(back.clone().take_tensors().unwrap(), tensors);
        assert!(Frame::read_from(&mut r).unwrap().is_none(), "a clean end");
    }

    #[test]
    fn owned_tensors_small_and_large_read_back_the_same() {
        for len in [8usize, (GATHER / 4) + 100] {
            let tensors = vec![
                Tensor {
                    name: "BIG".into(),
                    datatype: DataType::Fp32,
                    shape: vec![len as i64],
                    data: (0..len * 4).map(|i| (i % 251) as u8).collect(),
                },
                Tensor {
                    name: "E".into(),
                    datatype: DataType::Uint8,
                    shape: vec![0],
                    data: Vec::new(),
                },
            ];
            let mut f = Frame::new(json!({"kind": "response"}));
            let list = f.add_owned_tensors(tensors.clone());
            f.header.insert("tensors".into(), list);
            let mut wire = Vec::new();
            f.write_to(&mut wire).unwrap();
            let mut back = Frame::read_from(&mut wire.as_slice()).unwrap().unwrap();
            assert_eq!(back.body.len(), len * 4);
            assert_eq!(back.take_tensors().unwrap(), tensors, "{len}");
        }
        // A lone tensor spanning the body takes it whole.
        let mut f = Frame::new(json!({"tensors": [
            {"name": "T", "datatype": "UINT8", "shape": [3], "size": 3}]}));
        f.body = vec![1, 2, 3];
        let at = f.body.as_ptr();
        let t = f.take_tensors().unwrap();
        assert_eq!((t[0].data.as_ptr(), f.body.len()), (at, 0));
    }

    #[test]
    fn a_cut_or_lying_frame_is_an_error_not_a_panic() {
        let mut f = Frame::new(json!({"kind": "x"}));
        f.body = vec![1, 2, 3];
        let mut wire = Vec::new();
        f.write_to(&mut wire).unwrap();
        for cut in 1..wire.len() {
            assert!(Frame::read_from(&mut &wire[..cut]).is_err(), "cut at {cut}");
        }
        f.header.insert(
            "tensors".into(),
            json!([{"name": "T", "datatype": "UINT8", "shape": [9], "size": 9}]),
        );
        assert!(f.take_tensors().is_err(), "a tensor past the body");
        f.header.insert(
            "tensors".into(),
            json!([{"name": "T", "datatype": "NOPE", "shape": [3], "size": 3}]),
        );
        assert!(f.take_tensors().is_err());
        let huge = [0xffu8, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(Frame::read_from(&mut &huge[..]).is_err());
    }

    #[test]
    fn error_objects_keep_their_code() {
        let f = Frame::new(json!({"error": {"message": "nf", "code": "NOT_FOUND"}}));
        let e = f.error().unwrap();
        assert_eq!((e.kind, e.message.as_str()), (ErrorKind::NotFound, "nf"));
        assert!(Frame::new(json!({"error": null})).error().is_none());
        for kind in [
            ErrorKind::Internal,
            ErrorKind::Cancelled,
            ErrorKind::Unknown,
        ] {
            assert_eq!(error_kind(code_name(kind)), kind);
        }
    }
}
