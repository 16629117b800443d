//! Prometheus metrics in Triton's names and labels (`nv_inference_*` per
//! model and version, `nv_cpu_*` and `nv_gpu_*` for the machine), rendered
//! in the text exposition format for `/metrics` on `--metrics-port`.
//!
//! The machine's readings are taken by a [`Sampler`] thread every
//! `--metrics-interval-ms` (Triton's poll thread wakes every half interval;
//! here the CPU utilization is the busy share of exactly the last
//! interval), and a scrape prints the last one.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, Weak};

use crate::core::device::GpuReading;
use crate::core::metrics::latency::Summary;
use crate::core::metrics::settings::MetricsSettings;
use crate::core::metrics::stats::{Histogram, BUCKETS_US};
use crate::core::repository::LoadedModel;

/// (name, type, help, value of a model) for the per-model families.
type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&LoadedModel) -> f64,
);

/// The families `counter_latencies=false` leaves out.
fn is_latency_counter(name: &str) -> bool {
    name.ends_with("_duration_us") || name.starts_with("nv_cache_")
}

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

/// `model="m",version="1"` plus one `_<key>` label per `metric_tags` entry,
/// and with `--model-namespacing` `namespace="<repository>"`.
fn labels(m: &LoadedModel, extra: &[(&str, &str)]) -> String {
    let mut parts = vec![format!("model=\"{}\"", escape(&m.name))];
    if !m.namespace.is_empty() {
        parts.push(format!("namespace=\"{}\"", escape(&m.namespace)));
    }
    for (k, v) in extra {
        parts.push(format!("{k}=\"{}\"", escape(v)));
    }
    parts.push(format!("version=\"{}\"", m.version));
    for (k, v) in &m.config.metric_tags {
        parts.push(format!("_{k}=\"{}\"", escape(v)));
    }
    parts.join(",")
}

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

