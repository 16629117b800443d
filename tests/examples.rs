//! The example programs (`examples/*.rs`) against `trtis serve` on the
//! example model repository: their exact output over HTTP and gRPC, and a
//! clear error and a failing exit status when the server cannot be reached.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::util::{onnx_available, stdout, Serve};

/// A built example binary: `cargo test` builds examples into
/// `target/<profile>/examples/`, next to the `trtis` binary's directory.
fn example(name: &str) -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_trtis"));
    let path = bin
        .parent()
        .unwrap()
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "{} is not built: run `cargo build --examples`",
        path.display()
    );
    path
}

fn run(name: &str, args: &[&str]) -> Output {
    Command::new(example(name))
        .args(args)
        .output()
        .expect("the example runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What `simple_client` prints: Triton's 16 pairs of lines.
fn simple_client_output() -> String {
    (0..16)
        .map(|i| format!("{i} + 1 = {}\n{i} - 1 = {}\n", i + 1, i - 1))
        .collect()
}

#[test]
fn the_examples_run_against_the_example_repository() {
    if !onnx_available() {
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/model_repository");
    let server = Serve::start(&repo, &[], &[]);
    let http = format!("127.0.0.1:{}", server.port);
    let grpc = format!("127.0.0.1:{}", server.grpc_port);

    for args in [
        vec!["-u", http.as_str()],
        vec!["-u", http.as_str(), "-i", "http"],
        vec!["-u", grpc.as_str(), "-i", "grpc"],
    ] {
        let out = run("simple_client", &args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), simple_client_output(), "{args:?}");
        assert_eq!(stderr(&out), "", "{args:?}");
    }

    // The text models are served through the OpenAI-compatible API and
    // the generate extension.
    let (status, models) = server.get("/v1/models");
    assert_eq!(status, 200, "{models}");
    for name in ["text_generator", "text_embedding"] {
        assert!(models.contains(&format!(r#""id":"{name}""#)), "{models}");
    }
    let (status, answer) = server.post(
        "/v2/models/text_generator/generate",
        r#"{"text_input": "The client sends", "max_tokens": 3, "temperature": 0}"#,
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["num_output_tokens"], 3, "{answer}");

    let out = run("stream_client", &["-u", &grpc]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "response 0: OUTPUT0[0..4] = [1, 2, 3, 4]  OUTPUT1[0..4] = [-1, 0, 1, 2]\n\
         response 1: OUTPUT0[0..4] = [17, 18, 19, 20]  OUTPUT1[0..4] = [15, 16, 17, 18]\n\
         response 2: OUTPUT0[0..4] = [33, 34, 35, 36]  OUTPUT1[0..4] = [31, 32, 33, 34]\n\
         response 3: OUTPUT0[0..4] = [49, 50, 51, 52]  OUTPUT1[0..4] = [47, 48, 49, 50]\n"
    );
    let out = run("stream_client", &["-u", &grpc, "-n", "9"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 9);
    assert_eq!(
        lines[8],
        "response 8: OUTPUT0[0..4] = [129, 130, 131, 132]  OUTPUT1[0..4] = [127, 128, 129, 130]"
    );

    // The sequence client: two interleaved sequences on each stateful
    // example model, over both protocols.
    for (model, last) in [
        ("simple_sequence", "[7] 1 : -1"),
        ("simple_dyna_sequence", "[7] 1001 : 1000"),
        ("simple_accumulator", "[7] 29 : 71"),
    ] {
        for args in [
            ["-u", http.as_str(), "-i", "http"],
            ["-u", grpc.as_str(), "-i", "grpc"],
        ] {
            let mut args = args.to_vec();
            args.extend(["-m", model]);
            let out = run("sequence_client", &args);
            assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
            let text = stdout(&out);
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 9, "{args:?}: {text}");
            assert_eq!(lines[7], last, "{args:?}");
            assert_eq!(lines[8], "PASS: Sequence");
        }
    }
    // The ensemble client: pixels in, classes out, over both protocols.
    let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/images");
    let coffee = images.join("coffee.jpg");
    let rocket = images.join("rocket.jpg");
    for args in [
        ["-u", http.as_str(), "-i", "http"],
        ["-u", grpc.as_str(), "-i", "grpc"],
    ] {
        let mut args = args.to_vec();
        args.extend([
            "-c",
            "2",
            coffee.to_str().unwrap(),
            rocket.to_str().unwrap(),
        ]);
        let out = run("ensemble_client", &args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let text = stdout(&out);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].ends_with("(967) espresso"), "{text}");
        assert!(lines[2].ends_with("(657) missile"), "{text}");
    }
    let out = run("ensemble_client", &["-u", &http, "Cargo.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("error: "), "{}", stderr(&out));

    // `trtis infer` drives a sequence one request at a time; `trtis perf`
    // sends sequences to a sequence model.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("five.json"), r#"{"data":[{"INPUT":[5]}]}"#).unwrap();
    for (flags, sum) in [
        (&["--sequence-start"][..], "[5]"),
        (&[][..], "[10]"),
        (&["--sequence-end"][..], "[15]"),
    ] {
        let mut args = vec![
            "infer",
            "-u",
            &grpc,
            "-i",
            "grpc",
            "-m",
            "simple_accumulator",
            "--input-data",
            "five.json",
            "--sequence-id",
            "77",
        ];
        args.extend(flags);
        let out = crate::util::trtis(dir.path(), &args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(
            stdout(&out).ends_with(&format!("OUTPUT INT32 [1, 1]: {sum}\n")),
            "{}",
            stdout(&out)
        );
    }
    let out = crate::util::trtis(
        dir.path(),
        &[
            "infer",
            "-u",
            &http,
            "-m",
            "simple_accumulator",
            "--input-data",
            "five.json",
            "--sequence-id",
            "77",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("must specify the START flag"),
        "{}",
        stderr(&out)
    );
    let out = crate::util::trtis(
        dir.path(),
        &[
            "perf",
            "-u",
            &grpc,
            "-i",
            "grpc",
            "-m",
            "simple_accumulator",
            "-t",
            "4",
            "-p",
            "300",
            "--sequence-length",
            "5",
            "-f",
            "perf.csv",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let csv = std::fs::read_to_string(dir.path().join("perf.csv")).unwrap();
    assert_eq!(csv.lines().count(), 2, "{csv}");
    // Request-rate mode: requests spread over --num-of-sequences sequences.
    let out = crate::util::trtis(
        dir.path(),
        &[
            "perf",
            "-u",
            &http,
            "-m",
            "simple_accumulator",
            "--request-rate-range",
            "200",
            "-p",
            "300",
            "--num-of-sequences",
            "3",
            "--sequence-length",
            "4",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("Request Rate: 200, throughput"),
        "{}",
        stdout(&out)
    );
    // (A failed request would make trtis perf exit 1.)

    let out = run("sequence_client", &["-u", &http, "-m", "simple"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("error: "), "{}", stderr(&out));

    // A server error is reported, not a panic.
    let out = run("simple_client", &["-u", &http, "-m", "nosuch"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).starts_with(&format!(
            "error: inference on 'nosuch' at {http} failed: HTTP 404: "
        )),
        "{}",
        stderr(&out)
    );
    let out = run("stream_client", &["-u", &grpc, "-m", "nosuch"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("error: response 0: ") && stderr(&out).contains("nosuch"),
        "{}",
        stderr(&out)
    );

    server.interrupt();
    assert_eq!(server.wait(Duration::from_secs(10)), Some(0));
}

#[test]
fn the_examples_fail_clearly_without_a_server() {
    for (name, args) in [
        ("simple_client", &["-u", "127.0.0.1:1"][..]),
        ("simple_client", &["-u", "127.0.0.1:1", "-i", "grpc"][..]),
        ("stream_client", &["-u", "127.0.0.1:1"][..]),
        ("sequence_client", &["-u", "127.0.0.1:1"][..]),
        (
            "ensemble_client",
            &["-u", "127.0.0.1:1", "examples/images/coffee.jpg"][..],
        ),
    ] {
        let out = run(name, args);
        assert_eq!(out.status.code(), Some(1), "{name} {args:?}");
        assert_eq!(stdout(&out), "", "{name} {args:?}");
        let err = stderr(&out);
        assert!(
            err.starts_with("error: cannot reach the server at 127.0.0.1:1: "),
            "{name} {args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{name} {args:?}: {err}");
    }
}
