//! The dynamic batcher's queue and its batching decision, kept free of
//! threads and clocks so both are unit-tested as pure functions of
//! (queue, now).
//!
//! The queue has one level per priority (`priority_levels`, 1 the
//! highest; one level when priorities are not configured), each with its
//! own `ModelQueuePolicy`: a maximum size, a default timeout, whether a
//! request may lower it, and what happens to a request whose timeout
//! expires in the queue (REJECT: it fails; DELAY: it moves behind the
//! level's requests that have not timed out). Batches are taken in
//! priority order: level 1's requests, then its delayed ones, then
//! level 2's, and so on.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::pb::model_queue_policy::TimeoutAction as PbTimeoutAction;
use crate::core::config::pb::ModelQueuePolicy;
use crate::core::config::ModelConfig;
use crate::core::error::Error;
use crate::core::types::Tensor;

/// A config's `preferred_batch_size` list: positive, ascending, distinct.
pub fn preferred_sizes(sizes: &[i32]) -> Vec<usize> {
    let mut preferred: Vec<usize> = sizes
        .iter()
        .filter(|&&p| p > 0)
        .map(|&p| p as usize)
        .collect();
    preferred.sort_unstable();
    preferred.dedup();
    preferred
}

/// What happens to a request whose queue timeout expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutAction {
    Reject,
    Delay,
}

/// One priority level's `ModelQueuePolicy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePolicy {
    pub action: TimeoutAction,
    /// Zero: no timeout.
    pub default_timeout: Duration,
    pub allow_override: bool,
    /// Zero: unbounded.
    pub max_queue_size: usize,
}

impl Default for QueuePolicy {
    fn default() -> Self {
        QueuePolicy {
            action: TimeoutAction::Reject,
            default_timeout: Duration::ZERO,
            allow_override: false,
            max_queue_size: 0,
        }
    }
}

impl QueuePolicy {
    fn from_pb(p: &ModelQueuePolicy) -> Self {
        QueuePolicy {
            action: if p.timeout_action == PbTimeoutAction::Delay as i32 {
                TimeoutAction::Delay
            } else {
                TimeoutAction::Reject
            },
            default_timeout: Duration::from_micros(p.default_timeout_microseconds),
            allow_override: p.allow_timeout_override,
            max_queue_size: p.max_queue_size as usize,
        }
    }

    /// The queue timeout of a request that asked for `requested_us` (0:
    /// nothing asked): the default, or the request's when the policy
    /// allows overriding and it is shorter. As in Triton, a request cannot
    /// set a timeout where the policy has none.
    pub fn timeout(&self, requested_us: u64) -> Option<Duration> {
        let mut timeout = self.default_timeout;
        if self.allow_override && requested_us != 0 {
            let requested = Duration::from_micros(requested_us);
            if requested < timeout {
                timeout = requested;
            }
        }
        (!timeout.is_zero()).then_some(timeout)
    }
}

/// The batching settings of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchConfig {
    pub max_batch_size: usize,
    /// Ascending.
    pub preferred: Vec<usize>,
    pub max_queue_delay: Duration,
    pub preserve_ordering: bool,
    /// One policy per priority level (index 0 is level 1).
    pub levels: Vec<QueuePolicy>,
    /// The level of requests without a (valid) priority, 1-based.
    pub default_level: usize,
    /// Ragged inputs, batch inputs and scattered outputs.
    pub io: crate::core::batch_io::BatchIo,
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
        let preferred = preferred_sizes(&db.preferred_batch_size);
        let default_policy = db
            .default_queue_policy
            .as_ref()
            .map(QueuePolicy::from_pb)
            .unwrap_or_default();
        let count = db.priority_levels.max(1) as usize;
        let levels = (1..=count as u64)
            .map(|level| {
                db.priority_queue_policy
                    .get(&level)
                    .map(QueuePolicy::from_pb)
                    .unwrap_or_else(|| default_policy.clone())
            })
            .collect();
        let default_level = match db.default_priority_level as usize {
            l if l >= 1 && l <= count => l,
            _ => 1,
        };
        Some(BatchConfig {
            max_batch_size: c.max_batch_size as usize,
            preferred,
            max_queue_delay: Duration::from_micros(db.max_queue_delay_microseconds),
            preserve_ordering: db.preserve_ordering,
            levels,
            default_level,
            io: crate::core::batch_io::BatchIo::from_config(c),
        })
    }

    /// The queue index (0-based) of a request's `priority` parameter: 0,
    /// or a level the model does not have, is the default level.
    pub fn level_of(&self, priority: u64) -> usize {
        match priority as usize {
            p if p >= 1 && p <= self.levels.len() => p - 1,
            _ => self.default_level - 1,
        }
    }
}

