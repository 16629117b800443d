//! Schema conformance: our `proto/model_config.proto` against the
//! descriptors Triton ships in the `tritonclient` PyPI package
//! (`tritonclient/grpc/model_config_pb2.py`). Every message, field (name,
//! number, type, label, message/enum type, oneof) and enum value there must
//! be here, identical. Ours may add only what is newer than the pinned
//! client (listed in `NEWER_THAN_CLIENT`).
//!
//! The package is only the yardstick; our file is written by us.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use prost::Message;
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorProto, FileDescriptorSet};

/// In our schema but not in tritonclient 2.51's: added to Triton later.
const NEWER_THAN_CLIENT: &[&str] = &[
    "inference.ModelMetrics",
    "inference.ModelConfig.model_metrics",
    "inference.ModelEnsembling.max_inflight_requests",
];

/// The Python that has `tritonclient` (scripts/setup.sh makes `.venv`).
pub fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TRTIS_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    venv.exists().then_some(venv)
}

/// Whether tests that need the Python clients must run (CI and the README's
/// test command set this) rather than be skipped with a note.
pub fn python_required() -> bool {
    std::env::var_os("TRTIS_REQUIRE_PYTHON").is_some()
}

fn triton_descriptor(module: &str) -> Option<FileDescriptorProto> {
    let Some(python) = python() else {
        assert!(
            !python_required(),
            "no Python environment with tritonclient: run scripts/setup.sh"
        );
        eprintln!("skipped: no .venv with tritonclient (run scripts/setup.sh)");
        return None;
    };
    let out = Command::new(&python)
        .args([
            "-c",
            &format!("import sys\nfrom tritonclient.grpc import {module} as m\nsys.stdout.buffer.write(m.DESCRIPTOR.serialized_pb)"),
        ])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(FileDescriptorProto::decode(&out.stdout[..]).expect("a FileDescriptorProto"))
}

fn ours(file: &str) -> FileDescriptorProto {
    let set = FileDescriptorSet::decode(trtis::core::config::DESCRIPTOR_SET).unwrap();
    set.file
        .into_iter()
        .find(|f| f.name() == file)
        .expect("the file is compiled in")
}

#[derive(Default)]
struct Flat {
    messages: BTreeMap<String, DescriptorProto>,
    enums: BTreeMap<String, EnumDescriptorProto>,
}

fn flatten(file: &FileDescriptorProto) -> Flat {
    fn walk(prefix: &str, m: &DescriptorProto, flat: &mut Flat) {
        let name = format!("{prefix}.{}", m.name());
        for e in &m.enum_type {
            flat.enums.insert(format!("{name}.{}", e.name()), e.clone());
        }
        for n in &m.nested_type {
            walk(&name, n, flat);
        }
        flat.messages.insert(name, m.clone());
    }
    let mut flat = Flat::default();
    let prefix = file.package();
    for e in &file.enum_type {
        flat.enums
            .insert(format!("{prefix}.{}", e.name()), e.clone());
    }
    for m in &file.message_type {
        walk(prefix, m, &mut flat);
    }
    flat
}

fn newer(name: &str) -> bool {
    NEWER_THAN_CLIENT
        .iter()
        .any(|n| name == *n || name.starts_with(&format!("{n}.")))
}

