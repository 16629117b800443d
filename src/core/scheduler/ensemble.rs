//! The ensemble scheduler (`platform: "ensemble"`): a request's tensors
//! flow through the steps of `ensemble_scheduling`, each step an inference
//! on its composing model through that model's own scheduler (so composing
//! models batch dynamically). A step starts the moment every tensor it
//! reads exists (steps run concurrently where the graph allows, and a step
//! does not wait for unrelated ones); a tensor whose last reader this is
//! moves into it, others are copied. The first failing step fails the
//! request with its error at once, prefixed `in ensemble 'E', ` as Triton's.
//!
//! As Triton's ensemble scheduler: only the steps a requested output needs
//! run; the ensemble's own input and output `reshape`s apply; a tensor
//! passing between a model with batching and one without gains or loses a
//! batch dimension of 1 (`fit_dims`); an optional input left out, or an
//! output a step did not produce, is a tensor without data, so the steps
//! that read it still run (without it) and the response leaves it out.
//!
//! It knows the server only through `StepRunner` ("run this request on
//! model M"), which the engine implements: no cycle back to the engine.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::{Completion, Submission};
use crate::core::batch_io::reshape_shape;
use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::pb::model_ensembling::Step;
use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::instance::Done;
use crate::core::metrics::stats::ModelStats;
use crate::core::types::{InferRequest, InferResponse, RequestedOutput, SequenceParams, Tensor};

/// What an ensemble needs of the server: one step's request run on a
/// composing model, through that model's own scheduler (boxed, because a
/// step may itself be an ensemble), and that model's config, to fit each
/// tensor's batch dimension to it.
pub trait StepRunner: Sync {
    /// `home` is the ensemble's namespace (see `EnsembleScheduler::namespace`).
    fn run_step<'a>(
        &'a self,
        home: &'a str,
        model: &'a str,
        version: &'a str,
        request: InferRequest,
    ) -> BoxFuture<'a, Result<InferResponse>>;

    /// Calls `f` with the config of the model a step would run on now.
    fn with_step_config(
        &self,
        home: &str,
        model: &str,
        version: &str,
        f: &mut dyn FnMut(&ModelConfig),
    ) -> Result<()>;
}

/// A step's model version for the engine: "" (the latest) for -1.
pub fn step_version(step: &Step) -> String {
    if step.model_version < 0 {
        String::new()
    } else {
        step.model_version.to_string()
    }
}

/// The ensemble scheduler of one ensemble version.
pub struct EnsembleScheduler {
    /// Boxed: a config is large, and the scheduler's other kinds are not.
    config: Box<ModelConfig>,
    /// The ensemble's repository with `--model-namespacing` ("" without):
    /// a step's model there is preferred to one of the same name elsewhere.
    namespace: String,
    /// The ensemble's statistics: each request that ran every step counts
    /// as one execution.
    stats: Arc<ModelStats>,
}

impl EnsembleScheduler {
    pub fn new(config: ModelConfig, namespace: String, stats: Arc<ModelStats>) -> Self {
        EnsembleScheduler {
            config: Box::new(config),
            namespace,
            stats,
        }
    }

    /// Runs the request's steps through `steps` while the completion is
    /// awaited (an ensemble has no queue of its own: its steps queue on
    /// their composing models).
    pub fn submit<'a>(
        &'a self,
        submission: Submission<'a>,
        steps: &'a dyn StepRunner,
    ) -> Completion<'a> {
        Completion::running(Box::pin(async move {
            let start = Instant::now();
            let s = submission;
            let request = (
                s.id,
                s.priority,
                s.timeout_us,
                s.sequence,
                s.parameters,
                s.trace.clone(),
            );
            let result = run(
                steps,
                &self.namespace,
                &self.config,
                request,
                s.inputs,
                s.batch,
                s.outputs,
            )
            .await;
            let compute = start.elapsed();
            if result.is_ok() {
                self.stats
                    .record_execution(s.batch, (Duration::ZERO, compute, Duration::ZERO));
            }
            Done {
                result,
                queue: Duration::ZERO,
                compute,
                input: Duration::ZERO,
                output: Duration::ZERO,
                rejected: false,
                parameters: None,
                last: true,
            }
        }))
    }
}