/// Where a queued request's answer goes: the queue only needs to know
/// whether the caller still waits (so the module stays free of the instance
/// layer; the batcher chooses the payload).
pub trait Caller {
    fn gone(&self) -> bool;
}

impl<T> Caller for oneshot::Sender<T> {
    fn gone(&self) -> bool {
        self.is_closed()
    }
}

/// One request waiting to be batched; `R` is where its answer goes.
pub struct Request<R> {
    /// Inputs in config order, each with the request's batch as dim 0.
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<String>,
    /// The request's own batch size.
    pub batch: usize,
    pub enqueued: Instant,
    pub reply: R,
    /// The model's pending-request gauge (decremented when dispatched).
    pub pending: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// The `priority` parameter (0: none).
    pub priority: u64,
    /// The `timeout` parameter in microseconds (0: none).
    pub timeout_us: u64,
    /// Set by the queue: when the request times out.
    pub deadline: Option<Instant>,
    /// Set by the batcher: arrival order, for `preserve_ordering`.
    pub seq: u64,
    /// For a backend that takes requests apart: what it reads of the
    /// request besides its tensors.
    pub info: Option<Box<crate::core::types::RequestInfo>>,
}

impl<R: Caller> Request<R> {
    /// Whether the caller stopped waiting.
    pub fn abandoned(&self) -> bool {
        self.reply.gone()
    }
}

struct Level<R> {
    policy: QueuePolicy,
    main: VecDeque<Request<R>>,
    /// Requests whose timeout expired under DELAY.
    delayed: VecDeque<Request<R>>,
}

impl<R> Level<R> {
    fn len(&self) -> usize {
        self.main.len() + self.delayed.len()
    }
}

/// The queue of one model version's dynamic batcher.
pub struct Queue<R> {
    levels: Vec<Level<R>>,
}

