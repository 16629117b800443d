//! The schedulers: how a model version's requests reach its instances.
//!
//! Every loaded version has exactly one [`Scheduler`], chosen by its config
//! as Triton chooses: the default scheduler (FIFO to the instances, no
//! batching), the dynamic batcher (`dynamic_batching`), the sequence batcher
//! (`sequence_batching`) or the ensemble scheduler (`platform:
//! "ensemble"`). The engine talks to all four the same way: it hands over a
//! validated [`Submission`] and awaits the [`Completion`]; a scheduler
//! refuses at once (a full queue, a bad sequence request) or answers
//! through the completion. Each scheduler counts its own executions and
//! gives each request exactly its part of a batch's outputs.
//!
//! Below this module: the instances (`core::instance`), batch arithmetic
//! (`core::batch_io`) and the statistics; never the engine (an ensemble
//! reaches its composing models through the narrow `StepRunner`).

mod default;
pub mod dynamic;
pub mod ensemble;
mod lists;
pub mod sequence;
mod split;
mod worker;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

use crate::core::batch_io::BatchIo;
use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::instance::{Done, InstancePool, WorkSource};
use crate::core::metrics::stats::ModelStats;
use crate::core::types::{CancelToken, RequestInfo, RequestedOutput, SequenceParams, Tensor};

pub use default::DefaultScheduler;
pub use dynamic::{BatchConfig, DynamicBatcher};
pub use ensemble::{step_version, EnsembleScheduler, StepRunner};
pub use sequence::{SeqSettings, SequenceBatcher};

/// One validated request, as a scheduler takes it.
pub struct Submission<'a> {
    /// The request's id (Triton's messages start with it).
    pub id: &'a str,
    /// Inputs in the model config's order, batch dimension included.
    pub inputs: Vec<Tensor>,
    /// The outputs the caller asked for, in its order.
    pub outputs: &'a [RequestedOutput],
    /// The request's batch size (1 for a model without batching).
    pub batch: usize,
    pub priority: u64,
    /// The request's `timeout` in µs (0: none).
    pub timeout_us: u64,
    pub sequence: &'a SequenceParams,
    /// When the request reached the scheduler (queue time runs from here).
    pub enqueued: Instant,
    /// The request's parameters for the backend (not Triton's own).
    pub parameters: &'a serde_json::Map<String, serde_json::Value>,
    /// Set when the caller stops waiting (the engine's drop guard); a
    /// backend that takes requests apart gets it in `RequestInfo`.
    pub cancel: &'a CancelToken,
    /// For the requests this one makes (an ensemble's steps): its trace
    /// context when it is traced, so theirs are its children.
    pub trace: Option<crate::core::types::TraceContext>,
}

impl Submission<'_> {
    fn output_names(&self) -> Vec<String> {
        self.outputs.iter().map(|o| o.name.clone()).collect()
    }

    /// What a backend that takes requests apart reads of this one.
    fn info(&self) -> RequestInfo {
        RequestInfo {
            id: self.id.to_string(),
            correlation_id: self.sequence.id.clone(),
            flags: u32::from(self.sequence.start) | (u32::from(self.sequence.end) << 1),
            timeout_us: self.timeout_us,
            parameters: self.parameters.clone(),
            cancel: self.cancel.clone(),
            trace: self.trace.clone(),
        }
    }
}

/// How a model's instances take a batch and answer (from its config).
#[derive(Debug, Clone, Copy, Default)]
pub struct Answering {
    /// The backend takes a batch's requests apart
    /// (`backend::takes_request_lists`).
    pub lists: bool,
    /// `model_transaction_policy { decoupled: true }`: any number of
    /// responses per request.
    pub decoupled: bool,
}

impl Answering {
    pub fn of(config: &ModelConfig) -> Self {
        Answering {
            lists: crate::core::config::catalog::takes_request_lists(config),
            decoupled: config
                .model_transaction_policy
                .as_ref()
                .is_some_and(|p| p.decoupled),
        }
    }
}

/// The scheduler of one model version.
pub enum Scheduler {
    Default(DefaultScheduler),
    Dynamic(DynamicBatcher),
    Sequence(SequenceBatcher),
    Ensemble(EnsembleScheduler),
}

