//! The `identity` backend, as Triton ships it: output *i* is input *i*, for
//! every datatype, BYTES binary-safe. No model file is needed. Like Triton's,
//! it takes an `execute_delay_ms` parameter: each execution sleeps that long
//! (for testing queues, shutdown and lifecycle under load), and with
//! `instance_wise_delay_multiplier` M the instance made k-th (from 0) sleeps
//! `execute_delay_ms * max(M * k, 1)`, as Triton's does. A `delay_input`
//! parameter names an INT32 input whose largest value adds that many
//! milliseconds, so requests can finish out of order (ordering tests).
//!
//! With the sequence batcher, the inputs it supplies (control inputs, then
//! implicit state inputs, in config order) follow the config's inputs, so
//! outputs past the config's inputs echo them; an output state echoes its
//! input state. A `record_inputs` parameter names a file that gets one JSON
//! line per execution with every input tensor the model received (shape,
//! datatype, values), to check what a scheduler gave the model.
//!
//! As Triton's identity backend does, every response carries the example
//! response parameters `param0`..`param3` (a string, an integer, a boolean
//! and a double), the counter `input_byte_size_counter{model,version}`
//! adds up the bytes of every input received, and `creation_delay_sec`
//! makes loading the model's first instance take that many seconds.

use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::types::Tensor;

/// The datatype and dims (batch dimension excluded) of the zeros an
/// optional input's output gets when the input is left out.
type Zeros = (crate::core::types::DataType, Vec<i64>);

pub struct IdentityInstance {
    /// Output names; output *i* copies input *i*.
    outputs: Vec<String>,
    /// The config's inputs: name, and for an optional one the datatype and
    /// dims of the zeros its output gets when a request leaves it out (as
    /// Triton's identity backend answers).
    inputs: Vec<(String, Option<Zeros>)>,
    batching: bool,
    /// Sleep per execution.
    delay: std::time::Duration,
    /// Index of the input whose largest value is extra milliseconds.
    delay_input: Option<usize>,
    /// (output state, input state) names.
    states: Vec<(String, String)>,
    /// Where to append a JSON line per execution.
    record: Option<std::path::PathBuf>,
    /// `input_byte_size_counter{model,version}` (None where it could not be
    /// made: another family of that name exists).
    byte_counter: Option<crate::core::metrics::custom::Handle>,
}

/// Triton's identity backend's example response parameters.
fn example_parameters() -> std::sync::Arc<crate::core::types::ResponseParameters> {
    static PARAMETERS: std::sync::OnceLock<std::sync::Arc<crate::core::types::ResponseParameters>> =
        std::sync::OnceLock::new();
    PARAMETERS
        .get_or_init(|| {
            let mut p = crate::core::types::ResponseParameters::new();
            p.insert("param0".into(), "an example string parameter".into());
            p.insert("param1".into(), 42.into());
            p.insert("param2".into(), false.into());
            p.insert("param3".into(), 123.123.into());
            std::sync::Arc::new(p)
        })
        .clone()
}

/// Joins the counter Triton's identity backend keeps per model version.
fn byte_counter(model: &str, version: &str) -> Option<crate::core::metrics::custom::Handle> {
    use crate::core::metrics::custom as cm;
    const NAME: &str = "input_byte_size_counter";
    // The family lives as long as one of its metrics (which holds it).
    let _family = cm::family(
        NAME,
        "Cumulative input byte size of all requests received by the model",
        cm::Kind::Counter,
    )
    .ok()?;
    cm::metric(
        NAME,
        vec![
            ("model".to_string(), model.to_string()),
            ("version".to_string(), version.to_string()),
        ],
        None,
    )
    .ok()
}

