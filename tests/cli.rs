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
    assert_eq!(stdout(&out), "OK: 9 models checked, 0 errors, 0 warnings\n");
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
