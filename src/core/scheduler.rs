//! The dynamic batcher (`dynamic_batching` in the config): requests of a
//! model version wait in one queue, in arrival order, and are combined into
//! batches along the first dimension when an instance is free.
//!
//! Policy (Triton's, without priorities yet): a batch forms only when an
//! instance can take it, so batches grow under load; it is sent at once
//! when it reaches `max_batch_size` or the largest `preferred_batch_size`,
//! or when the next request cannot join (different shapes, or too large);
//! otherwise it waits until its oldest request has waited
//! `max_queue_delay_microseconds` (0: send what is there). Requests whose
//! callers went away are dropped before batching. The batcher runs on its
//! own thread; the batch executes on the instance threads, which split the
//! outputs among the requests.

use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::instance::{Done, InstancePool, Reply, Work};
use crate::core::types::Tensor;

/// The batching settings of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchConfig {
    pub max_batch_size: usize,
    /// Ascending.
    pub preferred: Vec<usize>,
    pub max_queue_delay: Duration,
}

impl BatchConfig {
    /// The settings, when the model has dynamic batching and batches.
    pub fn from_config(c: &ModelConfig) -> Option<Self> {
        let Some(SchedulingChoice::DynamicBatching(db)) = &c.scheduling_choice else {
            return None;
        };
        if c.max_batch_size <= 0 {
            return None;
        }
        let mut preferred: Vec<usize> = db
            .preferred_batch_size
            .iter()
            .filter(|&&p| p > 0)
            .map(|&p| p as usize)
            .collect();
        preferred.sort_unstable();
        preferred.dedup();
        Some(BatchConfig {
            max_batch_size: c.max_batch_size as usize,
            preferred,
            max_queue_delay: Duration::from_micros(db.max_queue_delay_microseconds),
        })
    }
}

/// One request waiting to be batched.
pub struct Request {
    /// Inputs in config order, each with the request's batch as dim 0.
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<String>,
    /// The request's own batch size.
    pub batch: usize,
    pub enqueued: Instant,
    pub reply: oneshot::Sender<Done>,
    /// The model's pending-request gauge (decremented when dispatched).
    pub pending: Arc<std::sync::atomic::AtomicI64>,
}

/// What to do with the queue now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send the first `n` requests as one batch.
    Send(usize),
    /// Wait for more requests until this instant, then decide again.
    Wait(Instant),
}

/// Whether two requests can share a batch: the same inputs with the same
/// shapes past the batch dimension, and the same outputs.
fn compatible(a: &Request, b: &Request) -> bool {
    a.outputs == b.outputs
        && a.inputs.len() == b.inputs.len()
        && a.inputs.iter().zip(&b.inputs).all(|(x, y)| {
            x.name == y.name && x.datatype == y.datatype && x.shape.get(1..) == y.shape.get(1..)
        })
}

/// The batching decision, a pure function of the queue and the time.
pub fn decide(queue: &VecDeque<Request>, config: &BatchConfig, now: Instant) -> Decision {
    let Some(first) = queue.front() else {
        return Decision::Wait(now + config.max_queue_delay);
    };
    let mut total = 0;
    let mut count = 0;
    let mut preferred_at = None;
    for r in queue {
        if !compatible(first, r) || total + r.batch > config.max_batch_size {
            // The batch cannot grow past this request: send it as it is.
            return Decision::Send(count.max(1));
        }
        total += r.batch;
        count += 1;
        if config.preferred.contains(&total) {
            preferred_at = Some((total, count));
        }
    }
    if total >= config.max_batch_size {
        return Decision::Send(count);
    }
    if let Some((size, n)) = preferred_at {
        if Some(&size) == config.preferred.last() {
            return Decision::Send(n);
        }
    }
    let deadline = first.enqueued + config.max_queue_delay;
    if config.max_queue_delay.is_zero() || now >= deadline {
        // Time is up: the largest preferred batch formed, else all of it.
        return Decision::Send(preferred_at.map(|(_, n)| n).unwrap_or(count));
    }
    Decision::Wait(deadline)
}

/// Free instances, counted.
struct Slots {
    free: Mutex<usize>,
    cv: Condvar,
}

impl Slots {
    fn acquire(&self) {
        let mut free = self.free.lock().unwrap();
        while *free == 0 {
            free = self.cv.wait(free).unwrap();
        }
        *free -= 1;
    }

    fn release(&self) {
        *self.free.lock().unwrap() += 1;
        self.cv.notify_one();
    }
}

