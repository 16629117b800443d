//! The `identity` backend, as Triton ships it: output *i* is input *i*, for
//! every datatype, BYTES binary-safe. No model file is needed. Like Triton's,
//! it takes an `execute_delay_ms` parameter: each execution sleeps that long
//! (for testing queues, shutdown and lifecycle under load).

use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::types::Tensor;

pub struct IdentityInstance {
    /// Output names; output *i* copies input *i*.
    outputs: Vec<String>,
    /// Sleep per execution.
    delay: std::time::Duration,
}

impl IdentityInstance {
    pub fn new(config: &ModelConfig) -> Result<Self> {
        if config.output.len() > config.input.len() {
            return Err(Error::invalid_arg(format!(
                "identity model '{}' has more outputs than inputs",
                config.name
            )));
        }
        let delay_ms = match config.parameters.get("execute_delay_ms") {
            None => 0,
            Some(p) => p.string_value.trim().parse::<u64>().map_err(|_| {
                Error::invalid_arg(format!(
                    "parameter 'execute_delay_ms' of model '{}' must be a whole number of milliseconds",
                    config.name
                ))
            })?,
        };
        Ok(IdentityInstance {
            outputs: config.output.iter().map(|o| o.name.clone()).collect(),
            delay: std::time::Duration::from_millis(delay_ms),
        })
    }
}

impl super::InstanceExec for IdentityInstance {
    fn execute(&mut self, inputs: &[Tensor], outputs: &[String]) -> Result<Vec<Tensor>> {
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
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
