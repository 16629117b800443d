//! Source-tree rules that keep the architecture true (ARCHITECTURE.md):
//! every module documents itself, and the pure config layer knows nothing of
//! async runtimes, transports or backends.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src_files() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

#[test]
fn every_module_starts_with_a_doc_comment() {
    for (path, text) in src_files() {
        assert!(
            text.starts_with("//!"),
            "src/{path} must start with a //! module doc"
        );
    }
}

#[test]
fn config_and_types_stay_pure() {
    for (path, text) in src_files() {
        if path.starts_with("core/config/") || path.starts_with("core/types/") {
            for banned in [
                "tokio", "tonic", "axum", "reqwest", "ort::", "tch::", "cudarc", "std::fs",
                "std::net",
            ] {
                assert!(
                    !text.contains(banned),
                    "src/{path} uses {banned}: core::config is pure data and functions"
                );
            }
        }
        if path.starts_with("core/") {
            assert!(
                !text.contains("crate::cmd"),
                "src/{path}: core never imports cmd"
            );
            assert!(!text.contains("clap"), "src/{path}: only cmd knows clap");
        }
    }
}

#[test]
fn no_stubs_in_src() {
    for (path, text) in src_files() {
        for stub in ["todo!(", "unimplemented!("] {
            assert!(!text.contains(stub), "src/{path} contains {stub}");
        }
    }
}