/// Utilization between two readings of [`cpu_times`], in [0, 1].
fn cpu_utilization(before: Option<(u64, u64)>, now: Option<(u64, u64)>) -> f64 {
    match (before, now) {
        (Some((busy, total)), Some(now)) if now.1 > total => {
            ((now.0.saturating_sub(busy)) as f64 / (now.1 - total) as f64).clamp(0.0, 1.0)
        }
        _ => 0.0,
    }
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

/// The machine's readings for `nv_cpu_*` and `nv_gpu_*`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Readings {
    /// None with `--allow-cpu-metrics=false`.
    pub cpu: Option<CpuReading>,
    /// Empty with `--allow-gpu-metrics=false` or without a GPU.
    pub gpus: Vec<GpuReading>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuReading {
    /// Busy share of all CPUs since the reading before, in [0, 1].
    pub utilization: f64,
    pub memory_total: u64,
    pub memory_used: u64,
}

/// Takes the machine's readings every interval on a thread of its own, for
/// the scrapes to print; the thread ends once the sampler is dropped.
#[derive(Debug)]
pub struct Sampler {
    cpu: bool,
    gpu: bool,
    last: Mutex<Readings>,
    /// `/proc/stat`'s counters at the last reading.
    cpu_times: Mutex<Option<(u64, u64)>>,
}

impl Sampler {
    /// A sampler of what `settings` allow, with its first reading taken
    /// (no thread: see [`Sampler::start`]).
    pub fn new(settings: &MetricsSettings) -> Arc<Sampler> {
        let sampler = Arc::new(Sampler {
            cpu: settings.cpu,
            gpu: settings.gpu,
            last: Mutex::new(Readings::default()),
            cpu_times: Mutex::new(None),
        });
        sampler.sample();
        sampler
    }

    /// [`Sampler::new`], and a thread that takes a reading every
    /// `settings.interval` when there is anything to read.
    pub fn start(settings: &MetricsSettings) -> Arc<Sampler> {
        let sampler = Sampler::new(settings);
        if settings.cpu || settings.gpu {
            let weak: Weak<Sampler> = Arc::downgrade(&sampler);
            let every = settings.interval;
            let _ = std::thread::Builder::new()
                .name("trtis:metrics".to_string())
                .spawn(move || loop {
                    std::thread::sleep(every);
                    match weak.upgrade() {
                        Some(s) => s.sample(),
                        None => return,
                    }
                });
        }
        sampler
    }

    /// Takes a reading now.
    pub fn sample(&self) {
        let cpu = self.cpu.then(|| {
            let now = cpu_times();
            let mut before = self.cpu_times.lock().unwrap_or_else(|e| e.into_inner());
            let utilization = cpu_utilization(*before, now);
            *before = now;
            let (memory_total, memory_used) = memory();
            CpuReading {
                utilization,
                memory_total,
                memory_used,
            }
        });
        let gpus = if self.gpu {
            crate::core::device::gpu_readings()
        } else {
            Vec::new()
        };
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Readings { cpu, gpus };
    }

    /// The last reading.
    pub fn readings(&self) -> Readings {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The metrics of these models and of the machine with the default
/// settings, the machine read now (its CPU utilization is 0: there is no
/// reading before).
pub fn render(models: &[Arc<LoadedModel>]) -> String {
    let settings = MetricsSettings::default();
    render_with(models, &settings, &Sampler::new(&settings).readings())
}

/// A sample's value as the text format writes it.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        v.to_string()
    }
}

/// The metrics of these models and of the machine (`readings`), as
/// `settings` say.
pub fn render_with(
    models: &[Arc<LoadedModel>],
    settings: &MetricsSettings,
    readings: &Readings,
) -> String {
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
        if !settings.counter_latencies && is_latency_counter(name) {
            continue;
        }
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for m in models {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(m, &[]), value(m));
        }
    }
    // The response cache's families, for the models that enable it.
    let cached: Vec<&Arc<LoadedModel>> = models
        .iter()
        .filter(|m| m.config.response_cache.as_ref().is_some_and(|c| c.enable))
        .collect();
    if !cached.is_empty() && settings.counter_latencies {
        for (name, help, value) in CACHE_FAMILIES {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for m in &cached {
                let _ = writeln!(out, "{name}{{{}}} {}", labels(m, &[]), value(m));
            }
        }
    }
    if !models.is_empty() {
        let name = "nv_model_load_duration_secs";
        let _ = writeln!(out, "# HELP {name} Model load time in seconds");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for m in models {
            let secs = m.stats.load_duration_ns.load(Relaxed) as f64 / 1e9;
            let _ = writeln!(out, "{name}{{{}}} {secs}", labels(m, &[]));
        }
    }
    render_summaries(&mut out, models, settings);
    render_first_response(&mut out, models);
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
    if !readings.gpus.is_empty() {
        type GpuFamily = (
            &'static str,
            &'static str,
            &'static str,
            fn(&GpuReading) -> f64,
        );
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
            for g in &readings.gpus {
                let _ = writeln!(
                    out,
                    "{name}{{gpu_uuid=\"{}\"}} {}",
                    escape(&g.uuid),
                    value(g)
                );
            }
        }
    }
    if let Some(cpu) = &readings.cpu {
        let _ = writeln!(
            out,
            "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]"
        );
        let _ = writeln!(out, "# TYPE nv_cpu_utilization gauge");
        let _ = writeln!(out, "nv_cpu_utilization {}", cpu.utilization);
        let _ = writeln!(
            out,
            "# HELP nv_cpu_memory_total_bytes CPU total memory (RAM), in bytes"
        );
        let _ = writeln!(out, "# TYPE nv_cpu_memory_total_bytes gauge");
        let _ = writeln!(out, "nv_cpu_memory_total_bytes {}", cpu.memory_total);
        let _ = writeln!(
            out,
            "# HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes"
        );
        let _ = writeln!(out, "# TYPE nv_cpu_memory_used_bytes gauge");
        let _ = writeln!(out, "nv_cpu_memory_used_bytes {}", cpu.memory_used);
    }
    // Families the models made (pb_utils.MetricFamily).
    crate::core::metrics::custom::render(&mut out);
    out
}

