//! The ensemble scheduler (`platform: "ensemble"`): a request's tensors
//! flow through the steps of `ensemble_scheduling`, each step an inference
//! on its composing model through that model's own scheduler (so composing
//! models batch dynamically). A step starts the moment every tensor it
//! reads exists (steps run concurrently where the graph allows, and a step
//! does not wait for unrelated ones); a tensor whose last reader this is
//! moves into it, others are copied. The first failing step fails the
//! request with its error at once.
//!
//! It knows the server only through `StepRunner` ("run this request on
//! model M"), which the engine implements: no cycle back to the engine.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::{Completion, Submission};
use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::pb::model_ensembling::Step;
use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::instance::Done;
use crate::core::stats::ModelStats;
use crate::core::types::{InferRequest, InferResponse, RequestedOutput, SequenceParams, Tensor};

/// What an ensemble needs of the server: one step's request run on a
/// composing model, through that model's own scheduler (boxed, because a
/// step may itself be an ensemble).
pub trait StepRunner: Sync {
    /// `home` is the ensemble's namespace (see `EnsembleScheduler::namespace`).
    fn run_step<'a>(
        &'a self,
        home: &'a str,
        model: &'a str,
        version: &'a str,
        request: InferRequest,
    ) -> BoxFuture<'a, Result<InferResponse>>;
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
            }
        }))
    }
}

/// Runs an ensemble request (already validated against the ensemble's
/// config); returns the requested outputs, in the requested order.
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
    outputs: &[RequestedOutput],
) -> Result<Vec<Tensor>> {
    let name = &config.name;
    let Some(SchedulingChoice::EnsembleScheduling(ensembling)) = &config.scheduling_choice else {
        return Err(Error::internal(format!(
            "ensemble '{name}' has no ensemble_scheduling"
        )));
    };
    let mut tensors: HashMap<String, Tensor> =
        inputs.into_iter().map(|t| (t.name.clone(), t)).collect();
    // How many readers each tensor has left (the response counts as one).
    let mut readers: HashMap<String, usize> = HashMap::new();
    for step in &ensembling.step {
        for ensemble_name in step.input_map.values() {
            *readers.entry(ensemble_name.clone()).or_default() += 1;
        }
    }
    for o in outputs {
        *readers.entry(o.name.clone()).or_default() += 1;
    }
    let mut pending: Vec<&Step> = ensembling.step.iter().collect();
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
                let mut t = if left == Some(0) {
                    tensors.remove(ensemble_name)
                } else {
                    tensors.get(ensemble_name).cloned()
                }
                .ok_or_else(|| Error::internal(format!("tensor '{ensemble_name}' vanished")))?;
                t.name = model_input.clone();
                step_inputs.push(t);
            }
            let step_request = InferRequest {
                id: id.to_string(),
                inputs: step_inputs,
                shm_inputs: Vec::new(),
                outputs: step
                    .output_map
                    .keys()
                    .map(|name| RequestedOutput {
                        name: name.clone(),
                        classification: None,
                        shm: None,
                    })
                    .collect(),
                priority,
                timeout_us,
                sequence: sequence.clone(),
                parameters: parameters.clone(),
                // A traced ensemble's steps are its children.
                trace_context: trace.clone(),
            };
            let version = step_version(step);
            running.push(async move {
                let result = runner
                    .run_step(home, &step.model_name, &version, step_request)
                    .await;
                (step, result)
            });
        }
        // Wait for the next step to finish; its outputs may start others.
        let Some((step, result)) = running.next().await else {
            break;
        };
        let response = result?;
        for t in response.outputs {
            if let Some(ensemble_name) = step.output_map.get(&t.name) {
                tensors.insert(
                    ensemble_name.clone(),
                    Tensor {
                        name: ensemble_name.clone(),
                        ..t
                    },
                );
            }
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
    outputs
        .iter()
        .map(|o| {
            tensors.remove(&o.name).ok_or_else(|| {
                Error::internal(format!("ensemble '{name}' produced no tensor '{}'", o.name))
            })
        })
        .collect()
}
