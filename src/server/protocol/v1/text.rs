//! The v1 API's three renderings of a message: protobuf text format (one
//! line for HTTP headers, multi-line for status bodies), protobuf JSON, and
//! parsing the text format of `NV-InferRequest`.
//!
//! The text writer is ours, not `prost-reflect`'s: v1 clients and people
//! reading `/api/status` expect C++ protobuf's `ShortDebugString` /
//! `DebugString` layout (`name: "x" dims: 16 output { ... }`, fields in
//! number order, map entries sorted by key, strings C-escaped), while
//! `prost-reflect` writes a compact `name:"x",dims:[16]` form. Parsing and
//! JSON use `prost-reflect` over the v1 descriptor set.

use std::fmt::Write as _;
use std::sync::LazyLock;

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MapKey, MessageDescriptor, Value};

use crate::core::error::{Error, Result};

static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors_v1.bin"));

fn pool() -> &'static DescriptorPool {
    static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
        DescriptorPool::decode(DESCRIPTORS).expect("build.rs writes a valid v1 descriptor set")
    });
    &POOL
}

fn descriptor(name: &str) -> MessageDescriptor {
    pool()
        .get_message_by_name(&format!("nvidia.inferenceserver.{name}"))
        .expect("a message of proto/v1")
}

fn dynamic(message: &impl Message, name: &str) -> DynamicMessage {
    DynamicMessage::decode(descriptor(name), message.encode_to_vec().as_slice())
        .expect("a message re-decodes with its own descriptor")
}

/// One line, as C++ `ShortDebugString` (HTTP headers).
pub fn short(message: &impl Message, name: &str) -> String {
    let mut out = String::new();
    write_message(&mut out, &dynamic(message, name), None);
    out
}

/// `short` of a `RequestStatus`, written directly: every v1 answer carries
/// one (`NV-Status`), and the generic writer's re-encoding costs a few
/// microseconds per request. The same text (a unit test compares them).
pub fn request_status_line(status: &super::pb::RequestStatus) -> String {
    let mut out = String::with_capacity(64);
    if status.code != 0 {
        out.push_str("code: ");
        match super::pb::RequestStatusCode::try_from(status.code) {
            Ok(c) => out.push_str(c.as_str_name()),
            Err(_) => write!(out, "{}", status.code).unwrap_or(()),
        }
    }
    let mut field = |name: &str, value: &str| {
        if !value.is_empty() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(name);
            out.push_str(": ");
            escape(&mut out, value.as_bytes());
        }
    };
    field("msg", &status.msg);
    field("server_id", &status.server_id);
    if status.request_id != 0 {
        if !out.is_empty() {
            out.push(' ');
        }
        write!(out, "request_id: {}", status.request_id).unwrap_or(());
    }
    out
}

/// Multi-line, as C++ `DebugString` (status bodies).
pub fn pretty(message: &impl Message, name: &str) -> String {
    let mut out = String::new();
    write_message(&mut out, &dynamic(message, name), Some(0));
    out
}

/// The protobuf JSON mapping (lowerCamelCase names, 64-bit integers as
/// strings, default values left out).
pub fn json(message: &impl Message, name: &str) -> String {
    serde_json::to_string(&dynamic(message, name)).expect("a message serializes to JSON")
}

/// Parses text format into `T` (`name`: its message name in proto/v1).
pub fn parse<T: Message + Default>(text: &str, name: &str) -> Result<T> {
    let message = DynamicMessage::parse_text_format(descriptor(name), text)
        .map_err(|e| Error::invalid_arg(format!("failed to parse {name}: {e}")))?;
    T::decode(message.encode_to_vec().as_slice())
        .map_err(|e| Error::invalid_arg(format!("failed to parse {name}: {e}")))
}

