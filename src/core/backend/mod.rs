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

use std::path::{Path, PathBuf};

use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::types::Tensor;

/// One loaded instance of a model version.
pub trait InstanceExec: Send {
    /// Runs one request: `inputs` are validated against the model config
    /// (names, types, shapes incl. the batch dimension); returns the tensors
    /// named in `outputs`, in that order.
    fn execute(&mut self, inputs: &[Tensor], outputs: &[String]) -> Result<Vec<Tensor>>;
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
pub fn load_instance(ctx: &LoadContext) -> Result<Box<dyn InstanceExec>> {
    match ctx.config.backend.as_str() {
        "identity" => Ok(Box::new(identity::IdentityInstance::new(ctx.config)?)),
        "onnxruntime" => Ok(Box::new(onnx::OnnxInstance::load(ctx)?)),
        other => Err(Error::unsupported(format!(
            "unable to find backend library for backend '{other}', try specifying runtime on the model configuration."
        ))),
    }
}
