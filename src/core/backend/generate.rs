//! What `trtis gen-config` asks of a backend: a model config made from a
//! model file (`Backend::gen_config`), with the command line's batching
//! choices, and the comment lines that go above it. The helpers here are
//! shared by the backends that complete a config from the tensors their
//! file declares.

use crate::core::config::autocomplete::{self, ModelTensor};
use crate::core::config::pb::{model_config::SchedulingChoice, ModelDynamicBatching};
use crate::core::config::ModelConfig;

/// The command line's choices.
#[derive(Debug, Clone, Copy, Default)]
pub struct GenRequest {
    /// `--max-batch-size` (None: the backend's default).
    pub max_batch_size: Option<i32>,
    /// `--dynamic-batching` (None: on when the model batches).
    pub dynamic_batching: Option<bool>,
}

/// What a backend made of a model file beside the config: the comment
/// lines that go above it, and notes for the user (printed to stderr).
#[derive(Debug, Default)]
pub struct Generated {
    pub header: Vec<String>,
    pub notes: Vec<String>,
}

/// `dynamic_batching {}`.
pub fn dynamic_batching() -> Option<SchedulingChoice> {
    Some(SchedulingChoice::DynamicBatching(
        ModelDynamicBatching::default(),
    ))
}

/// What auto-complete makes of the tensors a model file declares (`io`, as
/// its backend read them), with the command line's batching choices; no
/// comment lines.
pub fn from_tensors(
    file: &std::path::Path,
    req: &GenRequest,
    config: &mut ModelConfig,
    io: crate::core::error::Result<(Vec<ModelTensor>, Vec<ModelTensor>)>,
) -> Result<Generated, String> {
    let shown = file.display().to_string();
    let (inputs, outputs) = io.map_err(|e| format!("{shown}: {e}"))?;
    complete_from(&shown, req, config, &inputs, &outputs)?;
    Ok(Generated::default())
}

/// Completes `config` from the model's tensors as auto-complete would,
/// with the command line's batching choices; errors are prefixed with
/// `shown` (the file).
pub fn complete_from(
    shown: &str,
    req: &GenRequest,
    config: &mut ModelConfig,
    inputs: &[ModelTensor],
    outputs: &[ModelTensor],
) -> Result<(), String> {
    config.max_batch_size = req.max_batch_size.unwrap_or(0);
    let auto_batch = req.max_batch_size.is_none();
    autocomplete::complete(
        config,
        inputs,
        outputs,
        auto_batch.then_some(autocomplete::DEFAULT_MAX_BATCH_SIZE),
    )
    .map_err(|e| format!("{shown}: {e}"))?;
    match req.dynamic_batching {
        Some(true) => config.scheduling_choice = dynamic_batching(),
        Some(false) => config.scheduling_choice = None,
        None if !auto_batch && config.max_batch_size > 0 => {
            config.scheduling_choice = dynamic_batching()
        }
        None => {}
    }
    Ok(())
}