/// The `*_summary_us` families (`summary_latencies=true`): per model,
/// `_count`, `_sum`, then one series per quantile, as prometheus-cpp
/// prints them; a family no model has is left out.
fn render_summaries(out: &mut String, models: &[Arc<LoadedModel>], settings: &MetricsSettings) {
    let quantiles: Vec<f64> = settings.summary_quantiles.iter().map(|q| q.0).collect();
    /// A summary's quantile values, count and sum.
    type Reading = (Summary, Vec<f64>, u64, f64);
    let read: Vec<(&Arc<LoadedModel>, Vec<Reading>)> = models
        .iter()
        .filter_map(|m| {
            let l = m.stats.latency.as_ref().filter(|l| l.has_summaries())?;
            Some((m, l.summary_readings(&quantiles)))
        })
        .collect();
    for summary in crate::core::metrics::latency::SUMMARIES {
        let (name, help) = summary.family();
        let mut header = false;
        for (m, readings) in &read {
            let Some((_, values, count, sum)) = readings.iter().find(|r| r.0 == summary) else {
                continue;
            };
            if !header {
                let _ = writeln!(out, "# HELP {name} {help}");
                let _ = writeln!(out, "# TYPE {name} summary");
                header = true;
            }
            let l = labels(m, &[]);
            let _ = writeln!(out, "{name}_count{{{l}}} {count}");
            let _ = writeln!(out, "{name}_sum{{{l}}} {sum}");
            for (q, v) in quantiles.iter().zip(values) {
                let _ = writeln!(out, "{name}{{{l},quantile=\"{q}\"}} {}", number(*v));
            }
        }
    }
}

/// `nv_inference_first_response_histogram_ms` (`histogram_latencies=true`).
fn render_first_response(out: &mut String, models: &[Arc<LoadedModel>]) {
    let name = crate::core::metrics::latency::FIRST_RESPONSE_FAMILY;
    let mut header = false;
    for m in models {
        let Some(h) = m
            .stats
            .latency
            .as_ref()
            .and_then(|l| l.first_response.as_ref())
        else {
            continue;
        };
        if !header {
            let _ = writeln!(
                out,
                "# HELP {name} Duration from request to first response in milliseconds"
            );
            let _ = writeln!(out, "# TYPE {name} histogram");
            header = true;
        }
        let l = labels(m, &[]);
        let (counts, sum) = h.cumulative();
        for (i, count) in counts.iter().enumerate() {
            let le = h
                .bounds
                .get(i)
                .map(|b| number(*b))
                .unwrap_or_else(|| "+Inf".to_string());
            let _ = writeln!(out, "{name}_bucket{{{l},le=\"{le}\"}} {count}");
        }
        let _ = writeln!(
            out,
            "{name}_count{{{l}}} {}",
            counts.last().copied().unwrap_or(0)
        );
        let _ = writeln!(out, "{name}_sum{{{l}}} {sum}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampler_reads_only_what_is_allowed() {
        let off = MetricsSettings {
            cpu: false,
            gpu: false,
            ..Default::default()
        };
        assert_eq!(Sampler::new(&off).readings(), Readings::default());
        let cpu = Sampler::new(&MetricsSettings {
            gpu: false,
            ..Default::default()
        });
        let first = cpu.readings().cpu.expect("a CPU reading");
        assert!(first.memory_total > 0 && first.memory_used <= first.memory_total);
        assert_eq!(first.utilization, 0.0, "no reading before the first");
    }

    #[test]
    fn machine_families_follow_the_readings() {
        let settings = MetricsSettings::default();
        let none = render_with(&[], &settings, &Readings::default());
        assert!(
            !none.contains("nv_cpu_") && !none.contains("nv_gpu_"),
            "{none}"
        );
        assert!(
            !none.contains("nv_model_load_duration_secs"),
            "no series, no family"
        );
        let readings = Readings {
            cpu: Some(CpuReading {
                utilization: 0.25,
                memory_total: 100,
                memory_used: 40,
            }),
            gpus: vec![GpuReading {
                uuid: "GPU-1".into(),
                utilization: 0.5,
                memory_total: 8,
                memory_used: 2,
                power_usage: 70.0,
                power_limit: 300.0,
                energy: 12.0,
            }],
        };
        let page = render_with(&[], &settings, &readings);
        for line in [
            "nv_cpu_utilization 0.25",
            "nv_cpu_memory_total_bytes 100",
            "nv_cpu_memory_used_bytes 40",
            "nv_gpu_utilization{gpu_uuid=\"GPU-1\"} 0.5",
            "nv_energy_consumption{gpu_uuid=\"GPU-1\"} 12",
        ] {
            assert!(page.lines().any(|l| l == line), "{line} in:\n{page}");
        }
    }

    #[test]
    fn numbers_are_written_as_the_text_format_wants() {
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(100.0), "100");
        assert_eq!(number(0.5), "0.5");
    }
}
