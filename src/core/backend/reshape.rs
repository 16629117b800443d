//! `reshape` on inputs and outputs (the seed's Model Configuration,
//! "Reshape"): clients, schedulers and warmup see a tensor with its
//! configured `dims`; the model sees it with `reshape.shape`. A batching
//! model keeps its batch dimension outside the reshape (`dims: [1]` with
//! `reshape: { shape: [] }` gives the model `[batch]`). Only the shape
//! changes: the data is the same bytes in the same order.
//!
//! It wraps any backend's instance, so every backend and every scheduler
//! get it in one place.

use std::sync::Arc;

use super::{BatchExec, Instance, ListExec};
use crate::core::batch_io::reshape_shape as convert;
use crate::core::config::pb::ModelTensorReshape;
use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::responder::BackendRequest;
use crate::core::types::Tensor;

/// One reshaped tensor: its name, the shape on the outside (`from`) and
/// the shape the model sees (`to`), both without the batch dimension.
#[derive(Debug, Clone)]
struct Rule {
    name: String,
    outside: Vec<i64>,
    inside: Vec<i64>,
}

/// The reshapes of a model's inputs and outputs.
struct Rules {
    batching: bool,
    inputs: Vec<Rule>,
    outputs: Arc<Vec<Rule>>,
}

/// An instance whose inputs and outputs are reshaped.
struct Reshaped<E: ?Sized> {
    inner: Box<E>,
    rules: Rules,
}

impl Rules {
    fn reshape_inputs(&self, inputs: &mut [Tensor]) -> Result<()> {
        for t in inputs {
            if let Some(rule) = self.inputs.iter().find(|r| r.name == t.name) {
                t.shape = convert(&t.shape, &rule.outside, &rule.inside, self.batching)
                    .ok_or_else(|| mismatch("input", t, &rule.outside))?;
            }
        }
        Ok(())
    }
}

/// The model's outputs back in the shapes the config gives clients.
fn reshape_outputs(rules: &[Rule], batching: bool, outputs: &mut [Tensor]) -> Result<()> {
    for t in outputs {
        if let Some(rule) = rules.iter().find(|r| r.name == t.name) {
            t.shape = convert(&t.shape, &rule.inside, &rule.outside, batching)
                .ok_or_else(|| mismatch("output", t, &rule.inside))?;
        }
    }
    Ok(())
}

/// `inner` with the config's reshapes applied around it (itself when the
/// config has none).
pub fn wrap(config: &ModelConfig, inner: Instance) -> Instance {
    let rule = |name: &str, dims: &[i64], reshape: Option<&ModelTensorReshape>| {
        reshape.map(|r| Rule {
            name: name.to_string(),
            outside: dims.to_vec(),
            inside: r.shape.clone(),
        })
    };
    let inputs: Vec<Rule> = config
        .input
        .iter()
        .filter_map(|i| rule(&i.name, &i.dims, i.reshape.as_ref()))
        .collect();
    let outputs: Vec<Rule> = config
        .output
        .iter()
        .filter_map(|o| rule(&o.name, &o.dims, o.reshape.as_ref()))
        .collect();
    if inputs.is_empty() && outputs.is_empty() {
        return inner;
    }
    let rules = Rules {
        batching: config.max_batch_size > 0,
        inputs,
        outputs: Arc::new(outputs),
    };
    match inner {
        Instance::Batches(inner) => Instance::Batches(Box::new(Reshaped { inner, rules })),
        Instance::Lists(inner) => Instance::Lists(Box::new(Reshaped { inner, rules })),
    }
}

impl BatchExec for Reshaped<dyn BatchExec> {
    fn execute(&mut self, mut inputs: Vec<Tensor>, outputs: &[String]) -> Result<Vec<Tensor>> {
        self.rules.reshape_inputs(&mut inputs)?;
        let mut results = self.inner.execute(inputs, outputs)?;
        reshape_outputs(&self.rules.outputs, self.rules.batching, &mut results)?;
        Ok(results)
    }

    fn timing(&self) -> (std::time::Duration, std::time::Duration) {
        self.inner.timing()
    }

    fn response_parameters(&self) -> Option<Arc<crate::core::types::ResponseParameters>> {
        self.inner.response_parameters()
    }
}

impl ListExec for Reshaped<dyn ListExec> {
    /// Each request's inputs reshaped now; its responses (however many, and
    /// whenever they come) reshaped on their way out.
    fn execute_requests(&mut self, mut requests: Vec<BackendRequest>) -> Result<()> {
        let mut ready = Vec::with_capacity(requests.len());
        for mut r in requests.drain(..) {
            if let Err(e) = self.rules.reshape_inputs(&mut r.inputs) {
                r.respond.fail(e);
                continue;
            }
            if !self.rules.outputs.is_empty() {
                let (rules, batching) = (Arc::clone(&self.rules.outputs), self.rules.batching);
                r.respond
                    .map_outputs(Arc::new(move |tensors: &mut Vec<Tensor>| {
                        reshape_outputs(&rules, batching, tensors)
                    }));
            }
            ready.push(r);
        }
        if ready.is_empty() {
            return Ok(());
        }
        self.inner.execute_requests(ready)
    }

    fn memory_usage(&self) -> Vec<crate::core::metrics::memory::MemoryUsage> {
        self.inner.memory_usage()
    }
}

fn mismatch(what: &str, t: &Tensor, expected: &[i64]) -> Error {
    Error::internal(format!(
        "{what} '{}' has shape {:?}, which cannot be reshaped from {expected:?}",
        t.name, t.shape
    ))
}
