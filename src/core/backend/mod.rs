//! Backends: what executes a model. A backend loads one instance of a model
//! version; the instance runs requests synchronously on its own OS thread
//! (see `core::instance`), never on the async runtime.
//!
//! Built in: `identity` (Triton's test backend) and `onnxruntime` (ONNX
//! Runtime through `ort`, the shared library loaded at run time).

pub mod identity;
#[cfg(feature = "onnx")]
pub mod onnx;
#[cfg(not(feature = "onnx"))]
#[path = "onnx_disabled.rs"]
pub mod onnx;
pub mod onnx_settings;
mod reshape;

use std::path::{Path, PathBuf};

use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::types::Tensor;

/// One loaded instance of a model version.
pub trait InstanceExec: Send {
    /// Runs one request: `inputs` are validated against the model config
    /// (names, types, shapes incl. the batch dimension; reshaped where the
    /// config says so) and the instance's to keep; returns the tensors
    /// named in `outputs`, in that order.
    fn execute(&mut self, inputs: Vec<Tensor>, outputs: &[String]) -> Result<Vec<Tensor>>;

    /// Of the last `execute`, the time spent handing the inputs to the
    /// framework and taking the outputs back (Triton's compute_input and
    /// compute_output); zero where the backend has no such step.
    fn timing(&self) -> (std::time::Duration, std::time::Duration) {
        Default::default()
    }
}

/// What a backend needs to load an instance.
#[derive(Debug, Clone)]
pub struct LoadContext<'a> {
    pub config: &'a ModelConfig,
    /// `<repo>/<model>`.
    pub model_dir: &'a Path,
    /// `<repo>/<model>/<version>`.
    pub version_dir: PathBuf,
    /// `<group name>_<index>`.
    pub instance_name: String,
}

/// Loads one instance with the backend the (normalized) config names.
/// The config's `reshape`s wrap every backend's instance.
pub fn load_instance(ctx: &LoadContext) -> Result<Box<dyn InstanceExec>> {
    let instance: Box<dyn InstanceExec> = match ctx.config.backend.as_str() {
        "identity" => Box::new(identity::IdentityInstance::new(ctx.config)?),
        "onnxruntime" => Box::new(onnx::OnnxInstance::load(ctx)?),
        other => {
            return Err(Error::unsupported(format!(
                "unable to find backend library for backend '{other}', try specifying runtime on the model configuration."
            )))
        }
    };
    Ok(reshape::wrap(ctx.config, instance))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `config::support` says is built is what `load_instance` loads
    /// (a load may still fail for want of a model file, not of a backend).
    #[test]
    fn every_backend_the_support_table_names_is_loadable() {
        for backend in crate::core::config::support::built_backends() {
            let config = ModelConfig {
                name: "m".into(),
                backend: backend.to_string(),
                ..Default::default()
            };
            let dir = std::env::temp_dir();
            let ctx = LoadContext {
                config: &config,
                model_dir: &dir,
                version_dir: dir.join("no-such-version"),
                instance_name: "m_0".into(),
            };
            if let Err(e) = load_instance(&ctx) {
                assert!(
                    !e.message.contains("unable to find backend library"),
                    "{backend}: {}",
                    e.message
                );
            }
        }
    }
}
