//! What `/metrics` shows, from the metrics flags: `--metrics-config`
//! (Triton's `MetricReporterConfig::ParseConfig`), `--allow-cpu-metrics`,
//! `--allow-gpu-metrics` and `--metrics-interval-ms`.

use std::time::Duration;

use crate::core::error::{Error, Result};
use crate::core::logging::log;

/// Triton's default summary quantiles, (quantile, allowed error).
pub const DEFAULT_QUANTILES: [(f64, f64); 5] = [
    (0.5, 0.05),
    (0.9, 0.01),
    (0.95, 0.001),
    (0.99, 0.001),
    (0.999, 0.001),
];

/// The metrics settings of a server.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSettings {
    /// The cumulative `*_duration_us` counters and the response cache's
    /// counters (`counter_latencies`; on by default).
    pub counter_latencies: bool,
    /// The `*_summary_us` families (`summary_latencies`; off by default).
    pub summary_latencies: bool,
    /// Their quantiles (`summary_quantiles`), (quantile, error) pairs.
    pub summary_quantiles: Vec<(f64, f64)>,
    /// `nv_inference_first_response_histogram_ms` (`histogram_latencies`;
    /// off by default).
    pub histogram_latencies: bool,
    /// The `nv_cpu_*` families.
    pub cpu: bool,
    /// The `nv_gpu_*` families.
    pub gpu: bool,
    /// How often the CPU and GPU readings are taken.
    pub interval: Duration,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            counter_latencies: true,
            summary_latencies: false,
            summary_quantiles: DEFAULT_QUANTILES.to_vec(),
            histogram_latencies: false,
            cpu: true,
            gpu: true,
            interval: Duration::from_millis(2000),
        }
    }
}

impl MetricsSettings {
    /// The settings of the flags: each `--metrics-config` value in order.
    ///
    /// As in Triton: a value is `<setting>=<value>`, and a comma before the
    /// `=` (a per-name setting, which Triton has none of) or no `=` is an
    /// error; keys and values are compared exactly; the switches only turn
    /// away from their default (`summary_latencies=false` after `=true`
    /// leaves it on); a `summary_quantiles` pair that does not parse is
    /// logged and skipped, and the last value with a good pair wins.
    ///
    /// Where Triton silently does nothing, trtis says so: an unknown key is
    /// logged as ignored (a warning; Triton stores it and nothing reads
    /// it), and a switch whose value is neither `true` nor `false` (which
    /// Triton takes and ignores: `summary_latencies=True` leaves the
    /// summaries off) is refused.
    pub fn from_flags(
        configs: &[String],
        allow_cpu: bool,
        allow_gpu: bool,
        interval_ms: u64,
    ) -> Result<MetricsSettings> {
        let mut settings = MetricsSettings {
            cpu: allow_cpu,
            gpu: allow_gpu,
            interval: Duration::from_millis(interval_ms.max(1)),
            ..Default::default()
        };
        for arg in configs {
            let format = || {
                Error::invalid_arg(format!(
                    "--metrics-config option format is <setting>=<value>. Got {arg}"
                ))
            };
            let (key, value) = arg.split_once('=').ok_or_else(format)?;
            if key.contains(',') {
                return Err(format());
            }
            let switch = |on: &str| -> Result<bool> {
                match value {
                    "true" | "false" => Ok(value == on),
                    _ => Err(Error::invalid_arg(format!(
                        "--metrics-config {arg}: the value of '{key}' must be true or false"
                    ))),
                }
            };
            match key {
                "counter_latencies" => {
                    if switch("false")? {
                        settings.counter_latencies = false;
                    }
                }
                "summary_latencies" => {
                    if switch("true")? {
                        settings.summary_latencies = true;
                    }
                }
                "histogram_latencies" => {
                    if switch("true")? {
                        settings.histogram_latencies = true;
                    }
                }
                "summary_quantiles" => {
                    let quantiles = parse_quantiles(value);
                    if !quantiles.is_empty() {
                        settings.summary_quantiles = quantiles;
                    }
                }
                _ => log(
                    'W',
                    &format!(
                        "--metrics-config {arg}: unknown setting '{key}' ignored (known: counter_latencies, summary_latencies, summary_quantiles, histogram_latencies)"
                    ),
                ),
            }
        }
        Ok(settings)
    }

    /// These settings on a server that serves no metrics: nothing for the
    /// request path to keep (no summaries, no first-response histogram) and
    /// no readings to take.
    pub fn unserved(self) -> MetricsSettings {
        MetricsSettings {
            summary_latencies: false,
            histogram_latencies: false,
            cpu: false,
            gpu: false,
            ..self
        }
    }
}