/// The batcher of one model version.
pub struct DynamicBatcher {
    /// The queue's sending side; `None` once shutting down.
    tx: Option<SyncSender<Request>>,
    /// Joined on drop.
    thread: Option<JoinHandle<()>>,
    label: String,
}

impl DynamicBatcher {
    pub fn start(
        label: &str,
        config: BatchConfig,
        pool: Arc<InstancePool>,
        instances: usize,
        capacity: usize,
    ) -> Result<Self> {
        let (tx, rx) = mpsc::sync_channel(capacity.max(1));
        let slots = Arc::new(Slots {
            free: Mutex::new(instances.max(1)),
            cv: Condvar::new(),
        });
        let name: String = format!("trtis:batch:{label}").chars().take(15).collect();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || run_batcher(rx, config, pool, slots))
            .map_err(|e| Error::internal(format!("failed to start the batcher thread: {e}")))?;
        Ok(DynamicBatcher {
            tx: Some(tx),
            thread: Some(thread),
            label: label.to_string(),
        })
    }

    pub fn submit(&self, request: Request) -> Result<()> {
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| Error::unavailable(format!("model '{}' is unloading", self.label)))?;
        tx.try_send(request).map_err(|e| match e {
            TrySendError::Full(_) => Error::unavailable(format!(
                "inference request queue of model '{}' is full",
                self.label
            )),
            TrySendError::Disconnected(_) => {
                Error::unavailable(format!("model '{}' is unloading", self.label))
            }
        })
    }
}