/// One ensemble tensor as Triton's ensemble scheduler keeps it: the data
/// (`None` for an optional ensemble input the request left out, or a step
/// output its model did not produce: steps that read it still run, without
/// that input) and the batch size of the request it came from (0 from a
/// model without batching), which decides whether a batch dimension is
/// added or stripped on the way into the next model.
struct Slot {
    tensor: Option<Tensor>,
    batch: usize,
}

/// Triton's `ReshapeTensorDims`: a tensor moving between a model with
/// batching and one without. Into a batching model, a tensor from a
/// non-batching source whose shape matches the model's `dims` gets a batch
/// dimension of 1; into a non-batching model, a tensor of batch 1 whose
/// shape does not match `dims` loses its batch dimension. Anything else is
/// passed as it is.
fn fit_dims(dims: &[i64], batching: bool, source_batch: usize, shape: Vec<i64>) -> Vec<i64> {
    if batching == (source_batch != 0) {
        return shape;
    }
    if batching {
        if matches_wildcard(dims, &shape) {
            return std::iter::once(1).chain(shape).collect();
        }
    } else if source_batch == 1 && !shape.is_empty() && !matches_wildcard(dims, &shape) {
        return shape[1..].to_vec();
    }
    shape
}

/// Triton's `CompareDimsWithWildcard`: same rank, each dimension equal or
/// either one -1.
fn matches_wildcard(dims: &[i64], shape: &[i64]) -> bool {
    dims.len() == shape.len()
        && dims
            .iter()
            .zip(shape)
            .all(|(&d, &s)| d == -1 || s == -1 || d == s)
}

/// The steps a request needs: those that produce a requested output, and
/// then those that feed a needed step (Triton prunes the rest).
fn needed_steps<'s>(steps: &'s [Step], outputs: &[RequestedOutput]) -> Vec<&'s Step> {
    let mut wanted: std::collections::HashSet<&str> =
        outputs.iter().map(|o| o.name.as_str()).collect();
    let mut needed = vec![false; steps.len()];
    loop {
        let mut grew = false;
        for (i, step) in steps.iter().enumerate() {
            if !needed[i]
                && step
                    .output_map
                    .values()
                    .any(|t| wanted.contains(t.as_str()))
            {
                needed[i] = true;
                grew = true;
                wanted.extend(step.input_map.values().map(String::as_str));
            }
        }
        if !grew {
            break;
        }
    }
    steps
        .iter()
        .zip(needed)
        .filter_map(|(s, n)| n.then_some(s))
        .collect()
}

/// The tensor's shape through a `reshape` (`from` → `to`, batch dimension
/// kept outside), as Triton applies an ensemble's own input and output
/// reshapes.
fn reshaped(mut t: Tensor, from: &[i64], to: &[i64], batching: bool) -> Result<Tensor> {
    t.shape = reshape_shape(&t.shape, from, to, batching).ok_or_else(|| {
        Error::invalid_arg(format!(
            "tensor '{}' has shape {:?}, which cannot be reshaped from {from:?} to {to:?}",
            t.name, t.shape
        ))
    })?;
    Ok(t)
}

/// A step's request as its model takes it: each input's batch dimension
/// fitted to the model's batching (`fit_dims`), inputs with no data left
/// out. Returns the request's batch size as Triton records it for the
/// step's outputs (0 for a model without batching).
fn fit_step_inputs(config: &ModelConfig, inputs: &mut [(Tensor, usize)]) -> usize {
    let batching = config.max_batch_size > 0;
    for (t, source_batch) in inputs.iter_mut() {
        if let Some(spec) = config.input.iter().find(|i| i.name == t.name) {
            t.shape = fit_dims(
                &spec.dims,
                batching,
                *source_batch,
                std::mem::take(&mut t.shape),
            );
        }
    }
    if !batching {
        return 0;
    }
    inputs
        .first()
        .and_then(|(t, _)| t.shape.first())
        .map_or(1, |&b| b.max(0) as usize)
}

