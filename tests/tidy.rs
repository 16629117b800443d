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
        if path.starts_with("core/config/")
            || path == "core/types.rs"
            || path.starts_with("core/types/")
        {
            for banned in [
                "tokio", "tonic", "axum", "reqwest", "ort::", "tch::", "cudarc", "std::fs",
                "std::net",
            ] {
                assert!(
                    !names(&text, banned),
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

/// Who may use whom inside `core` (ARCHITECTURE.md, "Layers"): each module
/// and the modules it may name. Anything may use `error`, `types` and the
/// generated config schema `config::pb`; a module may use itself.
const LAYERS: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("types", &[]),
    ("config", &[]),
    ("metrics", &["config", "logging"]),
    ("device", &[]),
    ("logging", &[]),
    ("batch_io", &["config"]),
    ("request", &["config"]),
    ("classify", &[]),
    ("cache", &[]),
    ("responder", &[]),
    ("openai", &["config", "fsutil"]),
    (
        "backend",
        &[
            "config",
            "batch_io",
            "metrics",
            "device",
            "responder",
            "fsutil",
            "logging",
        ],
    ),
    ("rate_limit", &[]),
    ("fsutil", &[]),
    (
        "instance",
        &["backend", "responder", "rate_limit", "logging"],
    ),
    (
        "scheduler",
        &[
            "config",
            "batch_io",
            "instance",
            "responder",
            "metrics",
            "logging",
        ],
    ),
    (
        "warmup",
        &[
            "config",
            "batch_io",
            "request",
            "backend",
            "instance",
            "responder",
            "scheduler",
            "fsutil",
            "logging",
        ],
    ),
    (
        "repository",
        &[
            "config",
            "batch_io",
            "device",
            "backend",
            "instance",
            "scheduler",
            "warmup",
            "metrics",
            "rate_limit",
            "openai",
            "fsutil",
            "logging",
        ],
    ),
    ("shm", &["device", "logging"]),
    ("remote", &["fsutil", "logging"]),
    ("trace", &["logging"]),
    (
        "engine",
        &[
            "config",
            "batch_io",
            "request",
            "classify",
            "cache",
            "rate_limit",
            "device",
            "backend",
            "instance",
            "responder",
            "scheduler",
            "repository",
            "metrics",
            "remote",
            "shm",
            "trace",
            "logging",
        ],
    ),
];

/// The `core` modules a source file names (`crate::core::<m>`, and each
/// path of a `crate::core::{<m>::…, <n>}` group), with `config::pb` apart
/// from the rest of `config`.
fn core_modules_named(text: &str) -> std::collections::BTreeSet<String> {
    let mut named = std::collections::BTreeSet::new();
    let mut note = |path: &str| {
        let path = path.trim();
        let module = path.split("::").next().unwrap_or("").trim();
        if path.starts_with("config::pb") {
            named.insert("config::pb".to_string());
        } else if !module.is_empty() && module != "self" {
            named.insert(module.to_string());
        }
    };
    let mut rest = text;
    while let Some(at) = rest.find("crate::core::") {
        rest = &rest[at + "crate::core::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The group's top-level paths: split at commas outside braces.
            let (mut depth, mut from) = (0usize, 0usize);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        note(&group[from..i]);
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        note(&group[from..i]);
                        from = i + 1;
                    }
                    _ => {}
                }
            }
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        note(&rest[..end]);
    }
    named
}

#[test]
fn core_layers_are_one_way() {
    let table: std::collections::BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut seen = std::collections::BTreeSet::new();
    for (path, text) in src_files() {
        let Some(inside) = path.strip_prefix("core/") else {
            continue;
        };
        let module = inside
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_string();
        if module == "mod" {
            continue; // core/mod.rs declares the modules
        }
        let allowed = table.get(module.as_str()).unwrap_or_else(|| {
            panic!("src/{path}: core::{module} is not in the LAYERS table (tests/tidy.rs, ARCHITECTURE.md)")
        });
        seen.insert(module.clone());
        for used in core_modules_named(&text) {
            let ok = used == module
                || used == "error"
                || used == "types"
                || used == "config::pb"
                || allowed.contains(&used.as_str());
            assert!(
                ok,
                "src/{path}: core::{module} may not use core::{used} (the layers in ARCHITECTURE.md run one way)"
            );
        }
        for banned in ["crate::client", "crate::perf", "crate::server"] {
            assert!(
                !text.contains(banned),
                "src/{path}: core never uses {banned}"
            );
        }
    }
    for (module, _) in LAYERS {
        assert!(
            seen.contains(*module),
            "LAYERS names core::{module}, which does not exist"
        );
    }
}

#[test]
fn the_wire_formats_know_no_listener() {
    // `server::protocol` is shared with the client: it may use the engine's
    // types, never the frontends or the Prometheus renderer above it.
    for (path, text) in src_files() {
        if path.starts_with("server/protocol/") {
            for banned in ["crate::server::frontend", "crate::server::prometheus"] {
                assert!(
                    !text.contains(banned),
                    "src/{path}: server::protocol never uses {banned}"
                );
            }
        }
    }
}

