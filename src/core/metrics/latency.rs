//! The latency metrics Triton keeps per model version only when asked
//! (`--metrics-config summary_latencies=true`, `histogram_latencies=true`):
//! sliding-window summaries of each request's durations, and the histogram
//! of the time to a request's first response.
//!
//! A summary works as prometheus-cpp's (Triton's) does: its quantiles
//! describe the last 48 to 60 seconds (a 60 s window in 5 age buckets of
//! 12 s), its `_count` and `_sum` every observation since the load.
//! prometheus-cpp keeps a CKMS sketch per age bucket and inserts each value
//! into all five; here each age bucket is an HDR histogram (the
//! `hdrhistogram` crate, already used by `perf`) that only the current
//! bucket records into, and a scrape merges the five. Same window, one
//! insertion instead of five, and a quantile's rank is exact while its
//! value is within 1% (two significant digits), where CKMS bounds the rank
//! error by the quantile's configured error and keeps exact values.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram as Hdr;

use crate::core::config::pb::model_metrics::metric_control::MetricOptions;
use crate::core::config::ModelConfig;
use crate::core::metrics::settings::MetricsSettings;

/// prometheus-cpp's summary defaults.
pub const MAX_AGE: Duration = Duration::from_secs(60);
pub const AGE_BUCKETS: usize = 5;

/// The family whose buckets a model config may set.
pub const FIRST_RESPONSE_FAMILY: &str = "nv_inference_first_response_histogram_ms";

/// Triton's default buckets of the first-response histogram (ms).
pub const FIRST_RESPONSE_BUCKETS: [f64; 4] = [100.0, 500.0, 2000.0, 5000.0];

/// Two significant digits: values within 1%.
const SIGNIFICANT_DIGITS: u8 = 2;

fn hdr() -> Hdr<u32> {
    // Auto-resizing: memory grows with the largest value seen.
    Hdr::new(SIGNIFICANT_DIGITS).expect("2 significant digits are valid")
}

/// One sliding-window summary of durations in microseconds.
pub struct Window {
    /// The age buckets, a ring: `current` records, the others hold the
    /// 12 s periods before it.
    slots: Vec<Hdr<u32>>,
    current: usize,
    /// When the current bucket began.
    began: Instant,
    /// Every observation since the start (prometheus-cpp's are not
    /// windowed either).
    count: u64,
    sum_ns: u128,
}

impl Window {
    pub fn new(now: Instant) -> Window {
        Window {
            slots: (0..AGE_BUCKETS).map(|_| hdr()).collect(),
            current: 0,
            began: now,
            count: 0,
            sum_ns: 0,
        }
    }

    fn age_bucket() -> Duration {
        MAX_AGE / AGE_BUCKETS as u32
    }

    /// Moves the ring on to `now`: each age bucket that ended empties the
    /// oldest and makes it current.
    fn rotate(&mut self, now: Instant) {
        let step = Self::age_bucket();
        let mut steps = 0;
        while now.saturating_duration_since(self.began) >= step {
            self.began += step;
            steps += 1;
            if steps <= AGE_BUCKETS {
                self.current = (self.current + 1) % AGE_BUCKETS;
                self.slots[self.current].reset();
            } else {
                // Idle for longer than the window: all are empty already;
                // skip ahead without looping over every step.
                let left = now.saturating_duration_since(self.began).as_nanos() / step.as_nanos();
                self.began += step * left as u32;
            }
        }
    }

    pub fn observe(&mut self, d: Duration, now: Instant) {
        self.rotate(now);
        let us = (d.as_nanos() / 1000).min(u64::MAX as u128) as u64;
        // Auto-resizing never refuses a value; saturate should it.
        let slot = &mut self.slots[self.current];
        if slot.record(us).is_err() {
            let _ = slot.record(slot.high());
        }
        self.count += 1;
        self.sum_ns += d.as_nanos();
    }

    /// Each quantile's value (µs) over the window: NaN when the window is
    /// empty (as prometheus-cpp).
    pub fn quantiles(&mut self, quantiles: &[f64], now: Instant) -> Vec<f64> {
        self.rotate(now);
        let mut all = hdr();
        for slot in &self.slots {
            let _ = all.add(slot);
        }
        quantiles
            .iter()
            .map(|&q| {
                if all.is_empty() {
                    f64::NAN
                } else {
                    all.value_at_quantile(q) as f64
                }
            })
            .collect()
    }

    /// (count, sum in µs) since the start.
    pub fn totals(&self) -> (u64, f64) {
        (self.count, self.sum_ns as f64 / 1000.0)
    }
}

