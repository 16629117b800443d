//! The PyTorch backend in a build without the `torch` cargo feature: the
//! same interface, and loading a model fails with how to get the backend,
//! so the build does not need libtorch.

use crate::core::error::{Error, Result};
use crate::core::types::Tensor;

use super::LoadContext;

/// Why a PyTorch model cannot load in this build, and what to do.
pub const NOT_BUILT: &str =
    "this trtis was built without the PyTorch backend (cargo feature `torch`): \
     run scripts/setup.sh (it installs libtorch from the `torch` wheel into .venv-torch), \
     then build with `cargo build --release --features torch`";

/// Never constructed: `load` always fails.
pub struct TorchInstance(());

impl TorchInstance {
    pub fn load(_ctx: &LoadContext) -> Result<Self> {
        Err(Error::unsupported(NOT_BUILT))
    }
}

impl super::InstanceExec for TorchInstance {
    fn execute(&mut self, _inputs: Vec<Tensor>, _outputs: &[String]) -> Result<Vec<Tensor>> {
        Err(Error::unsupported(NOT_BUILT))
    }
}
