//! `trtis serve` as a process: start on an ephemeral port, environment
//! variables for flags, graceful shutdown with a request in flight, exit on
//! a model that fails to load, a disconnected client's queued request
//! being dropped rather than computed, and ONNX Runtime's threads spinning
//! through a run (their sleeps per request, from `/proc`).

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::util::http::{get, post};
use crate::util::Serve;

fn slow_repo(delay_ms: u64) -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    let dir = repo.path().join("slow");
    std::fs::create_dir_all(dir.join("1")).unwrap();
    std::fs::write(dir.join("1/.keep"), "").unwrap();
    std::fs::write(
        dir.join("config.pbtxt"),
        format!(
            "backend: \"identity\"\nmax_batch_size: 1\n\
             input [ {{ name: \"IN\" data_type: TYPE_INT32 dims: [ 1 ] }} ]\n\
             output [ {{ name: \"OUT\" data_type: TYPE_INT32 dims: [ 1 ] }} ]\n\
             parameters {{ key: \"execute_delay_ms\" value: {{ string_value: \"{delay_ms}\" }} }}\n"
        ),
    )
    .unwrap();
    repo
}

const BODY: &str = r#"{"inputs":[{"name":"IN","datatype":"INT32","shape":[1,1],"data":[7]}]}"#;

#[test]
fn sigint_lets_the_request_in_flight_finish_then_exits_0() {
    let repo = slow_repo(400);
    let server = Serve::start(repo.path(), &[], &[]);
    let addr = server.addr();
    let request = std::thread::spawn(move || post(addr, "/v2/models/slow/infer", BODY));
    std::thread::sleep(Duration::from_millis(100));
    server.interrupt();
    let (status, out) = request.join().unwrap();
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["outputs"][0]["data"][0], 7);
    assert_eq!(server.wait(Duration::from_secs(10)), Some(0));
}

#[test]
fn flags_can_come_from_trtis_environment_variables() {
    let repo = slow_repo(0);
    let server = Serve::start(
        repo.path(),
        &[],
        &[("TRTIS_HTTP_PORT", "0"), ("TRTIS_ID", "from-env")],
    );
    let (_, body) = server.get("/v2");
    assert!(body.contains("\"name\":\"from-env\""), "{body}");
    server.interrupt();
    assert_eq!(server.wait(Duration::from_secs(10)), Some(0));
}

#[test]
fn a_model_that_fails_to_load_stops_the_server_unless_told_otherwise() {
    let repo = slow_repo(0);
    std::fs::create_dir_all(repo.path().join("broken/1")).unwrap();
    std::fs::write(
        repo.path().join("broken/config.pbtxt"),
        "backend: \"identity\"\nmax_batch_size: -4\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_trtis"))
        .args([
            "serve",
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--model-store",
        ])
        .arg(repo.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("'max_batch_size' must be non-negative value for broken"),
        "{stderr}"
    );
    assert!(stderr.contains("failed to load all models"), "{stderr}");

    // --exit-on-error=false serves the rest; not ready under strict readiness,
    // ready with --strict-readiness=false.
    for (strict, ready) in [("true", 400), ("false", 200)] {
        let server = Serve::start(
            repo.path(),
            &["--exit-on-error=false", "--strict-readiness", strict],
            &[],
        );
        let (status, body) = server.get("/v2/health/ready");
        assert_eq!(status, ready, "strict={strict}: {body}");
        let (status, _) = server.post("/v2/models/slow/infer", BODY);
        assert_eq!(status, 200);
        server.interrupt();
        assert_eq!(server.wait(Duration::from_secs(10)), Some(0));
    }
}

#[test]
fn a_client_that_disconnects_has_its_queued_request_dropped() {
    let repo = slow_repo(300);
    let server = Serve::start(repo.path(), &[], &[]);
    let addr = server.addr();
    // A occupies the only instance; B queues behind it, then hangs up (a
    // raw socket: a real client does not abandon a request it sent).
    let a = std::thread::spawn(move || post(addr, "/v2/models/slow/infer", BODY));
    std::thread::sleep(Duration::from_millis(50));
    {
        let mut b = TcpStream::connect(addr).unwrap();
        write!(
            b,
            "POST /v2/models/slow/infer HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{BODY}",
            BODY.len()
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        b.shutdown(std::net::Shutdown::Both).unwrap();
    }
    assert_eq!(a.join().unwrap().0, 200);
    std::thread::sleep(Duration::from_millis(500));
    let (_, body) = get(addr, "/v2/models/slow/stats");
    let stats: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        stats["model_stats"][0]["execution_count"], 1,
        "the abandoned request was computed: {stats}"
    );
    server.interrupt();
    assert_eq!(server.wait(Duration::from_secs(10)), Some(0));
}

/// The value of one sample line of a Prometheus text page.
fn sample(page: &str, prefix: &str) -> f64 {
    page.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {prefix} in:\n{page}"))
}

