//! Every `tritonserver` flag given to `trtis serve`, as a Triton user moving
//! a deployment over would: `tests/fixtures/triton-flags.tsv` (Triton
//! 2.71's list) walked row by row against the real binary. A row's flag
//! must never be clap's "unexpected argument"; it is honoured (the server
//! starts and serves), noted (starts, and logs a line naming the flag) or
//! refused at start with its reason, as the row says. Plus Triton's
//! spellings: `--flag=value` and `--flag value`, unambiguous prefixes,
//! repeated scalar flags (the last wins).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One row of the flag list.
struct Row {
    flag: String,
    value: Option<String>,
    outcome: String,
    text: Option<String>,
}

fn rows() -> Vec<Row> {
    let path = super::util::fixtures().join("triton-flags.tsv");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 4, "a row has 4 columns: {l:?}");
            let opt = |s: &str| (s != "-").then(|| s.to_string());
            Row {
                flag: cols[0].to_string(),
                value: opt(cols[1]),
                outcome: cols[2].to_string(),
                text: opt(cols[3]),
            }
        })
        .collect()
}

fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// N free ports, distinct from every other this test binary takes: drawn
/// in turn from below Linux's ephemeral range (32768-60999), so neither
/// another row's server nor a client connection's source port can take
/// one between here and the server's bind.
fn free_ports<const N: usize>() -> [u16; N] {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = 20_000 + (std::process::id() % 500) * 20;
    let mut ports = [0u16; N];
    let mut found = 0;
    while found < N {
        let port = (start + NEXT.fetch_add(1, Ordering::SeqCst) % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            ports[found] = port;
            found += 1;
        }
    }
    ports
}

/// What one `trtis serve` run did: whether it came up (a listener
/// answered), its exit code, and everything it printed.
struct Run {
    started: bool,
    code: Option<i32>,
    output: String,
}

/// Runs `trtis serve --model-store <repo> <base ports> <args>`; stops it
/// with SIGTERM once a listener answers.
fn serve(repo: &Path, tmp: &Path, args: &[String]) -> Run {
    let ports = free_ports::<3>();
    let fill = |s: &str| {
        s.replace("{repo}", &repo.display().to_string())
            .replace("{tmp}", &tmp.display().to_string())
            .replace("{http_port}", &ports[0].to_string())
            .replace("{grpc_port}", &ports[1].to_string())
            .replace("{metrics_port}", &ports[2].to_string())
    };
    let out_path = tmp.join(format!("out-{}.txt", ports[0]));
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_trtis"))
        .arg("serve")
        .arg("--model-store")
        .arg(repo)
        .args(["--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1"])
        .args(["--http-port", &ports[0].to_string()])
        .args(["--grpc-port", &ports[1].to_string()])
        .args(["--metrics-port", &ports[2].to_string()])
        .args(args.iter().map(|a| fill(a)))
        .env("TRTIS_GPUS", "none")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut started = false;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if !started
            && ports.iter().any(|&p| {
                TcpStream::connect_timeout(
                    &SocketAddr::from(([127, 0, 0, 1], p)),
                    Duration::from_millis(100),
                )
                .is_ok()
            })
        {
            started = true;
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().unwrap().code();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut output = std::fs::read_to_string(&out_path).unwrap_or_default();
    if let Ok(log) = std::fs::read_to_string(tmp.join("server.log")) {
        output.push_str(&log);
    }
    Run {
        started,
        code,
        output,
    }
}

/// The row's arguments, `--flag=value` on even rows and `--flag value` on
/// odd ones (both are Triton's spellings).
fn row_args(i: usize, row: &Row) -> Vec<String> {
    match &row.value {
        None => vec![row.flag.clone()],
        Some(v) if i % 2 == 0 => vec![format!("{}={v}", row.flag)],
        Some(v) => vec![row.flag.clone(), v.clone()],
    }
}

/// Why the row's run is not what the row says, if it is not.
fn check_row(i: usize, row: &Row) -> Option<String> {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("models");
    // One model, so that a repository named twice (--model-repository
    // beside the base --model-store) must count once, as Triton's set does.
    super::util::write_model(
        &repo,
        "simple",
        r#"name: "simple" backend: "identity" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]"#,
    );
    let args = row_args(i, row);
    let run = if row.outcome == "help" {
        let out = Command::new(env!("CARGO_BIN_EXE_trtis"))
            .arg("serve")
            .args(&args)
            .output()
            .unwrap();
        Run {
            started: false,
            code: out.status.code(),
            output: String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        }
    } else {
        serve(&repo, tmp.path(), &args)
    };
    // (Whether a listener answered: a flake's first clue.)
    let what = format!(
        "{args:?}: {} -> {:?} (a listener answered: {})\n{}",
        row.outcome, run.code, run.started, run.output
    );
    if run.output.contains("unexpected argument") {
        return Some(format!("clap does not know it: {what}"));
    }
    let holds = row
        .text
        .as_ref()
        .is_none_or(|t| run.output.contains(t.as_str()));
    let ok = match row.outcome.as_str() {
        "help" => run.code == Some(0) && run.output.contains("--model-repository"),
        "serve" => run.started && run.code == Some(0) && holds,
        "note" => {
            run.started
                && run.code == Some(0)
                && holds
                && run.output.lines().any(|l| {
                    l.starts_with('I') && row.text.as_ref().is_some_and(|t| l.contains(t.as_str()))
                })
        }
        "refuse" => !run.started && run.code == Some(2) && holds,
        other => return Some(format!("unknown outcome {other}")),
    };
    (!ok).then_some(what)
}

#[test]
fn every_triton_flag_is_answered_as_the_list_says() {
    let rows = rows();
    let flags: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.flag.as_str()).collect();
    // Triton 2.71's 91 names (its alias --model-store among them).
    assert_eq!(flags.len(), 91, "the list has every flag once at least");
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(row) = rows.get(i) else { break };
                if let Some(why) = check_row(i, row) {
                    failures.lock().unwrap().push(why);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} rows differ:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n---\n")
    );
}

#[test]
fn prefixes_and_repeats_as_triton_takes_them() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("models");
    std::fs::create_dir_all(&repo).unwrap();
    // An unambiguous prefix is the flag; a repeated scalar flag's last
    // value wins (here the id the server reports).
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_trtis"))
        .args(["serve", "--model-repo"])
        .arg(&repo)
        .args(["--http-addr", "127.0.0.1", "--allow-grpc", "false"])
        .args(["--allow-metr=0", "--id=first", "--id", "second"])
        .args(["--http-port", "1", "--http-port", &port.to_string()])
        .env("TRTIS_GPUS", "none")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            let (status, body) = super::util::http::get(addr, "/v2");
            assert_eq!(status, 200, "{body}");
            break body;
        }
        assert!(Instant::now() < deadline, "the server did not come up");
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    let meta: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(meta["name"], "second");

    // An ambiguous prefix is refused, naming the flags it could be.
    let out = super::util::trtis(
        tmp.path(),
        &["serve", "--model-store", "m", "--trace-l", "1"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
}