/// Writes the set fields of `message`; `indent`: None for one line, else
/// the depth of a multi-line rendering.
fn write_message(out: &mut String, message: &DynamicMessage, indent: Option<usize>) {
    for (field, value) in message.fields() {
        let kind = field.kind();
        match value {
            Value::List(items) => {
                for item in items {
                    write_field(out, field.name(), item, &kind, indent);
                }
            }
            Value::Map(map) => {
                let Kind::Message(entry) = &kind else {
                    continue;
                };
                let key_kind = entry.map_entry_key_field().kind();
                let value_kind = entry.map_entry_value_field().kind();
                let mut entries: Vec<(&MapKey, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (key, value) in entries {
                    open(out, field.name(), indent);
                    let inner = indent.map(|d| d + 1);
                    write_field(out, "key", &key.clone().into(), &key_kind, inner);
                    write_field(out, "value", value, &value_kind, inner);
                    close(out, indent);
                }
            }
            value => write_field(out, field.name(), value, &kind, indent),
        }
    }
}

fn separate(out: &mut String, indent: Option<usize>) {
    match indent {
        None if !out.is_empty() => out.push(' '),
        None => {}
        Some(depth) => out.extend(std::iter::repeat_n("  ", depth)),
    }
}

fn end_line(out: &mut String, indent: Option<usize>) {
    if indent.is_some() {
        out.push('\n');
    }
}

fn open(out: &mut String, name: &str, indent: Option<usize>) {
    separate(out, indent);
    out.push_str(name);
    out.push_str(" {");
    end_line(out, indent);
}

fn close(out: &mut String, indent: Option<usize>) {
    match indent {
        None => out.push_str(" }"),
        Some(depth) => {
            out.extend(std::iter::repeat_n("  ", depth));
            out.push_str("}\n");
        }
    }
}

fn write_field(out: &mut String, name: &str, value: &Value, kind: &Kind, indent: Option<usize>) {
    if let Value::Message(m) = value {
        open(out, name, indent);
        write_message(out, m, indent.map(|d| d + 1));
        close(out, indent);
        return;
    }
    separate(out, indent);
    out.push_str(name);
    out.push_str(": ");
    match value {
        Value::Bool(v) => out.push_str(if *v { "true" } else { "false" }),
        Value::I32(v) => write!(out, "{v}").unwrap_or(()),
        Value::I64(v) => write!(out, "{v}").unwrap_or(()),
        Value::U32(v) => write!(out, "{v}").unwrap_or(()),
        Value::U64(v) => write!(out, "{v}").unwrap_or(()),
        Value::F32(v) => float(out, f64::from(*v), v.to_string()),
        Value::F64(v) => float(out, *v, v.to_string()),
        Value::String(s) => escape(out, s.as_bytes()),
        Value::Bytes(b) => escape(out, b),
        Value::EnumNumber(n) => match kind {
            Kind::Enum(e) => match e.get_value(*n) {
                Some(v) => out.push_str(v.name()),
                None => write!(out, "{n}").unwrap_or(()),
            },
            _ => write!(out, "{n}").unwrap_or(()),
        },
        Value::Message(_) | Value::List(_) | Value::Map(_) => {}
    }
    end_line(out, indent);
}

/// A float as C++ prints it: the shortest text that reads back the same
/// value, `inf`, `-inf`, `nan`.
fn float(out: &mut String, v: f64, shortest: String) {
    if v.is_nan() {
        out.push_str("nan");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "inf" } else { "-inf" });
    } else {
        out.push_str(&shortest);
    }
}

/// A quoted string, C-escaped as C++ `CEscape` does (bytes outside
/// printable ASCII in octal).
fn escape(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for &b in bytes {
        match b {
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b'"' => out.push_str("\\\""),
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => write!(out, "\\{b:03o}").unwrap_or(()),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::super::pb;
    use super::*;

    #[test]
    fn one_line_matches_cpp_short_debug_string() {
        let header = pb::InferRequestHeader {
            batch_size: 2,
            input: vec![pb::infer_request_header::Input {
                name: "INPUT0".into(),
                dims: vec![16],
                ..Default::default()
            }],
            output: vec![pb::infer_request_header::Output {
                name: "OUT\"1".into(),
                cls: Some(pb::infer_request_header::output::Class { count: 3 }),
                shared_memory: None,
            }],
            id: 7,
            ..Default::default()
        };
        let text = short(&header, "InferRequestHeader");
        assert_eq!(
            text,
            r#"batch_size: 2 input { name: "INPUT0" dims: 16 } output { name: "OUT\"1" cls { count: 3 } } id: 7"#
        );
        let back: pb::InferRequestHeader = parse(&text, "InferRequestHeader").unwrap();
        assert_eq!(back, header);
    }

    #[test]
    fn multi_line_indents_and_sorts_map_entries() {
        let mut status = pb::ServerStatus {
            id: "triton".into(),
            ..Default::default()
        };
        for name in ["b", "a"] {
            status.model_status.insert(
                name.into(),
                pb::ModelStatus {
                    config: Some(pb::ModelConfig {
                        name: name.into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            );
        }
        let text = pretty(&status, "ServerStatus");
        assert_eq!(
            text,
            "id: \"triton\"\nmodel_status {\n  key: \"a\"\n  value {\n    config {\n      name: \"a\"\n    }\n  }\n}\nmodel_status {\n  key: \"b\"\n  value {\n    config {\n      name: \"b\"\n    }\n  }\n}\n"
        );
        let back: pb::ServerStatus = parse(&text, "ServerStatus").unwrap();
        assert_eq!(back, status);
    }

    #[test]
    fn floats_and_bytes_read_back() {
        let class = pb::infer_response_header::output::Class {
            idx: 3,
            value: 0.1,
            label: "caf\u{e9}\n".into(),
        };
        let text = short(&class, "InferResponseHeader.Output.Class");
        assert_eq!(text, r#"idx: 3 value: 0.1 label: "caf\303\251\n""#);
        let back: pb::infer_response_header::output::Class =
            parse(&text, "InferResponseHeader.Output.Class").unwrap();
        assert_eq!(back, class);
    }

    #[test]
    fn the_request_status_line_is_the_generic_text() {
        for (code, msg, server_id, request_id) in [
            (1, "", "triton", 7u64),
            (5, "unexpected size for input 'x'\n", "s\"id", 0),
            (0, "", "", 0),
            (42, "odd code", "", 1),
        ] {
            let status = pb::RequestStatus {
                code,
                msg: msg.into(),
                server_id: server_id.into(),
                request_id,
            };
            assert_eq!(
                request_status_line(&status),
                short(&status, "RequestStatus")
            );
        }
    }

    #[test]
    fn bad_text_is_an_invalid_argument() {
        let e = parse::<pb::InferRequestHeader>("batch_size: x", "InferRequestHeader").unwrap_err();
        assert_eq!(e.kind, crate::core::error::ErrorKind::InvalidArg);
        let e = parse::<pb::InferRequestHeader>("bogus: 1", "InferRequestHeader").unwrap_err();
        assert!(e.message.contains("InferRequestHeader"), "{}", e.message);
    }
}