/// The summarized durations: Triton's five `*_summary_us` families and
/// the response cache's two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Summary {
    Request,
    Queue,
    ComputeInput,
    ComputeInfer,
    ComputeOutput,
    CacheHit,
    CacheMiss,
}

pub const SUMMARIES: [Summary; 7] = [
    Summary::Request,
    Summary::Queue,
    Summary::ComputeInput,
    Summary::ComputeInfer,
    Summary::ComputeOutput,
    Summary::CacheHit,
    Summary::CacheMiss,
];

impl Summary {
    /// (name, help) as Triton prints them (the compute ones reuse the
    /// counters' help, as Triton's do).
    pub fn family(self) -> (&'static str, &'static str) {
        match self {
            Summary::Request => ("nv_inference_request_summary_us", "Summary of inference request duration in microseconds (includes cached requests)"),
            Summary::Queue => ("nv_inference_queue_summary_us", "Summary of inference queuing duration in microseconds (includes cached requests)"),
            Summary::ComputeInput => ("nv_inference_compute_input_summary_us", "Cumulative compute input duration in microseconds (does not include cached requests)"),
            Summary::ComputeInfer => ("nv_inference_compute_infer_summary_us", "Cumulative compute inference duration in microseconds (does not include cached requests)"),
            Summary::ComputeOutput => ("nv_inference_compute_output_summary_us", "Cumulative inference compute output duration in microseconds (does not include cached requests)"),
            Summary::CacheHit => ("nv_cache_hit_summary_per_model", "Summary of cache hit duration per model, in microseconds"),
            Summary::CacheMiss => ("nv_cache_miss_summary_per_model", "Summary of cache miss (insert + lookup) duration per model, in microseconds"),
        }
    }
}

/// A histogram with fixed buckets, lock-free.
pub struct BucketHistogram {
    /// Upper bounds, ascending; +Inf is the last count.
    pub bounds: Vec<f64>,
    counts: Vec<AtomicU64>,
    sum: AtomicU64,
}

impl BucketHistogram {
    /// Buckets sorted, duplicates and non-finite bounds dropped.
    pub fn new(bounds: &[f64]) -> BucketHistogram {
        let mut bounds: Vec<f64> = bounds.iter().copied().filter(|b| b.is_finite()).collect();
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        BucketHistogram {
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            bounds,
            sum: AtomicU64::new(0),
        }
    }

    /// One observation of a whole number (Triton observes whole ms).
    pub fn observe(&self, value: u64) {
        let i = self.bounds.partition_point(|&b| b < value as f64);
        self.counts[i].fetch_add(1, Relaxed);
        self.sum.fetch_add(value, Relaxed);
    }

    /// Cumulative counts per bucket (the last is +Inf, the total), and the
    /// sum.
    pub fn cumulative(&self) -> (Vec<u64>, u64) {
        (running_totals(&self.counts), self.sum.load(Relaxed))
    }
}

/// A model version's optional latency metrics.
pub struct LatencyMetrics {
    /// By `Summary as usize`; None for a family the model does not have.
    summaries: Option<Mutex<[Option<Window>; 7]>>,
    pub first_response: Option<BucketHistogram>,
}

impl LatencyMetrics {
    /// What `settings` turn on for a model of `config`: None when nothing
    /// (the request path then pays one branch).
    pub fn for_model(settings: &MetricsSettings, config: &ModelConfig) -> Option<LatencyMetrics> {
        if !settings.summary_latencies && !settings.histogram_latencies {
            return None;
        }
        let cached = config.response_cache.as_ref().is_some_and(|c| c.enable);
        let summaries = settings.summary_latencies.then(|| {
            let now = Instant::now();
            Mutex::new(SUMMARIES.map(|s| {
                let has = match s {
                    // Triton leaves the request summary out of a cached
                    // model's, and has the cache ones only for those.
                    Summary::Request => !cached,
                    Summary::CacheHit | Summary::CacheMiss => cached,
                    _ => true,
                };
                has.then(|| Window::new(now))
            }))
        });
        let first_response = settings
            .histogram_latencies
            .then(|| BucketHistogram::new(&first_response_buckets(config)));
        Some(LatencyMetrics {
            summaries,
            first_response,
        })
    }

    fn observe(&self, values: &[(Summary, Duration)]) {
        if let Some(summaries) = &self.summaries {
            let now = Instant::now();
            let mut windows = summaries.lock().unwrap_or_else(|e| e.into_inner());
            for &(s, d) in values {
                if let Some(w) = &mut windows[s as usize] {
                    w.observe(d, now);
                }
            }
        }
    }

    fn first_response(&self, d: Duration) {
        if let Some(h) = &self.first_response {
            h.observe((d.as_nanos() / 1_000_000) as u64);
        }
    }

