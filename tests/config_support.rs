//! Every config field is honoured or refused, and `validate-config` and
//! `serve` agree on which: a repository with one model per kind of finding,
//! checked both ways.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::util::{trtis, write_model, Serve};

const IO: &str = r#"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"#;

/// (model, what it adds to an identity model's config, whether it loads).
const MODELS: &[(&str, &str, bool)] = &[
    ("plain", "", true),
    // Warnings only: serving stays correct.
    (
        "speed_hints",
        "optimization { eager_batching: true priority: PRIORITY_MAX graph { level: 1 } }",
        true,
    ),
    (
        "unread_parameter",
        r#"parameters [ { key: "no_such_knob" value: { string_value: "1" } } ]"#,
        true,
    ),
    (
        "metric_tags",
        r#"metric_tags [ { key: "team" value: "a" } ]"#,
        true,
    ),
    // Served by Triton too without acting on them, by default.
    ("cache", "response_cache { enable: true }", true),
    (
        "rate_limited",
        r#"instance_group [ { kind: KIND_CPU count: 1 rate_limiter { resources [ { name: "R" count: 1 } ] } } ]"#,
        true,
    ),
    // Refused, each with its reason.
    (
        "passive",
        "instance_group [ { kind: KIND_CPU passive: true } ]",
        false,
    ),
    (
        "host_policy",
        r#"instance_group [ { kind: KIND_CPU host_policy: "numa0" } ]"#,
        false,
    ),
    (
        "agents",
        r#"model_repository_agents { agents [ { name: "checksum" } ] }"#,
        false,
    ),
    (
        "openvino",
        r#"optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }"#,
        false,
    ),
    (
        "decoupled",
        "model_transaction_policy { decoupled: true }",
        false,
    ),
    (
        "op_library",
        r#"model_operations { op_library_filename: [ "libop.so" ] }"#,
        false,
    ),
    ("runtime", r#"runtime: "model.py""#, false),
    // A static rule broken: refused by validation itself.
    (
        "bad_rule",
        "max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 8 ] }",
        false,
    ),
];

fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, extra, _) in MODELS {
        write_model(
            dir.path(),
            name,
            &format!("backend: \"identity\"\n{IO}\n{extra}\n"),
        );
    }
    // Model files their backends cannot load: a TorchScript file that is
    // not one, an empty custom library.
    write_model(dir.path(), "torch", &format!("backend: \"pytorch\"\n{IO}"));
    std::fs::write(dir.path().join("torch/1/model.pt"), b"not a model").unwrap();
    write_model(dir.path(), "custom", &format!("platform: \"custom\"\n{IO}"));
    std::fs::write(dir.path().join("custom/1/libcustom.so"), b"").unwrap();
    dir
}

fn loads(name: &str) -> bool {
    MODELS
        .iter()
        .find(|(n, _, _)| *n == name)
        .is_some_and(|(_, _, ok)| *ok)
}

#[test]
fn validate_config_passes_exactly_the_models_serve_makes_ready() {
    let repo = repository();
    let out = trtis(repo.path(), &["validate-config", "--format", "json", "."]);
    assert_eq!(out.status.code(), Some(1), "there are errors");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let all: BTreeSet<String> = doc["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect();
    let failing: BTreeSet<String> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "error")
        .map(|f| f["model"].as_str().unwrap().to_string())
        .collect();
    let passing: BTreeSet<String> = all.difference(&failing).cloned().collect();
    let expected: BTreeSet<String> = all.iter().filter(|m| loads(m)).cloned().collect();
    assert_eq!(passing, expected, "validate-config: {doc:#}");

    // Each refusal names its field and says why.
    let finding = |model: &str, field: &str| {
        doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["model"] == model && f["field"] == field)
            .unwrap_or_else(|| panic!("no finding on {model} {field}: {doc:#}"))
            .clone()
    };
    let f = finding("passive", "instance_group[0].passive");
    assert_eq!(f["severity"], "error");
    assert!(f["line"].as_u64().unwrap() > 0, "located: {f}");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("not supported by trtis"),
        "{f}"
    );
    // A PyTorch model whose file is no TorchScript archive.
    let f = finding("torch", "default_model_filename");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("not a TorchScript archive"),
        "{f}"
    );
    let f = finding("unread_parameter", "parameters[\"no_such_knob\"]");
    assert_eq!(f["severity"], "warning");

    let server = Serve::start(repo.path(), &["--exit-on-error=false"], &[]);
    let (status, index) = server.post("/v2/repository/index", "{}");
    assert_eq!(status, 200, "{index}");
    let mut ready = BTreeSet::new();
    for entry in index.as_array().unwrap() {
        let name = entry["name"].as_str().unwrap().to_string();
        if entry["state"] == "READY" {
            ready.insert(name);
        } else {
            // Unavailable with the reason validate-config gives first.
            let first = doc["findings"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["model"] == entry["name"] && f["severity"] == "error")
                .unwrap_or_else(|| panic!("serve refused what validate-config passed: {entry}"));
            let reason = entry["reason"].as_str().unwrap_or_default();
            assert!(
                reason.contains(first["message"].as_str().unwrap()),
                "{entry} vs {first}"
            );
        }
    }
    assert_eq!(ready, passing, "serve's READY models: {index:#}");

    // A model with only warnings serves.
    let body = json!({"inputs": [{"name": "IN", "datatype": "FP32", "shape": [4], "data": [1.0, 2.0, 3.0, 4.0]}]});
    let (status, reply) = server.post("/v2/models/speed_hints/infer", &body.to_string());
    assert_eq!(status, 200, "{reply}");
    server.interrupt();
    assert_eq!(server.wait(Duration::from_secs(10)), Some(0));
}
