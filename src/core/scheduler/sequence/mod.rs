//! The sequence batcher (`sequence_batching` in the config): routes every
//! request of a sequence to one instance (`places` keeps the places, the
//! backlog and the idle clock), fills the control inputs (START, END,
//! READY, CORRID) of each batch row (`tensors`; what to fill comes from
//! `settings`), and carries implicit state from one request of a sequence
//! to the next.
//!
//! Each instance forms its own batches, on its own thread: the instance
//! threads take their work from the batcher (`instance::WorkSource`),
//! each waiting on its own condition variable for a request of one of its
//! sequences and out its batch's queue delay. A submitter wakes the
//! instance that holds the request's sequence, so a request crosses one
//! thread on its way in and one on its way out. An instance runs one batch
//! at a time, so a sequence's requests run in order and its state is
//! stored (when the execution ends, on the instance's thread) before its
//! next request is batched. The batcher's own thread keeps time: it frees
//! the places of idle sequences (handing them to the backlog and waking
//! their instances) and ends backlogged requests whose timeout passed; it
//! is woken only when such a deadline comes sooner than it would wake.
//!
//! A backend that takes a batch's requests apart (the Python backend) gets
//! the batch as a list: each row one request with its own inputs, its row's
//! control inputs, its correlation id and START/END flags, answering
//! through its own responder (Triton's Python backend under the sequence
//! batcher). Implicit state is refused for such a backend at load.

pub mod places;
mod settings;
mod tensors;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar};
use std::time::{Duration, Instant};

use super::lists::Answer;
use super::worker::{self, Batcher, Worker};
use super::{pending, Answering, Completion, Submission};
use crate::core::error::{request_prefix, Error, Result};
use crate::core::instance::{Done, InstancePool, Work, WorkSource};
use crate::core::metrics::stats::ModelStats;
use crate::core::responder::Responder;
use crate::core::types::{hooks, DataType, RequestInfo, SequenceId, Tensor};
use places::Refusal;
pub use places::{Next, SeqConfig, Sequences, Strategy};
pub use settings::{Control, ControlKind, SeqSettings, StateSpec};
use tensors::{batch_work, shape_key, take_rows};

/// A request waiting in the sequence batcher.
struct SeqRequest {
    /// Inputs in the model config's order, batch dimension included.
    inputs: Vec<Tensor>,
    outputs: Vec<String>,
    enqueued: Instant,
    /// Where its answers go (several for a decoupled model).
    reply: SeqReply,
    pending: Arc<AtomicI64>,
    id: SequenceId,
    /// The request's `timeout` (µs, 0: none): how long it may wait in the
    /// backlog for its sequence to get a place.
    timeout_us: u64,
    /// What a backend that takes requests apart reads of it (id,
    /// correlation id, flags, parameters); None otherwise.
    info: Option<Box<RequestInfo>>,
}

/// Where a queued request's answers go: its caller's channel, or, for a
/// request its model rescheduled, the responder it already answers
/// through (a decoupled model's stream goes on).
enum SeqReply {
    Caller(Answer),
    Taken(Responder),
}

impl SeqReply {
    /// Sends the request's last answer.
    fn send(self, done: Done) {
        match self {
            SeqReply::Caller(answer) => answer.send(done),
            SeqReply::Taken(responder) => {
                responder.respond(done.result, true);
            }
        }
    }

    /// The responder the request answers through once an instance took it.
    fn into_responder(self, enqueued: Instant) -> Responder {
        match self {
            SeqReply::Caller(answer) => Responder::new(answer.into_sink(), enqueued),
            SeqReply::Taken(responder) => responder,
        }
    }
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
    /// When the batcher's thread wakes to keep time (None: only when
    /// woken).
    keeper_at: Option<Instant>,
    /// Triton's test hooks (`core::types::hooks`): no batch forms until
    /// `TRITONSERVER_DELAY_SCHEDULER` requests are queued in places and
    /// `TRITONSERVER_BACKLOG_DELAY_SCHEDULER` in the backlog; then both are
    /// 0 for good. Tests use them to count the batches a known set of
    /// requests makes.
    hold: (usize, usize),
    /// Iterative sequences whose running request the model rescheduled:
    /// they keep their place when the execution ends.
    rescheduled: HashSet<u64>,
}

