//! The dynamic batcher (`dynamic_batching` in the config): requests of a
//! model version wait in one queue (`queue`: priority levels, queue
//! policies and the batching decision) and are combined into batches along
//! the first dimension when an instance is free.
//!
//! A batch forms only when an instance can take it, so batches grow under
//! load, and it forms on that instance's own thread: the instance threads
//! take their work from the batcher (`instance::WorkSource`). The instance
//! that went idle last leads: it waits for requests, out the batch's queue
//! delay, and takes the batch it decides on; the other idle instances wait
//! their turn. So a request crosses one thread on its way in (the
//! receiving thread wakes the leading instance) and one on its way out,
//! and a lightly loaded model keeps running on the instance whose data is
//! still in the caches. Callers submit under the same lock, so a full
//! queue refuses a request at once. Requests whose callers went away are
//! dropped before batching.
//!
//! The batcher's own thread keeps time only while no instance is idle: it
//! fails or delays the requests whose queue timeout passes while every
//! instance is busy. The instance threads split a batch's outputs among its
//! requests; with `preserve_ordering` the answers are released in arrival
//! order.

mod delivery;
pub mod queue;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::core::error::{Error, Result};
use crate::core::instance::{BackendRequest, Done, InstancePool, Job, Reply, Work, WorkSource};
use crate::core::responder::{Responder, Sink};
use crate::core::types::Tensor;

use super::lists::list_work;
use super::split::split;
use super::worker::{self, Batcher, Worker};
use super::{pending, Answering, Completion, Submission};
use crate::core::error::request_prefix;
use delivery::{Answer, Delivery};
pub use queue::{decide, BatchConfig, Decision, QueuePolicy, TimeoutAction};

/// A request in the dynamic batcher's queue: its answers go back on a
/// oneshot channel, or (a decoupled model) a stream.
pub type Request = queue::Request<Answer>;
type Queue = queue::Queue<Answer>;

/// Triton's test-only hook: hold the batcher until this many requests
/// are queued (`core::types::hooks`).
pub const DELAY_SCHEDULER_VAR: &str = "TRITONSERVER_DELAY_SCHEDULER";

/// The most requests waiting in one batcher, whatever the policies say.
const HARD_LIMIT_MESSAGE: &str = "inference request queue is full";

/// What the submitters, the instance threads and the batcher's thread
/// share, under one lock.
struct State {
    queue: Queue,
    /// The instances waiting for work, the one that went idle last on top:
    /// it leads (forms the next batch).
    idle: Vec<usize>,
    /// When the batcher's thread wakes to keep time (None: only when
    /// woken).
    keeper_at: Option<Instant>,
    next_seq: u64,
    /// Triton's test hook `TRITONSERVER_DELAY_SCHEDULER=N`: no batch forms
    /// until N requests are queued (then 0, for good), so a test can count
    /// the batches a known set of requests makes.
    hold: usize,
}

impl State {
    /// Whether the batcher's thread must be woken to keep time: no instance
    /// is idle to do it, and a queue timeout comes before it would wake.
    /// It then counts as set to wake for that timeout.
    fn keeper_needed(&mut self) -> bool {
        // (`times_out` first: without queue timeouts, no scan of the queue.)
        if !self.idle.is_empty() || !self.queue.times_out() {
            return false;
        }
        match self.queue.next_timeout() {
            Some(at) if self.keeper_at.is_none_or(|k| at < k) => {
                self.keeper_at = Some(at);
                true
            }
            _ => false,
        }
    }
}

/// What the batcher's thread works with, beside its state.
struct Dyn {
    label: String,
    /// The model's statistics: each batch's execution is counted here.
    stats: Arc<crate::core::metrics::stats::ModelStats>,
    config: BatchConfig,
    capacity: usize,
    delivery: Delivery,
    answering: Answering,
    /// One per instance: instance `i` waits for its turn on `wake[i]`.
    wake: Vec<Condvar>,
}

type Shared = worker::Shared<Dyn>;

impl Batcher for Dyn {
    type State = State;
    /// Held for the instances, which take their work from the batcher.
    type Context = Arc<InstancePool>;

    fn thread_name(&self) -> String {
        format!("trtis:batch:{}", self.label)
    }

    fn run(shared: &Arc<Shared>, _: &Arc<InstancePool>) {
        keep_time(shared)
    }

    fn takers(&self) -> &[Condvar] {
        &self.wake
    }

    /// The leading instance waits out the queue delay, then takes its batch.
    fn take(shared: &Arc<Shared>, taker: usize) -> Option<Work> {
        loop {
            let batch = next_batch(shared, taker)?;
            if let Some(work) = batch_work(batch, shared) {
                return Some(work);
            }
        }
    }

