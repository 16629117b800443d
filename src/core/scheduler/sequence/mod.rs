//! The sequence batcher (`sequence_batching` in the config): routes every
//! request of a sequence to one instance (`places` keeps the places, the
//! backlog and the idle clock), fills the control inputs (START, END,
//! READY, CORRID) of each batch row (`tensors`; what to fill comes from
//! `settings`), and carries implicit state from one request of a sequence
//! to the next.
//!
//! It runs on its own thread, waiting on one condition variable for new
//! requests, finished batches, a batch's queue delay and the next idle
//! deadline. Each instance has its own queue in the pool, and an instance
//! runs one batch at a time, so a sequence's requests run in order and its
//! state is stored before its next request is batched.
//!
//! A backend that takes a batch's requests apart (the Python backend) gets
//! the batch as a list: each row one request with its own inputs, its row's
//! control inputs, its correlation id and START/END flags, answering
//! through its own responder (Triton's Python backend under the sequence
//! batcher). Implicit state is refused for such a backend at load.

pub mod places;
mod settings;
mod tensors;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lists::Answer;
use super::worker::{self, Batcher, Worker};
use super::{pending, Answering, Completion, Submission};
use crate::core::error::{request_prefix, Error, Result};
use crate::core::instance::{Done, InstancePool};
use crate::core::stats::ModelStats;
use crate::core::types::{DataType, RequestInfo, SequenceId, Tensor};
use places::Refusal;
pub use places::{Next, SeqConfig, Sequences, Strategy};
pub use settings::{Control, ControlKind, SeqSettings, StateSpec};
use tensors::{dispatch, shape_key, take_rows};

/// A request waiting in the sequence batcher.
struct SeqRequest {
    /// Inputs in the model config's order, batch dimension included.
    inputs: Vec<Tensor>,
    outputs: Vec<String>,
    enqueued: Instant,
    /// Where its answers go (several for a decoupled model).
    reply: Answer,
    pending: Arc<AtomicI64>,
    id: SequenceId,
    /// The request's `timeout` (µs, 0: none): how long it may wait in the
    /// backlog for its sequence to get a place.
    timeout_us: u64,
    /// What a backend that takes requests apart reads of it (id,
    /// correlation id, flags, parameters); None otherwise.
    info: Option<Box<RequestInfo>>,
}

impl std::fmt::Debug for SeqRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeqRequest").field("id", &self.id).finish()
    }
}

struct State {
    seqs: Sequences<SequenceId, SeqRequest>,
    /// Implicit state of each sequence (by serial), per state spec.
    states: HashMap<u64, Vec<Tensor>>,
}

/// The most sequences that may wait for a place (the backlog) in one model
/// version; a new sequence past it is refused (UNAVAILABLE). Triton's
/// backlog has no bound; this one keeps a flood of never-ended sequences
/// from growing the server's memory without end.
pub const MAX_BACKLOG: usize = 16384;

/// The most requests queued in one model version, in places and in the
/// backlog together.
pub const MAX_QUEUED: usize = 65536;

/// What the batcher's thread works with, beside its state.
struct Seq {
    label: String,
    stats: Arc<ModelStats>,
    settings: SeqSettings,
    /// How the instances take a batch: concatenated, or as a list of
    /// requests (and whether each answers once).
    answering: Answering,
}

type Shared = worker::Shared<Seq>;

impl Batcher for Seq {
    type State = State;
    type Context = Arc<InstancePool>;

    fn thread_name(&self) -> String {
        format!("trtis:seq:{}", self.label)
    }

    fn run(shared: &Arc<Shared>, pool: &Arc<InstancePool>) {
        run(shared, pool)
    }

    fn fail_queued(&self, state: &mut State, error: &Error) {
        state.states.clear();
        for r in state.seqs.drain() {
            fail(r, error.clone(), false);
        }
    }
}

/// The sequence batcher of one model version.
pub struct SequenceBatcher {
    worker: Worker<Seq>,
}

