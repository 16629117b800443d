//! `trtis serve` as a process: start on an ephemeral port, environment
//! variables for flags, graceful shutdown with a request in flight, exit on
//! a model that fails to load, and a disconnected client's queued request
//! being dropped rather than computed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `trtis serve` and the port it printed.
pub struct Serve {
    child: Child,
    pub port: u16,
    pub grpc_port: u16,
    pub metrics_port: u16,
}

impl Serve {
    pub fn start(repo: &Path, args: &[&str], envs: &[(&str, &str)]) -> Serve {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_trtis"));
        cmd.arg("serve").arg("--model-store").arg(repo).args(args);
        if !envs.iter().any(|(k, _)| *k == "TRTIS_HTTP_PORT") {
            cmd.args(["--http-port", "0"]);
        }
        cmd.args([
            "--http-address",
            "127.0.0.1",
            "--grpc-port",
            "0",
            "--grpc-address",
            "127.0.0.1",
            "--metrics-port",
            "0",
        ]);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let deadline = Instant::now() + Duration::from_secs(30);
        // Both listeners announce themselves (gRPC first); take what comes.
        let (mut port, mut grpc_port, mut metrics_port) = (None, None, None);
        while port.is_none()
            || (grpc_port.is_none() && !args.contains(&"--allow-grpc=false"))
            || (metrics_port.is_none() && !args.contains(&"--allow-metrics=false"))
        {
            assert!(Instant::now() < deadline, "no 'Started HTTPService' line");
            let line = lines.next().expect("serve exited before starting").unwrap();
            let port_of = |addr: &str| {
                addr.rsplit(':')
                    .next()
                    .unwrap()
                    .trim()
                    .parse::<u16>()
                    .unwrap()
            };
            if let Some(addr) = line.split("Started HTTPService at ").nth(1) {
                port = Some(port_of(addr));
            }
            if let Some(addr) = line.split("Started GRPCInferenceService at ").nth(1) {
                grpc_port = Some(port_of(addr));
            }
            if let Some(addr) = line.split("Started Metrics Service at ").nth(1) {
                metrics_port = Some(port_of(addr));
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Serve {
            child,
            port: port.unwrap(),
            grpc_port: grpc_port.unwrap_or(0),
            metrics_port: metrics_port.unwrap_or(0),
        }
    }

    fn post(&self, path: &str, body: &str) -> (u16, Value) {
        post(self.port, path, body)
    }

    pub fn interrupt(&self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
    }

    pub fn wait(mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A server a test did not stop is killed when the test ends, so no
/// process outlives the test run.
impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One POST with `Connection: close`; the status and the JSON body.
fn post(port: u16, path: &str, body: &str) -> (u16, Value) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

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
    let port = server.port;
    let request = std::thread::spawn(move || post(port, "/v2/models/slow/infer", BODY));
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
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    write!(
        s,
        "GET /v2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    assert!(raw.contains("\"name\":\"from-env\""), "{raw}");
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
        let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        write!(
            s,
            "GET /v2/health/ready HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        assert!(
            raw.starts_with(&format!("HTTP/1.1 {ready}")),
            "strict={strict}: {raw}"
        );
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
    let port = server.port;
    // A occupies the only instance; B queues behind it, then hangs up.
    let a = std::thread::spawn(move || post(port, "/v2/models/slow/infer", BODY));
    std::thread::sleep(Duration::from_millis(50));
    {
        let mut b = TcpStream::connect(("127.0.0.1", port)).unwrap();
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
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET /v2/models/slow/stats HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let stats: Value = serde_json::from_str(raw.split("\r\n\r\n").nth(1).unwrap()).unwrap();
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
    let mut s = TcpStream::connect(("127.0.0.1", server.metrics_port)).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let page = raw.split("\r\n\r\n").nth(1).unwrap_or("");
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
