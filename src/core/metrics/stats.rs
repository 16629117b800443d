//! Per model-version statistics (Triton's statistics extension): counters
//! and cumulative durations, updated lock-free on the request path.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use crate::core::metrics::memory::MemoryUsage;

/// Compute input, infer and output durations of one execution.
pub type Times = (Duration, Duration, Duration);

/// A count and a total duration.
#[derive(Debug, Default)]
pub struct Duration64 {
    count: AtomicU64,
    ns: AtomicU64,
}

impl Duration64 {
    pub fn add(&self, d: Duration) {
        self.count.fetch_add(1, Relaxed);
        self.ns.fetch_add(d.as_nanos() as u64, Relaxed);
    }

    pub fn get(&self) -> (u64, u64) {
        (self.count.load(Relaxed), self.ns.load(Relaxed))
    }
}

/// Upper bounds (µs) of the latency histograms' buckets: 100 µs to 10 s,
/// about three per decade, plus +Inf.
pub const BUCKETS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// A latency histogram with Prometheus' cumulative buckets, lock-free.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per bucket (not cumulative); the last one is +Inf.
    counts: [AtomicU64; BUCKETS_US.len() + 1],
    sum_ns: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let us = d.as_micros() as u64;
        let i = BUCKETS_US.partition_point(|&b| b < us);
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(d.as_nanos() as u64, Relaxed);
    }

    /// Cumulative counts per bucket (the last is +Inf, the total), and the
    /// sum in nanoseconds.
    pub fn cumulative(&self) -> (Vec<u64>, u64) {
        (
            crate::core::metrics::latency::running_totals(&self.counts),
            self.sum_ns.load(Relaxed),
        )
    }
}

/// The statistics of one model version.
#[derive(Debug, Default)]
pub struct ModelStats {
    pub success: Duration64,
    pub fail: Duration64,
    pub queue: Duration64,
    pub compute_input: Duration64,
    pub compute_infer: Duration64,
    pub compute_output: Duration64,
    /// Response cache lookups that found an answer (their lookup time), and
    /// that did not (lookup and insertion time).
    pub cache_hit: Duration64,
    pub cache_miss: Duration64,
    /// Batch elements inferred.
    pub inference_count: AtomicU64,
    /// Backend executions.
    pub execution_count: AtomicU64,
    /// Milliseconds since the epoch of the last inference.
    pub last_inference: AtomicU64,
    /// Executions per batch size (index = batch size, up to 64).
    pub batch: BatchStats,
    /// Failures by reason (Triton's `reason` label): in the backend,
    /// refused by the queue (full, or timed out), canceled by the caller;
    /// the rest of `fail` are invalid requests (OTHER).
    pub fail_backend: AtomicU64,
    pub fail_rejected: AtomicU64,
    pub fail_canceled: AtomicU64,
    /// Requests accepted and not yet taken by an instance (queued).
    pub pending: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// Latency distributions of successful requests: end to end, in the
    /// queue, in the backend.
    pub request_histogram: Histogram,
    pub queue_histogram: Histogram,
    pub compute_histogram: Histogram,
    /// Successful requests by their own batch size (the v1 API's
    /// `infer_stats`): (success, compute, queue) per size. A map behind a
    /// lock, not a fixed array, because a request's batch size has no
    /// bound below `max_batch_size`; uncontended, it costs tens of ns.
    pub by_request_batch: std::sync::Mutex<std::collections::BTreeMap<u32, RequestBatch>>,
    /// The summaries and first-response histogram that `--metrics-config`
    /// asks for; None (one branch per request) when it asks for neither.
    pub latency: Option<Box<crate::core::metrics::latency::LatencyMetrics>>,
    /// How long the version took to load (its backend model and
    /// instances), for `nv_model_load_duration_secs`; 0 for an ensemble.
    pub load_duration_ns: AtomicU64,
    /// The memory the version's load took, as the statistics'
    /// `memory_usage` reports it (an estimate; set at load).
    pub memory_usage: std::sync::Mutex<Vec<MemoryUsage>>,
}

/// The successful requests of one batch size: end to end, in the backend
/// (input, infer and output), queued; (count, ns) each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestBatch {
    pub success: (u64, u64),
    pub compute: (u64, u64),
    pub queue: (u64, u64),
}

/// Compute durations by batch size.
#[derive(Debug)]
pub struct BatchStats {
    /// Per batch size: compute input, infer and output.
    pub by_size: Vec<[Duration64; 3]>,
}

impl Default for BatchStats {
    fn default() -> Self {
        BatchStats {
            by_size: (0..=64).map(|_| Default::default()).collect(),
        }
    }
}

impl ModelStats {
    /// Statistics that also keep `latency` (see [`ModelStats::latency`]).
    pub fn with_latency(latency: Option<crate::core::metrics::latency::LatencyMetrics>) -> Self {
        ModelStats {
            latency: latency.map(Box::new),
            ..Default::default()
        }
    }

    /// Records a successful request of `batch` elements; `execution` is
    /// the executed batch size when this request counts the execution (the
    /// first request of a dynamic batch, or any request run alone).
    pub fn record_success(
        &self,
        batch: usize,
        execution: Option<usize>,
        total: Duration,
        queue: Duration,
        times: Times,
    ) {
        if let Some(l) = &self.latency {
            l.success(total, queue, times, total);
        }
        self.record_success_counts(batch, execution, total, queue, times);
    }