impl SequenceBatcher {
    pub fn start(
        label: &str,
        settings: SeqSettings,
        answering: Answering,
        pool: Arc<InstancePool>,
        stats: Arc<ModelStats>,
    ) -> Result<Self> {
        let mut seqs = Sequences::new(settings.seq.clone());
        let initial: Vec<&[i64]> = settings
            .states
            .iter()
            .map(|s| s.initial_shape.as_slice())
            .collect();
        seqs.set_start_key(shape_key(&initial));
        let worker = Worker::start(
            Seq {
                label: label.to_string(),
                stats,
                settings,
                answering,
            },
            State {
                seqs,
                states: HashMap::new(),
            },
            pool,
        )?;
        Ok(SequenceBatcher { worker })
    }

    /// Checks a request (Triton's checks, in its order and with its
    /// messages), then queues it on its sequence, or refuses it.
    pub fn submit<'a>(&self, submission: Submission<'a>) -> Result<Completion<'a>> {
        let shared = self.worker.shared();
        let prefix = request_prefix(submission.id);
        self.check(&submission, &prefix)?;
        let (reply, completion) = Answer::new(shared.answering.decoupled);
        let sequence = submission.sequence;
        let request = SeqRequest {
            info: shared.answering.lists.then(|| Box::new(submission.info())),
            outputs: submission.output_names(),
            inputs: submission.inputs,
            enqueued: submission.enqueued,
            reply,
            pending: Arc::clone(&shared.stats.pending),
            id: sequence.id.clone(),
            timeout_us: submission.timeout_us,
        };
        pending(&shared.stats.pending, || {
            self.push(request, sequence.start, sequence.end, &prefix)
        })?;
        Ok(completion)
    }

    /// The sequence batcher's request checks: the CORRID type (a request
    /// check), batch size 1, a sequence id.
    fn check(&self, submission: &Submission, prefix: &str) -> Result<()> {
        let shared = self.worker.shared();
        let name = &shared.label;
        let id = &submission.sequence.id;
        if let Some(control) = shared.settings.corrid_control() {
            let given = match id {
                SequenceId::Text(_) => Some("BYTES"),
                SequenceId::Number(_) => Some("UINT64"),
                SequenceId::None => None,
            };
            let text_control = control.datatype == DataType::Bytes;
            if let Some(given) = given {
                if (given == "BYTES") != text_control {
                    return Err(Error::invalid_arg(format!(
                        "{prefix}sequence batching control '{}' data-type is '{given}', but model '{name}' expects '{}'",
                        control.name,
                        control.datatype.name()
                    )));
                }
            }
        }
        if shared.settings.batching && submission.batch > 1 {
            return Err(Error::invalid_arg(format!(
                "inference request to model '{name}' must specify batch-size 1 due to requirements of sequence batcher"
            )));
        }
        if id.is_none() {
            return Err(Error::invalid_arg(format!(
                "inference request to model '{name}' must specify a non-zero or non-empty correlation ID"
            )));
        }
        Ok(())
    }

    /// Queues a checked request of a sequence, or refuses it with Triton's
    /// message (`prefix` is the request id prefix).
    fn push(&self, request: SeqRequest, start: bool, end: bool, prefix: &str) -> Result<()> {
        let shared = self.worker.shared();
        let mut state = self.worker.lock_open(&shared.label)?;
        if state.seqs.queued() >= MAX_QUEUED {
            return Err(Error::unavailable(format!(
                "{prefix}inference request queue is full for model '{}': {MAX_QUEUED} requests are queued",
                shared.label
            )));
        }
        let key = request.id.clone();
        if start && state.seqs.backlog_len() >= MAX_BACKLOG && state.seqs.serial_of(&key).is_none()
        {
            return Err(Error::unavailable(format!(
                "{prefix}sequence backlog is full for model '{}': {MAX_BACKLOG} sequences are waiting for a slot",
                shared.label
            )));
        }
        if start && state.seqs.serial_of(&key).is_some() {
            crate::core::logging::log(
                'W',
                &format!(
                    "sequence {key} for model '{}' has a conflict. The previous sequence did not end before this sequence start. Previous sequence will be terminated early.",
                    shared.label
                ),
            );
        }
        let now = Instant::now();
        let timeout = request.timeout_us;
        match state.seqs.submit(key, start, end, request, now) {
            Ok(serial) if timeout > 0 => {
                state
                    .seqs
                    .set_backlog_deadline(serial, now + Duration::from_micros(timeout));
            }
            Ok(_) => {}
            Err((Refusal::NoStart, r)) => {
                return Err(Error::invalid_arg(format!(
                    "inference request for sequence {} to model '{}' must specify the START flag on the first request of the sequence",
                    r.id, shared.label
                )))
            }
        }
        drop(state);
        self.worker.notify();
        Ok(())
    }

    /// Stops taking requests; the queued ones are sent without waiting for
    /// fuller batches.
    pub fn close(&self) {
        self.worker.close();
    }
}