/// Whether `text` names `name` as a path or word of its own (not as the end
/// of a longer identifier: `support::` does not name `ort::`).
fn names(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(at, _)| {
        !text[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[test]
fn only_the_backends_link_native_libraries() {
    for (path, text) in src_files() {
        // libtorch only through the PyTorch backend library (backends/torch),
        // which the server loads at run time; the CUDA driver (cudarc) also
        // in core::device, which finds the GPUs and opens CUDA IPC memory.
        let in_backend = path.starts_with("core/backend/");
        let in_device = path == "core/device.rs" || path.starts_with("core/device/");
        for lib in ["ort::", "tch::", "torch_sys::", "cudarc::", "libloading::"] {
            if in_backend && !matches!(lib, "tch::" | "torch_sys::") {
                continue;
            }
            if in_device && lib == "cudarc::" {
                continue;
            }
            assert!(
                !names(&text, lib),
                "src/{path} names {lib}: only core::backend links it (libtorch only backends/torch, the CUDA driver also core::device)"
            );
        }
    }
}

/// A file's module path from the crate root (`core/a/b.rs` → core, a, b;
/// `core/a/mod.rs` → core, a; `lib.rs`, `main.rs` → the root).
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file without its comments and its trailing tests
/// (`#[cfg(test)]` onwards, where `super` means the file itself).
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths (from the crate root) a file at module path `at`
/// names: `crate::a::b`, `super::…` (any number), and each item of a
/// `{…}` group after either.
fn paths_named(at: &[String], code: &str) -> Vec<Vec<String>> {
    let is_path = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let starts = rest.starts_with("crate::") || rest.starts_with("super::");
        let boundary = i == 0 || !is_path(bytes[i - 1] as char);
        if !(starts && boundary) {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let end = rest.find(|c: char| !is_path(c)).unwrap_or(rest.len());
        let path = &rest[..end];
        let mut items: Vec<String> = Vec::new();
        if path.ends_with("::") && rest[end..].starts_with('{') {
            // A group: its items, each up to its first non-path character.
            let mut depth = 0;
            let mut close = end;
            for (k, c) in rest[end..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            close = end + k;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            for item in rest[end + 1..close].split(',') {
                let item = item.trim();
                let item_end = item.find(|c: char| !is_path(c)).unwrap_or(item.len());
                items.push(format!("{path}{}", &item[..item_end]));
            }
        } else {
            items.push(path.to_string());
        }
        for item in items {
            let segs: Vec<&str> = item.split("::").filter(|s| !s.is_empty()).collect();
            let resolved: Option<Vec<String>> = if segs.first() == Some(&"crate") {
                Some(segs[1..].iter().map(|s| s.to_string()).collect())
            } else {
                let ups = segs.iter().take_while(|s| **s == "super").count();
                (ups <= at.len()).then(|| {
                    let mut p: Vec<String> = at[..at.len() - ups].to_vec();
                    p.extend(segs[ups..].iter().map(|s| s.to_string()));
                    p
                })
            };
            if let Some(p) = resolved {
                out.push(p);
            }
        }
        i += end.max(1);
    }
    out
}

/// Files of one folder do not use each other in a circle: for each
/// folder, the graph of its children (files and subfolders) by what each
/// names of the others has no cycle. (A folder's mod.rs is the parent, not
/// one of them.)
#[test]
fn files_of_a_folder_use_each_other_one_way() {
    use std::collections::{BTreeMap, BTreeSet};
    let files = src_files();
    // folder → child → the children of the same folder it names.
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut children: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    for (rel, _) in &files {
        let m = module_path(rel);
        for k in 0..m.len() {
            children
                .entry(m[..k].to_vec())
                .or_default()
                .insert(m[k].clone());
        }
    }
    for (rel, text) in &files {
        let at = module_path(rel);
        for named in paths_named(&at, &code_of(text)) {
            // The deepest folder both lie in, and the child of it on each side.
            let common = at.iter().zip(&named).take_while(|(a, b)| a == b).count();
            if common >= at.len() || common >= named.len() {
                continue; // itself, a parent, or its own children
            }
            let folder = at[..common].to_vec();
            if named
                .get(..3)
                .is_some_and(|p| p == ["core", "config", "pb"])
            {
                continue; // the generated schema, which uses nothing (as in LAYERS)
            }
            let (from, to) = (at[common].clone(), named[common].clone());
            if children.get(&folder).is_some_and(|c| c.contains(&to)) {
                graphs
                    .entry(folder)
                    .or_default()
                    .entry(from)
                    .or_default()
                    .insert(to);
            }
        }
    }
    let mut circles = Vec::new();
    for (folder, graph) in &graphs {
        // Each node's reach; a node that reaches itself is on a circle.
        for start in graph.keys() {
            let mut seen = BTreeSet::new();
            let mut todo: Vec<&String> = graph[start].iter().collect();
            while let Some(n) = todo.pop() {
                if seen.insert(n.clone()) {
                    todo.extend(graph.get(n).into_iter().flatten());
                }
            }
            if seen.contains(start) {
                circles.push(format!(
                    "src/{}: {start} (and {:?})",
                    folder.join("/"),
                    graph[start]
                ));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "files that use each other in a circle:\n{}",
        circles.join("\n")
    );
}

/// No source file holds more than 800 lines: a file that grows past it
/// holds several jobs, and is split along them (ARCHITECTURE.md).
#[test]
fn no_source_file_is_over_800_lines() {
    let long: Vec<String> = src_files()
        .into_iter()
        .filter(|(_, text)| text.lines().count() > 800)
        .map(|(path, text)| format!("src/{path}: {} lines", text.lines().count()))
        .collect();
    assert!(
        long.is_empty(),
        "split these along their jobs:\n{}",
        long.join("\n")
    );
}
