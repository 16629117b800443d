//! `trtis gen-config MODEL_FILE`: prints a `config.pbtxt` for a model file,
//! ready to save and edit. The file's extension names its format in the
//! backend catalog (`config::catalog`); the format's backend makes the
//! config (`Backend::gen_config`): what auto-complete would make from the
//! tensors the file declares (ONNX, SavedModel, OpenVINO IR), or, where
//! the file does not record types or shapes (a TorchScript module, an
//! AOTInductor package's outputs), placeholders with comment lines at the
//! top saying what to edit.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use prost::Message;
use prost_reflect::text_format::FormatOptions;
use prost_reflect::DynamicMessage;
use trtis::core::backend::{self, generate::GenRequest};
use trtis::core::config::catalog;
use trtis::core::config::pb::{model_instance_group::Kind, ModelInstanceGroup};
use trtis::core::config::pbtxt::model_config_descriptor;
use trtis::core::config::ModelConfig;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model file (the formats this build reads are listed by the
    /// backend catalog).
    #[arg(help = model_help())]
    model: PathBuf,

    /// The model name (default: the model directory's name when the file is
    /// at `<model>/<version>/model.onnx` (or `model.pt`), else the file's
    /// stem).
    #[arg(long)]
    name: Option<String>,

    /// Maximum batch size (default for ONNX: 4 when every tensor's first
    /// dimension is dynamic, else 0; for TorchScript: 0, as a module does
    /// not say whether it batches).
    #[arg(long)]
    max_batch_size: Option<i32>,

    /// Turn dynamic batching on (on by default when the model batches; a
    /// TorchScript model batches only with --max-batch-size above 0).
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    dynamic_batching: Option<bool>,

    /// Instances (CPU) to run.
    #[arg(long)]
    instance_count: Option<i32>,
}

/// `MODEL`'s help: the formats this build's backends read.
fn model_help() -> String {
    format!("The model file: {}", catalog::gen_config_formats())
}

fn default_name(model: &Path) -> String {
    let version_dir = model.parent();
    let is_version = version_dir
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.parse::<u64>().is_ok());
    let model_dir = version_dir
        .and_then(Path::parent)
        .and_then(|d| d.file_name());
    match (is_version, model_dir) {
        (true, Some(dir)) => dir.to_string_lossy().into_owned(),
        _ => model
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".to_string()),
    }
}

pub fn run(args: Args) -> ExitCode {
    let mut config = ModelConfig {
        name: args
            .name
            .clone()
            .unwrap_or_else(|| default_name(&args.model)),
        ..Default::default()
    };
    if let Err(message) = refuse_special_file(&args.model) {
        eprintln!("error: {message}");
        return ExitCode::from(1);
    }
    let req = GenRequest {
        max_batch_size: args.max_batch_size,
        dynamic_batching: args.dynamic_batching,
    };
    let format = catalog::format_of_file(&args.model);
    let made = match format {
        Some((_, f)) if f.no_gen_config.is_some() => {
            // A format that declares no inputs or outputs (a custom.h
            // library): nothing to generate a config from.
            let why = f.no_gen_config.unwrap_or_default();
            eprintln!("error: {}: {why}", args.model.display());
            return ExitCode::from(2);
        }
        Some((spec, f)) if f.gen_config => match backend::lookup(spec.name) {
            Some(b) => {
                config.backend = spec.name.into();
                config.platform = f.platform.into();
                b.gen_config(&args.model, &req, &mut config)
            }
            None => Err(format!(
                "{}: this build has no {} backend{}",
                args.model.display(),
                spec.name,
                spec.availability.refusal()
            )),
        },
        _ => {
            eprintln!(
                "error: {}: gen-config reads {}",
                args.model.display(),
                catalog::gen_config_formats()
            );
            return ExitCode::from(2);
        }
    };
    let header = match made {
        Ok(made) => {
            for note in made.notes {
                eprintln!("{note}");
            }
            made.header
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(count) = args.instance_count {
        config.instance_group.push(ModelInstanceGroup {
            count,
            kind: Kind::Cpu as i32,
            ..Default::default()
        });
    }
    let message =
        DynamicMessage::decode(model_config_descriptor(), config.encode_to_vec().as_slice())
            .expect("a ModelConfig re-decodes");
    let text = message.to_text_format_with_options(&FormatOptions::new().pretty(true));
    for line in header {
        println!("# {line}");
    }
    println!("{text}");
    ExitCode::SUCCESS
}

/// Refuses a model path that is there but is no regular file (a FIFO
/// would block the reader until a writer came; a device is no model); for a
/// SavedModel directory, the same of its `saved_model.pb`. A path that is
/// not there, or a directory where a file is expected, is left to the
/// reader's own error.
fn refuse_special_file(model: &Path) -> Result<(), String> {
    let is_dir = std::fs::metadata(model).is_ok_and(|m| m.is_dir());
    let file = if is_dir {
        model.join("saved_model.pb")
    } else {
        model.to_path_buf()
    };
    match trtis::core::fsutil::check_regular(&file) {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Err(e.to_string()),
        _ => Ok(()),
    }
}