/// `<q>:<error>,<q>:<error>,...`; a pair that does not parse, or whose
/// quantile or error is outside [0, 1], is logged and skipped.
fn parse_quantiles(value: &str) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for pair in value.split(',') {
        let parsed = pair.split_once(':').and_then(|(q, e)| {
            let q: f64 = q.trim().parse().ok()?;
            let e: f64 = e.trim().parse().ok()?;
            ((0.0..=1.0).contains(&q) && (0.0..=1.0).contains(&e)).then_some((q, e))
        });
        match parsed {
            Some(p) => out.push(p),
            None => log(
                'E',
                &format!(
                    "--metrics-config summary_quantiles: '{pair}' is not <quantile>:<error> with both in [0, 1]; skipped"
                ),
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(configs: &[&str]) -> Result<MetricsSettings> {
        let configs: Vec<String> = configs.iter().map(|s| s.to_string()).collect();
        MetricsSettings::from_flags(&configs, true, true, 2000)
    }

    #[test]
    fn defaults_are_tritons() {
        let s = parse(&[]).unwrap();
        assert_eq!(s, MetricsSettings::default());
        assert!(s.counter_latencies && !s.summary_latencies && !s.histogram_latencies);
        assert_eq!(s.summary_quantiles, DEFAULT_QUANTILES.to_vec());
        assert_eq!(s.interval, Duration::from_millis(2000));
    }

    #[test]
    fn flags_set_cpu_gpu_and_interval() {
        let s = MetricsSettings::from_flags(&[], false, true, 200).unwrap();
        assert!(!s.cpu && s.gpu);
        assert_eq!(s.interval, Duration::from_millis(200));
        let s = MetricsSettings::from_flags(&[], true, false, 0).unwrap();
        assert!(s.cpu && !s.gpu);
        assert_eq!(s.interval, Duration::from_millis(1));
    }

    #[test]
    fn switches_turn_one_way_only() {
        let s = parse(&["summary_latencies=true", "summary_latencies=false"]).unwrap();
        assert!(s.summary_latencies, "=false after =true leaves it on");
        let s = parse(&["counter_latencies=false", "counter_latencies=true"]).unwrap();
        assert!(!s.counter_latencies, "=true after =false leaves it off");
        let s = parse(&["histogram_latencies=true"]).unwrap();
        assert!(s.histogram_latencies);
        let s = parse(&["histogram_latencies=false", "summary_latencies=false"]).unwrap();
        assert!(!s.histogram_latencies && !s.summary_latencies);
    }

    #[test]
    fn a_comma_before_the_equals_sign_or_no_equals_sign_is_refused() {
        for bad in ["model,summary_latencies=true", "summary_latencies", "a,b"] {
            let e = parse(&[bad]).unwrap_err();
            assert_eq!(
                e.message,
                format!("--metrics-config option format is <setting>=<value>. Got {bad}")
            );
        }
        // A comma after the `=` belongs to the value.
        let s = parse(&["summary_quantiles=0.5:0.05,0.75:0.01"]).unwrap();
        assert_eq!(s.summary_quantiles, vec![(0.5, 0.05), (0.75, 0.01)]);
    }

    #[test]
    fn switch_values_are_exact_and_others_refused() {
        for bad in [
            "summary_latencies=True",
            "histogram_latencies=1",
            "counter_latencies=",
        ] {
            let e = parse(&[bad]).unwrap_err();
            assert!(e.message.contains("must be true or false"), "{}", e.message);
            assert!(e.message.contains(bad), "{}", e.message);
        }
    }

    #[test]
    fn unknown_keys_are_ignored() {
        let s = parse(&["Summary_Latencies=true", "whatever=1"]).unwrap();
        assert_eq!(s, MetricsSettings::default());
    }

    #[test]
    fn bad_quantile_pairs_are_skipped_and_an_all_bad_value_keeps_the_last() {
        let s = parse(&["summary_quantiles=0.1:0.01,bad,0.2:x,1.5:0.1,0.3:0.02"]).unwrap();
        assert_eq!(s.summary_quantiles, vec![(0.1, 0.01), (0.3, 0.02)]);
        let s = parse(&["summary_quantiles=0.1:0.01", "summary_quantiles=nothing"]).unwrap();
        assert_eq!(s.summary_quantiles, vec![(0.1, 0.01)]);
        let s = parse(&["summary_quantiles=x"]).unwrap();
        assert_eq!(s.summary_quantiles, DEFAULT_QUANTILES.to_vec());
    }

    #[test]
    fn unserved_keeps_nothing_for_the_request_path() {
        let s = parse(&["summary_latencies=true", "histogram_latencies=true"])
            .unwrap()
            .unserved();
        assert!(!s.summary_latencies && !s.histogram_latencies && !s.cpu && !s.gpu);
    }
}
