//! The built `trtis` binary, run as a user runs it.

use crate::util::{fixtures, stdout, trtis};

#[test]
fn validate_config_reports_findings_and_exits_1() {
    let root = fixtures().join("repos");
    let out = trtis(&root, &["validate-config", "mixed"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(
        stdout(&out),
        "mixed/bad/config.pbtxt:6:30: error: dynamic_batching.preferred_batch_size[1]: \
         dynamic batching preferred size must be <= max batch size for bad\n\
         mixed/bad/config.pbtxt:8:20: warning: instance_group[0].kind: instance group bad_0 of model bad \
         has kind KIND_GPU but no GPUs are available\n\
         FAILED: 3 models checked, 1 error, 1 warning\n"
    );
}

#[test]
fn validate_config_on_a_model_dir_and_a_file() {
    let root = fixtures().join("repos");
    // The ensemble finds its step model beside it.
    let out = trtis(&root, &["validate-config", "mixed/pipeline"]);
    assert_eq!(stdout(&out), "OK: 1 model checked, 0 errors, 0 warnings\n");
    assert_eq!(out.status.code(), Some(0));

    let out = trtis(
        &root.join("mixed/good"),
        &["validate-config", "config.pbtxt"],
    );
    assert_eq!(stdout(&out), "OK: 1 model checked, 0 errors, 0 warnings\n");

    let out = trtis(&root.join("mixed/good"), &["validate-config"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the current directory is the default"
    );
}

#[test]
fn validate_config_deny_warnings_and_json() {
    let root = fixtures().join("repos");
    let out = trtis(&root, &["validate-config", "--format", "json", "mixed"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["errors"], 1);
    assert_eq!(doc["warnings"], 1);
    assert_eq!(
        doc["models"],
        serde_json::json!(["bad", "good", "pipeline"])
    );
    let first = &doc["findings"][0];
    assert_eq!(first["model"], "bad");
    assert_eq!(first["file"], "mixed/bad/config.pbtxt");
    assert_eq!(first["line"], 6);
    assert_eq!(first["column"], 30);
    assert_eq!(first["severity"], "error");
    assert_eq!(first["field"], "dynamic_batching.preferred_batch_size[1]");

    let out = trtis(
        &root,
        &[
            "validate-config",
            "--deny-warnings",
            "mixed/good",
            "mixed/pipeline",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn validate_config_usage_and_io_errors_exit_2() {
    let root = fixtures().join("repos");
    let out = trtis(&root, &["validate-config", "does/not/exist"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does/not/exist"));

    let out = trtis(&root, &["validate-config", "--format", "yaml", "mixed"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_example_repository_validates() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let out = trtis(&examples, &["validate-config", "model_repository"]);
    assert_eq!(
        stdout(&out),
        "OK: 19 models checked, 0 errors, 0 warnings\n"
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn help_lists_the_subcommands() {
    let out = trtis(&fixtures(), &["--help"]);
    let help = stdout(&out);
    assert!(help.contains("validate-config"));
    assert!(help.contains("serve"));
    assert!(help.contains("  perf "), "{help}");
}

#[test]
fn gen_config_output_validates_and_round_trips() {
    if trtis::core::backend::onnx::find_library().is_err() {
        assert!(
            std::env::var_os("TRTIS_REQUIRE_PYTHON").is_none(),
            "ONNX Runtime not found: run scripts/setup.sh"
        );
        return;
    }
    let repo = tempfile::tempdir().unwrap();
    let model = repo.path().join("simple");
    std::fs::create_dir_all(model.join("1")).unwrap();
    let examples =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/model_repository");
    std::fs::copy(
        examples.join("simple/1/model.onnx"),
        model.join("1/model.onnx"),
    )
    .unwrap();
    let out = trtis(
        repo.path(),
        &["gen-config", "simple/1/model.onnx", "--instance-count", "2"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    assert!(text.contains("name: \"simple\""), "{text}");
    assert!(text.contains("max_batch_size: 4"), "{text}");
    std::fs::write(model.join("config.pbtxt"), &text).unwrap();
    let out = trtis(repo.path(), &["validate-config", "."]);
    assert_eq!(stdout(&out), "OK: 1 model checked, 0 errors, 0 warnings\n");

    let out = trtis(
        repo.path(),
        &["gen-config", "simple/1/model.onnx", "--max-batch-size", "0"],
    );
    let text = stdout(&out);
    assert!(text.contains("dims: [-1, 16]"), "{text}");
    assert!(!text.contains("dynamic_batching"), "{text}");

    let out = trtis(repo.path(), &["gen-config", "missing.onnx"]);
    assert_eq!(out.status.code(), Some(1));
}

/// `gen-config` on a TorchScript fixture: status, stdout, stderr.
fn gen_config_pt(dir: &std::path::Path, file: &str) -> (Option<i32>, String, String) {
    let model = fixtures().join("pytorch").join(file);
    let out = trtis(dir, &["gen-config", model.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), stdout(&out), stderr)
}

/// The config `gen-config` printed without its leading comment lines.
fn without_comments(text: &str) -> String {
    let header = text.lines().take_while(|l| l.starts_with('#')).count();
    text.lines().skip(header).collect::<Vec<_>>().join("\n")
}

#[test]
fn gen_config_names_a_torchscript_modules_inputs_and_outputs() {
    let repo = tempfile::tempdir().unwrap();
    let (code, text, stderr) = gen_config_pt(repo.path(), "add_sub.pt");
    assert_eq!(code, Some(0), "{stderr}");
    // The comment header says what TorchScript does not record.
    let header: Vec<&str> = text.lines().take_while(|l| l.starts_with('#')).collect();
    let header = header.join("\n");
    assert!(
        header.contains("forward(INPUT0: Tensor, INPUT1: Tensor) -> Tuple[Tensor, Tensor]"),
        "{text}"
    );
    assert!(header.contains("data types or shapes"), "{text}");
    assert!(header.contains("placeholder"), "{text}");
    assert!(header.contains("batch"), "{text}");
    assert!(stderr.starts_with("warning: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let config = without_comments(&text);
    assert!(config.contains("name: \"add_sub\""), "{text}");
    assert!(config.contains("platform: \"pytorch_libtorch\""), "{text}");
    assert!(config.contains("backend: \"pytorch\""), "{text}");
    assert!(
        !config.contains("max_batch_size"),
        "0 is the default: {text}"
    );
    assert!(!config.contains("dynamic_batching"), "{text}");
    for name in ["INPUT0", "INPUT1", "OUTPUT__0", "OUTPUT__1"] {
        assert!(config.contains(&format!("name: \"{name}\"")), "{text}");
    }
    assert!(!config.contains("OUTPUT__2"), "{text}");
    assert_eq!(config.matches("data_type: TYPE_FP32").count(), 4, "{text}");
    assert_eq!(config.matches("dims: [-1]").count(), 4, "{text}");

    // Saved beside the model, it validates.
    let model = repo.path().join("add_sub");
    std::fs::create_dir_all(model.join("1")).unwrap();
    std::fs::copy(
        fixtures().join("pytorch/add_sub.pt"),
        model.join("1/model.pt"),
    )
    .unwrap();
    std::fs::write(model.join("config.pbtxt"), &text).unwrap();
    let out = trtis(repo.path(), &["validate-config", "."]);
    let report = stdout(&out);
    assert_eq!(report, "OK: 1 model checked, 0 errors, 0 warnings\n");
    assert_eq!(out.status.code(), Some(0));

    // The flags work as for ONNX.
    let out = trtis(
        repo.path(),
        &[
            "gen-config",
            "add_sub/1/model.pt",
            "--name",
            "renamed",
            "--max-batch-size",
            "8",
            "--instance-count",
            "2",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(text.contains("name: \"renamed\""), "{text}");
    assert!(text.contains("max_batch_size: 8"), "{text}");
    assert!(text.contains("dynamic_batching {"), "{text}");
    assert!(text.contains("count: 2"), "{text}");
    let out = trtis(
        repo.path(),
        &[
            "gen-config",
            "add_sub/1/model.pt",
            "--max-batch-size",
            "8",
            "--dynamic-batching=false",
        ],
    );
    assert!(!stdout(&out).contains("dynamic_batching"));
}

#[test]
fn gen_config_on_string_and_dict_modules() {
    let dir = tempfile::tempdir().unwrap();
    let (code, text, stderr) = gen_config_pt(dir.path(), "strings.pt");
    assert_eq!(code, Some(0), "{stderr}");
    let text = without_comments(&text);
    assert!(text.contains("name: \"x\""), "{text}");
    assert_eq!(text.matches("data_type: TYPE_STRING").count(), 2, "{text}");
    assert!(!text.contains("TYPE_FP32"), "{text}");

    let (code, text, stderr) = gen_config_pt(dir.path(), "string_len.pt");
    assert_eq!(code, Some(0), "{stderr}");
    let text = without_comments(&text);
    assert_eq!(text.matches("data_type: TYPE_STRING").count(), 1, "{text}");
    assert_eq!(text.matches("data_type: TYPE_FP32").count(), 1, "{text}");

    // Batched, a List[str] is [1] reshaped to [] (Triton's one-dimension
    // rule), and the config validates.
    let model = dir.path().join("repo/strings");
    std::fs::create_dir_all(model.join("1")).unwrap();
    std::fs::copy(
        fixtures().join("pytorch/strings.pt"),
        model.join("1/model.pt"),
    )
    .unwrap();
    let out = trtis(
        dir.path(),
        &[
            "gen-config",
            "repo/strings/1/model.pt",
            "--max-batch-size",
            "4",
        ],
    );
    let text = stdout(&out);
    assert_eq!(text.matches("reshape {}").count(), 2, "{text}");
    std::fs::write(model.join("config.pbtxt"), &text).unwrap();
    let out = trtis(dir.path(), &["validate-config", "repo"]);
    assert_eq!(stdout(&out), "OK: 1 model checked, 0 errors, 0 warnings\n");

    // A Dict[str, Tensor]'s keys are not in the module: no inputs.
    let (code, text, stderr) = gen_config_pt(dir.path(), "dict_in.pt");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!text.contains("input ["), "{text}");
    assert!(text.contains("name: \"OUTPUT__0\""), "{text}");
    assert!(stderr.contains("Dict[str, Tensor]"), "{stderr}");
    assert!(stderr.contains("no inputs"), "{stderr}");
    assert!(
        text.lines()
            .take_while(|l| l.starts_with('#'))
            .any(|l| l.contains("Dict[str, Tensor]")),
        "{text}"
    );

    // A List[Tensor]'s length is not either: one output, said so.
    let (code, text, stderr) = gen_config_pt(dir.path(), "list_out.pt");
    assert_eq!(code, Some(0), "{stderr}");
    let text = without_comments(&text);
    assert!(text.contains("name: \"OUTPUT__0\""), "{text}");
    assert!(!text.contains("OUTPUT__1"), "{text}");
    assert!(stderr.contains("List[Tensor]"), "{stderr}");
}

#[test]
fn gen_config_refuses_other_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("model.pt"), "not a zip").unwrap();
    std::fs::write(dir.path().join("model.txt"), "").unwrap();
    let out = trtis(dir.path(), &["gen-config", "model.pt"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("model.pt: not a TorchScript archive"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    let out = trtis(dir.path(), &["gen-config", "model.txt"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(".onnx") && stderr.contains(".pt"),
        "{stderr}"
    );
}

/// Piped into a reader that stops early (`trtis ... | head -1`), a command
/// ends quietly by SIGPIPE, as Unix tools do: no panic on the closed pipe.
#[test]
fn a_closed_output_pipe_ends_a_command_quietly() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_trtis"))
        .current_dir(fixtures())
        // About 200 KB of findings: more than a pipe holds, so the command
        // is still writing when the reader goes.
        .arg("validate-config")
        .args(["config_cases"; 8])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}");
}