    /// A successful request: its durations, and when its first response
    /// went.
    pub fn success(
        &self,
        total: Duration,
        queue: Duration,
        (input, infer, output): (Duration, Duration, Duration),
        first: Duration,
    ) {
        self.observe(&[
            (Summary::Request, total),
            (Summary::Queue, queue),
            (Summary::ComputeInput, input),
            (Summary::ComputeInfer, infer),
            (Summary::ComputeOutput, output),
        ]);
        self.first_response(first);
    }

    /// A request answered from the response cache, `lookup` long.
    pub fn cache_hit(&self, total: Duration, lookup: Duration) {
        self.observe(&[
            (Summary::Request, total),
            (Summary::Queue, Duration::ZERO),
            (Summary::CacheHit, lookup),
        ]);
        self.first_response(total);
    }

    pub fn cache_miss(&self, d: Duration) {
        self.observe(&[(Summary::CacheMiss, d)]);
    }

    /// Whether the summaries are kept.
    pub fn has_summaries(&self) -> bool {
        self.summaries.is_some()
    }

    /// Of each summary the model has: its quantiles' values, count and sum.
    pub fn summary_readings(&self, quantiles: &[f64]) -> Vec<(Summary, Vec<f64>, u64, f64)> {
        let Some(summaries) = &self.summaries else {
            return Vec::new();
        };
        let now = Instant::now();
        let mut windows = summaries.lock().unwrap_or_else(|e| e.into_inner());
        SUMMARIES
            .iter()
            .filter_map(|&s| {
                let w = windows[s as usize].as_mut()?;
                let values = w.quantiles(quantiles, now);
                let (count, sum) = w.totals();
                Some((s, values, count, sum))
            })
            .collect()
    }
}

impl std::fmt::Debug for LatencyMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyMetrics")
            .field("summaries", &self.summaries.is_some())
            .field(
                "first_response",
                &self.first_response.as_ref().map(|h| &h.bounds),
            )
            .finish()
    }
}