/// Runs an ensemble request (already validated against the ensemble's
/// config); returns the requested outputs that the steps produced, in the
/// requested order.
async fn run(
    runner: &dyn StepRunner,
    home: &str,
    config: &ModelConfig,
    // The request's id, priority, timeout, sequence and backend parameters,
    // passed to every step (stateful composing models get the sequence).
    (id, priority, timeout_us, sequence, parameters, trace): (
        &str,
        u64,
        u64,
        &SequenceParams,
        &serde_json::Map<String, serde_json::Value>,
        Option<crate::core::types::TraceContext>,
    ),
    inputs: Vec<Tensor>,
    batch: usize,
    outputs: &[RequestedOutput],
) -> Result<Vec<Tensor>> {
    let name = &config.name;
    let Some(SchedulingChoice::EnsembleScheduling(ensembling)) = &config.scheduling_choice else {
        return Err(Error::internal(format!(
            "ensemble '{name}' has no ensemble_scheduling"
        )));
    };
    let batching = config.max_batch_size > 0;
    let source_batch = if batching { batch } else { 0 };
    let mut inputs: HashMap<String, Tensor> =
        inputs.into_iter().map(|t| (t.name.clone(), t)).collect();
    let mut tensors: HashMap<String, Slot> = HashMap::new();
    for spec in &config.input {
        // Moved, not copied: the request's tensors become the ensemble's.
        let tensor = match (inputs.remove(&spec.name), &spec.reshape) {
            (Some(t), Some(r)) => Some(reshaped(t, &spec.dims, &r.shape, batching)?),
            (t, _) => t,
        };
        tensors.insert(
            spec.name.clone(),
            Slot {
                tensor,
                batch: source_batch,
            },
        );
    }
    let steps = needed_steps(&ensembling.step, outputs);
    // How many readers each tensor has left (the response counts as one).
    let mut readers: HashMap<String, usize> = HashMap::new();
    for step in &steps {
        for ensemble_name in step.input_map.values() {
            *readers.entry(ensemble_name.clone()).or_default() += 1;
        }
    }
    for o in outputs {
        *readers.entry(o.name.clone()).or_default() += 1;
    }
    let in_ensemble = |mut e: Error| {
        e.message = format!("in ensemble '{name}', {}", e.message);
        e
    };
    let mut pending = steps;
    let mut running = FuturesUnordered::new();
    loop {
        // Start every step whose input tensors all exist.
        let (ready, waiting): (Vec<&Step>, Vec<&Step>) = pending
            .into_iter()
            .partition(|s| s.input_map.values().all(|t| tensors.contains_key(t)));
        pending = waiting;
        for step in ready {
            let mut step_inputs = Vec::with_capacity(step.input_map.len());
            for (model_input, ensemble_name) in &step.input_map {
                let left = readers.get_mut(ensemble_name).map(|n| {
                    *n -= 1;
                    *n
                });
                let slot = tensors
                    .get_mut(ensemble_name)
                    .ok_or_else(|| Error::internal(format!("tensor '{ensemble_name}' vanished")))?;
                let t = if left == Some(0) {
                    slot.tensor.take()
                } else {
                    slot.tensor.clone()
                };
                if let Some(mut t) = t {
                    t.name = model_input.clone();
                    step_inputs.push((t, slot.batch));
                }
            }
            let version = step_version(step);
            let mut step_batch = 0;
            runner
                .with_step_config(home, &step.model_name, &version, &mut |c| {
                    step_batch = fit_step_inputs(c, &mut step_inputs);
                })
                .map_err(in_ensemble)?;
            let step_request = InferRequest {
                id: id.to_string(),
                inputs: step_inputs.into_iter().map(|(t, _)| t).collect(),
                shm_inputs: Vec::new(),
                outputs: step
                    .output_map
                    .keys()
                    .map(|name| RequestedOutput::named(name.clone()))
                    .collect(),
                priority,
                timeout_us,
                sequence: sequence.clone(),
                parameters: parameters.clone(),
                // A traced ensemble's steps are its children.
                trace_context: trace.clone(),
            };
            running.push(async move {
                let result = runner
                    .run_step(home, &step.model_name, &version, step_request)
                    .await;
                (step, step_batch, result)
            });
        }
        // Wait for the next step to finish; its outputs may start others.
        let Some((step, step_batch, result)) = running.next().await else {
            break;
        };
        let response = result.map_err(in_ensemble)?;
        let mut produced: HashMap<String, Tensor> = response
            .outputs
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect();
        // An output the model did not produce is a tensor without data:
        // the steps that read it as an optional input still run.
        for (model_output, ensemble_name) in &step.output_map {
            let tensor = produced.remove(model_output).map(|t| Tensor {
                name: ensemble_name.clone(),
                ..t
            });
            tensors.insert(
                ensemble_name.clone(),
                Slot {
                    tensor,
                    batch: step_batch,
                },
            );
        }
    }
    if let Some(step) = pending.first() {
        let missing = step
            .input_map
            .values()
            .find(|t| !tensors.contains_key(*t))
            .cloned()
            .unwrap_or_default();
        return Err(Error::internal(format!(
            "in ensemble '{name}', the step of model '{}' waits for tensor '{missing}', which no step produced",
            step.model_name
        )));
    }
    let mut results = Vec::with_capacity(outputs.len());
    for o in outputs {
        let Some(Slot {
            tensor: Some(mut t),
            batch: tensor_batch,
        }) = tensors.remove(&o.name)
        else {
            // Triton leaves out an output no composing model produced.
            continue;
        };
        if let Some(spec) = config.output.iter().find(|s| s.name == o.name) {
            let inside = spec.reshape.as_ref().map_or(&spec.dims, |r| &r.shape);
            t.shape = fit_dims(inside, batching, tensor_batch, std::mem::take(&mut t.shape));
            if let Some(r) = &spec.reshape {
                t = reshaped(t, &r.shape, &spec.dims, batching)?;
            }
        }
        results.push(t);
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_batching_tensor_gains_a_batch_of_one_where_its_shape_is_the_dims() {
        assert_eq!(fit_dims(&[-1], true, 0, vec![16]), vec![1, 16]);
        assert_eq!(fit_dims(&[16], true, 0, vec![16]), vec![1, 16]);
        // Not the model's dims: taken as already batched.
        assert_eq!(fit_dims(&[16], true, 0, vec![3, 16]), vec![3, 16]);
    }

    #[test]
    fn a_batch_of_one_is_stripped_for_a_non_batching_model() {
        assert_eq!(fit_dims(&[16], false, 1, vec![1, 16]), vec![16]);
        // The shape already fits the model as it is.
        assert_eq!(fit_dims(&[-1, -1], false, 1, vec![1, 16]), vec![1, 16]);
        // A larger batch is passed as it is.
        assert_eq!(fit_dims(&[16], false, 2, vec![2, 16]), vec![2, 16]);
    }

    #[test]
    fn same_batching_on_both_sides_changes_nothing() {
        assert_eq!(fit_dims(&[16], true, 4, vec![4, 16]), vec![4, 16]);
        assert_eq!(fit_dims(&[16], false, 0, vec![16]), vec![16]);
    }

    #[test]
    fn steps_that_feed_no_requested_output_are_pruned() {
        let step = |model: &str, i: &str, o: &str| Step {
            model_name: model.into(),
            input_map: [("IN".to_string(), i.to_string())].into(),
            output_map: [("OUT".to_string(), o.to_string())].into(),
            ..Default::default()
        };
        let steps = vec![
            step("a", "X", "T"),
            step("b", "T", "Y"),
            step("c", "X", "Z"),
        ];
        let out = |n: &str| RequestedOutput::named(n);
        let names = |v: Vec<&Step>| v.iter().map(|s| s.model_name.clone()).collect::<Vec<_>>();
        assert_eq!(names(needed_steps(&steps, &[out("Y")])), ["a", "b"]);
        assert_eq!(names(needed_steps(&steps, &[out("Z")])), ["c"]);
        assert_eq!(
            names(needed_steps(&steps, &[out("Y"), out("Z")])),
            ["a", "b", "c"]
        );
    }
}
