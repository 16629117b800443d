//! The two servers the tests talk to: `TestServer`, an in-process `Engine`
//! and HTTP router on 127.0.0.1:0 (stopped on drop), and `Serve`, the built
//! `trtis serve` as a child process on ephemeral ports (killed on drop if a
//! test did not stop it). Both are reached through `util::http`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use trtis::core::repository::ControlMode;
use trtis::core::{Engine, ServerConfig};
use trtis::server::frontend::http::AppState;
use trtis::server::frontend::router;

use super::http;

/// An in-process engine on `repo` (every model loaded without error), the
/// runtime to serve it on and a listener on 127.0.0.1:0: what the HTTP and
/// the gRPC test servers start from.
pub fn engine_on_a_port(
    repo: &Path,
    mode: ControlMode,
    load: &[&str],
) -> (Engine, tokio::runtime::Runtime, tokio::net::TcpListener) {
    let mut config = ServerConfig::new(repo);
    config.control_mode = mode;
    config.load_models = load.iter().map(|s| s.to_string()).collect();
    let (engine, errors) = Engine::start(config).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    (engine, runtime, listener)
}

/// A server on an ephemeral port, stopped on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    runtime: tokio::runtime::Runtime,
    engine: Engine,
}

impl TestServer {
    pub fn start(
        repo: &Path,
        mode: ControlMode,
        load: &[&str],
        max_input_size: usize,
    ) -> TestServer {
        let (engine, runtime, listener) = engine_on_a_port(repo, mode, load);
        let addr = listener.local_addr().unwrap();
        let state = AppState {
            engine: engine.clone(),
            max_input_size,
        };
        let app = router(state, true);
        runtime.spawn(async move { axum::serve(listener, app).await });
        TestServer {
            addr,
            runtime,
            engine,
        }
    }

    pub fn engine(&self) -> Engine {
        self.engine.clone()
    }

    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }

    /// Sends one request; returns status, headers (lower-case names) and body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: &[u8],
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        http::request(self.addr, method, path, headers, body)
    }

    /// Sends `body` as JSON (none when null); the status and the JSON body.
    pub fn json(&self, method: &str, path: &str, body: Value) -> (u16, Value) {
        http::json(self.addr, method, path, body)
    }
}

/// A running `trtis serve` and the ports it printed.
pub struct Serve {
    child: Child,
    pub port: u16,
    pub grpc_port: u16,
    pub metrics_port: u16,
}

impl Serve {
    pub fn start(repo: &Path, args: &[&str], envs: &[(&str, &str)]) -> Serve {
        Serve::start_within(repo, args, envs, Duration::from_secs(30))
    }

    /// As `start`, allowing the server `ready` to load its models (a
    /// TensorRT engine takes its time to build).
    pub fn start_within(
        repo: &Path,
        args: &[&str],
        envs: &[(&str, &str)],
        ready: Duration,
    ) -> Serve {
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
        // The suite's expectations are a machine without a GPU: on one, its
        // servers use none, unless a test simulates GPUs or chooses, or is a
        // GPU test (scripts/test-gpu.sh).
        let chooses = envs
            .iter()
            .any(|(k, _)| *k == "TRTIS_GPU_COUNT" || *k == "TRTIS_GPUS");
        if !chooses && std::env::var("TRTIS_GPU_TESTS").as_deref() != Ok("1") {
            cmd.env("TRTIS_GPUS", "none");
        }
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
        let deadline = Instant::now() + ready;
        // Both listeners announce themselves (gRPC first); take what comes.
        let (mut port, mut grpc_port, mut metrics_port) = (None, None, None);
        let mut seen: Vec<String> = Vec::new();
        while port.is_none()
            || (grpc_port.is_none() && !args.contains(&"--allow-grpc=false"))
            || (metrics_port.is_none() && !args.contains(&"--allow-metrics=false"))
        {
            assert!(
                Instant::now() < deadline,
                "no 'Started HTTPService' line:\n{}",
                seen.join("\n")
            );
            let Some(line) = lines.next() else {
                panic!("serve exited before starting:\n{}", seen.join("\n"));
            };
            let line = line.unwrap();
            seen.push(line.clone());
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

    /// The HTTP listener, 127.0.0.1:`port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The metrics listener, 127.0.0.1:`metrics_port`.
    pub fn metrics_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.metrics_port))
    }

    /// POSTs `body` as given; the status and the JSON body.
    pub fn post(&self, path: &str, body: &str) -> (u16, Value) {
        http::post(self.addr(), path, body)
    }

    /// GETs `path`; the status and the body as text.
    pub fn get(&self, path: &str) -> (u16, String) {
        http::get(self.addr(), path)
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
