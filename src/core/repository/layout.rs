//! The on-disk shape of a Triton model repository:
//! `<repo>/<model>/config.pbtxt` and `<repo>/<model>/<version>/<files>`, and
//! which versions a version policy selects.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::core::config::pb::{model_version_policy::PolicyChoice, ModelVersionPolicy};

/// The configuration file of a model directory.
pub const CONFIG_FILE: &str = "config.pbtxt";

/// Subdirectories of a model directory that are not versions.
pub const NON_VERSION_DIRS: &[&str] = &["warmup", "initial_state", "configs"];

/// What a model directory holds.
#[derive(Debug, Clone)]
pub struct ModelDir {
    /// The directory name: the model's name in the repository.
    pub name: String,
    pub path: PathBuf,
    /// The config file it loads from: `configs/<--model-config-name>.pbtxt`
    /// when that flag is given and the file is there, else `config.pbtxt`,
    /// as Triton picks it.
    pub config_file: PathBuf,
    /// Numeric version directories.
    pub versions: BTreeMap<i64, PathBuf>,
    /// Subdirectories ignored as versions, with Triton's reason.
    pub ignored: Vec<String>,
}

/// The model directory's `configs/<config_name>.pbtxt` (`config_name` is
/// `--model-config-name`), when that flag is given and the file is there.
fn custom_config(dir: &Path, config_name: Option<&str>) -> Option<PathBuf> {
    let name = config_name?;
    Some(dir.join("configs").join(format!("{name}.pbtxt"))).filter(|p| p.is_file())
}

impl ModelDir {
    /// The model's config file ([`ModelDir::config_file`]).
    pub fn config_path(&self) -> PathBuf {
        self.config_file.clone()
    }

    /// Names in the first version directory in Triton's (lexical) order,
    /// which is where the backend is guessed from.
    pub fn first_version_entries(&self) -> Vec<String> {
        let first = self
            .versions
            .iter()
            .min_by_key(|(v, _)| v.to_string())
            .map(|(_, p)| p);
        first
            .map(|p| list_names(p).unwrap_or_default())
            .unwrap_or_default()
    }
}

/// Reads a model directory's version subdirectories; its config file is
/// `configs/<config_name>.pbtxt` where it has one (`--model-config-name`).
pub fn scan_model_dir(path: &Path, config_name: Option<&str>) -> io::Result<ModelDir> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string_lossy().into_owned());
    let mut versions = BTreeMap::new();
    let mut ignored = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        if !entry.file_type()?.is_dir() && !entry.path().is_dir() {
            continue;
        }
        let sub = entry.file_name().to_string_lossy().into_owned();
        if NON_VERSION_DIRS.contains(&sub.as_str()) || sub.starts_with('.') {
            continue;
        }
        if sub.len() > 1 && sub.starts_with('0') {
            ignored.push(format!(
                "ignore version directory '{sub}' which contains leading zeros in its directory name"
            ));
        } else if let Some(v) = sub
            .parse::<i64>()
            .ok()
            .filter(|_| sub.bytes().all(|b| b.is_ascii_digit()))
        {
            versions.insert(v, entry.path());
        } else {
            ignored.push(format!(
                "ignore version directory '{sub}' which fails to convert to integral number"
            ));
        }
    }
    ignored.sort();
    Ok(ModelDir {
        name,
        path: path.to_path_buf(),
        config_file: custom_config(path, config_name).unwrap_or_else(|| path.join(CONFIG_FILE)),
        versions,
        ignored,
    })
}

