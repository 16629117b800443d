//! The HTTP frontend through real sockets: an in-process `Engine` and router
//! on 127.0.0.1:0 (`util::TestServer`), driven with a real HTTP/1.1 client
//! (`util::http`).

use std::path::Path;

use crate::util::{onnx_available, TestServer};
use serde_json::{json, Value};
use trtis::core::repository::ControlMode;

/// A repository with identity models (no native library needed).
fn identity_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        "ident/config.pbtxt",
        r#"backend: "identity"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] label_filename: "labels.txt" } ]
"#,
    );
    write("ident/labels.txt", "zero\none\ntwo\nthree\n");
    write("ident/1/.keep", "");
    write(
        "bytes/config.pbtxt",
        r#"backend: "identity"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ -1 ] } ]
"#,
    );
    write("bytes/1/.keep", "");
    write("bytes/2/.keep", "");
    dir
}

const MB: usize = 1 << 20;

#[test]
fn health_metadata_and_config() {
    let repo = identity_repo();
    let s = TestServer::start(repo.path(), ControlMode::None, &[], MB);
    assert_eq!(s.request("GET", "/v2/health/live", &[], b"").0, 200);
    assert_eq!(s.request("GET", "/v2/health/ready", &[], b"").0, 200);
    let (status, meta) = s.json("GET", "/v2", Value::Null);
    assert_eq!(status, 200);
    assert_eq!(meta["name"], "triton");
    assert!(meta["extensions"]
        .as_array()
        .unwrap()
        .contains(&json!("binary_tensor_data")));

    let (status, meta) = s.json("GET", "/v2/models/ident", Value::Null);
    assert_eq!(status, 200);
    assert_eq!(
        meta["inputs"][0],
        json!({"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]})
    );
    assert_eq!(meta["versions"], json!(["1"]));
    // latest 1 of versions 1 and 2
    let (_, meta) = s.json("GET", "/v2/models/bytes", Value::Null);
    assert_eq!(meta["versions"], json!(["2"]));
    assert_eq!(
        s.request("GET", "/v2/models/bytes/versions/2/ready", &[], b"")
            .0,
        200
    );
    assert_eq!(
        s.request("GET", "/v2/models/bytes/versions/1/ready", &[], b"")
            .0,
        400
    );

    let (status, config) = s.json("GET", "/v2/models/ident/config", Value::Null);
    assert_eq!(status, 200);
    assert_eq!(config["max_batch_size"], 4);
    assert_eq!(config["input"][0]["dims"], json!([-1]));
    assert_eq!(config["instance_group"][0]["kind"], "KIND_CPU");

    let (status, err) = s.json("GET", "/v2/models/nope", Value::Null);
    assert_eq!(status, 404);
    assert_eq!(
        err["error"],
        "Request for unknown model: 'nope' is not found"
    );
    assert_eq!(s.request("GET", "/v2/no/such/route", &[], b"").0, 404);
}

#[test]
fn infer_json_binary_classification_and_stats() {
    let repo = identity_repo();
    let s = TestServer::start(repo.path(), ControlMode::None, &[], MB);
    let (status, out) = s.json(
        "POST",
        "/v2/models/ident/infer",
        json!({"id": "r1", "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [0.5, 3.0, 1.0, 2.0]}],
               "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2}}]}),
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["id"], "r1");
    assert_eq!(out["outputs"][0]["datatype"], "BYTES");
    assert_eq!(out["outputs"][0]["shape"], json!([1, 2]));
    assert_eq!(
        out["outputs"][0]["data"],
        json!(["3.000000:1:one", "2.000000:3:three"])
    );

    // Binary in, binary out, with NUL and non-UTF-8 bytes.
    let elements: [&[u8]; 2] = [b"a\0b", b"\xff\xfe"];
    let mut data = Vec::new();
    for e in elements {
        data.extend_from_slice(&(e.len() as u32).to_le_bytes());
        data.extend_from_slice(e);
    }
    let header = json!({"inputs": [{"name": "IN", "datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": data.len()}}],
                        "outputs": [{"name": "OUT", "parameters": {"binary_data": true}}]});
    let mut body = serde_json::to_vec(&header).unwrap();
    let json_len = body.len();
    body.extend_from_slice(&data);
    let (status, headers, resp) = s.request(
        "POST",
        "/v2/models/bytes/infer",
        &[("Inference-Header-Content-Length", json_len.to_string())],
        &body,
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "inference-header-content-length")
        .unwrap()
        .1
        .parse()
        .unwrap();
    let head: Value = serde_json::from_slice(&resp[..len]).unwrap();
    assert_eq!(
        head["outputs"][0]["parameters"]["binary_data_size"],
        data.len()
    );
    assert_eq!(&resp[len..], &data[..]);

    let (_, stats) = s.json("GET", "/v2/models/ident/stats", Value::Null);
    let st = &stats["model_stats"][0];
    assert_eq!(st["inference_count"], 1);
    assert_eq!(st["execution_count"], 1);
    assert_eq!(st["inference_stats"]["success"]["count"], 1);
}

#[test]
fn request_errors_are_400_with_a_message_and_the_server_lives_on() {
    let repo = identity_repo();
    let s = TestServer::start(repo.path(), ControlMode::None, &[], 4096);
    let cases = [
        (
            json!({"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}),
            "unexpected inference input 'X' for model 'ident'",
        ),
        (
            json!({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [1]}]}),
            "inference input 'INPUT0' data-type is 'INT32', but model 'ident' expects 'FP32'",
        ),
        (
            json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [8, 1], "data": [1,2,3,4,5,6,7,8]}]}),
            "inference request batch-size must be <= 4 for 'ident'",
        ),
        (
            json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1.0]}]}),
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
        (
            json!({"inputs": []}),
            "expected 1 inputs but got 0 inputs for model 'ident'",
        ),
        (
            json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}], "outputs": [{"name": "NOPE"}]}),
            "unexpected inference output 'NOPE' for model 'ident'",
        ),
    ];
    for (body, message) in cases {
        let (status, err) = s.json("POST", "/v2/models/ident/infer", body);
        assert_eq!(status, 400, "{err}");
        assert!(
            err["error"].as_str().unwrap().contains(message),
            "{err} should contain {message}"
        );
    }
    let (status, _, body) = s.request("POST", "/v2/models/ident/infer", &[], b"{not json");
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("failed to parse the request JSON buffer"));
    let big = vec![b' '; 8192];
    let (status, _, body) = s.request("POST", "/v2/models/ident/infer", &[], &big);
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains(
        "Request JSON size of 8192 bytes exceeds the maximum allowed value of 4096 bytes. Use --http-max-input-size to increase the limit."
    ));
    assert_eq!(s.request("GET", "/v2/health/ready", &[], b"").0, 200);
}