    fn fail_queued(&self, state: &mut State, error: &Error) {
        let n = state.queue.len();
        for r in state.queue.pop(n) {
            r.pending.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            let done = Done::failed(error.clone(), r.enqueued.elapsed(), false);
            self.delivery.deliver(r.seq, Some((r.reply, done)));
        }
    }
}

/// The batcher of one model version.
pub struct DynamicBatcher {
    worker: Worker<Dyn>,
}

impl DynamicBatcher {
    /// Starts the batcher and, with `start_pool` given the batcher to take
    /// work from, its `instances` instances.
    pub fn start(
        label: &str,
        config: BatchConfig,
        answering: Answering,
        instances: usize,
        capacity: usize,
        stats: Arc<crate::core::metrics::stats::ModelStats>,
        start_pool: impl FnOnce(Arc<dyn WorkSource>) -> Result<Arc<InstancePool>>,
    ) -> Result<Self> {
        let delivery = if config.preserve_ordering {
            Delivery::Ordered(Mutex::default())
        } else {
            Delivery::Direct
        };
        let state = State {
            queue: Queue::new(&config),
            idle: Vec::with_capacity(instances),
            keeper_at: None,
            next_seq: 0,
            hold: crate::core::types::hooks::env_count(DELAY_SCHEDULER_VAR) as usize,
        };
        let worker = Worker::start_with(
            Dyn {
                label: label.to_string(),
                stats,
                capacity: capacity.max(1),
                config,
                delivery,
                answering,
                wake: (0..instances.max(1)).map(|_| Condvar::new()).collect(),
            },
            state,
            |shared| start_pool(Arc::new(worker::Source(Arc::clone(shared)))),
        )?;
        Ok(DynamicBatcher { worker })
    }

    /// Queues a request, or refuses it at once (unloading, or its
    /// priority level's queue is full).
    pub fn submit<'a>(&self, submission: Submission<'a>) -> Result<Completion<'a>> {
        let shared = self.worker.shared();
        let (reply, completion) = Answer::new(shared.answering.decoupled);
        let info = shared.answering.lists.then(|| Box::new(submission.info()));
        let request = Request {
            outputs: submission.output_names(),
            inputs: submission.inputs,
            batch: submission.batch,
            enqueued: submission.enqueued,
            reply,
            pending: Arc::clone(&shared.stats.pending),
            priority: submission.priority,
            timeout_us: submission.timeout_us,
            deadline: None,
            seq: 0,
            info,
        };
        pending(&shared.stats.pending, || self.push(request, submission.id))?;
        Ok(completion)
    }

    fn push(&self, request: Request, id: &str) -> Result<()> {
        let shared = self.worker.shared();
        let mut state = self.worker.lock_open(&shared.label)?;
        // Requests whose callers went away must not hold places that a
        // live request needs (the batcher only sweeps when it wakes): a
        // request about to be refused sweeps them first.
        if state.queue.len() >= shared.capacity {
            sweep_abandoned(shared, &mut state.queue);
            if state.queue.len() >= shared.capacity {
                return Err(Error::unavailable(format!(
                    "{HARD_LIMIT_MESSAGE} for model '{}'",
                    shared.label
                )));
            }
        }
        let mut request = request;
        request.seq = state.next_seq;
        let config = &shared.config;
        let pushed = match state.queue.push(config, request) {
            Err((_, request)) if sweep_abandoned(shared, &mut state.queue) > 0 => {
                state.queue.push(config, request)
            }
            other => other,
        };
        pushed
            .map_err(|(e, _)| Error::new(e.kind, format!("{}{}", request_prefix(id), e.message)))?;
        state.next_seq += 1;
        let leader = state.idle.last().copied();
        let keeper = state.keeper_needed();
        drop(state);
        wake_after(shared, leader, keeper);
        Ok(())
    }

    /// Stops taking requests; the queued ones are sent without waiting for
    /// fuller batches, and then the instances' threads end.
    pub fn close(&self) {
        self.worker.close();
    }
}

/// Drops the queued requests whose callers went away (releasing their
/// gauge count and ordering slot); returns how many.
fn sweep_abandoned(shared: &Shared, queue: &mut Queue) -> usize {
    let gone = queue.remove_abandoned();
    for r in &gone {
        r.pending.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        shared.delivery.deliver(r.seq, None);
    }
    gone.len()
}