    /// A decoupled model's successful request, whose first response went
    /// `first` after it began (None: it sent none).
    pub fn record_decoupled_success(
        &self,
        batch: usize,
        total: Duration,
        first: Option<Duration>,
        queue: Duration,
        times: Times,
    ) {
        if let Some(l) = &self.latency {
            l.success(total, queue, times, first.unwrap_or(total));
        }
        self.record_success_counts(batch, None, total, queue, times);
    }

    fn record_success_counts(
        &self,
        batch: usize,
        execution: Option<usize>,
        total: Duration,
        queue: Duration,
        (input, compute, output): Times,
    ) {
        self.success.add(total);
        self.request_histogram.observe(total);
        self.queue_histogram.observe(queue);
        self.compute_histogram.observe(compute);
        self.queue.add(queue);
        self.compute_input.add(input);
        self.compute_infer.add(compute);
        self.compute_output.add(output);
        self.inference_count.fetch_add(batch as u64, Relaxed);
        {
            let mut by = self
                .by_request_batch
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let entry = by.entry(batch as u32).or_default();
            let add = |(count, ns): &mut (u64, u64), d: Duration| {
                *count += 1;
                *ns += d.as_nanos() as u64;
            };
            add(&mut entry.success, total);
            add(&mut entry.compute, input + compute + output);
            add(&mut entry.queue, queue);
        }
        if let Some(executed) = execution {
            self.record_execution(executed, (input, compute, output));
        }
        self.touch();
    }

    /// One backend execution of `executed` batch elements (the dynamic
    /// batcher records each batch once, whoever of its callers is left).
    pub fn record_execution(&self, executed: usize, (input, compute, output): Times) {
        self.execution_count.fetch_add(1, Relaxed);
        if let Some([i, c, o]) = self.batch.by_size.get(executed) {
            i.add(input);
            c.add(compute);
            o.add(output);
        }
    }

    /// A request answered from the response cache: a success that ran no
    /// model (not in the inference or execution counts), `lookup` long.
    pub fn record_cache_hit(&self, total: Duration, lookup: Duration) {
        if let Some(l) = &self.latency {
            l.cache_hit(total, lookup);
        }
        self.success.add(total);
        self.request_histogram.observe(total);
        self.queue.add(Duration::ZERO);
        self.cache_hit.add(lookup);
        self.touch();
    }

    /// A response cache lookup that found nothing and the insertion of the
    /// answer, `d` long together.
    pub fn record_cache_miss(&self, d: Duration) {
        if let Some(l) = &self.latency {
            l.cache_miss(d);
        }
        self.cache_miss.add(d);
    }

    pub fn record_failure(&self, total: Duration) {
        self.fail.add(total);
        self.touch();
    }

    /// A failure in the backend (after the request was accepted).
    pub fn record_backend_failure(&self, total: Duration) {
        self.fail_backend.fetch_add(1, Relaxed);
        self.record_failure(total);
    }

    /// A request the queue refused: full, or its timeout expired.
    pub fn record_rejected(&self, total: Duration) {
        self.fail_rejected.fetch_add(1, Relaxed);
        self.record_failure(total);
    }

    /// A request whose caller went away before its answer.
    pub fn record_canceled(&self, total: Duration) {
        self.fail_canceled.fetch_add(1, Relaxed);
        self.record_failure(total);
    }

    fn touch(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.last_inference.store(now.as_millis() as u64, Relaxed);
    }
}

/// A point-in-time copy of a model version's statistics, for the frontends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub last_inference: u64,
    pub inference_count: u64,
    pub execution_count: u64,
    /// (count, ns) pairs.
    pub success: (u64, u64),
    pub fail: (u64, u64),
    pub queue: (u64, u64),
    pub compute_input: (u64, u64),
    pub compute_infer: (u64, u64),
    pub compute_output: (u64, u64),
    pub cache_hit: (u64, u64),
    pub cache_miss: (u64, u64),
    /// (batch size, executions, compute input, infer and output ns), for
    /// sizes that ran.
    pub batches: Vec<(u64, u64, u64, u64, u64)>,
    /// Successful requests by their batch size.
    pub request_batches: Vec<(u32, RequestBatch)>,
    /// What the version's load took (the statistics' `memory_usage`).
    pub memory_usage: Vec<MemoryUsage>,
}

impl ModelStats {
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            last_inference: self.last_inference.load(Relaxed),
            inference_count: self.inference_count.load(Relaxed),
            execution_count: self.execution_count.load(Relaxed),
            success: self.success.get(),
            fail: self.fail.get(),
            queue: self.queue.get(),
            compute_input: self.compute_input.get(),
            compute_infer: self.compute_infer.get(),
            compute_output: self.compute_output.get(),
            cache_hit: self.cache_hit.get(),
            cache_miss: self.cache_miss.get(),
            batches: self
                .batch
                .by_size
                .iter()
                .enumerate()
                .filter_map(|(size, [i, c, o])| {
                    let (count, ns) = c.get();
                    (count > 0).then_some((size as u64, count, i.get().1, ns, o.get().1))
                })
                .collect(),
            request_batches: self
                .by_request_batch
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|(&size, &b)| (size, b))
                .collect(),
            memory_usage: self
                .memory_usage
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_with_bounds_inclusive() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_micros(101));
        h.observe(Duration::from_secs(60));
        let (counts, sum) = h.cumulative();
        assert_eq!(counts.len(), BUCKETS_US.len() + 1);
        assert_eq!(counts[0], 1, "le=100 holds 100 µs");
        assert_eq!(counts[1], 2);
        assert_eq!(counts[BUCKETS_US.len() - 1], 2);
        assert_eq!(counts[BUCKETS_US.len()], 3, "+Inf is the total");
        assert_eq!(sum, 60_000_201_000);
    }
}