#[test]
fn explicit_mode_loads_and_unloads() {
    let repo = identity_repo();
    let s = TestServer::start(repo.path(), ControlMode::Explicit, &["bytes"], MB);
    assert_eq!(s.request("GET", "/v2/models/ident/ready", &[], b"").0, 400);
    let (_, index) = s.json("POST", "/v2/repository/index", Value::Null);
    assert_eq!(
        index,
        json!([
            {"name": "bytes", "version": "2", "state": "READY", "reason": ""},
            {"name": "ident"},
        ])
    );
    assert_eq!(
        s.json("POST", "/v2/repository/models/ident/load", Value::Null)
            .0,
        200
    );
    assert_eq!(s.request("GET", "/v2/models/ident/ready", &[], b"").0, 200);
    assert_eq!(
        s.json(
            "POST",
            "/v2/repository/models/ident/unload",
            json!({"parameters": {}})
        )
        .0,
        200
    );
    assert_eq!(s.request("GET", "/v2/models/ident/ready", &[], b"").0, 400);
    let (_, index) = s.json("POST", "/v2/repository/index", json!({"ready": true}));
    assert_eq!(index.as_array().unwrap().len(), 1);
    let (status, err) = s.json("POST", "/v2/repository/models/missing/load", Value::Null);
    assert_eq!(status, 404);
    assert_eq!(
        err["error"],
        "failed to load 'missing', failed to poll from model repository"
    );
}