/// Drops the requests whose callers went away and fails (or delays) the
/// ones whose queue timeout passed by `now`.
fn sweep_and_expire(shared: &Shared, queue: &mut Queue, now: Instant) {
    sweep_abandoned(shared, queue);
    for r in queue.expire(now) {
        fail(shared, r, Error::unavailable("Request timeout expired"));
    }
}

/// After the lock is let go: wakes the instance that leads now, and the
/// batcher's thread when it must keep an earlier timeout
/// (`State::keeper_needed`).
fn wake_after(shared: &Shared, leader: Option<usize>, keeper: bool) {
    if let Some(leader) = leader {
        shared.wake[leader].notify_one();
    }
    if keeper {
        shared.cv.notify_one();
    }
}

/// Fails a request that never reached an instance.
fn fail(shared: &Shared, r: Request, error: Error) {
    r.pending.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    let done = Done::failed(error, r.enqueued.elapsed(), true);
    shared.delivery.deliver(r.seq, Some((r.reply, done)));
}

/// A request's part of a batch's outputs: the ones it asked for, in its
/// order (a batch computes what any of its requests asked for).
fn own_outputs(mut tensors: Vec<Tensor>, asked: &[String]) -> Vec<Tensor> {
    if tensors.len() == asked.len() && tensors.iter().zip(asked).all(|(t, a)| &t.name == a) {
        return tensors;
    }
    asked
        .iter()
        .filter_map(|a| {
            let i = tensors.iter().position(|t| &t.name == a)?;
            Some(tensors.swap_remove(i))
        })
        .collect()
}

/// Waits, as instance `taker`, until it leads and a batch is decided on;
/// returns the batch's requests, or None once the batcher is closed and
/// its queue empty.
fn next_batch(shared: &Shared, taker: usize) -> Option<Vec<Request>> {
    let config = &shared.config;
    let wake = &shared.wake[taker];
    let mut state = shared.lock();
    state.idle.retain(|&t| t != taker);
    state.idle.push(taker);
    loop {
        let now = Instant::now();
        sweep_and_expire(shared, &mut state.queue, now);
        if state.queue.is_empty() && !state.open {
            state.idle.retain(|&t| t != taker);
            return None;
        }
        if state.hold > 0 && state.queue.len() >= state.hold {
            state.hold = 0;
        }
        let held = state.hold > 0 && state.open;
        if state.queue.is_empty() || state.idle.last() != Some(&taker) || held {
            state = wake.wait(state).unwrap_or_else(|p| p.into_inner());
            continue;
        }
        let mut until = state.queue.next_timeout();
        let n = match decide(&state.queue, config, now) {
            Decision::Send(n) => Some(n),
            // Shutting down: send what is there without waiting.
            Decision::Wait(_) if !state.open => Some(state.queue.len()),
            Decision::Wait(at) => {
                until = Some(until.map_or(at, |w| w.min(at)));
                None
            }
        };
        if let Some(n) = n {
            let batch = state.queue.pop(n.max(1));
            state.idle.pop();
            // The next idle instance leads now, if there is more to do.
            let next = if state.queue.is_empty() && state.open {
                None
            } else {
                state.idle.last().copied()
            };
            let keeper = state.keeper_needed();
            drop(state);
            wake_after(shared, next, keeper);
            return Some(batch);
        }
        state = match until {
            Some(at) => {
                let wait = at.saturating_duration_since(Instant::now());
                wake.wait_timeout(state, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            None => wake.wait(state).unwrap_or_else(|p| p.into_inner()),
        };
    }
}

/// The batcher's thread: while no instance is idle (the leading one keeps
/// time itself), fails or delays the requests whose queue timeout passes.
fn keep_time(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        let now = Instant::now();
        sweep_and_expire(shared, &mut state.queue, now);
        if !state.open {
            // The instances send what is queued, at once.
            state.keeper_at = None;
            return;
        }
        let at = if state.idle.is_empty() {
            state.queue.next_timeout()
        } else {
            None
        };
        state.keeper_at = at;
        state = match at {
            Some(at) => {
                let wait = at.saturating_duration_since(Instant::now());
                shared.cv.wait_timeout(state, wait).unwrap().0
            }
            None => shared.cv.wait(state).unwrap(),
        };
    }
}

/// A batch's work for the instance that takes it, which splits the
/// outputs; None when the batch was answered already (its inputs cannot be
/// put together).
fn batch_work(batch: Vec<Request>, shared: &Arc<Shared>) -> Option<Work> {
    if shared.answering.lists {
        return Some(requests_work(batch, shared));
    }
    let sizes: Vec<usize> = batch.iter().map(|r| r.batch).collect();
    let total: usize = sizes.iter().sum();
    let first_enqueued = batch
        .iter()
        .map(|r| r.enqueued)
        .min()
        .unwrap_or_else(Instant::now);
    // Every output a request of the batch asked for, in first-asked order.
    let mut outputs: Vec<String> = Vec::new();
    for r in &batch {
        for o in &r.outputs {
            if !outputs.contains(o) {
                outputs.push(o.clone());
            }
        }
    }
    let io = &shared.config.io;
    let scatter = {
        let views: Vec<&[Tensor]> = batch.iter().map(|r| r.inputs.as_slice()).collect();
        io.scatter_shapes(&views)
    };
    let mut batch = batch;
    let gathering = Instant::now();
    let inputs = io.model_inputs(
        batch
            .iter_mut()
            .map(|r| std::mem::take(&mut r.inputs))
            .collect(),
    );
    let gather = gathering.elapsed();
    for r in &batch {
        r.pending.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
    let waiting: Vec<(Answer, Instant, u64, Vec<String>)> = batch
        .into_iter()
        .map(|r| (r.reply, r.enqueued, r.seq, r.outputs))
        .collect();
    let finish_shared = Arc::clone(shared);
    let finish = move |done: Done| {
        // Where queue time ends (gathering counts as compute_input).
        let taken = first_enqueued + done.queue;
        let ok = done.result.is_ok();
        let splitting = Instant::now();
        let parts = match done.result {
            // A split that panics still answers every request and frees
            // the instance.
            Ok(tensors) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                split(&tensors, &sizes, &scatter)
            }))
            .unwrap_or_else(|_| {
                let e = Error::internal("failed to split the batch's outputs among its requests");
                sizes.iter().map(|_| Err(e.clone())).collect()
            }),
            Err(e) => sizes.iter().map(|_| Err(e.clone())).collect(),
        };
        let output = done.output + splitting.elapsed();
        if ok {
            finish_shared
                .stats
                .record_execution(total, (done.input, done.compute, output));
        }
        for ((reply, enqueued, seq, asked), part) in waiting.into_iter().zip(parts) {
            let answer = Done {
                result: part.map(|tensors| own_outputs(tensors, &asked)),
                queue: taken.saturating_duration_since(enqueued),
                compute: done.compute,
                input: done.input,
                output,
                rejected: false,
                parameters: done.parameters.clone(),
                last: done.last,
            };
            finish_shared.delivery.deliver(seq, Some((reply, answer)));
        }
    };
    let inputs = match inputs {
        Ok(inputs) => inputs,
        Err(e) => {
            // The batch inputs cannot be made (item shapes of different
            // ranks): the batch fails with the reason.
            finish(Done::failed(e, Duration::ZERO, false));
            return None;
        }
    };
    Some(Work {
        job: Job::Batch { inputs, outputs },
        enqueued: first_enqueued,
        reply: Reply::Callback(Box::new(finish)),
        pending: None,
        gather,
    })
}

