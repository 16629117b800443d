//! Data-driven config validation cases, in the style of Triton's
//! `qa/L0_model_config`: every `tests/fixtures/config_cases/<case>/` holds a
//! `config.pbtxt` (and any files, version directories and, under `repo/`,
//! sibling models the case needs) and an `expected` file with the exact
//! finding lines, or `OK`. Adding a case is adding files.
//!
//! The case is installed in a fresh repository as the directory named by its
//! `dirname` file, else by the config's `name`, else by the case name, and
//! the whole repository is checked as `trtis validate-config` would.
//! `TRTIS_BLESS=1` rewrites the `expected` files from the actual output.

use std::path::Path;

use trtis::core::config::{parse_config, Severity};
use trtis::core::repository::{check_repository, CheckOptions};

use crate::util::{copy_tree, fixtures};

const CONTROL_FILES: &[&str] = &["expected", "dirname", "repo"];

/// The finding lines for one case, paths relative to the repository.
fn run_case(case: &Path) -> Vec<String> {
    let repo = tempfile::tempdir().unwrap();
    let case_name = case.file_name().unwrap().to_string_lossy().into_owned();
    let dirname = std::fs::read_to_string(case.join("dirname"))
        .ok()
        .map(|s| s.trim().to_string())
        .or_else(|| {
            let bytes = std::fs::read(case.join("config.pbtxt")).ok()?;
            let name = parse_config(&bytes).ok()?.config.name;
            (!name.is_empty() && !name.contains('/')).then_some(name)
        })
        .unwrap_or(case_name);
    let model = repo.path().join(&dirname);
    std::fs::create_dir_all(&model).unwrap();
    for entry in std::fs::read_dir(case).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if CONTROL_FILES.contains(&name.as_str()) {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &model.join(&name));
        } else {
            std::fs::copy(entry.path(), model.join(&name)).unwrap();
        }
    }
    if case.join("repo").is_dir() {
        copy_tree(&case.join("repo"), repo.path());
    }
    let opts = CheckOptions {
        gpus: &[],
        gpu_backends: &[],
        min_compute_capability: trtis::core::device::MIN_COMPUTE_CAPABILITY,
        config_name: None,
        missing_gpu: Severity::Warning,
        // Triton's own rules: what this server refuses is tested in
        // config_support.rs.
        server_support: false,
        model_files: false,
    };
    let models = check_repository(repo.path(), None, &opts).unwrap();
    models
        .iter()
        .flat_map(|m| &m.findings)
        .map(|f| {
            let mut f = f.clone();
            f.file = f.file.strip_prefix(repo.path()).unwrap().to_path_buf();
            f.to_string()
        })
        .collect()
}

#[test]
fn config_cases() {
    let root = fixtures().join("config_cases");
    let bless = std::env::var_os("TRTIS_BLESS").is_some();
    let mut cases: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() > 50, "the case directory is missing cases");
    let mut failures = Vec::new();
    for case in &cases {
        let actual = run_case(case);
        let actual_text = if actual.is_empty() {
            "OK\n".to_string()
        } else {
            actual.join("\n") + "\n"
        };
        let expected = std::fs::read_to_string(case.join("expected")).unwrap_or_default();
        if expected != actual_text {
            if bless {
                std::fs::write(case.join("expected"), &actual_text).unwrap();
            } else {
                failures.push(format!(
                    "{}:\n--- expected\n{expected}--- actual\n{actual_text}",
                    case.display()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Every case named after a rule fails with an error, except the ones that
/// are warnings by design; seed examples pass.
#[test]
fn rule_cases_fail_and_seed_cases_pass() {
    let root = fixtures().join("config_cases");
    for entry in std::fs::read_dir(&root).unwrap() {
        let case = entry.unwrap().path();
        if !case.is_dir() {
            continue;
        }
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let expected = std::fs::read_to_string(case.join("expected")).unwrap();
        let has_error = expected.lines().any(|l| l.contains(": error: "));
        if name.starts_with("rule") && name != "rule28_gpu_group_without_gpu" {
            assert!(has_error, "{name} should fail with an error:\n{expected}");
        }
        if name.starts_with("seed_") {
            assert!(
                !has_error,
                "seed example {name} should validate:\n{expected}"
            );
        }
    }
}

/// Rules 1 to 29 each have at least one failing case (rules 1 and 5 can only
/// fail before normalization; they are unit-tested in `config/validate/`, as
/// Triton's normalization makes them unreachable from a file).
#[test]
fn every_rule_has_a_case() {
    let root = fixtures().join("config_cases");
    let names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for rule in (2..=29).filter(|r| *r != 5 && *r != 17) {
        let prefix = format!("rule{rule:02}_");
        assert!(
            names.iter().any(|n| n.starts_with(&prefix)),
            "no case for rule {rule}"
        );
    }
}