impl Scheduler {
    /// The scheduler a model's config asks for, in front of its
    /// `instances` instances, which `start_pool` starts: given the
    /// scheduler they take their work from (either batcher), or None (they
    /// take it from the pool's queue). `sequence` is the sequence batcher's
    /// settings, when the config has `sequence_batching`.
    pub fn start(
        config: &ModelConfig,
        instances: usize,
        start_pool: impl FnOnce(Option<Arc<dyn WorkSource>>) -> Result<Arc<InstancePool>>,
        sequence: Option<SeqSettings>,
        io: BatchIo,
        queue_capacity: usize,
        stats: Arc<ModelStats>,
    ) -> Result<Scheduler> {
        let name = &config.name;
        let answering = Answering::of(config);
        let batching = BatchConfig::from_config(config).filter(|_| sequence.is_none());
        if let Some(batching) = batching {
            return DynamicBatcher::start(
                name,
                batching,
                answering,
                instances,
                queue_capacity,
                stats,
                |source| start_pool(Some(source)),
            )
            .map(Scheduler::Dynamic);
        }
        if let Some(settings) = sequence {
            // `config::support` refuses this first (validate-config too).
            if answering.lists && !settings.states.is_empty() {
                return Err(Error::unsupported(format!(
                    "model '{name}': not supported by trtis: {}",
                    crate::core::config::catalog::LIST_BACKEND_STATE
                )));
            }
            return SequenceBatcher::start(name, settings, answering, stats, |source| {
                start_pool(Some(source))
            })
            .map(Scheduler::Sequence);
        }
        let pool = start_pool(None)?;
        Ok(Scheduler::Default(DefaultScheduler::new(
            pool, io, answering, stats,
        )))
    }

    /// Takes a request, or refuses it at once with the reason. An
    /// ensemble's steps run through `steps` while the completion is
    /// awaited.
    pub fn submit<'a>(
        &'a self,
        submission: Submission<'a>,
        steps: &'a dyn StepRunner,
    ) -> Result<Completion<'a>> {
        match self {
            Scheduler::Default(s) => s.submit(submission),
            Scheduler::Dynamic(s) => s.submit(submission),
            Scheduler::Sequence(s) => s.submit(submission),
            Scheduler::Ensemble(s) => Ok(s.submit(submission, steps)),
        }
    }

    /// Stops taking requests; those queued run at once (unloading).
    pub fn close(&self) {
        match self {
            Scheduler::Dynamic(s) => s.close(),
            Scheduler::Sequence(s) => s.close(),
            Scheduler::Default(_) | Scheduler::Ensemble(_) => {}
        }
    }
}

/// What a scheduler's post-processing does to an answer on the caller's
/// side (the default scheduler counts the execution and scatters
/// `batch_output`s there).
type After = Box<dyn FnOnce(&mut Done) + Send>;

/// The answers to one submitted request: zero or more [`Done`]s, then
/// `None`. Every model today answers exactly once; a decoupled model (the
/// Python backend's) answers any number of times, its stream ending when
/// the model sends the final flag. Dropping a completion abandons the
/// request: a queued request whose caller went away is not computed.
pub struct Completion<'a> {
    answers: Answers<'a>,
}

enum Answers<'a> {
    /// One answer on a channel, with the scheduler's post-processing.
    One(Option<(oneshot::Receiver<Done>, Option<After>)>),
    /// Any number of answers; the channel's close is the final flag.
    Many(crate::core::responder::StreamRx),
    /// One answer computed on the caller's task (an ensemble's steps).
    Running(Option<BoxFuture<'a, Done>>),
}

impl<'a> Completion<'a> {
    /// A completion answered once, on `rx`.
    pub fn one(rx: oneshot::Receiver<Done>) -> Self {
        Completion {
            answers: Answers::One(Some((rx, None))),
        }
    }

    /// A completion answered once, on `rx`, then post-processed by `after`
    /// before the caller sees the answer.
    pub fn one_then(rx: oneshot::Receiver<Done>, after: After) -> Self {
        Completion {
            answers: Answers::One(Some((rx, Some(after)))),
        }
    }