/// A batch as separate requests for the instance (a backend that
/// takes requests apart): each answers through its responder; the
/// execution's end counts the batch.
fn requests_work(batch: Vec<Request>, shared: &Arc<Shared>) -> Work {
    let sizes: Vec<usize> = batch.iter().map(|r| r.batch).collect();
    let first_enqueued = batch
        .iter()
        .map(|r| r.enqueued)
        .min()
        .unwrap_or_else(Instant::now);
    let requests: Vec<BackendRequest> = batch
        .into_iter()
        .map(|r| {
            r.pending.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            let sink = match r.reply {
                Answer::Once(tx) => {
                    let (seq, delivery) = (r.seq, Arc::clone(shared));
                    Sink::Once(Box::new(move |done| {
                        delivery
                            .delivery
                            .deliver(seq, Some((Answer::Once(tx), done)))
                    }))
                }
                Answer::Stream(tx) => {
                    // A stream's answers go out as they come; its place
                    // in the arrival order is released now.
                    shared.delivery.deliver(r.seq, None);
                    Sink::Stream(tx)
                }
            };
            BackendRequest {
                inputs: r.inputs,
                outputs: r.outputs,
                info: r.info.map(|i| *i).unwrap_or_default(),
                respond: Responder::new(sink, r.enqueued),
                reschedule: None,
            }
        })
        .collect();
    let finish_shared = Arc::clone(shared);
    let finish = move |done: Done, ran: usize| {
        // An execution that ran counts, failed or not (Triton counts a
        // Python model's raising execute too).
        if ran > 0 {
            finish_shared
                .stats
                .record_execution(ran, (done.input, done.compute, done.output));
        }
    };
    list_work(requests, sizes, first_enqueued, finish)
}
