//! The `identity` backend, as Triton ships it: output *i* is input *i*, for
//! every datatype, BYTES binary-safe. No model file is needed. Like Triton's,
//! it takes an `execute_delay_ms` parameter: each execution sleeps that long
//! (for testing queues, shutdown and lifecycle under load). A `delay_input`
//! parameter names an INT32 input whose largest value adds that many
//! milliseconds, so requests can finish out of order (ordering tests).

use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::types::Tensor;

pub struct IdentityInstance {
    /// Output names; output *i* copies input *i*.
    outputs: Vec<String>,
    /// Sleep per execution.
    delay: std::time::Duration,
    /// Index of the input whose largest value is extra milliseconds.
    delay_input: Option<usize>,
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
        let delay_input = match config.parameters.get("delay_input") {
            None => None,
            Some(p) => Some(
                config
                    .input
                    .iter()
                    .position(|i| {
                        i.name == p.string_value
                            && i.data_type == crate::core::config::pb::DataType::TypeInt32 as i32
                    })
                    .ok_or_else(|| {
                        Error::invalid_arg(format!(
                            "parameter 'delay_input' of model '{}' must name an INT32 input",
                            config.name
                        ))
                    })?,
            ),
        };
        Ok(IdentityInstance {
            outputs: config.output.iter().map(|o| o.name.clone()).collect(),
            delay: std::time::Duration::from_millis(delay_ms),
            delay_input,
        })
    }
}

impl super::InstanceExec for IdentityInstance {
    fn execute(&mut self, inputs: &[Tensor], outputs: &[String]) -> Result<Vec<Tensor>> {
        let mut delay = self.delay;
        if let Some(t) = self.delay_input.and_then(|i| inputs.get(i)) {
            let most = t
                .data
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .max()
                .unwrap_or(0);
            delay += std::time::Duration::from_millis(most.max(0) as u64);
        }
        if !delay.is_zero() {
            std::thread::sleep(delay);
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
