//! The ONNX Runtime backend in a build without the `onnx` cargo feature:
//! the same interface, and every use fails with the reason, so a model that
//! needs it fails its load (and `gen-config` its run) with a clear message
//! instead of the build needing `ort`. It stands in for `mod.rs` (see
//! `backend/mod.rs`), so it declares the same pure [`settings`].

#[path = "settings.rs"]
pub mod settings;

use std::path::Path;

use crate::core::config::autocomplete::ModelTensor;
use crate::core::error::{Error, Result};
use crate::core::types::Tensor;

use super::LoadContext;

fn not_built() -> Error {
    Error::unsupported(
        "this trtis was built without the ONNX Runtime backend (cargo feature `onnx`, on by default)",
    )
}

/// The inputs and outputs of an ONNX model file: not available here.
/// Without the `onnx` feature there is no ONNX Runtime, so no CUDA provider.
pub fn cuda_provider_available() -> bool {
    false
}

pub fn model_io(_path: &Path) -> Result<(Vec<ModelTensor>, Vec<ModelTensor>)> {
    Err(not_built())
}

/// Never constructed: `load` always fails.
pub struct OnnxInstance(());

impl OnnxInstance {
    pub fn load(_ctx: &LoadContext) -> Result<Self> {
        Err(not_built())
    }
}

impl super::BatchExec for OnnxInstance {
    fn execute(&mut self, _inputs: Vec<Tensor>, _outputs: &[String]) -> Result<Vec<Tensor>> {
        Err(not_built())
    }
}
