//! Per model-version statistics (Triton's statistics extension): counters
//! and cumulative durations, updated lock-free on the request path.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// The statistics of one model version.
#[derive(Debug, Default)]
pub struct ModelStats {
    pub success: Duration64,
    pub fail: Duration64,
    pub queue: Duration64,
    pub compute_input: Duration64,
    pub compute_infer: Duration64,
    pub compute_output: Duration64,
    /// Batch elements inferred.
    pub inference_count: AtomicU64,
    /// Backend executions.
    pub execution_count: AtomicU64,
    /// Milliseconds since the epoch of the last inference.
    pub last_inference: AtomicU64,
    /// Executions per batch size (index = batch size, up to 64).
    pub batch: BatchStats,
    /// Failures in the backend (the rest of `fail` were refused requests).
    pub fail_backend: AtomicU64,
    /// Requests accepted and not yet taken by an instance (queued).
    pub pending: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

/// Compute durations by batch size.
#[derive(Debug)]
pub struct BatchStats {
    pub by_size: Vec<Duration64>,
}

impl Default for BatchStats {
    fn default() -> Self {
        BatchStats {
            by_size: (0..=64).map(|_| Duration64::default()).collect(),
        }
    }
}

impl ModelStats {
    /// Records a successful execution of `batch` elements.
    /// Records a successful request of `batch` elements; `execution` is
    /// the executed batch size when this request counts the execution (the
    /// first request of a dynamic batch, or any request run alone).
    pub fn record_success(
        &self,
        batch: usize,
        execution: Option<usize>,
        total: Duration,
        queue: Duration,
        compute: Duration,
    ) {
        self.success.add(total);
        self.queue.add(queue);
        self.compute_input.add(Duration::ZERO);
        self.compute_infer.add(compute);
        self.compute_output.add(Duration::ZERO);
        self.inference_count.fetch_add(batch as u64, Relaxed);
        if let Some(executed) = execution {
            self.execution_count.fetch_add(1, Relaxed);
            if let Some(b) = self.batch.by_size.get(executed) {
                b.add(compute);
            }
        }
        self.touch();
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
    /// (batch size, executions, compute ns), for sizes that ran.
    pub batches: Vec<(u64, u64, u64)>,
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
            batches: self
                .batch
                .by_size
                .iter()
                .enumerate()
                .filter_map(|(size, d)| {
                    let (count, ns) = d.get();
                    (count > 0).then_some((size as u64, count, ns))
                })
                .collect(),
        }
    }
}