impl IdentityInstance {
    /// The instance made `index`-th of version `version` of the model
    /// (from 0).
    pub fn new(config: &ModelConfig, index: usize, version: &str) -> Result<Self> {
        use crate::core::config::pb::model_config::SchedulingChoice;
        let (supplied, states) = match &config.scheduling_choice {
            Some(SchedulingChoice::SequenceBatching(sb)) => (
                sb.control_input.len() + sb.state.len(),
                sb.state
                    .iter()
                    .map(|s| (s.output_name.clone(), s.input_name.clone()))
                    .collect(),
            ),
            _ => (0, Vec::new()),
        };
        // Batch inputs follow the config's inputs too.
        let supplied = supplied
            + crate::core::batch_io::BatchIo::from_config(config)
                .input_names()
                .count();
        if config.output.len() > config.input.len() + supplied {
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
        let multiplier = match config.parameters.get("instance_wise_delay_multiplier") {
            None => 0,
            Some(p) => p.string_value.trim().parse::<u64>().map_err(|_| {
                Error::invalid_arg(format!(
                    "parameter 'instance_wise_delay_multiplier' of model '{}' must be a whole number",
                    config.name
                ))
            })?,
        };
        let delay_ms = if multiplier > 0 {
            delay_ms.saturating_mul(multiplier.saturating_mul(index as u64).max(1))
        } else {
            delay_ms
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
        if let Some(p) = config.parameters.get("creation_delay_sec") {
            let secs = p.string_value.trim().parse::<u64>().map_err(|_| {
                Error::invalid_arg(format!(
                    "parameter 'creation_delay_sec' of model '{}' must be a whole number of seconds",
                    config.name
                ))
            })?;
            // Triton's sleeps once, making the model; here its first instance.
            if index == 0 && secs > 0 {
                crate::core::logging::log('I', &format!("Creation delay is set to: {secs}"));
                std::thread::sleep(std::time::Duration::from_secs(secs));
            }
        }
        Ok(IdentityInstance {
            byte_counter: byte_counter(&config.name, version),
            outputs: config.output.iter().map(|o| o.name.clone()).collect(),
            inputs: config
                .input
                .iter()
                .map(|i| {
                    let zeros = i.optional.then(|| {
                        crate::core::types::DataType::from_config(i.data_type)
                            .map(|d| (d, i.dims.iter().map(|&d| d.max(0)).collect()))
                    });
                    (i.name.clone(), zeros.flatten())
                })
                .collect(),
            batching: config.max_batch_size > 0,
            delay: std::time::Duration::from_millis(delay_ms),
            delay_input,
            states,
            record: config
                .parameters
                .get("record_inputs")
                .map(|p| std::path::PathBuf::from(&p.string_value)),
        })
    }
}

/// With ragged inputs (`config::catalog::takes_request_lists`): each
/// request of the batch answered on its own, as Triton's identity backend
/// does.
impl super::ListExec for IdentityInstance {
    fn execute_requests(
        &mut self,
        requests: Vec<crate::core::responder::BackendRequest>,
    ) -> Result<()> {
        use super::BatchExec;
        for r in requests {
            r.respond.set_parameters(Some(example_parameters()));
            let result = self.execute(r.inputs, &r.outputs);
            r.respond.respond(result, true);
        }
        Ok(())
    }
}

impl super::BatchExec for IdentityInstance {
    fn response_parameters(
        &self,
    ) -> Option<std::sync::Arc<crate::core::types::ResponseParameters>> {
        Some(example_parameters())
    }

    fn execute(&mut self, inputs: Vec<Tensor>, outputs: &[String]) -> Result<Vec<Tensor>> {
        if let Some(counter) = &self.byte_counter {
            let bytes: usize = inputs.iter().map(|t| t.data.len()).sum();
            let _ = crate::core::metrics::custom::update(
                counter,
                crate::core::metrics::custom::Update::Increment(bytes as f64),
            );
        }
        if crate::core::logging::enabled('V', 1) {
            for t in &inputs {
                crate::core::logging::verbose(&format!(
                    "\tinput {}: datatype = {}, shape = {:?}, byte_size = {}, buffer_count = 1",
                    t.name,
                    t.datatype.name(),
                    t.shape,
                    t.data.len()
                ));
            }
        }
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
        if let Some(path) = &self.record {
            record(path, &inputs)?;
        }
        // Each output's input, by position.
        let sources = outputs
            .iter()
            .map(|name| {
                if let Some((_, input)) = self.states.iter().find(|(o, _)| o == name) {
                    return match inputs.iter().position(|t| &t.name == input) {
                        Some(p) => Ok((usize::MAX, Some(p))),
                        None => Err(Error::internal(format!(
                            "identity state '{input}' was not given"
                        ))),
                    };
                }
                let i = self
                    .outputs
                    .iter()
                    .position(|o| o == name)
                    .ok_or_else(|| Error::internal(format!("unknown output '{name}'")))?;
                // The config's input i by name (optional inputs may be left
                // out); past the config's inputs, those the server supplies.
                let given = match self.inputs.get(i) {
                    Some((input, zeros)) => match inputs.iter().position(|t| &t.name == input) {
                        Some(p) => Some(p),
                        None if zeros.is_some() => None,
                        None => {
                            return Err(Error::internal(format!(
                                "identity output '{name}' has no input '{input}'"
                            )))
                        }
                    },
                    None if i < inputs.len() => Some(i),
                    None => {
                        return Err(Error::internal(format!(
                            "identity output '{name}' has no input {i}"
                        )))
                    }
                };
                Ok((i, given))
            })
            .collect::<Result<Vec<(usize, Option<usize>)>>>()?;
        let batch = match (self.batching, inputs.first()) {
            (true, Some(t)) => t.shape.first().copied(),
            _ => None,
        };
        // An input read by one output moves into it; one read by several
        // is copied for all but the last.
        let mut inputs: Vec<Option<Tensor>> = inputs.into_iter().map(Some).collect();
        let mut out = Vec::with_capacity(outputs.len());
        for (k, (name, &(i, given))) in outputs.iter().zip(&sources).enumerate() {
            let Some(p) = given else {
                // An optional input left out: zeros of its config shape.
                let (datatype, dims) = self.inputs[i].1.clone().expect("checked above");
                let shape: Vec<i64> = batch.into_iter().chain(dims).collect();
                let n = crate::core::types::element_count(&shape).unwrap_or(0);
                let data = match datatype.size() {
                    Some(size) => vec![0; n * size],
                    None => vec![0; n * 4],
                };
                out.push(Tensor {
                    name: name.clone(),
                    datatype,
                    shape,
                    data,
                });
                continue;
            };
            let again = sources[k + 1..].iter().any(|&(_, g)| g == Some(p));
            let t = if again {
                inputs[p].clone()
            } else {
                inputs[p].take()
            }
            .ok_or_else(|| Error::internal(format!("identity input {p} was used up")))?;
            out.push(Tensor {
                name: name.clone(),
                ..t
            });
        }
        Ok(out)
    }
}

/// Appends one JSON line with the inputs of an execution.
fn record(path: &std::path::Path, inputs: &[Tensor]) -> Result<()> {
    use crate::core::types::DataType;
    use std::io::Write;
    let mut line = serde_json::Map::new();
    for t in inputs {
        let values: Vec<serde_json::Value> = match t.datatype {
            DataType::Int32 => t
                .data
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]).into())
                .collect(),
            DataType::Uint64 => t
                .data
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])).into())
                .collect(),
            DataType::Int64 => t
                .data
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])).into())
                .collect(),
            DataType::Fp32 => t
                .data
                .chunks_exact(4)
                .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).into())
                .collect(),
            DataType::Bool => t.data.iter().map(|&b| (b != 0).into()).collect(),
            DataType::Bytes => Tensor::bytes_elements(&t.data)
                .unwrap_or_default()
                .iter()
                .map(|e| String::from_utf8_lossy(e).into_owned().into())
                .collect(),
            _ => vec![],
        };
        line.insert(
            t.name.clone(),
            serde_json::json!({"datatype": t.datatype.name(), "shape": t.shape, "values": values}),
        );
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| {
            Error::internal(format!(
                "identity: cannot record to '{}': {e}",
                path.display()
            ))
        })?;
    writeln!(file, "{}", serde_json::Value::Object(line))
        .map_err(|e| Error::internal(format!("identity: cannot record: {e}")))
}

