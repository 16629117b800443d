//! The dynamic batcher (`dynamic_batching` in the config): requests of a
//! model version wait in one queue (`queue`: priority levels, queue
//! policies and the batching decision) and are combined into batches along
//! the first dimension when an instance is free.
//!
//! A batch forms only when an instance can take it, so batches grow under
//! load. The batcher runs on its own thread, waiting on one condition
//! variable for new requests, free instances, the batch's queue delay and
//! the next queue timeout; callers submit under the same lock, so a full
//! queue refuses a request at once. Requests whose callers went away are
//! dropped before batching. A batch executes on the instance threads,
//! which split the outputs among its requests; with `preserve_ordering`
//! the answers are released in arrival order.

mod delivery;
pub mod queue;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::core::error::{Error, Result};
use crate::core::instance::{BackendRequest, Done, InstancePool, Reply, Work};
use crate::core::responder::{Responder, Sink};
use crate::core::types::Tensor;

use super::lists::run_list;
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

/// The most requests waiting in one batcher, whatever the policies say.
const HARD_LIMIT_MESSAGE: &str = "inference request queue is full";

/// What the submitters and the batcher thread share, under one lock.
struct State {
    queue: Queue,
    /// Instances free to take a batch.
    free: usize,
    next_seq: u64,
}

/// What the batcher's thread works with, beside its state.
struct Dyn {
    label: String,
    /// The model's statistics: each batch's execution is counted here.
    stats: Arc<crate::core::stats::ModelStats>,
    config: BatchConfig,
    capacity: usize,
    delivery: Delivery,
    answering: Answering,
}

type Shared = worker::Shared<Dyn>;

impl Batcher for Dyn {
    type State = State;
    type Context = Arc<InstancePool>;

    fn thread_name(&self) -> String {
        format!("trtis:batch:{}", self.label)
    }

    fn run(shared: &Arc<Shared>, pool: &Arc<InstancePool>) {
        run_batcher(shared, pool)
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
    pub fn start(
        label: &str,
        config: BatchConfig,
        answering: Answering,
        pool: Arc<InstancePool>,
        instances: usize,
        capacity: usize,
        stats: Arc<crate::core::stats::ModelStats>,
    ) -> Result<Self> {
        let delivery = if config.preserve_ordering {
            Delivery::Ordered(Mutex::default())
        } else {
            Delivery::Direct
        };
        let state = State {
            queue: Queue::new(&config),
            free: instances.max(1),
            next_seq: 0,
        };
        let worker = Worker::start(
            Dyn {
                label: label.to_string(),
                stats,
                capacity: capacity.max(1),
                config,
                delivery,
                answering,
            },
            state,
            pool,
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

/// Fails a request that never reached an instance.
fn fail(shared: &Shared, r: Request, error: Error) {
    r.pending.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    let done = Done::failed(error, r.enqueued.elapsed(), true);
    shared.delivery.deliver(r.seq, Some((r.reply, done)));
}

fn run_batcher(shared: &Arc<Shared>, pool: &InstancePool) {
    let config = &shared.config;
    let mut state = shared.state.lock().unwrap();
    loop {
        let now = Instant::now();
        sweep_abandoned(shared, &mut state.queue);
        for r in state.queue.expire(now) {
            fail(shared, r, Error::unavailable("Request timeout expired"));
        }
        if state.queue.is_empty() {
            if !state.open {
                return;
            }
            state = shared.cv.wait(state).unwrap();
            continue;
        }
        let mut wake = state.queue.next_timeout();
        if state.free > 0 {
            let n = match decide(&state.queue, config, now) {
                Decision::Send(n) => Some(n),
                // Shutting down: send what is there without waiting.
                Decision::Wait(_) if !state.open => Some(state.queue.len()),
                Decision::Wait(at) => {
                    wake = Some(wake.map_or(at, |w| w.min(at)));
                    None
                }
            };
            if let Some(n) = n {
                state.free -= 1;
                let batch = state.queue.pop(n.max(1));
                drop(state);
                dispatch(batch, pool, shared);
                state = shared.state.lock().unwrap();
                continue;
            }
        }
        state = match wake {
            Some(at) => {
                let wait = at.saturating_duration_since(Instant::now());
                shared.cv.wait_timeout(state, wait).unwrap().0
            }
            None => shared.cv.wait(state).unwrap(),
        };
    }
}

/// Runs a batch on the next instance and splits the outputs.
fn dispatch(batch: Vec<Request>, pool: &InstancePool, shared: &Arc<Shared>) {
    if shared.answering.lists {
        return dispatch_requests(batch, pool, shared);
    }
    let sizes: Vec<usize> = batch.iter().map(|r| r.batch).collect();
    let total: usize = sizes.iter().sum();
    let first_enqueued = batch
        .iter()
        .map(|r| r.enqueued)
        .min()
        .unwrap_or_else(Instant::now);
    let outputs = batch[0].outputs.clone();
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
    let waiting: Vec<(Answer, Instant, u64)> = batch
        .into_iter()
        .map(|r| (r.reply, r.enqueued, r.seq))
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
        for ((reply, enqueued, seq), part) in waiting.into_iter().zip(parts) {
            let answer = Done {
                result: part,
                queue: taken.saturating_duration_since(enqueued),
                compute: done.compute,
                input: done.input,
                output,
                rejected: false,
            };
            finish_shared.delivery.deliver(seq, Some((reply, answer)));
        }
        finish_shared.state.lock().unwrap().free += 1;
        finish_shared.cv.notify_all();
    };
    let inputs = match inputs {
        Ok(inputs) => inputs,
        Err(e) => {
            // The batch inputs cannot be made (item shapes of different
            // ranks): the batch fails with the reason.
            finish(Done::failed(e, Duration::ZERO, false));
            return;
        }
    };
    let work = Work {
        inputs,
        outputs,
        requests: Vec::new(),
        enqueued: first_enqueued,
        reply: Reply::Callback(Box::new(finish)),
        pending: None,
        gather,
    };
    if let Err((e, work)) = pool.submit(work) {
        // The pool refused (it is stopping): the batch fails with the reason.
        work.reply.send(Done::failed(e, Duration::ZERO, false));
    }
}

/// Runs a batch on the next instance as separate requests (a backend that
/// takes requests apart): each answers through its responder; the
/// execution's end counts the batch and frees the instance.
fn dispatch_requests(batch: Vec<Request>, pool: &InstancePool, shared: &Arc<Shared>) {
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
        finish_shared.state.lock().unwrap().free += 1;
        finish_shared.cv.notify_all();
    };
    run_list(pool, None, requests, sizes, first_enqueued, finish);
}