impl Drop for DynamicBatcher {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run_batcher(
    rx: Receiver<Request>,
    config: BatchConfig,
    pool: Arc<InstancePool>,
    slots: Arc<Slots>,
) {
    let mut queue: VecDeque<Request> = VecDeque::new();
    let mut open = true;
    loop {
        if queue.is_empty() {
            if !open {
                return;
            }
            match rx.recv() {
                Ok(r) => queue.push_back(r),
                Err(_) => return,
            }
        }
        // Form the batch only once an instance can take it.
        slots.acquire();
        let n = loop {
            while let Ok(r) = rx.try_recv() {
                queue.push_back(r);
            }
            queue.retain(|r| {
                let keep = !r.reply.is_closed();
                if !keep {
                    r.pending.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                }
                keep
            });
            if queue.is_empty() {
                break 0;
            }
            match decide(&queue, &config, Instant::now()) {
                Decision::Send(n) => break n,
                Decision::Wait(deadline) if open => {
                    let wait = deadline.saturating_duration_since(Instant::now());
                    match rx.recv_timeout(wait) {
                        Ok(r) => queue.push_back(r),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => open = false,
                    }
                }
                Decision::Wait(_) => break queue.len(),
            }
        };
        if n == 0 {
            slots.release();
            continue;
        }
        let n = n.min(queue.len());
        let batch: Vec<Request> = queue.drain(..n).collect();
        dispatch(batch, &pool, Arc::clone(&slots));
    }
}

/// Concatenates a batch's inputs, runs it, and splits the outputs.
fn dispatch(batch: Vec<Request>, pool: &InstancePool, slots: Arc<Slots>) {
    let sizes: Vec<usize> = batch.iter().map(|r| r.batch).collect();
    let total: usize = sizes.iter().sum();
    let first_enqueued = batch
        .iter()
        .map(|r| r.enqueued)
        .min()
        .unwrap_or_else(Instant::now);
    let outputs = batch[0].outputs.clone();
    let mut inputs: Vec<Tensor> = Vec::with_capacity(batch[0].inputs.len());
    for (i, t) in batch[0].inputs.iter().enumerate() {
        let mut shape = t.shape.clone();
        shape[0] = total as i64;
        let data = batch
            .iter()
            .flat_map(|r| r.inputs[i].data.iter().copied())
            .collect();
        inputs.push(Tensor {
            name: t.name.clone(),
            datatype: t.datatype,
            shape,
            data,
        });
    }
    for r in &batch {
        r.pending.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
    let waiting: Vec<(oneshot::Sender<Done>, Instant)> =
        batch.into_iter().map(|r| (r.reply, r.enqueued)).collect();
    let finish = move |done: Done| {
        let taken = Instant::now() - done.compute;
        match done.result {
            Ok(tensors) => {
                let parts = split(&tensors, &sizes);
                for (i, ((reply, enqueued), part)) in waiting.into_iter().zip(parts).enumerate() {
                    let _ = reply.send(Done {
                        result: part,
                        queue: taken.saturating_duration_since(enqueued),
                        compute: done.compute,
                        executed_batch: total,
                        leader: i == 0,
                    });
                }
            }
            Err(e) => {
                for (i, (reply, enqueued)) in waiting.into_iter().enumerate() {
                    let _ = reply.send(Done {
                        result: Err(e.clone()),
                        queue: taken.saturating_duration_since(enqueued),
                        compute: done.compute,
                        executed_batch: total,
                        leader: i == 0,
                    });
                }
            }
        }
        slots.release();
    };
    let work = Work {
        inputs,
        outputs,
        enqueued: first_enqueued,
        reply: Reply::Callback(Box::new(finish)),
        pending: None,
    };
    if let Err(e) = pool.submit(work) {
        // The pool refused (unloading): the callback was dropped with the
        // work, so the callers see their replies closed as an error.
        crate::core::logging::log('W', &e.message);
    }
}

/// Splits batched outputs along dim 0 into the requests' parts.
fn split(tensors: &[Tensor], sizes: &[usize]) -> Vec<Result<Vec<Tensor>>> {
    let total: usize = sizes.iter().sum();
    let mut parts: Vec<Result<Vec<Tensor>>> = sizes.iter().map(|_| Ok(Vec::new())).collect();
    for t in tensors {
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

    fn request(batch: usize, width: i64, enqueued: Instant) -> Request {
        let (reply, _rx) = oneshot::channel();
        std::mem::forget(_rx);
        Request {
            inputs: vec![Tensor {
                name: "IN".into(),
                datatype: DataType::Int32,
                shape: vec![batch as i64, width],
                data: vec![0; batch * width as usize * 4],
            }],
            outputs: vec!["OUT".into()],
            batch,
            enqueued,
            reply,
            pending: Arc::new(std::sync::atomic::AtomicI64::new(0)),
        }
    }

    fn config(max: usize, preferred: &[usize], delay_us: u64) -> BatchConfig {
        BatchConfig {
            max_batch_size: max,
            preferred: preferred.to_vec(),
            max_queue_delay: Duration::from_micros(delay_us),
        }
    }

    #[test]
    fn sends_at_max_or_the_largest_preferred_size() {
        let now = Instant::now();
        let q: VecDeque<_> = (0..8).map(|_| request(1, 4, now)).collect();
        assert_eq!(decide(&q, &config(8, &[], 1000), now), Decision::Send(8));
        let q: VecDeque<_> = (0..5).map(|_| request(1, 4, now)).collect();
        assert_eq!(
            decide(&q, &config(8, &[2, 4], 1000), now),
            Decision::Send(4)
        );
    }

    #[test]
    fn waits_for_the_delay_then_sends_the_largest_preferred_or_all() {
        let now = Instant::now();
        let q: VecDeque<_> = (0..3).map(|_| request(1, 4, now)).collect();
        let c = config(8, &[2, 4], 500);
        assert_eq!(
            decide(&q, &c, now),
            Decision::Wait(now + Duration::from_micros(500))
        );
        let later = now + Duration::from_micros(600);
        assert_eq!(decide(&q, &c, later), Decision::Send(2));
        assert_eq!(decide(&q, &config(8, &[], 500), later), Decision::Send(3));
        assert_eq!(decide(&q, &config(8, &[], 0), now), Decision::Send(3));
    }

    #[test]
    fn requests_that_cannot_join_end_the_batch() {
        let now = Instant::now();
        let mut q: VecDeque<_> = (0..2).map(|_| request(1, 4, now)).collect();
        q.push_back(request(1, 5, now)); // other shape
        assert_eq!(decide(&q, &config(8, &[], 1000), now), Decision::Send(2));
        let q: VecDeque<_> = [request(3, 4, now), request(6, 4, now)]
            .into_iter()
            .collect();
        assert_eq!(
            decide(&q, &config(8, &[], 1000), now),
            Decision::Send(1),
            "3 + 6 > 8"
        );
    }

    #[test]
    fn split_gives_each_request_its_rows() {
        let t = Tensor {
            name: "OUT".into(),
            datatype: DataType::Int32,
            shape: vec![3, 2],
            data: (0..6i32).flat_map(|x| x.to_le_bytes()).collect(),
        };
        let parts = split(&[t], &[1, 2]);
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
        let parts = split(&[strings], &[1, 1]);
        assert_eq!(
            parts[1].as_ref().unwrap()[0].data,
            Tensor::serialize_bytes([b"bc".as_slice()])
        );
    }
}