/// The model directories of a repository: its subdirectories, sorted,
/// hidden ones skipped.
pub fn list_model_dirs(repo: &Path) -> io::Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(repo)? {
        let entry = entry?;
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if !hidden && entry.path().is_dir() {
            dirs.push(entry.path());
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// Whether `dir` looks like a model directory rather than a repository: it
/// has a `config.pbtxt` (or `configs/<config_name>.pbtxt`) or a numeric
/// version subdirectory.
pub fn is_model_dir(dir: &Path, config_name: Option<&str>) -> bool {
    dir.join(CONFIG_FILE).is_file()
        || custom_config(dir, config_name).is_some()
        || scan_model_dir(dir, config_name).is_ok_and(|m| !m.versions.is_empty())
}

/// Sorted file and directory names in `dir`.
pub fn list_names(dir: &Path) -> io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

/// The versions a policy selects from those available, and the versions a
/// `specific` policy names that have no directory.
pub fn versions_to_load(
    policy: Option<&ModelVersionPolicy>,
    available: &BTreeMap<i64, PathBuf>,
) -> (Vec<i64>, Vec<i64>) {
    match policy.and_then(|p| p.policy_choice.as_ref()) {
        Some(PolicyChoice::All(_)) => (available.keys().copied().collect(), Vec::new()),
        Some(PolicyChoice::Specific(s)) => {
            let mut wanted = s.versions.clone();
            wanted.sort_unstable();
            wanted.dedup();
            wanted.into_iter().partition(|v| available.contains_key(v))
        }
        Some(PolicyChoice::Latest(l)) => {
            let mut latest: Vec<i64> = available
                .keys()
                .rev()
                .take(l.num_versions as usize)
                .copied()
                .collect();
            latest.reverse();
            (latest, Vec::new())
        }
        // Normalization always sets a policy; Triton's default is latest 1.
        None => (
            available.keys().next_back().copied().into_iter().collect(),
            Vec::new(),
        ),
    }
}

/// A model name that is a plain directory name: not empty, no path
/// separator, not `.` or `..`, no NUL.
pub fn is_contained_name(name: &str) -> bool {
    !name.trim().is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && !name.contains("..")
}

pub(super) fn fingerprint(dir: &std::path::Path) -> u64 {
    fingerprint_but(dir, None)
}

/// The fingerprint of a model's files without its `config.pbtxt`.
pub(super) fn files_fingerprint(dir: &std::path::Path) -> u64 {
    fingerprint_but(dir, Some(CONFIG_FILE))
}

/// Names, sizes and times of the files under `dir` (4 levels), hashed;
/// `skip` a top-level file left out.
fn fingerprint_but(dir: &std::path::Path, skip: Option<&str>) -> u64 {
    use std::hash::{Hash, Hasher};
    fn walk(
        dir: &std::path::Path,
        h: &mut std::collections::hash_map::DefaultHasher,
        depth: usize,
        skip: Option<&str>,
    ) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            if depth == 0 && skip.is_some_and(|s| e.file_name() == s) {
                continue;
            }
            e.file_name().hash(h);
            if let Ok(meta) = e.metadata() {
                meta.len().hash(h);
                if let Ok(t) = meta.modified() {
                    t.hash(h);
                }
                if meta.is_dir() && depth < 4 {
                    walk(&e.path(), h, depth + 1, None);
                }
            }
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    walk(dir, &mut h, 0, skip);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::pb::model_version_policy::{All, Latest, Specific};

    fn available(vs: &[i64]) -> BTreeMap<i64, PathBuf> {
        vs.iter()
            .map(|&v| (v, PathBuf::from(v.to_string())))
            .collect()
    }

    fn policy(p: PolicyChoice) -> ModelVersionPolicy {
        ModelVersionPolicy {
            policy_choice: Some(p),
        }
    }

    #[test]
    fn version_policies_select_versions() {
        let av = available(&[1, 2, 3, 10]);
        let latest2 = policy(PolicyChoice::Latest(Latest { num_versions: 2 }));
        assert_eq!(versions_to_load(Some(&latest2), &av), (vec![3, 10], vec![]));
        let all = policy(PolicyChoice::All(All {}));
        assert_eq!(versions_to_load(Some(&all), &av).0, vec![1, 2, 3, 10]);
        let specific = policy(PolicyChoice::Specific(Specific {
            versions: vec![3, 1, 7],
        }));
        assert_eq!(
            versions_to_load(Some(&specific), &av),
            (vec![1, 3], vec![7])
        );
        let latest0 = policy(PolicyChoice::Latest(Latest { num_versions: 0 }));
        assert_eq!(versions_to_load(Some(&latest0), &av).0, Vec::<i64>::new());
        assert_eq!(versions_to_load(None, &av).0, vec![10]);
    }

    #[test]
    fn scan_finds_numeric_versions_and_reports_others() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("mymodel");
        for d in ["1", "2", "007", "v3", "warmup", ".git"] {
            std::fs::create_dir_all(m.join(d)).unwrap();
        }
        std::fs::write(m.join("config.pbtxt"), "").unwrap();
        std::fs::write(m.join("1/model.onnx"), "").unwrap();
        let scanned = scan_model_dir(&m, None).unwrap();
        assert_eq!(scanned.name, "mymodel");
        assert_eq!(
            scanned.versions.keys().copied().collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(scanned.ignored.len(), 2, "{:?}", scanned.ignored);
        assert_eq!(
            scanned.first_version_entries(),
            vec!["model.onnx".to_string()]
        );
        assert!(is_model_dir(&m, None));
        assert!(!is_model_dir(dir.path(), None));
    }
}