#[test]
fn metrics_count_requests_in_tritons_names() {
    let repo = slow_repo(0);
    let server = Serve::start(repo.path(), &[], &[]);
    for _ in 0..3 {
        assert_eq!(server.post("/v2/models/slow/infer", BODY).0, 200);
    }
    let bad = r#"{"inputs":[{"name":"NOPE","datatype":"INT32","shape":[1,1],"data":[7]}]}"#;
    assert_eq!(server.post("/v2/models/slow/infer", bad).0, 400);
    let (_, page) = get(server.metrics_addr(), "/metrics");
    let page = page.as_str();
    let labels = r#"{model="slow",version="1"}"#;
    assert_eq!(
        sample(page, &format!("nv_inference_request_success{labels}")),
        3.0
    );
    assert_eq!(sample(page, &format!("nv_inference_count{labels}")), 3.0);
    assert_eq!(
        sample(page, &format!("nv_inference_exec_count{labels}")),
        3.0
    );
    assert_eq!(
        sample(page, &format!("nv_inference_pending_request_count{labels}")),
        0.0
    );
    assert_eq!(
        sample(
            page,
            r#"nv_inference_request_failure{model="slow",reason="OTHER",version="1"}"#
        ),
        1.0
    );
    assert!(sample(page, &format!("nv_inference_request_duration_us{labels}")) > 0.0);
    assert!(sample(page, "nv_cpu_memory_total_bytes") > 0.0);
    assert!(page.contains("# TYPE nv_inference_pending_request_count gauge"));
    for reason in ["REJECTED", "CANCELED", "BACKEND"] {
        assert_eq!(
            sample(
                page,
                &format!(
                    r#"nv_inference_request_failure{{model="slow",reason="{reason}",version="1"}}"#
                )
            ),
            0.0
        );
    }
    // Latency histograms: three successes, in cumulative buckets.
    let h = "trtis_inference_request_duration_us";
    assert!(page.contains(&format!("# TYPE {h} histogram")));
    assert_eq!(sample(page, &format!("{h}_count{labels}")), 3.0);
    assert_eq!(
        sample(
            page,
            &format!(r#"{h}_bucket{{model="slow",le="+Inf",version="1"}}"#)
        ),
        3.0
    );
    assert_eq!(
        sample(
            page,
            &format!(r#"{h}_bucket{{model="slow",le="10000000",version="1"}}"#)
        ),
        3.0
    );
    assert!(sample(page, &format!("{h}_sum{labels}")) > 0.0);
    // No GPU here: no GPU metrics, and no error.
    assert!(!page.contains("nv_gpu_"), "{page}");
    server.interrupt();
    assert_eq!(server.wait(Duration::from_secs(10)), Some(0));
}

#[test]
fn onnx_runtime_threads_spin_during_a_run_by_default_and_sleep_when_told() {
    // An ONNX model's instance with every core's intra-op threads: by
    // default they spin between the operators of a run (and stop when it
    // ends), so a request costs its threads a sleep or two; with
    // `allow_spinning: "0"` a worker thread sleeps after every operator it
    // helped with (about 50 on the classifier). ONNX Runtime's threads
    // carry the instance thread's name.
    if !crate::util::onnx_available() {
        return;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("skipped: one core, so no intra-op worker threads");
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = tempfile::tempdir().unwrap();
    for (name, extra) in [
        ("spins", ""),
        (
            "sleeps",
            "parameters { key: \"allow_spinning\" value: { string_value: \"0\" } }\n",
        ),
    ] {
        crate::util::write_model(
            repo.path(),
            name,
            &format!(
                "platform: \"onnxruntime_onnx\"\nmax_batch_size: 1\n\
                 input [ {{ name: \"input\" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]\n\
                 output [ {{ name: \"output\" data_type: TYPE_FP32 dims: [ 1000 ] }} ]\n{extra}"
            ),
        );
        std::fs::copy(
            root.join("examples/model_repository/efficientnet_lite0/1/model.onnx"),
            repo.path().join(name).join("1/model.onnx"),
        )
        .unwrap();
    }
    let s = Serve::start(repo.path(), &[], &[]);
    let body = serde_json::json!({"inputs": [{"name": "input", "datatype": "FP32",
        "shape": [1, 3, 224, 224], "data": vec![0.5f32; 3 * 224 * 224]}]})
    .to_string();
    let n = 8;
    let per_request = |model: &str| {
        let infer = || {
            let (status, out) = s.post(&format!("/v2/models/{model}/infer"), &body);
            assert_eq!(status, 200, "{out}");
        };
        infer();
        let before = crate::util::thread_sleeps(s.pid());
        for _ in 0..n {
            infer();
        }
        let after = crate::util::thread_sleeps(s.pid());
        crate::util::slept(&before, &after, &format!("trtis:{model}:0")) as f64 / n as f64
    };
    let spins = per_request("spins");
    let sleeps = per_request("sleeps");
    assert!(
        spins < 10.0 && spins * 3.0 < sleeps,
        "the instance's threads slept {spins} times per request by default, {sleeps} with allow_spinning 0"
    );
}