/// The first-response histogram's buckets: the config's
/// `model_metrics.metric_control` for the family, else Triton's defaults.
pub fn first_response_buckets(config: &ModelConfig) -> Vec<f64> {
    config
        .model_metrics
        .iter()
        .flat_map(|m| &m.metric_control)
        .filter(|c| {
            c.metric_identifier
                .as_ref()
                .is_some_and(|i| i.family == FIRST_RESPONSE_FAMILY)
        })
        .find_map(|c| match &c.metric_options {
            Some(MetricOptions::HistogramOptions(h)) if !h.buckets.is_empty() => {
                Some(h.buckets.clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| FIRST_RESPONSE_BUCKETS.to_vec())
}

/// The running totals of bucket counts (Prometheus's cumulative `le`
/// buckets); the last is the total.
pub fn running_totals(counts: &[std::sync::atomic::AtomicU64]) -> Vec<u64> {
    let mut total = 0;
    counts
        .iter()
        .map(|c| {
            total += c.load(Relaxed);
            total
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const QS: [f64; 3] = [0.5, 0.9, 0.99];

    #[test]
    fn an_empty_window_reads_nan_and_zero_totals() {
        let now = Instant::now();
        let mut w = Window::new(now);
        assert!(w.quantiles(&QS, now).iter().all(|v| v.is_nan()));
        assert_eq!(w.totals(), (0, 0.0));
    }

    #[test]
    fn quantiles_are_within_one_percent() {
        let now = Instant::now();
        let mut w = Window::new(now);
        for us in 1..=1000u64 {
            w.observe(Duration::from_micros(us), now);
        }
        let values = w.quantiles(&QS, now);
        for (q, v) in QS.iter().zip(&values) {
            let exact = q * 1000.0;
            assert!(
                (v - exact).abs() <= exact * 0.01 + 1.0,
                "q={q}: {v} vs {exact}"
            );
        }
        let (count, sum) = w.totals();
        assert_eq!(count, 1000);
        assert_eq!(sum, 500_500.0);
    }

    #[test]
    fn observations_leave_the_window_after_48_to_60_seconds() {
        let t0 = Instant::now();
        let mut w = Window::new(t0);
        // Values under 256 µs are kept exactly (two significant digits).
        w.observe(Duration::from_micros(200), t0);
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        // Inside the window: the newest bucket and the four before it.
        w.observe(Duration::from_micros(10), s(30));
        assert_eq!(w.quantiles(&[1.0], s(47))[0], 200.0);
        // Five rotations (12 s each) after t0 the first bucket is reset.
        assert_eq!(w.quantiles(&[1.0], s(59))[0], 200.0);
        assert_eq!(w.quantiles(&[1.0], s(60))[0], 10.0);
        // The 30 s one stays until its bucket (24..36 s) ages out at 84 s.
        assert_eq!(w.quantiles(&[1.0], s(83))[0], 10.0);
        assert!(w.quantiles(&[1.0], s(84))[0].is_nan());
        // Count and sum are not windowed.
        assert_eq!(w.totals(), (2, 210.0));
    }

    #[test]
    fn a_long_idle_gap_empties_the_window_and_recording_goes_on() {
        let t0 = Instant::now();
        let mut w = Window::new(t0);
        w.observe(Duration::from_micros(5), t0);
        let later = t0 + Duration::from_secs(3600);
        assert!(w.quantiles(&[0.5], later)[0].is_nan());
        w.observe(Duration::from_micros(7), later);
        assert_eq!(w.quantiles(&[0.5], later + Duration::from_secs(1))[0], 7.0);
    }

    #[test]
    fn bucket_histogram_bounds_are_inclusive_and_sorted() {
        let h = BucketHistogram::new(&[500.0, 100.0, 100.0, f64::NAN]);
        assert_eq!(h.bounds, vec![100.0, 500.0]);
        for v in [0, 100, 101, 500, 501] {
            h.observe(v);
        }
        let (counts, sum) = h.cumulative();
        assert_eq!(counts, vec![2, 4, 5]);
        assert_eq!(sum, 1202);
    }

    #[test]
    fn the_model_config_sets_the_first_response_buckets() {
        let mut config = ModelConfig::default();
        assert_eq!(
            first_response_buckets(&config),
            FIRST_RESPONSE_BUCKETS.to_vec()
        );
        let text = r#"
            name: "m"
            model_metrics {
              metric_control [
                { metric_identifier { family: "other" } histogram_options { buckets: [ 1 ] } },
                { metric_identifier { family: "nv_inference_first_response_histogram_ms" }
                  histogram_options { buckets: [ 1, 2.5, 10 ] } }
              ]
            }"#;
        config = crate::core::config::parse_config(text.as_bytes())
            .unwrap()
            .config;
        assert_eq!(first_response_buckets(&config), vec![1.0, 2.5, 10.0]);
    }

    #[test]
    fn only_what_the_settings_ask_for_is_kept() {
        let config = ModelConfig::default();
        let off = MetricsSettings::default();
        assert!(LatencyMetrics::for_model(&off, &config).is_none());
        let histogram = MetricsSettings {
            histogram_latencies: true,
            ..Default::default()
        };
        let l = LatencyMetrics::for_model(&histogram, &config).unwrap();
        assert!(!l.has_summaries());
        l.success(
            Duration::from_millis(150),
            Duration::ZERO,
            Default::default(),
            Duration::from_micros(99_999),
        );
        let (counts, sum) = l.first_response.as_ref().unwrap().cumulative();
        assert_eq!(counts, vec![1, 1, 1, 1, 1], "99.999 ms is 99 whole ms");
        assert_eq!(sum, 99);
    }

    #[test]
    fn a_cached_model_has_the_cache_summaries_instead_of_the_request_one() {
        let summaries = MetricsSettings {
            summary_latencies: true,
            ..Default::default()
        };
        let plain = LatencyMetrics::for_model(&summaries, &ModelConfig::default()).unwrap();
        plain.success(
            Duration::from_micros(40),
            Duration::from_micros(10),
            (
                Duration::from_micros(1),
                Duration::from_micros(20),
                Duration::from_micros(2),
            ),
            Duration::from_micros(40),
        );
        let read = plain.summary_readings(&[0.5]);
        let names: Vec<Summary> = read.iter().map(|r| r.0).collect();
        assert_eq!(names, SUMMARIES[..5].to_vec());
        assert_eq!(read[0].1, vec![40.0]);
        assert_eq!((read[0].2, read[0].3), (1, 40.0));
        assert_eq!(read[3].1, vec![20.0]);

        let mut config = ModelConfig {
            response_cache: Some(Default::default()),
            ..Default::default()
        };
        config.response_cache.as_mut().unwrap().enable = true;
        let cached = LatencyMetrics::for_model(&summaries, &config).unwrap();
        cached.cache_hit(Duration::from_micros(30), Duration::from_micros(3));
        cached.cache_miss(Duration::from_micros(8));
        let read = cached.summary_readings(&[0.5]);
        let names: Vec<Summary> = read.iter().map(|r| r.0).collect();
        assert_eq!(
            names,
            vec![
                Summary::Queue,
                Summary::ComputeInput,
                Summary::ComputeInfer,
                Summary::ComputeOutput,
                Summary::CacheHit,
                Summary::CacheMiss
            ]
        );
        assert_eq!(read[4].1, vec![3.0]);
        assert_eq!(read[5].1, vec![8.0]);
    }
}