/// Whether two requests can share a batch: equal input shapes and equal
/// state shapes.
fn compatible(a: (&SeqRequest, u64), b: (&SeqRequest, u64)) -> bool {
    a.1 == b.1
        && a.0.inputs.len() == b.0.inputs.len()
        && a.0
            .inputs
            .iter()
            .zip(&b.0.inputs)
            .all(|(x, y)| x.name == y.name && x.shape == y.shape)
}

/// Answers a request that never reached an instance.
fn fail(r: SeqRequest, error: Error, rejected: bool) {
    r.pending.fetch_sub(1, Ordering::Relaxed);
    r.reply
        .send(Done::failed(error, r.enqueued.elapsed(), rejected));
}

fn run(shared: &Arc<Shared>, pool: &InstancePool) {
    let mut state = shared.state.lock().unwrap();
    loop {
        let open = state.open;
        // Shutting down: queued requests go without waiting for fuller
        // batches, and idle sequences give their places to the backlog at
        // once (its requests still run).
        let now = if open {
            Instant::now()
        } else {
            Instant::now() + Duration::from_secs(86_400)
        };
        for (serial, id) in state.seqs.reap(now) {
            state.states.remove(&serial);
            if open {
                crate::core::logging::verbose(&format!(
                    "Reaper: CORRID {id}: max sequence idle exceeded for model '{}'",
                    shared.label
                ));
            }
        }
        // Backlogged sequences whose requests' timeout passed give up
        // (Triton's message and code).
        let expired = state.seqs.expire_backlog(Instant::now());
        if !expired.is_empty() {
            drop(state);
            for r in expired {
                let e =
                    Error::unavailable("timeout of the corresponding sequence has been expired");
                fail(r, e, true);
            }
            state = shared.state.lock().unwrap();
            continue;
        }
        if !open && state.seqs.queued() == 0 {
            return;
        }
        let mut wake = match (state.seqs.next_idle(), state.seqs.next_backlog_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // Batches and the states their rows carry are taken under the lock;
        // their tensors are built after it is released.
        let mut batches = Vec::new();
        for i in 0..state.seqs.instances() {
            match state.seqs.next(i, now, compatible) {
                Next::Run(batch) => {
                    let rows = take_rows(&shared.settings, &mut state, batch.rows);
                    batches.push((batch.instance, rows));
                }
                Next::WaitUntil(at) => wake = Some(wake.map_or(at, |w| w.min(at))),
                Next::Nothing => {}
            }
        }
        if !batches.is_empty() {
            drop(state);
            for (instance, rows) in batches {
                dispatch(shared, pool, instance, rows);
            }
            state = shared.state.lock().unwrap();
            continue;
        }
        state = match wake {
            Some(at) if open => {
                let wait = at.saturating_duration_since(Instant::now());
                shared.cv.wait_timeout(state, wait).unwrap().0
            }
            _ => shared.cv.wait(state).unwrap(),
        };
    }
}
