//! Our client library against a real `trtis serve` over both protocols, and
//! the `status` and `infer` commands built on it.

use std::path::Path;
use std::time::Duration;

use trtis::client::{Client, ClientError, Protocol};
use trtis::core::types::{DataType, RequestedOutput, Tensor};

use crate::util::{stdout, trtis, Serve};

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, dt) in [
        ("ident_int32", "TYPE_INT32"),
        ("ident_bytes", "TYPE_STRING"),
    ] {
        let m = dir.path().join(name);
        std::fs::create_dir_all(m.join("1")).unwrap();
        std::fs::write(m.join("1/.keep"), "").unwrap();
        std::fs::write(
            m.join("config.pbtxt"),
            format!(
                "backend: \"identity\"\nmax_batch_size: 4\n\
                 input [ {{ name: \"INPUT0\" data_type: {dt} dims: [ -1 ] }} ]\n\
                 output [ {{ name: \"OUTPUT0\" data_type: {dt} dims: [ -1 ] label_filename: \"labels.txt\" }} ]\n"
            ),
        )
        .unwrap();
        std::fs::write(m.join("labels.txt"), "zero\none\ntwo\n").unwrap();
    }
    dir
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn int32(values: &[i32]) -> Tensor {
    Tensor {
        name: "INPUT0".into(),
        datatype: DataType::Int32,
        shape: vec![1, values.len() as i64],
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

#[test]
fn the_client_speaks_both_protocols() {
    let repo = repo();
    let server = Serve::start(
        repo.path(),
        &[
            "--model-control-mode",
            "explicit",
            "--load-model",
            "ident_int32",
        ],
        &[],
    );
    let rt = rt();
    for (protocol, port) in [
        (Protocol::Http, server.port),
        (Protocol::Grpc, server.grpc_port),
    ] {
        let mut c = rt
            .block_on(Client::connect(&format!("127.0.0.1:{port}"), protocol))
            .unwrap();
        assert!(rt.block_on(c.live()).unwrap(), "{protocol:?}");
        assert!(rt.block_on(c.ready()).unwrap());
        let meta = rt.block_on(c.server_metadata()).unwrap();
        assert_eq!(meta.name, "triton");
        assert!(meta.extensions.contains(&"statistics".to_string()));
        let model = rt.block_on(c.model_metadata("ident_int32", "")).unwrap();
        assert_eq!(model.inputs[0].shape, vec![-1, -1]);
        let config = rt.block_on(c.model_config("ident_int32", "1")).unwrap();
        assert_eq!(config.max_batch_size, 4);
        assert_eq!(config.input[0].dims, vec![-1]);

        let out = rt
            .block_on(c.infer("ident_int32", "", vec![int32(&[3, 1, 2])], vec![]))
            .unwrap();
        assert_eq!(out.outputs[0].data, int32(&[3, 1, 2]).data);
        let top = RequestedOutput {
            name: "OUTPUT0".into(),
            classification: Some(1),
            shm: None,
        };
        let out = rt
            .block_on(c.infer("ident_int32", "", vec![int32(&[3, 9, 2])], vec![top]))
            .unwrap();
        assert_eq!(
            Tensor::bytes_elements(&out.outputs[0].data).unwrap(),
            vec![b"9:1:one".as_slice()]
        );

        // Errors come back typed, with the server's message.
        let err = rt
            .block_on(c.infer("nope", "", vec![int32(&[1])], vec![]))
            .unwrap_err();
        assert_eq!(
            err.message(),
            "Request for unknown model: 'nope' is not found"
        );
        assert!(
            matches!(
                err,
                ClientError::Http { status: 404, .. } | ClientError::Grpc { .. }
            ),
            "{err:?}"
        );

        // Repository control.
        rt.block_on(c.load("ident_bytes")).unwrap();
        assert!(rt.block_on(c.model_ready("ident_bytes", "")).unwrap());
        rt.block_on(c.unload("ident_bytes")).unwrap();
        assert!(!rt.block_on(c.model_ready("ident_bytes", "")).unwrap());
        let index = rt.block_on(c.index()).unwrap();
        assert_eq!(
            index
                .iter()
                .find(|e| e.name == "ident_bytes")
                .unwrap()
                .state,
            "UNAVAILABLE"
        );

        let stats = rt.block_on(c.statistics("ident_int32")).unwrap();
        assert!(stats[0].stats.inference_count >= 2);
    }
    server.interrupt();
    assert_eq!(server.wait(Duration::from_secs(10)), Some(0));
}

#[test]
fn an_unreachable_server_is_a_transport_error() {
    let rt = rt();
    let mut c = rt
        .block_on(Client::connect("127.0.0.1:1", Protocol::Http))
        .unwrap();
    assert!(rt.block_on(c.live()).unwrap_err().is_transport());
    assert!(rt
        .block_on(Client::connect("127.0.0.1:1", Protocol::Grpc))
        .err()
        .unwrap()
        .is_transport());
}

#[test]
fn status_and_infer_commands() {
    let repo = repo();
    let server = Serve::start(repo.path(), &[], &[]);
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let http = format!("127.0.0.1:{}", server.port);
    let grpc = format!("127.0.0.1:{}", server.grpc_port);

    let out = trtis(here, &["status", "-u", &http]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    assert!(text.contains("live, ready"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("ident_int32") && l.contains("READY")),
        "{text}"
    );
    assert!(text.contains("AVG BATCH"), "{text}");

    let out = trtis(
        here,
        &[
            "status",
            "-u",
            &grpc,
            "-i",
            "grpc",
            "-m",
            "ident_bytes",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["models"][0]["name"], "ident_bytes");
    assert_eq!(doc["inputs"][0]["datatype"], "BYTES");

    let out = trtis(here, &["status", "-u", &http, "-m", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("model 'nope'"));
    let out = trtis(here, &["status", "-u", "127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach a server at 127.0.0.1:1"));

    // infer: JSON input data in perf_analyzer's format, both protocols.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.json");
    std::fs::write(
        &data,
        r#"{"data": [{"INPUT0": {"content": [5, 6, 7], "shape": [3]}}]}"#,
    )
    .unwrap();
    for (url, proto) in [(&http, "http"), (&grpc, "grpc")] {
        let out = trtis(
            here,
            &[
                "infer",
                "-m",
                "ident_int32",
                "-u",
                url,
                "-i",
                proto,
                "--input-data",
                data.to_str().unwrap(),
                "--json",
            ],
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            doc["outputs"][0]["data"],
            serde_json::json!([5, 6, 7]),
            "{proto}"
        );
        assert_eq!(doc["outputs"][0]["shape"], serde_json::json!([1, 3]));
    }
    // Generated data needs the variable dimension; --output-dir writes .npy.
    let out = trtis(here, &["infer", "-m", "ident_int32", "-u", &http]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--shape INPUT0:"));
    let outdir = dir.path().join("out");
    let out = trtis(
        here,
        &[
            "infer",
            "-m",
            "ident_int32",
            "-u",
            &http,
            "--shape",
            "INPUT0:4",
            "--data",
            "zero",
            "--output-dir",
            outdir.to_str().unwrap(),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let npy = std::fs::read(outdir.join("OUTPUT0.npy")).unwrap();
    assert!(npy.starts_with(b"\x93NUMPY"));
    assert_eq!(&npy[npy.len() - 16..], &[0u8; 16]);
    // ... and reads .npy back as an input.
    let out = trtis(
        here,
        &[
            "infer",
            "-m",
            "ident_int32",
            "-u",
            &http,
            "--input",
            &format!("INPUT0={}", outdir.join("OUTPUT0.npy").display()),
            "--json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = trtis(here, &["infer", "-m", "nope", "-u", &http]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("Request for unknown model: 'nope' is not found"));
    let out = trtis(here, &["infer", "-m", "x", "-u", "127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2));
    server.interrupt();
    assert_eq!(server.wait(Duration::from_secs(10)), Some(0));
}

#[test]
fn streaming_and_shared_memory_through_the_client() {
    let repo = repo();
    let server = Serve::start(repo.path(), &["--allow-client-shm"], &[]);
    let rt = rt();
    let mut c = rt
        .block_on(Client::connect(
            &format!("127.0.0.1:{}", server.grpc_port),
            Protocol::Grpc,
        ))
        .unwrap();
    let mut requests: Vec<Vec<Tensor>> = (0..5).map(|i| vec![int32(&[i, i + 1])]).collect();
    requests[2][0].datatype = DataType::Fp32; // the server refuses this one
    let answers = rt
        .block_on(c.stream_infer("ident_int32", requests))
        .unwrap();
    assert_eq!(answers.len(), 5);
    for (i, answer) in answers.iter().enumerate() {
        match (i, answer) {
            (2, Err(e)) => assert!(e.message().contains("data-type is 'FP32'"), "{e}"),
            (_, Ok(r)) => assert_eq!(r.outputs[0].data, int32(&[i as i32, i as i32 + 1]).data),
            (_, other) => panic!("answer {i}: {other:?}"),
        }
    }

    // Register and unregister a region over both protocols.
    let key = format!("/trtis_client_test_{}", std::process::id());
    let path = Path::new("/dev/shm").join(&key[1..]);
    std::fs::write(&path, vec![0u8; 64]).unwrap();
    for (protocol, port) in [
        (Protocol::Http, server.port),
        (Protocol::Grpc, server.grpc_port),
    ] {
        let mut c = rt
            .block_on(Client::connect(&format!("127.0.0.1:{port}"), protocol))
            .unwrap();
        rt.block_on(c.register_system_shared_memory("region", &key, 0, 64))
            .unwrap();
        let err = rt
            .block_on(c.register_system_shared_memory("region", &key, 0, 64))
            .unwrap_err();
        assert_eq!(
            err.message(),
            "shared memory region 'region' already in manager"
        );
        rt.block_on(c.unregister_system_shared_memory("")).unwrap();
    }
    std::fs::remove_file(&path).unwrap();
    server.interrupt();
    assert_eq!(server.wait(Duration::from_secs(10)), Some(0));
}

/// `trtis status --api v1` and `trtis infer --api v1` speak the legacy TRTIS
/// v1 API (here to trtis's own v1 routes and service) over both protocols:
/// the same answers as v2, classification included, the server's errors
/// passed on, and `perf --api v1` refused with the reason.
#[test]
fn status_and_infer_commands_speak_the_v1_api() {
    let repo = repo();
    let server = Serve::start(repo.path(), &[], &[]);
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let http = format!("127.0.0.1:{}", server.port);
    let grpc = format!("127.0.0.1:{}", server.grpc_port);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.json");
    std::fs::write(
        &data,
        r#"{"data": [{"INPUT0": {"content": [5, 7, 6], "shape": [3]}}]}"#,
    )
    .unwrap();
    for (url, proto) in [(&http, "http"), (&grpc, "grpc")] {
        let out = trtis(here, &["status", "--api", "v1", "-u", url, "-i", proto]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{proto}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = stdout(&out);
        assert!(text.contains("live, ready"), "{proto}: {text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("ident_int32") && l.contains("READY")),
            "{proto}: {text}"
        );

        let out = trtis(
            here,
            &[
                "infer",
                "--api",
                "v1",
                "-m",
                "ident_int32",
                "-u",
                url,
                "-i",
                proto,
                "--input-data",
                data.to_str().unwrap(),
                "--json",
            ],
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{proto}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            doc["outputs"][0]["data"],
            serde_json::json!([5, 7, 6]),
            "{proto}"
        );
        assert_eq!(
            doc["outputs"][0]["shape"],
            serde_json::json!([1, 3]),
            "{proto}"
        );

        // Top 2 classes with the labels file, as v2 formats them.
        let out = trtis(
            here,
            &[
                "infer",
                "--api",
                "v1",
                "-m",
                "ident_int32",
                "-u",
                url,
                "-i",
                proto,
                "--input-data",
                data.to_str().unwrap(),
                "-c",
                "2",
                "--json",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{proto}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            doc["outputs"][0]["data"],
            serde_json::json!(["7.000000:1:one", "6.000000:2:two"]),
            "{proto}"
        );

        // The server's own v1 error comes through, with its code.
        let out = trtis(
            here,
            &["infer", "--api", "v1", "-m", "nope", "-u", url, "-i", proto],
        );
        assert_eq!(out.status.code(), Some(1), "{proto}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("INVALID_ARG") && err.contains("'nope'"),
            "{proto}: {err}"
        );
    }
    let out = trtis(
        here,
        &["perf", "--api", "v1", "-m", "ident_int32", "-u", &http],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--api v1 is not supported"));
    server.interrupt();
    assert_eq!(server.wait(Duration::from_secs(10)), Some(0));
}
