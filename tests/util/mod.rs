//! Shared helpers: the fixture directory, copying trees, running the binary;
//! the test servers (`server`: in-process `TestServer`, `trtis serve` as a
//! process `Serve`) and the HTTP client every test reaches them with (`http`).

pub mod http;
pub mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use server::{Serve, TestServer};

/// `tests/fixtures` in the source tree.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Copies the directory tree `from` into `to` (created if missing).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

/// Runs the built `trtis` binary with `args` in `dir`.
pub fn trtis(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trtis"))
        .args(args)
        .current_dir(dir)
        .env_remove("TRTIS_GPU_COUNT")
        .output()
        .expect("the trtis binary runs")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A model `name` of the repository at `repo` without a model file (an
/// `identity` model, say): version 1 and `config`.
pub fn write_model(repo: &Path, name: &str, config: &str) {
    let m = repo.join(name);
    std::fs::create_dir_all(m.join("1")).unwrap();
    std::fs::write(m.join("1/.keep"), "").unwrap();
    std::fs::write(m.join("config.pbtxt"), config).unwrap();
}

/// The executions an `identity` model's `record_inputs` file recorded:
/// per execution, input name → datatype, shape and values.
pub fn recorded(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Whether ONNX Runtime can be loaded; without it the ONNX tests are
/// skipped, except under `TRTIS_REQUIRE_PYTHON` (scripts/test.sh), where
/// its absence fails them.
pub fn onnx_available() -> bool {
    if trtis::core::backend::onnx::find_library().is_ok() {
        return true;
    }
    assert!(
        std::env::var_os("TRTIS_REQUIRE_PYTHON").is_none(),
        "ONNX Runtime not found: run scripts/setup.sh"
    );
    eprintln!("skipped: ONNX Runtime not installed (scripts/setup.sh)");
    false
}

/// Voluntary context switches (times it slept) of each thread of process
/// `pid`, by the thread's name (the kernel keeps 15 bytes of it).
pub fn thread_sleeps(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the server's threads");
    for task in tasks.flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let count = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        out.push((name.trim_end().to_string(), count));
    }
    out
}

/// How many times the threads named `name` slept between two
/// `thread_sleeps`.
pub fn slept(before: &[(String, u64)], after: &[(String, u64)], name: &str) -> u64 {
    let sum =
        |v: &[(String, u64)]| -> u64 { v.iter().filter(|(n, _)| n == name).map(|(_, c)| c).sum() };
    sum(after) - sum(before)
}
