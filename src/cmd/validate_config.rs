//! `trtis validate-config [PATH]...`: checks repositories, model directories
//! or single `config.pbtxt` files statically and prints every finding.
//!
//! Exit codes: 0 clean (warnings allowed), 1 any error, 2 usage or I/O.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use trtis::core::config::Severity;
use trtis::core::device;
use trtis::core::repository::{check_repository, layout, CheckOptions, CheckedModel, Finding};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model repositories, model directories or config.pbtxt files.
    #[arg(default_value = ".")]
    paths: Vec<PathBuf>,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,

    /// Treat warnings as errors (exit 1 when there are any).
    #[arg(long)]
    deny_warnings: bool,

    /// Check each model's `configs/<NAME>.pbtxt` where it has one, as
    /// `serve --model-config-name` loads it.
    #[arg(long, value_name = "NAME")]
    model_config_name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Human,
    Json,
}

pub fn run(args: Args) -> ExitCode {
    if args.model_config_name.as_deref() == Some("") {
        eprintln!("error: empty argument for --model-config-name");
        return ExitCode::from(2);
    }
    let opts = CheckOptions {
        gpus: device::visible_gpus(),
        gpu_backends: trtis::core::backend::gpu_backends(device::visible_gpus()),
        min_compute_capability: device::MIN_COMPUTE_CAPABILITY,
        config_name: args.model_config_name.as_deref(),
        missing_gpu: Severity::Warning,
        server_support: true,
        model_files: true,
    };
    let mut models: Vec<CheckedModel> = Vec::new();
    for path in &args.paths {
        // A repository in object storage is checked from its mirror.
        let mirrored = match super::remote_repo::mirror(path) {
            Ok(m) => m,
            Err(message) => {
                eprintln!("error: {}: {message}", path.display());
                return ExitCode::from(2);
            }
        };
        let path = mirrored
            .as_ref()
            .map(|r| r.local_dir().to_path_buf())
            .unwrap_or_else(|| path.clone());
        match check_path(&path, &opts) {
            Ok(mut checked) => models.append(&mut checked),
            Err(message) => {
                eprintln!("error: {}: {message}", path.display());
                return ExitCode::from(2);
            }
        }
    }
    let findings: Vec<&Finding> = models.iter().flat_map(|m| &m.findings).collect();
    let errors = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let warnings = findings.len() - errors;
    let failed = errors > 0 || (args.deny_warnings && warnings > 0);

    let mut out = std::io::stdout().lock();
    let written = match args.format {
        Format::Human => write_human(&mut out, &findings, models.len(), errors, warnings, failed),
        Format::Json => write_json(&mut out, &models, errors, warnings),
    };
    if written.is_err() {
        return ExitCode::from(2);
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// A path is a config file, a model directory or a repository.
fn check_path(path: &Path, opts: &CheckOptions) -> Result<Vec<CheckedModel>, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    let (root, names) = if meta.is_file() {
        if path.file_name().is_none_or(|n| n != layout::CONFIG_FILE) {
            return Err(format!(
                "expected a directory or a file named {}",
                layout::CONFIG_FILE
            ));
        }
        model_in_parent(path.parent().unwrap_or(Path::new(".")))?
    } else if layout::is_model_dir(path, opts.config_name) {
        model_in_parent(path)?
    } else {
        (path.to_path_buf(), None)
    };
    check_repository(&root, names.as_deref(), opts).map_err(|e| e.to_string())
}

/// A model directory is checked as one model of the repository around it, so
/// that the models its ensemble steps name can be found beside it.
fn model_in_parent(model_dir: &Path) -> Result<(PathBuf, Option<Vec<String>>), String> {
    let abs = if model_dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        model_dir
    };
    let canonical = abs.canonicalize().map_err(|e| e.to_string())?;
    let name = canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or("a model directory needs a name")?;
    // Keep the user's spelling of the path in the output.
    let root = match model_dir.parent() {
        Some(parent) if model_dir.file_name().is_some() => {
            if parent.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                parent.to_path_buf()
            }
        }
        _ => abs.join(".."),
    };
    Ok((root, Some(vec![name])))
}

fn write_human(
    out: &mut impl Write,
    findings: &[&Finding],
    models: usize,
    errors: usize,
    warnings: usize,
    failed: bool,
) -> std::io::Result<()> {
    for f in findings {
        writeln!(out, "{f}")?;
    }
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    writeln!(
        out,
        "{}: {} checked, {}, {}",
        if failed { "FAILED" } else { "OK" },
        plural(models, "model"),
        plural(errors, "error"),
        plural(warnings, "warning"),
    )
}

fn write_json(
    out: &mut impl Write,
    models: &[CheckedModel],
    errors: usize,
    warnings: usize,
) -> std::io::Result<()> {
    let findings: Vec<serde_json::Value> = models
        .iter()
        .flat_map(|m| {
            m.findings.iter().map(move |f| {
                serde_json::json!({
                    "model": m.name(),
                    "file": f.file.display().to_string(),
                    "line": f.line,
                    "column": f.col,
                    "severity": f.severity.to_string(),
                    "field": f.field,
                    "message": f.message,
                })
            })
        })
        .collect();
    let doc = serde_json::json!({
        "models": models.iter().map(|m| m.name()).collect::<Vec<_>>(),
        "errors": errors,
        "warnings": warnings,
        "findings": findings,
    });
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
}
