//! Prometheus metrics in Triton's names and labels (`nv_inference_*` per
//! model and version, `nv_cpu_*` for the machine), rendered in the text
//! exposition format for `/metrics` on `--metrics-port`.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;

use crate::core::repository::LoadedModel;
use crate::core::stats::{Histogram, BUCKETS_US};

/// (name, type, help, value of a model) for the per-model families.
type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&LoadedModel) -> f64,
);

const FAMILIES: &[Family] = &[
    ("nv_inference_request_success", "counter", "Number of successful inference requests, all batch sizes", |m| m.stats.success.get().0 as f64),
    ("nv_inference_count", "counter", "Number of inferences performed (does not include cached requests)", |m| m.stats.inference_count.load(Relaxed) as f64),
    ("nv_inference_exec_count", "counter", "Number of model executions performed (does not include cached requests)", |m| m.stats.execution_count.load(Relaxed) as f64),
    ("nv_inference_pending_request_count", "gauge", "Instantaneous number of pending requests awaiting execution per-model.", |m| m.stats.pending.load(Relaxed).max(0) as f64),
    ("nv_inference_request_duration_us", "counter", "Cumulative inference request duration in microseconds (includes cached requests)", |m| (m.stats.success.get().1 + m.stats.fail.get().1) as f64 / 1000.0),
    ("nv_inference_queue_duration_us", "counter", "Cumulative inference queuing duration in microseconds (includes cached requests)", |m| m.stats.queue.get().1 as f64 / 1000.0),
    ("nv_inference_compute_input_duration_us", "counter", "Cumulative compute input duration in microseconds (does not include cached requests)", |m| m.stats.compute_input.get().1 as f64 / 1000.0),
    ("nv_inference_compute_infer_duration_us", "counter", "Cumulative compute inference duration in microseconds (does not include cached requests)", |m| m.stats.compute_infer.get().1 as f64 / 1000.0),
    ("nv_inference_compute_output_duration_us", "counter", "Cumulative inference compute output duration in microseconds (does not include cached requests)", |m| m.stats.compute_output.get().1 as f64 / 1000.0),
];

/// Triton's per-model response cache counters.
type CacheFamily = (&'static str, &'static str, fn(&LoadedModel) -> f64);

#[rustfmt::skip]
const CACHE_FAMILIES: &[CacheFamily] = &[
    ("nv_cache_num_hits_per_model", "Number of cache hits per model", |m| m.stats.cache_hit.get().0 as f64),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model", |m| m.stats.cache_miss.get().0 as f64),
    ("nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds", |m| m.stats.cache_hit.get().1 as f64 / 1000.0),
    ("nv_cache_miss_duration_per_model", "Total cache miss (insert + lookup) duration per model, in microseconds", |m| m.stats.cache_miss.get().1 as f64 / 1000.0),
];

/// Latency histograms per model (beyond Triton, which has cumulative
/// counters only): buckets can be summed across replicas for percentiles.
type HistogramFamily = (&'static str, &'static str, fn(&LoadedModel) -> &Histogram);

const HISTOGRAMS: &[HistogramFamily] = &[
    (
        "trtis_inference_request_duration_us",
        "Distribution of successful inference request durations in microseconds",
        |m| &m.stats.request_histogram,
    ),
    (
        "trtis_inference_queue_duration_us",
        "Distribution of queuing durations of successful requests in microseconds",
        |m| &m.stats.queue_histogram,
    ),
    (
        "trtis_inference_compute_infer_duration_us",
        "Distribution of compute inference durations of successful requests in microseconds",
        |m| &m.stats.compute_histogram,
    ),
];

/// Label values are escaped as the text format requires.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `model="m",version="1"` plus one `_<key>` label per `metric_tags` entry.
fn labels(m: &LoadedModel, extra: &[(&str, &str)]) -> String {
    let mut parts = vec![format!("model=\"{}\"", escape(&m.name))];
    for (k, v) in extra {
        parts.push(format!("{k}=\"{}\"", escape(v)));
    }
    parts.push(format!("version=\"{}\"", m.version));
    for (k, v) in &m.config.metric_tags {
        parts.push(format!("_{k}=\"{}\"", escape(v)));
    }
    parts.join(",")
}

/// CPU time counters from `/proc/stat` at the previous scrape.
static LAST_CPU: Mutex<Option<(u64, u64)>> = Mutex::new(None);

/// (busy, total) jiffies of all CPUs.
fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = values.iter().sum();
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// Utilization since the previous scrape, in [0, 1].
fn cpu_utilization() -> f64 {
    let Some(now) = cpu_times() else { return 0.0 };
    let mut last = LAST_CPU.lock().unwrap();
    let util = match *last {
        Some((busy, total)) if now.1 > total => {
            (now.0.saturating_sub(busy)) as f64 / (now.1 - total) as f64
        }
        _ => 0.0,
    };
    *last = Some(now);
    util.clamp(0.0, 1.0)
}

