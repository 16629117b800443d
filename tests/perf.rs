//! `trtis perf` against a real `trtis serve` on 127.0.0.1:0: a short sweep
//! over HTTP and gRPC writes perf_analyzer's CSV (exact header, one row per
//! step) and a valid SVG; the -d/-l/-c sweep stops at -c; an unreachable
//! server, an unknown model, a variable shape without --shape and a
//! request the server refuses fail clearly.

use std::process::{Command, Output};

use crate::util::Serve;

fn repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    for (name, dims) in [("fixed", "4"), ("var", "-1")] {
        let dir = repo.path().join(name);
        std::fs::create_dir_all(dir.join("1")).unwrap();
        std::fs::write(dir.join("1/.keep"), "").unwrap();
        std::fs::write(
            dir.join("config.pbtxt"),
            format!(
                "backend: \"identity\"\nmax_batch_size: 8\n\
                 input [ {{ name: \"IN\" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n\
                 output [ {{ name: \"OUT\" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n\
                 dynamic_batching {{ }}\n"
            ),
        )
        .unwrap();
    }
    repo
}

fn perf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trtis"))
        .arg("perf")
        .args(args)
        .output()
        .unwrap()
}

const HEADER: &str = "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency";

#[test]
fn a_short_sweep_writes_perf_analyzers_csv_and_an_svg() {
    let repo = repo();
    let server = Serve::start(repo.path(), &[], &[]);
    let out_dir = tempfile::tempdir().unwrap();
    for (protocol, port) in [("http", server.port), ("grpc", server.grpc_port)] {
        let csv = out_dir.path().join(format!("{protocol}.csv"));
        let svg = out_dir.path().join(format!("{protocol}.svg"));
        let url = format!("127.0.0.1:{port}");
        let out = perf(&[
            "-m",
            "fixed",
            "-u",
            &url,
            "-i",
            protocol,
            "--concurrency-range",
            "1:3:2",
            "-p",
            "300",
            "-r",
            "4",
            "-s",
            "90",
            "-f",
            csv.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("Request concurrency: 1"), "{stdout}");
        assert!(stdout.contains("Request concurrency: 3"), "{stdout}");
        assert!(stdout.contains(if protocol == "grpc" {
            "Avg gRPC time"
        } else {
            "Avg HTTP time"
        }));
        assert!(
            stdout.contains("Avg request latency:"),
            "the server side is reported: {stdout}"
        );
        let text = std::fs::read_to_string(&csv).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], HEADER);
        assert_eq!(lines.len(), 3, "{text}");
        let mut concurrencies = Vec::new();
        let mut throughputs = Vec::new();
        for row in &lines[1..] {
            let cells: Vec<&str> = row.split(',').collect();
            assert_eq!(cells.len(), 13, "{row}");
            concurrencies.push(cells[0].parse::<u32>().unwrap());
            let t: f64 = cells[1].parse().unwrap();
            assert!(t > 0.0, "{row}");
            throughputs.push(t);
            let p50: u64 = cells[9].parse().unwrap();
            let p99: u64 = cells[12].parse().unwrap();
            assert!(p50 > 0 && p50 <= p99, "{row}");
        }
        concurrencies.sort();
        assert_eq!(concurrencies, [1, 3]);
        assert!(
            throughputs.windows(2).all(|w| w[0] <= w[1]),
            "rows by throughput: {text}"
        );
        let svg = std::fs::read_to_string(&svg).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{svg}"
        );
        assert!(svg.contains("c=3"), "points are labelled");
        assert_eq!(svg.matches("<svg").count(), 1);
    }
}

#[test]
fn dynamic_concurrency_stops_at_the_maximum_and_json_reports_every_step() {
    let repo = repo();
    let server = Serve::start(repo.path(), &[], &[]);
    let url = format!("127.0.0.1:{}", server.port);
    let out = perf(&[
        "-m", "fixed", "-u", &url, "-d", "-l", "10000", "-c", "2", "-p", "200", "-r", "3", "-s",
        "90", "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let steps = doc["steps"].as_array().unwrap();
    let cs: Vec<u64> = steps
        .iter()
        .map(|s| s["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(cs, [1, 2]);
    for s in steps {
        assert_eq!(s["failed_count"], 0);
        assert!(s["request_count"].as_u64().unwrap() > 0);
        // The server's count over the same windows is close to the client's.
        let server = s["server"]["request_count"].as_u64().unwrap();
        assert!(server > 0, "{s}");
    }
}

#[test]
fn errors_are_clear() {
    let repo = repo();
    let server = Serve::start(repo.path(), &[], &[]);
    let url = format!("127.0.0.1:{}", server.port);
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();

    let out = perf(&["-m", "nope", "-u", &url, "-p", "100"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("nope"), "{}", stderr(&out));

    let out = perf(&["-m", "var", "-u", &url, "-p", "100"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--shape IN:"), "{}", stderr(&out));
    let out = perf(&[
        "-m", "var", "-u", &url, "-p", "100", "-r", "3", "-s", "90", "--shape", "IN:16",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // A request the server refuses fails the run with the server's words,
    // over both protocols (gRPC: the prepared request's bytes sent as they
    // are, the status read from the answer).
    for (protocol, port) in [("http", server.port), ("grpc", server.grpc_port)] {
        let url = format!("127.0.0.1:{port}");
        let out = perf(&[
            "-m", "fixed", "-u", &url, "-i", protocol, "-b", "16", "-p", "100",
        ]);
        assert_eq!(out.status.code(), Some(1), "{protocol}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("inference request batch-size must be <= 8 for 'fixed'"),
            "{protocol}: {}",
            stderr(&out)
        );
    }

    let out = perf(&["-m", "fixed", "-u", "127.0.0.1:1", "-p", "100"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot reach a server at 127.0.0.1:1"),
        "{}",
        stderr(&out)
    );

    let out = perf(&["-m", "fixed", "-u", &url, "-d", "-p", "100"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("needs -l"), "{}", stderr(&out));

    let out = perf(&[
        "-m",
        "fixed",
        "-u",
        &url,
        "--concurrency-range",
        "8:4",
        "-p",
        "100",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--concurrency-range ends (4) below where it starts (8)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn system_shared_memory_runs_and_leaves_no_region_behind() {
    let repo = repo();
    let server = Serve::start(repo.path(), &["--allow-client-shm"], &[]);
    for (protocol, port) in [("http", server.port), ("grpc", server.grpc_port)] {
        let url = format!("127.0.0.1:{port}");
        let out = perf(&[
            "-m",
            "fixed",
            "-u",
            &url,
            "-i",
            protocol,
            "--shared-memory",
            "system",
            "-p",
            "200",
            "-r",
            "3",
            "-s",
            "90",
            "--json",
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(doc["steps"][0]["request_count"].as_u64().unwrap() > 0);
        assert_eq!(doc["steps"][0]["failed_count"], 0);
    }
    let (_, body) = server.get("/v2/systemsharedmemory/status");
    assert_eq!(body.trim(), "[]", "{body}");
    let pid_prefix = "trtis_perf_";
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(pid_prefix))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // Without --allow-client-shm on the server, the run fails clearly.
    let plain = Serve::start(repo.path(), &[], &[]);
    let url = format!("127.0.0.1:{}", plain.port);
    let out = perf(&[
        "-m",
        "fixed",
        "-u",
        &url,
        "--shared-memory",
        "system",
        "-p",
        "100",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--allow-client-shm"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
