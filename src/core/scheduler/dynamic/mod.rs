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

pub mod ensemble;
pub mod queue;
pub mod sequence;
pub mod sequence_batcher;
mod worker;

use worker::{Batcher, Worker};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::core::error::{Error, Result};
use crate::core::instance::{Done, InstancePool, Reply, Work};
use crate::core::types::Tensor;

pub use queue::{decide, BatchConfig, Decision, QueuePolicy, TimeoutAction};

/// A request in the dynamic batcher's queue: its answer goes back on a
/// oneshot channel.
pub type Request = queue::Request<oneshot::Sender<Done>>;
type Queue = queue::Queue<oneshot::Sender<Done>>;

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
            let done = Done {
                result: Err(error.clone()),
                queue: r.enqueued.elapsed(),
                compute: Duration::ZERO,
                rejected: false,
            };
            self.delivery.deliver(r.seq, Some((r.reply, done)));
        }
    }
}

/// How answers reach the callers: at once, or in arrival order.
enum Delivery {
    Direct,
    Ordered(Mutex<Ordered>),
}

#[derive(Default)]
struct Ordered {
    /// The next sequence number to release.
    next: u64,
    /// Answers waiting for earlier ones (`None`: nothing to send).
    ready: BTreeMap<u64, Option<(oneshot::Sender<Done>, Done)>>,
}