/// (total, used) bytes from `/proc/meminfo`.
fn memory() -> (u64, u64) {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| -> u64 {
        info.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    let total = field("MemTotal:");
    (total, total.saturating_sub(field("MemAvailable:")))
}

/// The metrics of these models and of the machine.
pub fn render(models: &[std::sync::Arc<LoadedModel>]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes"
    );
    let _ = writeln!(out, "# TYPE nv_inference_request_failure counter");
    for m in models {
        let backend = m.stats.fail_backend.load(Relaxed);
        let rejected = m.stats.fail_rejected.load(Relaxed);
        let canceled = m.stats.fail_canceled.load(Relaxed);
        let other = m
            .stats
            .fail
            .get()
            .0
            .saturating_sub(backend + rejected + canceled);
        for (reason, value) in [
            ("REJECTED", rejected),
            ("CANCELED", canceled),
            ("BACKEND", backend),
            ("OTHER", other),
        ] {
            let _ = writeln!(
                out,
                "nv_inference_request_failure{{{}}} {value}",
                labels(m, &[("reason", reason)])
            );
        }
    }
    for (name, kind, help, value) in FAMILIES {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for m in models {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(m, &[]), value(m));
        }
    }
    // The response cache's families, for the models that enable it.
    let cached: Vec<&std::sync::Arc<LoadedModel>> = models
        .iter()
        .filter(|m| m.config.response_cache.as_ref().is_some_and(|c| c.enable))
        .collect();
    if !cached.is_empty() {
        for (name, help, value) in CACHE_FAMILIES {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for m in &cached {
                let _ = writeln!(out, "{name}{{{}}} {}", labels(m, &[]), value(m));
            }
        }
    }
    for (name, help, pick) in HISTOGRAMS {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for m in models {
            let (counts, sum_ns) = pick(m).cumulative();
            for (i, count) in counts.iter().enumerate() {
                let le = BUCKETS_US
                    .get(i)
                    .map(|b| b.to_string())
                    .unwrap_or_else(|| "+Inf".to_string());
                let _ = writeln!(
                    out,
                    "{name}_bucket{{{}}} {count}",
                    labels(m, &[("le", &le)])
                );
            }
            let l = labels(m, &[]);
            let _ = writeln!(out, "{name}_sum{{{l}}} {}", sum_ns as f64 / 1000.0);
            let _ = writeln!(
                out,
                "{name}_count{{{l}}} {}",
                counts.last().copied().unwrap_or(0)
            );
        }
    }
    let gpus = crate::core::device::gpu_readings();
    if !gpus.is_empty() {
        type Gpu = crate::core::device::GpuReading;
        type GpuFamily = (&'static str, &'static str, &'static str, fn(&Gpu) -> f64);
        let families: [GpuFamily; 6] = [
            (
                "nv_gpu_utilization",
                "gauge",
                "GPU utilization rate [0.0 - 1.0)",
                |g| g.utilization,
            ),
            (
                "nv_gpu_memory_total_bytes",
                "gauge",
                "GPU total memory, in bytes",
                |g| g.memory_total as f64,
            ),
            (
                "nv_gpu_memory_used_bytes",
                "gauge",
                "GPU used memory, in bytes",
                |g| g.memory_used as f64,
            ),
            (
                "nv_gpu_power_usage",
                "gauge",
                "GPU power usage in watts",
                |g| g.power_usage,
            ),
            (
                "nv_gpu_power_limit",
                "gauge",
                "GPU power management limit in watts",
                |g| g.power_limit,
            ),
            (
                "nv_energy_consumption",
                "counter",
                "GPU energy consumption in joules since the Triton Server started",
                |g| g.energy,
            ),
        ];
        for (name, kind, help, value) in families {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for g in &gpus {
                let _ = writeln!(
                    out,
                    "{name}{{gpu_uuid=\"{}\"}} {}",
                    escape(&g.uuid),
                    value(g)
                );
            }
        }
    }
    let (total, used) = memory();
    let _ = writeln!(
        out,
        "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]"
    );
    let _ = writeln!(out, "# TYPE nv_cpu_utilization gauge");
    let _ = writeln!(out, "nv_cpu_utilization {}", cpu_utilization());
    let _ = writeln!(
        out,
        "# HELP nv_cpu_memory_total_bytes CPU total memory (RAM), in bytes"
    );
    let _ = writeln!(out, "# TYPE nv_cpu_memory_total_bytes gauge");
    let _ = writeln!(out, "nv_cpu_memory_total_bytes {total}");
    let _ = writeln!(
        out,
        "# HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes"
    );
    let _ = writeln!(out, "# TYPE nv_cpu_memory_used_bytes gauge");
    let _ = writeln!(out, "nv_cpu_memory_used_bytes {used}");
    // Families the models made (pb_utils.MetricFamily).
    crate::core::custom_metrics::render(&mut out);
    out
}