#[test]
fn load_unload_api_is_refused_without_explicit_mode() {
    let repo = identity_repo();
    let s = TestServer::start(repo.path(), ControlMode::None, &[], MB);
    let (status, err) = s.json("POST", "/v2/repository/models/ident/unload", Value::Null);
    assert_eq!(status, 503);
    assert_eq!(
        err["error"],
        "explicit model load / unload is not allowed if polling is enabled"
    );
}

#[test]
fn onnx_simple_model_adds_and_subtracts() {
    if trtis::core::backend::onnx::find_library().is_err() {
        assert!(
            std::env::var_os("TRTIS_REQUIRE_PYTHON").is_none(),
            "ONNX Runtime not found: run scripts/setup.sh"
        );
        eprintln!("skipped: ONNX Runtime not installed (scripts/setup.sh)");
        return;
    }
    let repo = tempfile::tempdir().unwrap();
    crate::util::copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/model_repository/simple"),
        &repo.path().join("simple"),
    );
    let s = TestServer::start(repo.path(), ControlMode::None, &[], MB);
    let a: Vec<i32> = (0..16).collect();
    let b: Vec<i32> = vec![3; 16];
    let (status, out) = s.json(
        "POST",
        "/v2/models/simple/infer",
        json!({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": a},
                          {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": b}]}),
    );
    assert_eq!(status, 200, "{out}");
    let sum: Vec<i64> = (0..16).map(|x| x + 3).collect();
    let diff: Vec<i64> = (0..16).map(|x| x - 3).collect();
    assert_eq!(out["outputs"][0]["data"], json!(sum));
    assert_eq!(out["outputs"][1]["data"], json!(diff));
}

#[test]
fn a_model_without_config_is_auto_completed_from_the_onnx_file() {
    if !onnx_available() {
        return;
    }
    let repo = tempfile::tempdir().unwrap();
    let dir = repo.path().join("adder/1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/model_repository/simple/1/model.onnx"),
        dir.join("model.onnx"),
    )
    .unwrap();
    let s = TestServer::start(repo.path(), ControlMode::None, &[], MB);
    let (status, config) = s.json("GET", "/v2/models/adder/config", Value::Null);
    assert_eq!(status, 200, "{config}");
    assert_eq!(config["max_batch_size"], 4);
    assert_eq!(config["backend"], "onnxruntime");
    assert_eq!(config["input"][1]["name"], "INPUT1");
    assert_eq!(config["input"][1]["dims"], json!([16]));
    assert_eq!(config["output"][0]["data_type"], "TYPE_INT32");
    let (status, out) = s.json(
        "POST",
        "/v2/models/adder/infer",
        json!({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [2, 16], "data": vec![1; 32]},
                          {"name": "INPUT1", "datatype": "INT32", "shape": [2, 16], "data": vec![2; 32]}]}),
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["outputs"][0]["data"], json!(vec![3; 32]));
}