/// The identity backend in the registry.
pub struct Identity;

impl super::Backend for Identity {
    fn name(&self) -> &'static str {
        "identity"
    }

    /// Lists of requests for a ragged batch, else batches.
    fn load(&self, ctx: &super::LoadContext) -> Result<super::Instance> {
        let version = ctx
            .version_dir
            .file_name()
            .map(|v| v.to_string_lossy().into_owned())
            .unwrap_or_default();
        let instance = IdentityInstance::new(ctx.config, ctx.instance_index, &version)?;
        Ok(if super::takes_request_lists(ctx.config) {
            super::Instance::Lists(Box::new(instance))
        } else {
            super::Instance::Batches(Box::new(instance))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(parameters: &str) -> ModelConfig {
        let text = format!(
            r#"name: "m" backend: "identity" max_batch_size: 8
            input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
            output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
            {parameters}"#
        );
        crate::core::config::parse_config(text.as_bytes())
            .unwrap()
            .config
    }

    #[test]
    fn the_delay_grows_with_the_instance_as_tritons_multiplier_says() {
        let c = config(
            r#"parameters { key: "execute_delay_ms" value: { string_value: "100" } }
               parameters { key: "instance_wise_delay_multiplier" value: { string_value: "4" } }"#,
        );
        let ms = |k| IdentityInstance::new(&c, k, "1").unwrap().delay.as_millis();
        // Triton: execute_delay_ms * max(multiplier * instance id, 1).
        assert_eq!((ms(0), ms(1), ms(2)), (100, 400, 800));
        let plain =
            config(r#"parameters { key: "execute_delay_ms" value: { string_value: "100" } }"#);
        assert_eq!(
            IdentityInstance::new(&plain, 3, "1")
                .unwrap()
                .delay
                .as_millis(),
            100
        );
        let bad = config(
            r#"parameters { key: "instance_wise_delay_multiplier" value: { string_value: "x" } }"#,
        );
        assert!(IdentityInstance::new(&bad, 0, "1").is_err());
    }
}
