//! The `identity` backend, as Triton ships it: output *i* is input *i*, for
//! every datatype, BYTES binary-safe. No model file is needed.

use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::types::Tensor;

pub struct IdentityInstance {
    /// Output name → the position of the input it copies.
    outputs: Vec<String>,
}

impl IdentityInstance {
    pub fn new(config: &ModelConfig) -> Result<Self> {
        if config.output.len() > config.input.len() {
            return Err(Error::invalid_arg(format!(
                "identity model '{}' has more outputs than inputs",
                config.name
            )));
        }
        Ok(IdentityInstance {
            outputs: config.output.iter().map(|o| o.name.clone()).collect(),
        })
    }
}

impl super::InstanceExec for IdentityInstance {
    fn execute(&mut self, inputs: &[Tensor], outputs: &[String]) -> Result<Vec<Tensor>> {
        outputs
            .iter()
            .map(|name| {
                let i = self
                    .outputs
                    .iter()
                    .position(|o| o == name)
                    .ok_or_else(|| Error::internal(format!("unknown output '{name}'")))?;
                let input = inputs.get(i).ok_or_else(|| {
                    Error::internal(format!("identity output '{name}' has no input {i}"))
                })?;
                Ok(Tensor {
                    name: name.clone(),
                    ..input.clone()
                })
            })
            .collect()
    }
}