/// Sends `data` as one binary input of `datatype` and shape `shape`; returns
/// status and the raw output bytes (or the error body).
fn binary_roundtrip(
    s: &TestServer,
    model: &str,
    datatype: &str,
    shape: &[i64],
    data: &[u8],
) -> (u16, Vec<u8>) {
    let header = json!({"inputs": [{"name": "INPUT0", "datatype": datatype, "shape": shape,
                                     "parameters": {"binary_data_size": data.len()}}],
                        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": true}}]});
    let mut body = serde_json::to_vec(&header).unwrap();
    let json_len = body.len();
    body.extend_from_slice(data);
    let (status, headers, resp) = s.request(
        "POST",
        &format!("/v2/models/{model}/infer"),
        &[("Inference-Header-Content-Length", json_len.to_string())],
        &body,
    );
    if status != 200 {
        return (status, resp);
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "inference-header-content-length")
        .unwrap()
        .1
        .parse()
        .unwrap();
    let head: Value = serde_json::from_slice(&resp[..len]).unwrap();
    assert_eq!(head["outputs"][0]["datatype"], datatype);
    assert_eq!(head["outputs"][0]["shape"], json!(shape));
    (status, resp[len..].to_vec())
}

#[test]
fn onnx_runtime_carries_all_13_datatypes() {
    if !onnx_available() {
        return;
    }
    let repo = crate::util::fixtures().join("onnx_types");
    let s = TestServer::start(&repo, ControlMode::None, &[], MB);
    let shape = [2i64, 3];
    for (model, datatype, size) in [
        ("onnx_bool", "BOOL", 1),
        ("onnx_uint8", "UINT8", 1),
        ("onnx_uint16", "UINT16", 2),
        ("onnx_uint32", "UINT32", 4),
        ("onnx_uint64", "UINT64", 8),
        ("onnx_int8", "INT8", 1),
        ("onnx_int16", "INT16", 2),
        ("onnx_int32", "INT32", 4),
        ("onnx_int64", "INT64", 8),
        ("onnx_fp16", "FP16", 2),
        ("onnx_fp32", "FP32", 4),
        ("onnx_fp64", "FP64", 8),
    ] {
        // Distinct bytes per element; BOOL must be 0 or 1.
        let data: Vec<u8> = (0..6 * size)
            .map(|i| {
                if datatype == "BOOL" {
                    (i % 2) as u8
                } else {
                    (i * 7 + 3) as u8 % 0x7b
                }
            })
            .collect();
        let (status, out) = binary_roundtrip(&s, model, datatype, &shape, &data);
        assert_eq!(status, 200, "{model}: {}", String::from_utf8_lossy(&out));
        assert_eq!(out, data, "{model} changed the data");
    }
    let mut strings = Vec::new();
    for word in ["a", "", "héllo", "x y", "longer string", "z"] {
        strings.extend_from_slice(&(word.len() as u32).to_le_bytes());
        strings.extend_from_slice(word.as_bytes());
    }
    let (status, out) = binary_roundtrip(&s, "onnx_string", "BYTES", &shape, &strings);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
    assert_eq!(out, strings);
    // ONNX Runtime strings must be UTF-8: a clear error, not a crash.
    let bad = [2u32.to_le_bytes().as_slice(), b"\xff\xfe"].concat();
    let (status, out) = binary_roundtrip(&s, "onnx_string", "BYTES", &[1, 1], &bad);
    assert_eq!(status, 400);
    assert!(
        String::from_utf8_lossy(&out).contains("must be valid UTF-8"),
        "{}",
        String::from_utf8_lossy(&out)
    );
}

#[test]
fn raw_binary_request_of_a_single_input() {
    if !onnx_available() {
        return;
    }
    let repo = crate::util::fixtures().join("onnx_types");
    let s = TestServer::start(&repo, ControlMode::Explicit, &["onnx_int32"], MB);
    let data: Vec<u8> = [5i32, -6, 7].iter().flat_map(|x| x.to_le_bytes()).collect();
    let (status, headers, resp) = s.request(
        "POST",
        "/v2/models/onnx_int32/infer",
        &[("Inference-Header-Content-Length", "0".to_string())],
        &data,
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "inference-header-content-length")
        .unwrap()
        .1
        .parse()
        .unwrap();
    let head: Value = serde_json::from_slice(&resp[..len]).unwrap();
    assert_eq!(head["outputs"][0]["shape"], json!([1, 3]));
    assert_eq!(&resp[len..], &data[..]);
}