/// Every difference between Triton's schema and ours.
fn differences(theirs: &FileDescriptorProto, ours: &FileDescriptorProto) -> Vec<String> {
    let mut diffs = Vec::new();
    if theirs.package() != ours.package() {
        diffs.push(format!(
            "package: {} vs {}",
            theirs.package(),
            ours.package()
        ));
    }
    let (t, o) = (flatten(theirs), flatten(ours));
    for (name, tm) in &t.messages {
        let Some(om) = o.messages.get(name) else {
            diffs.push(format!("missing message {name}"));
            continue;
        };
        let oneof = |m: &DescriptorProto, i: Option<i32>| {
            i.map(|i| m.oneof_decl[i as usize].name().to_string())
        };
        for tf in &tm.field {
            let Some(of) = om.field.iter().find(|f| f.name() == tf.name()) else {
                diffs.push(format!("missing field {name}.{}", tf.name()));
                continue;
            };
            let t_shape = (
                tf.number(),
                tf.r#type(),
                tf.label(),
                tf.type_name(),
                oneof(tm, tf.oneof_index),
            );
            let o_shape = (
                of.number(),
                of.r#type(),
                of.label(),
                of.type_name(),
                oneof(om, of.oneof_index),
            );
            if t_shape != o_shape {
                diffs.push(format!(
                    "field {name}.{}: triton {t_shape:?} vs ours {o_shape:?}",
                    tf.name()
                ));
            }
        }
        for of in &om.field {
            let full = format!("{name}.{}", of.name());
            if !tm.field.iter().any(|f| f.name() == of.name()) && !newer(&full) {
                diffs.push(format!("extra field {full}"));
            }
        }
        if tm.options.as_ref().map(|o| o.map_entry()) != om.options.as_ref().map(|o| o.map_entry())
        {
            diffs.push(format!("map entry flag of {name}"));
        }
    }
    for name in o.messages.keys() {
        if !t.messages.contains_key(name) && !newer(name) {
            diffs.push(format!("extra message {name}"));
        }
    }
    for (name, te) in &t.enums {
        let Some(oe) = o.enums.get(name) else {
            diffs.push(format!("missing enum {name}"));
            continue;
        };
        let values = |e: &EnumDescriptorProto| -> Vec<(String, i32)> {
            e.value
                .iter()
                .map(|v| (v.name().to_string(), v.number()))
                .collect()
        };
        if values(te) != values(oe) {
            diffs.push(format!(
                "enum {name}: triton {:?} vs ours {:?}",
                values(te),
                values(oe)
            ));
        }
    }
    for name in o.enums.keys() {
        if !t.enums.contains_key(name) && !newer(name) {
            diffs.push(format!("extra enum {name}"));
        }
    }
    for ts in &theirs.service {
        let Some(os) = ours.service.iter().find(|s| s.name() == ts.name()) else {
            diffs.push(format!("missing service {}", ts.name()));
            continue;
        };
        let shape = |m: &prost_types::MethodDescriptorProto| {
            (
                m.input_type().to_string(),
                m.output_type().to_string(),
                m.client_streaming(),
                m.server_streaming(),
            )
        };
        for tm in &ts.method {
            match os.method.iter().find(|m| m.name() == tm.name()) {
                None => diffs.push(format!("missing rpc {}.{}", ts.name(), tm.name())),
                Some(om) if shape(om) != shape(tm) => diffs.push(format!(
                    "rpc {}: triton {:?} vs ours {:?}",
                    tm.name(),
                    shape(tm),
                    shape(om)
                )),
                Some(_) => {}
            }
        }
        if os.method.len() != ts.method.len() {
            diffs.push(format!(
                "service {} has {} rpcs, Triton's {}",
                ts.name(),
                os.method.len(),
                ts.method.len()
            ));
        }
    }
    diffs
}

#[test]
fn model_config_proto_matches_tritonclient() {
    let Some(theirs) = triton_descriptor("model_config_pb2") else {
        return;
    };
    let diffs = differences(&theirs, &ours("model_config.proto"));
    assert!(
        diffs.is_empty(),
        "model_config.proto differs from Triton's:\n{}",
        diffs.join("\n")
    );
    assert!(
        flatten(&theirs).messages.len() > 40,
        "the yardstick itself looks wrong"
    );
}

#[test]
fn grpc_service_proto_matches_tritonclient() {
    let Some(theirs) = triton_descriptor("service_pb2") else {
        return;
    };
    let diffs = differences(&theirs, &ours("grpc_service.proto"));
    assert!(
        diffs.is_empty(),
        "grpc_service.proto differs from Triton's:\n{}",
        diffs.join("\n")
    );
    assert_eq!(
        theirs.service[0].method.len(),
        20,
        "the yardstick itself looks wrong"
    );
}

/// The comparison can fail: a drift in a field number is caught.
#[test]
fn a_drifted_schema_is_caught() {
    let Some(theirs) = triton_descriptor("model_config_pb2") else {
        return;
    };
    let mut drifted = ours("model_config.proto");
    let config = drifted
        .message_type
        .iter_mut()
        .find(|m| m.name() == "ModelConfig")
        .unwrap();
    let field = config
        .field
        .iter_mut()
        .find(|f| f.name() == "max_batch_size")
        .unwrap();
    field.number = Some(99);
    let dt = drifted
        .enum_type
        .iter_mut()
        .find(|e| e.name() == "DataType")
        .unwrap();
    dt.value.pop();
    let diffs = differences(&theirs, &drifted);
    assert!(
        diffs
            .iter()
            .any(|d| d.contains("ModelConfig.max_batch_size")),
        "{diffs:?}"
    );
    assert!(
        diffs.iter().any(|d| d.contains("enum inference.DataType")),
        "{diffs:?}"
    );
}