impl Delivery {
    fn deliver(&self, seq: u64, answer: Option<(oneshot::Sender<Done>, Done)>) {
        match self {
            Delivery::Direct => {
                if let Some((tx, done)) = answer {
                    let _ = tx.send(done);
                }
            }
            Delivery::Ordered(ordered) => {
                let mut o = ordered.lock().unwrap();
                o.ready.insert(seq, answer);
                loop {
                    let next = o.next;
                    let Some(answer) = o.ready.remove(&next) else {
                        break;
                    };
                    o.next += 1;
                    if let Some((tx, done)) = answer {
                        let _ = tx.send(done);
                    }
                }
            }
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
            },
            state,
            pool,
        )?;
        Ok(DynamicBatcher { worker })
    }

    /// Queues a request, or refuses it at once (unloading, or its
    /// priority level's queue is full). `id` is the request's id, for
    /// Triton's message prefix.
    pub fn submit(&self, request: Request, id: &str) -> Result<()> {
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
        pushed.map_err(|(e, _)| {
            Error::new(
                e.kind,
                format!("{}{}", crate::core::error::request_prefix(id), e.message),
            )
        })?;
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
    let done = Done {
        result: Err(error),
        queue: r.enqueued.elapsed(),
        compute: Duration::ZERO,
        rejected: true,
    };
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
    let inputs = io.model_inputs(
        batch
            .iter_mut()
            .map(|r| std::mem::take(&mut r.inputs))
            .collect(),
    );
    for r in &batch {
        r.pending.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
    let waiting: Vec<(oneshot::Sender<Done>, Instant, u64)> = batch
        .into_iter()
        .map(|r| (r.reply, r.enqueued, r.seq))
        .collect();
    let finish_shared = Arc::clone(shared);
    let finish = move |done: Done| {
        let taken = Instant::now() - done.compute;
        if done.result.is_ok() {
            finish_shared.stats.record_execution(total, done.compute);
        }
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
        for ((reply, enqueued, seq), part) in waiting.into_iter().zip(parts) {
            let answer = Done {
                result: part,
                queue: taken.saturating_duration_since(enqueued),
                compute: done.compute,
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
            finish(Done {
                result: Err(e),
                queue: Duration::ZERO,
                compute: Duration::ZERO,
                rejected: false,
            });
            return;
        }
    };
    let work = Work {
        inputs,
        outputs,
        enqueued: first_enqueued,
        reply: Reply::Callback(Box::new(finish)),
        pending: None,
    };
    if let Err((e, work)) = pool.submit(work) {
        // The pool refused (it is stopping): the batch fails with the reason.
        work.reply.send(Done {
            result: Err(e),
            queue: Duration::ZERO,
            compute: Duration::ZERO,
            rejected: false,
        });
    }
}

/// Splits batched outputs along dim 0 into the requests' parts; a
/// scattered output (`batch_output`) by the requests' shapes of it.
fn split(
    tensors: &[Tensor],
    sizes: &[usize],
    scatter: &[(String, Vec<Vec<i64>>)],
) -> Vec<Result<Vec<Tensor>>> {
    let total: usize = sizes.iter().sum();
    let mut parts: Vec<Result<Vec<Tensor>>> = sizes.iter().map(|_| Ok(Vec::new())).collect();
    for t in tensors {
        if let Some((_, shapes)) = scatter.iter().find(|(name, _)| name == &t.name) {
            match crate::core::batch_io::scatter(t, shapes) {
                Ok(pieces) => {
                    for (part, piece) in parts.iter_mut().zip(pieces) {
                        if let Ok(list) = part {
                            list.push(piece);
                        }
                    }
                }
                Err(e) => return sizes.iter().map(|_| Err(e.clone())).collect(),
            }
            continue;
        }
        let rows = t.shape.first().copied().unwrap_or(0) as usize;
        if rows != total {
            let e = Error::internal(format!(
                "output '{}' has {rows} rows for a batch of {total}",
                t.name
            ));
            return sizes.iter().map(|_| Err(e.clone())).collect();
        }
        let pieces: Vec<Vec<u8>> = match t.datatype.size() {
            Some(_) => {
                let row = t.data.len().checked_div(total).unwrap_or(0);
                let mut at = 0;
                sizes
                    .iter()
                    .map(|&n| {
                        let piece = t.data[at..at + n * row].to_vec();
                        at += n * row;
                        piece
                    })
                    .collect()
            }
            None => {
                let elements = Tensor::bytes_elements(&t.data).unwrap_or_default();
                let per_row = elements.len().checked_div(total).unwrap_or(0);
                let mut at = 0;
                sizes
                    .iter()
                    .map(|&n| {
                        let piece =
                            Tensor::serialize_bytes(elements[at..at + n * per_row].iter().copied());
                        at += n * per_row;
                        piece
                    })
                    .collect()
            }
        };
        for ((part, piece), &n) in parts.iter_mut().zip(pieces).zip(sizes) {
            if let Ok(list) = part {
                let mut shape = t.shape.clone();
                shape[0] = n as i64;
                list.push(Tensor {
                    name: t.name.clone(),
                    datatype: t.datatype,
                    shape,
                    data: piece,
                });
            }
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::types::DataType;

    fn done(n: i32) -> Done {
        Done {
            result: Ok(vec![Tensor {
                name: "OUT".into(),
                datatype: DataType::Int32,
                shape: vec![1],
                data: n.to_le_bytes().to_vec(),
            }]),
            queue: Duration::ZERO,
            compute: Duration::ZERO,
            rejected: false,
        }
    }

    #[test]
    fn ordered_delivery_waits_for_earlier_answers_and_skips_gone_ones() {
        let d = Delivery::Ordered(Mutex::default());
        let (tx0, mut rx0) = oneshot::channel();
        let (tx2, mut rx2) = oneshot::channel();
        let (tx3, mut rx3) = oneshot::channel();
        d.deliver(2, Some((tx2, done(2))));
        d.deliver(3, Some((tx3, done(3))));
        assert!(rx2.try_recv().is_err(), "2 waits for 0 and 1");
        d.deliver(0, Some((tx0, done(0))));
        assert!(rx0.try_recv().is_ok());
        assert!(rx2.try_recv().is_err(), "2 still waits for 1");
        d.deliver(1, None); // 1's caller went away
        assert!(rx2.try_recv().is_ok());
        assert!(rx3.try_recv().is_ok());
    }

    #[test]
    fn split_gives_each_request_its_rows() {
        let t = Tensor {
            name: "OUT".into(),
            datatype: DataType::Int32,
            shape: vec![3, 2],
            data: (0..6i32).flat_map(|x| x.to_le_bytes()).collect(),
        };
        let parts = split(&[t], &[1, 2], &[]);
        let a = parts[0].as_ref().unwrap();
        let b = parts[1].as_ref().unwrap();
        assert_eq!(a[0].shape, vec![1, 2]);
        assert_eq!(b[0].shape, vec![2, 2]);
        assert_eq!(
            b[0].data,
            (2..6i32).flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()
        );
        let strings = Tensor {
            name: "S".into(),
            datatype: DataType::Bytes,
            shape: vec![2, 1],
            data: Tensor::serialize_bytes([b"a".as_slice(), b"bc".as_slice()]),
        };
        let parts = split(&[strings], &[1, 1], &[]);
        assert_eq!(
            parts[1].as_ref().unwrap()[0].data,
            Tensor::serialize_bytes([b"bc".as_slice()])
        );
    }
}