    /// A completion answered any number of times: each `Done` sent on the
    /// returned sender is one response; dropping the sender ends them.
    pub fn stream() -> (crate::core::responder::StreamTx, Self) {
        let (tx, rx) = crate::core::responder::stream_channel();
        let completion = Completion {
            answers: Answers::Many(rx),
        };
        (tx, completion)
    }

    /// A completion answered by a future the caller drives.
    pub fn running(future: BoxFuture<'a, Done>) -> Self {
        Completion {
            answers: Answers::Running(Some(future)),
        }
    }

    /// The next answer; `None` once there are no more.
    pub async fn next(&mut self) -> Option<Done> {
        match &mut self.answers {
            Answers::One(slot) => {
                let (rx, after) = slot.take()?;
                let mut done = rx.await.unwrap_or_else(|_| {
                    Done::failed(
                        Error::internal("the model instance stopped before answering"),
                        std::time::Duration::ZERO,
                        false,
                    )
                });
                if let Some(after) = after {
                    after(&mut done);
                }
                Some(done)
            }
            Answers::Many(rx) => rx.recv().await,
            Answers::Running(future) => match future.take() {
                Some(f) => Some(f.await),
                None => None,
            },
        }
    }
}

/// Counts a request in the model's pending gauge while `submit` queues it
/// (the instance that takes it counts it out); a refused one is counted
/// out again at once.
fn pending<T>(gauge: &AtomicI64, submit: impl FnOnce() -> Result<T>) -> Result<T> {
    gauge.fetch_add(1, Ordering::Relaxed);
    submit().inspect_err(|_| {
        gauge.fetch_sub(1, Ordering::Relaxed);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn done(n: u8) -> Done {
        Done {
            result: Ok(vec![Tensor {
                name: "OUT".into(),
                datatype: crate::core::types::DataType::Uint8,
                shape: vec![1],
                data: vec![n],
            }]),
            queue: Duration::ZERO,
            compute: Duration::ZERO,
            input: Duration::ZERO,
            output: Duration::ZERO,
            rejected: false,
            parameters: None,
            last: true,
        }
    }

    fn value(d: Option<Done>) -> Option<u8> {
        d.map(|d| d.result.unwrap()[0].data[0])
    }

    #[tokio::test]
    async fn a_completion_answers_once_then_ends() {
        let (tx, rx) = oneshot::channel();
        let mut c = Completion::one_then(
            rx,
            Box::new(|d: &mut Done| {
                d.result.as_mut().unwrap()[0].data[0] += 1;
            }),
        );
        tx.send(done(1)).ok();
        assert_eq!(value(c.next().await), Some(2), "post-processed");
        assert!(c.next().await.is_none());
    }

    #[tokio::test]
    async fn a_dropped_sender_is_an_error_answer_not_a_hang() {
        let (tx, rx) = oneshot::channel::<Done>();
        let mut c = Completion::one(rx);
        drop(tx);
        let d = c.next().await.expect("an answer");
        assert!(d.result.is_err());
        assert!(c.next().await.is_none());
    }

    #[tokio::test]
    async fn a_stream_carries_several_answers_then_the_final_flag() {
        let (tx, mut c) = Completion::stream();
        for n in 0..3 {
            tx.send(done(n)).ok();
        }
        drop(tx);
        for n in 0..3 {
            assert_eq!(value(c.next().await), Some(n));
        }
        assert!(c.next().await.is_none());
        let (tx, mut c) = Completion::stream();
        drop(tx);
        assert!(c.next().await.is_none(), "zero responses is allowed");
    }

    #[tokio::test]
    async fn a_running_completion_answers_from_its_future() {
        let mut c = Completion::running(Box::pin(async { done(7) }));
        assert_eq!(value(c.next().await), Some(7));
        assert!(c.next().await.is_none());
    }

    #[test]
    fn a_refused_submission_leaves_the_gauge_as_it_was() {
        let gauge = AtomicI64::new(0);
        let r: Result<()> = pending(&gauge, || Err(Error::unavailable("full")));
        assert!(r.is_err());
        assert_eq!(gauge.load(Ordering::Relaxed), 0);
        pending(&gauge, || Ok(())).unwrap();
        assert_eq!(gauge.load(Ordering::Relaxed), 1);
    }
}