impl<R: Caller> Queue<R> {
    pub fn new(config: &BatchConfig) -> Self {
        Queue {
            levels: config
                .levels
                .iter()
                .map(|p| Level {
                    policy: p.clone(),
                    main: VecDeque::new(),
                    delayed: VecDeque::new(),
                })
                .collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.levels.iter().map(Level::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.levels.iter().all(|l| l.len() == 0)
    }

    /// Queues a request at its level, setting its timeout. A full level
    /// refuses it (Triton's "Exceeds maximum queue size").
    #[allow(clippy::result_large_err)] // the request comes back whole, by design
    pub fn push(
        &mut self,
        config: &BatchConfig,
        mut request: Request<R>,
    ) -> Result<(), (Error, Request<R>)> {
        let level = &mut self.levels[config.level_of(request.priority)];
        if level.policy.max_queue_size != 0 && level.len() >= level.policy.max_queue_size {
            return Err((Error::unavailable("Exceeds maximum queue size"), request));
        }
        request.deadline = level
            .policy
            .timeout(request.timeout_us)
            .map(|t| request.enqueued + t);
        level.main.push_back(request);
        Ok(())
    }

    /// The requests in the order batches take them.
    pub fn iter(&self) -> impl Iterator<Item = &Request<R>> {
        self.levels
            .iter()
            .flat_map(|l| l.main.iter().chain(l.delayed.iter()))
    }

    /// Takes the first `n` requests in batching order.
    pub fn pop(&mut self, mut n: usize) -> Vec<Request<R>> {
        let mut out = Vec::with_capacity(n);
        for level in &mut self.levels {
            for q in [&mut level.main, &mut level.delayed] {
                let k = n.min(q.len());
                out.extend(q.drain(..k));
                n -= k;
            }
        }
        out
    }

    /// Applies the timeouts: a request whose timeout has passed is
    /// returned (REJECT) or moved behind its level (DELAY; it does not
    /// time out again).
    pub fn expire(&mut self, now: Instant) -> Vec<Request<R>> {
        let mut rejected = Vec::new();
        for level in &mut self.levels {
            if !level
                .main
                .iter()
                .any(|r| r.deadline.is_some_and(|d| d <= now))
            {
                continue;
            }
            let mut kept = VecDeque::with_capacity(level.main.len());
            for mut r in level.main.drain(..) {
                if r.deadline.is_some_and(|d| d <= now) {
                    r.deadline = None;
                    match level.policy.action {
                        TimeoutAction::Reject => rejected.push(r),
                        TimeoutAction::Delay => level.delayed.push_back(r),
                    }
                } else {
                    kept.push_back(r);
                }
            }
            level.main = kept;
        }
        rejected
    }

    /// Removes the requests whose callers went away.
    pub fn remove_abandoned(&mut self) -> Vec<Request<R>> {
        let mut gone = Vec::new();
        for level in &mut self.levels {
            for q in [&mut level.main, &mut level.delayed] {
                if q.iter().any(Request::<R>::abandoned) {
                    let (keep, drop): (VecDeque<_>, VecDeque<_>) =
                        q.drain(..).partition(|r| !r.abandoned());
                    *q = keep;
                    gone.extend(drop);
                }
            }
        }
        gone
    }

    /// Whether a request can time out here at all (a level's policy has a
    /// timeout: a request cannot set one where the policy has none).
    pub fn times_out(&self) -> bool {
        self.levels
            .iter()
            .any(|l| !l.policy.default_timeout.is_zero())
    }

    /// The earliest queue timeout still to come.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.levels
            .iter()
            .flat_map(|l| l.main.iter())
            .filter_map(|r| r.deadline)
            .min()
    }

    /// Every request, in batching order (shutdown).
    pub fn drain(&mut self) -> Vec<Request<R>> {
        let n = self.len();
        self.pop(n)
    }
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
/// shapes past the batch dimension (any shapes for ragged inputs). Their
/// outputs may differ, as in Triton: the batch computes every output one
/// of them asked for, and each gets its own.
pub fn compatible<R>(a: &Request<R>, b: &Request<R>, io: &crate::core::batch_io::BatchIo) -> bool {
    a.inputs.len() == b.inputs.len()
        && a.inputs.iter().zip(&b.inputs).all(|(x, y)| {
            x.name == y.name
                && x.datatype == y.datatype
                && (io.is_ragged(&x.name) || x.shape.get(1..) == y.shape.get(1..))
        })
}

/// The batching decision, a pure function of the queue and the time, as
/// Triton's dynamic batcher takes it. Requests join the pending batch in
/// queue order until one cannot (it would pass `max_batch_size`, or its
/// shapes or outputs differ: the batch is sent now). A batch that reaches
/// a preferred size (no preferred sizes: `max_batch_size`) is sent at once,
/// the largest such prefix; so is the part before a request that would
/// pass the largest preferred size. Otherwise the batch waits until its
/// oldest request has waited `max_queue_delay` (0: no waiting), then goes
/// out whole.
pub fn decide<R: Caller>(queue: &Queue<R>, config: &BatchConfig, now: Instant) -> Decision {
    let max_preferred_default = [config.max_batch_size];
    let preferred: &[usize] = if config.preferred.is_empty() {
        &max_preferred_default
    } else {
        &config.preferred
    };
    let max_preferred = preferred.last().copied().unwrap_or(config.max_batch_size);
    let mut requests = queue.iter();
    let Some(first) = requests.next() else {
        return Decision::Wait(now + config.max_queue_delay);
    };
    let mut total = 0;
    let mut count = 0;
    let mut oldest = first.enqueued;
    let mut best: Option<usize> = None;
    let mut send_now = false;
    for r in std::iter::once(first).chain(requests) {
        let size = r.batch.max(1);
        if count > 0 {
            if total + size > max_preferred && best.is_none() {
                best = Some(count);
            }
            if total + size > config.max_batch_size || !compatible(first, r, &config.io) {
                send_now = true;
                break;
            }
        }
        total += size;
        count += 1;
        oldest = oldest.min(r.enqueued);
        if preferred.contains(&total) {
            best = Some(count);
        }
    }
    let delay_exceeded = !config.max_queue_delay.is_zero()
        && now.saturating_duration_since(oldest) >= config.max_queue_delay;
    if let Some(n) = best {
        if !delay_exceeded {
            return Decision::Send(n);
        }
    }
    if send_now || total >= max_preferred || delay_exceeded || config.max_queue_delay.is_zero() {
        return Decision::Send(count);
    }
    Decision::Wait(oldest + config.max_queue_delay)
}

#[cfg(test)]
mod tests;
