//! `trtis gen-config MODEL_FILE`: prints the `config.pbtxt` that
//! auto-complete would make for an ONNX model, ready to save and edit.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use prost::Message;
use prost_reflect::text_format::FormatOptions;
use prost_reflect::DynamicMessage;
use trtis::core::backend::onnx;
use trtis::core::config::autocomplete;
use trtis::core::config::pb::{
    model_config::SchedulingChoice, model_instance_group::Kind, ModelDynamicBatching,
    ModelInstanceGroup,
};
use trtis::core::config::pbtxt::model_config_descriptor;
use trtis::core::config::ModelConfig;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model file (`model.onnx`).
    model: PathBuf,

    /// The model name (default: the model directory's name when the file is
    /// at `<model>/<version>/model.onnx`, else the file's stem).
    #[arg(long)]
    name: Option<String>,

    /// Maximum batch size (default: 4 when every tensor's first dimension is
    /// dynamic, else 0).
    #[arg(long)]
    max_batch_size: Option<i32>,

    /// Turn dynamic batching on (on by default when the model batches).
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    dynamic_batching: Option<bool>,

    /// Instances (CPU) to run.
    #[arg(long)]
    instance_count: Option<i32>,
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
    if args.model.extension().is_none_or(|e| e != "onnx") {
        eprintln!(
            "error: {}: gen-config reads ONNX models (a .onnx file)",
            args.model.display()
        );
        return ExitCode::from(2);
    }
    let (inputs, outputs) = match onnx::model_io(&args.model) {
        Ok(io) => io,
        Err(e) => {
            eprintln!("error: {}: {e}", args.model.display());
            return ExitCode::from(1);
        }
    };
    let mut config = ModelConfig {
        name: args
            .name
            .clone()
            .unwrap_or_else(|| default_name(&args.model)),
        platform: "onnxruntime_onnx".into(),
        backend: "onnxruntime".into(),
        max_batch_size: args.max_batch_size.unwrap_or(0),
        ..Default::default()
    };
    let auto_batch = args.max_batch_size.is_none();
    if let Err(e) = autocomplete::complete(&mut config, &inputs, &outputs, auto_batch) {
        eprintln!("error: {}: {e}", args.model.display());
        return ExitCode::from(1);
    }
    match args.dynamic_batching {
        Some(true) => {
            config.scheduling_choice = Some(SchedulingChoice::DynamicBatching(
                ModelDynamicBatching::default(),
            ))
        }
        Some(false) => config.scheduling_choice = None,
        None if !auto_batch && config.max_batch_size > 0 => {
            config.scheduling_choice = Some(SchedulingChoice::DynamicBatching(
                ModelDynamicBatching::default(),
            ))
        }
        None => {}
    }
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
    println!("{text}");
    ExitCode::SUCCESS
}
