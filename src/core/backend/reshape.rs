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

use super::InstanceExec;
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

/// An instance whose inputs and outputs are reshaped.
struct Reshaped {
    inner: Box<dyn InstanceExec>,
    batching: bool,
    inputs: Vec<Rule>,
    outputs: Arc<Vec<Rule>>,
}

impl Reshaped {
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
pub fn wrap(config: &ModelConfig, inner: Box<dyn InstanceExec>) -> Box<dyn InstanceExec> {
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
    Box::new(Reshaped {
        inner,
        batching: config.max_batch_size > 0,
        inputs,
        outputs: Arc::new(outputs),
    })
}

impl InstanceExec for Reshaped {
    fn execute(&mut self, mut inputs: Vec<Tensor>, outputs: &[String]) -> Result<Vec<Tensor>> {
        self.reshape_inputs(&mut inputs)?;
        let mut results = self.inner.execute(inputs, outputs)?;
        reshape_outputs(&self.outputs, self.batching, &mut results)?;
        Ok(results)
    }

    /// Each request's inputs reshaped now; its responses (however many, and
    /// whenever they come) reshaped on their way out.
    fn execute_requests(&mut self, mut requests: Vec<BackendRequest>) -> Result<()> {
        let mut ready = Vec::with_capacity(requests.len());
        for mut r in requests.drain(..) {
            if let Err(e) = self.reshape_inputs(&mut r.inputs) {
                r.respond.fail(e);
                continue;
            }
            if !self.outputs.is_empty() {
                let (rules, batching) = (Arc::clone(&self.outputs), self.batching);
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

    fn timing(&self) -> (std::time::Duration, std::time::Duration) {
        self.inner.timing()
    }

    fn memory_usage(&self) -> Vec<crate::core::memory::MemoryUsage> {
        self.inner.memory_usage()
    }
}

fn mismatch(what: &str, t: &Tensor, expected: &[i64]) -> Error {
    Error::internal(format!(
        "{what} '{}' has shape {:?}, which cannot be reshaped from {expected:?}",
        t.name, t.shape
    ))
}

/// `shape` (whose dims past the batch dimension match `from`) as `to`:
/// `to`'s variable dimensions take the values of `from`'s, in order (the
/// config's rule: both have the same variable dimensions, with fixed
/// chunks of equal size between them), or the one left over by the
/// element count. `None` when `shape` does not match `from`.
fn convert(shape: &[i64], from: &[i64], to: &[i64], batching: bool) -> Option<Vec<i64>> {
    let (batch, rest) = if batching {
        let (b, rest) = shape.split_first()?;
        (Some(*b), rest)
    } else {
        (None, shape)
    };
    let matches = rest.len() == from.len()
        && rest
            .iter()
            .zip(from)
            .all(|(&actual, &d)| d == -1 || actual == d);
    if !matches {
        return None;
    }
    let elements = product(rest)?;
    let variables: Vec<i64> = rest
        .iter()
        .zip(from)
        .filter(|(_, &d)| d == -1)
        .map(|(&actual, _)| actual)
        .collect();
    let unknown = to.iter().filter(|&&d| d == -1).count();
    let mut values = variables.iter().copied();
    let in_order: Vec<i64> = to
        .iter()
        .map(|&d| {
            if d == -1 {
                values.next().unwrap_or(0)
            } else {
                d
            }
        })
        .collect();
    let inside = if unknown == variables.len() && product(&in_order) == Some(elements) {
        in_order
    } else if unknown == 1 {
        let known = product(&to.iter().copied().filter(|&d| d != -1).collect::<Vec<_>>())?;
        if known == 0 || elements % known != 0 {
            return None;
        }
        to.iter()
            .map(|&d| if d == -1 { elements / known } else { d })
            .collect()
    } else if unknown == 0 && product(to) == Some(elements) {
        to.to_vec()
    } else {
        return None;
    };
    Some(batch.into_iter().chain(inside).collect())
}

/// The element count of `dims`; `None` on overflow (a hostile shape).
fn product(dims: &[i64]) -> Option<i64> {
    dims.iter().try_fold(1i64, |n, &d| n.checked_mul(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_shapes_keep_the_batch_dimension_outside() {
        assert_eq!(convert(&[3, 4, 4], &[4, 4], &[16], true), Some(vec![3, 16]));
        assert_eq!(convert(&[3, 16], &[16], &[4, 4], true), Some(vec![3, 4, 4]));
        assert_eq!(convert(&[4, 4], &[4, 4], &[2, 8], false), Some(vec![2, 8]));
    }

    #[test]
    fn the_scalar_case() {
        // dims [1], reshape [] on a batching model: the model sees [batch].
        assert_eq!(convert(&[5, 1], &[1], &[], true), Some(vec![5]));
        assert_eq!(convert(&[5], &[], &[1], true), Some(vec![5, 1]));
    }

    #[test]
    fn variable_dimensions_carry_over_in_order() {
        assert_eq!(
            convert(&[2, 3, 4, 5], &[-1, 4, -1], &[-1, 2, 2, -1], true),
            Some(vec![2, 3, 2, 2, 5])
        );
        assert_eq!(convert(&[6, 4], &[-1, 4], &[-1], false), Some(vec![24]));
        assert_eq!(convert(&[24], &[-1], &[-1, 4], false), Some(vec![6, 4]));
    }

    #[test]
    fn a_shape_that_does_not_match_is_refused() {
        assert_eq!(convert(&[3, 5], &[4], &[2, 2], true), None);
        assert_eq!(convert(&[3], &[4], &[2, 2], true), None);
        assert_eq!(convert(&[7], &[-1], &[-1, 4], false), None);
        let huge = 1i64 << 31;
        assert_eq!(
            convert(&[huge, huge, 2, 0], &[-1, -1, -1, -1], &[-1], false),
            None
        );
    }
}