impl State {
    /// Whether the test hooks still hold every batch back (and clears them
    /// once their counts are reached).
    fn held(&mut self) -> bool {
        let (places, backlog) = self.hold;
        if places == 0 && backlog == 0 {
            return false;
        }
        let in_backlog = self.seqs.backlog_queued();
        let in_places = self.seqs.queued() - in_backlog;
        if in_places < places || in_backlog < backlog {
            return true;
        }
        self.hold = (0, 0);
        false
    }

    /// The next deadline the batcher's thread keeps: a sequence that could
    /// idle out, a backlogged request's timeout.
    fn next_deadline(&self) -> Option<Instant> {
        match (self.seqs.next_idle(), self.seqs.next_backlog_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the batcher's thread must be woken: a deadline comes before
    /// it would wake. It then counts as set to wake for it.
    fn keeper_needed(&mut self) -> bool {
        match self.next_deadline() {
            Some(at) if self.keeper_at.is_none_or(|k| at < k) => {
                self.keeper_at = Some(at);
                true
            }
            _ => false,
        }
    }
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
    /// One per instance: instance `i` waits for its next batch on
    /// `wake[i]`.
    wake: Vec<Condvar>,
    /// The correlation id the next iterative sequence started without one
    /// gets (Triton's count, from 1).
    next_iterative: AtomicU64,
}

type Shared = worker::Shared<Seq>;

impl Batcher for Seq {
    type State = State;
    /// Held for the instances, which take their work from the batcher.
    type Context = Arc<InstancePool>;

    fn thread_name(&self) -> String {
        format!("trtis:seq:{}", self.label)
    }

    fn run(shared: &Arc<Shared>, _: &Arc<InstancePool>) {
        keep_time(shared)
    }

    fn takers(&self) -> &[Condvar] {
        &self.wake
    }

    /// Instance `taker`'s next batch, formed on its thread.
    fn take(shared: &Arc<Shared>, taker: usize) -> Option<Work> {
        let (instance, rows) = next_batch(shared, taker)?;
        Some(batch_work(shared, instance, rows))
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
    /// Starts the batcher and, with `start_pool` given the batcher to take
    /// work from, its instances.
    pub fn start(
        label: &str,
        settings: SeqSettings,
        answering: Answering,
        stats: Arc<ModelStats>,
        start_pool: impl FnOnce(Arc<dyn WorkSource>) -> Result<Arc<InstancePool>>,
    ) -> Result<Self> {
        let mut seqs = Sequences::new(settings.seq.clone());
        let initial: Vec<&[i64]> = settings
            .states
            .iter()
            .map(|s| s.initial_shape.as_slice())
            .collect();
        seqs.set_start_key(shape_key(&initial));
        let instances = seqs.instances();
        let worker = Worker::start_with(
            Seq {
                label: label.to_string(),
                stats,
                settings,
                answering,
                wake: (0..instances.max(1)).map(|_| Condvar::new()).collect(),
                next_iterative: AtomicU64::new(1),
            },
            State {
                seqs,
                states: HashMap::new(),
                keeper_at: None,
                hold: (
                    hooks::env_count("TRITONSERVER_DELAY_SCHEDULER") as usize,
                    hooks::env_count("TRITONSERVER_BACKLOG_DELAY_SCHEDULER") as usize,
                ),
                rescheduled: HashSet::new(),
            },
            |shared| start_pool(Arc::new(worker::Source(Arc::clone(shared)))),
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
        // An iterative sequence's request without a correlation id starts
        // a sequence of its own (Triton's `IterativeSequencer`).
        let (id, start, end) = if shared.settings.iterative && sequence.id.is_none() {
            let n = shared.next_iterative.fetch_add(1, Ordering::Relaxed);
            (SequenceId::Number(n), true, false)
        } else {
            (sequence.id.clone(), sequence.start, sequence.end)
        };
        let info = shared.answering.lists.then(|| {
            let mut info = submission.info();
            info.correlation_id = id.clone();
            info.flags = u32::from(start) | (u32::from(end) << 1);
            Box::new(info)
        });
        let request = SeqRequest {
            info,
            outputs: submission.output_names(),
            inputs: submission.inputs,
            enqueued: submission.enqueued,
            reply: SeqReply::Caller(reply),
            pending: Arc::clone(&shared.stats.pending),
            id,
            timeout_us: submission.timeout_us,
        };
        pending(&shared.stats.pending, || {
            self.push(request, start, end, &prefix)
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
        if id.is_none() && !shared.settings.iterative {
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
        let serial = match state.seqs.submit(key, start, end, request, now) {
            Ok(serial) => serial,
            Err((Refusal::NoStart, r)) => {
                return Err(Error::invalid_arg(format!(
                    "inference request for sequence {} to model '{}' must specify the START flag on the first request of the sequence",
                    r.id, shared.label
                )))
            }
        };
        if timeout > 0 {
            state
                .seqs
                .set_backlog_deadline(serial, now + Duration::from_micros(timeout));
        }
        // The instance that holds the sequence (none while it waits in
        // the backlog) batches the request.
        let instance = state.seqs.instance_of(serial);
        let keeper = state.keeper_needed();
        drop(state);
        if let Some(wake) = instance.and_then(|i| shared.wake.get(i)) {
            wake.notify_one();
        }
        if keeper {
            self.worker.notify();
        }
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

/// Puts a request its model rescheduled back in its sequence (an
/// iterative sequence keeps its place), to run again as neither START nor
/// END; the instance holding the place is woken.
fn requeue(shared: &Shared, serial: u64, mut request: SeqRequest) {
    if let Some(info) = request.info.as_mut() {
        info.flags = 0;
    }
    request.pending.fetch_add(1, Ordering::Relaxed);
    let mut state = shared.lock();
    match state.seqs.requeue(serial, request, Instant::now()) {
        Ok(()) => {
            state.rescheduled.insert(serial);
            let instance = state.seqs.instance_of(serial);
            drop(state);
            if let Some(wake) = instance.and_then(|i| shared.wake.get(i)) {
                wake.notify_one();
            }
        }
        Err(r) => {
            drop(state);
            fail(
                r,
                Error::internal("the sequence of a rescheduled request has ended"),
                false,
            );
        }
    }
}

/// The moment a batcher that is closing batches at: far ahead, so queued
/// requests go without waiting for fuller batches and idle sequences give
/// their places to the backlog at once (its requests still run).
fn closing_now() -> Instant {
    Instant::now() + Duration::from_secs(86_400)
}

/// Waits, as instance `taker`, for its next batch: its rows, taken out of
/// the batcher with their states; None once the batcher is closed and
/// nothing is queued.
fn next_batch(shared: &Shared, taker: usize) -> Option<(usize, Vec<Option<tensors::RowInfo>>)> {
    let wake = shared.wake.get(taker)?;
    let mut state = shared.lock();
    loop {
        let open = state.open;
        if !open && state.seqs.queued() == 0 {
            drop(state);
            for other in &shared.wake {
                other.notify_all();
            }
            return None;
        }
        if open && state.held() {
            // Looked at again every 10 ms, as Triton's batcher threads do.
            state = wake
                .wait_timeout(state, Duration::from_millis(10))
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        }
        let now = if open { Instant::now() } else { closing_now() };
        match state.seqs.next(taker, now, compatible) {
            Next::Run(batch) => {
                let rows = take_rows(&shared.settings, &mut state, batch.rows);
                return Some((batch.instance, rows));
            }
            Next::WaitUntil(at) => {
                let wait = at.saturating_duration_since(Instant::now());
                state = wake
                    .wait_timeout(state, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            Next::Nothing => state = wake.wait(state).unwrap_or_else(|p| p.into_inner()),
        }
    }
}

/// The batcher's thread: frees the places of idle sequences (their
/// instances may have a backlogged sequence to run now) and ends the
/// backlogged requests whose timeout passed, at each deadline; when
/// closing, until nothing is queued.
fn keep_time(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        let open = state.open;
        let now = if open { Instant::now() } else { closing_now() };
        let mut freed = false;
        for (serial, id) in state.seqs.reap(now) {
            freed = true;
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
        if freed || !expired.is_empty() {
            drop(state);
            for wake in &shared.wake {
                wake.notify_all();
            }
            for r in expired {
                let e =
                    Error::unavailable("timeout of the corresponding sequence has been expired");
                fail(r, e, true);
            }
            state = shared.lock();
            continue;
        }
        if !open && state.seqs.queued() == 0 {
            state.keeper_at = None;
            return;
        }
        let at = if open { state.next_deadline() } else { None };
        state.keeper_at = at;
        state = match at {
            Some(at) => {
                let wait = at.saturating_duration_since(Instant::now());
                shared
                    .cv
                    .wait_timeout(state, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            None => shared.cv.wait(state).unwrap_or_else(|p| p.into_inner()),
        };
    }
}
