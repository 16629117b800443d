//! Metrics a model defines for itself (Triton's Python backend:
//! `pb_utils.MetricFamily` and its `Metric`s): one server-wide registry of
//! counter, gauge and histogram families, shown on `/metrics` after
//! Triton's own, under their own names (no `nv_` prefix).
//!
//! A family or a metric may be made by several model instances at once
//! (the same name, or the same labels): they share it, and it lives until
//! the last of them lets it go. Whoever makes one holds a [`Handle`], which
//! lets it go when dropped, so a worker that dies takes its share with it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use crate::core::error::{Error, Result};

/// A family's kind, with Triton's numbering (`MetricFamily.COUNTER` 0,
/// `GAUGE` 1, `HISTOGRAM` 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn from_code(code: u64) -> Option<Kind> {
        match code {
            0 => Some(Kind::Counter),
            1 => Some(Kind::Gauge),
            2 => Some(Kind::Histogram),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// What a metric is told to do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Update {
    Increment(f64),
    Set(f64),
    Observe(f64),
}

/// Label name and value pairs, sorted by name.
pub type Labels = Vec<(String, String)>;

#[derive(Debug)]
enum Value {
    Number(f64),
    Histogram {
        /// Upper bounds, ascending (`+Inf` is implied).
        bounds: Vec<f64>,
        /// Observations per bucket (not cumulative); one more for `+Inf`.
        counts: Vec<u64>,
        sum: f64,
        count: u64,
    },
}

#[derive(Debug)]
struct Metric {
    users: usize,
    value: Value,
}

#[derive(Debug)]
struct Family {
    help: String,
    kind: Kind,
    users: usize,
    metrics: BTreeMap<Labels, Metric>,
}

static FAMILIES: Mutex<BTreeMap<String, Family>> = Mutex::new(BTreeMap::new());

fn families() -> std::sync::MutexGuard<'static, BTreeMap<String, Family>> {
    FAMILIES.lock().unwrap_or_else(|p| p.into_inner())
}

/// A share of a family or of one metric (which holds its family too);
/// dropping it lets it go.
#[derive(Debug)]
pub enum Handle {
    Family(String),
    Metric(String, Labels),
}

impl Drop for Handle {
    fn drop(&mut self) {
        let mut all = families();
        match self {
            Handle::Family(name) => {
                if let Some(f) = all.get_mut(name.as_str()) {
                    f.users -= 1;
                    if f.users == 0 {
                        all.remove(name.as_str());
                    }
                }
            }
            Handle::Metric(name, labels) => {
                if let Some(f) = all.get_mut(name.as_str()) {
                    if let Some(m) = f.metrics.get_mut(labels) {
                        m.users -= 1;
                        if m.users == 0 {
                            f.metrics.remove(labels);
                        }
                    }
                    // A metric holds its family too.
                    f.users -= 1;
                    if f.users == 0 {
                        all.remove(name.as_str());
                    }
                }
            }
        }
    }
}

/// Prometheus' rule for metric names.
fn valid_name(name: &str, colons: bool) -> bool {
    let mut chars = name.chars();
    let first_ok = |c: char| c.is_ascii_alphabetic() || c == '_' || (colons && c == ':');
    match chars.next() {
        Some(c) if first_ok(c) => chars.all(|c| first_ok(c) || c.is_ascii_digit()),
        _ => false,
    }
}

/// Makes (or joins) the family `name`.
pub fn family(name: &str, help: &str, kind: Kind) -> Result<Handle> {
    if !valid_name(name, true) {
        return Err(Error::invalid_arg(format!(
            "metric family name '{name}' is not a valid Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)"
        )));
    }
    if name.starts_with("nv_") {
        return Err(Error::invalid_arg(format!(
            "metric family name '{name}' uses the 'nv_' prefix, which the server keeps for its own metrics"
        )));
    }
    let mut all = families();
    match all.get_mut(name) {
        Some(f) if f.kind != kind => Err(Error::invalid_arg(format!(
            "metric family '{name}' already exists with a different kind"
        ))),
        // As Triton's: the same name and kind is the family already made,
        // whose description stays.
        Some(f) => {
            f.users += 1;
            Ok(Handle::Family(name.to_string()))
        }
        None => {
            all.insert(
                name.to_string(),
                Family {
                    help: help.to_string(),
                    kind,
                    users: 1,
                    metrics: BTreeMap::new(),
                },
            );
            Ok(Handle::Family(name.to_string()))
        }
    }
}

/// Makes (or joins) the metric with `labels` of the family `name`;
/// a histogram's needs `buckets` (ascending upper bounds).
pub fn metric(name: &str, mut labels: Labels, buckets: Option<Vec<f64>>) -> Result<Handle> {
    for (key, _) in &labels {
        if !valid_name(key, false) || key.starts_with("__") {
            return Err(Error::invalid_arg(format!(
                "metric label name '{key}' is not a valid Prometheus label name"
            )));
        }
    }
    labels.sort();
    if labels.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(Error::invalid_arg("metric labels repeat a label name"));
    }
    let mut all = families();
    let Some(f) = all.get_mut(name) else {
        return Err(Error::not_found(format!(
            "metric family '{name}' does not exist"
        )));
    };
    let value = match (f.kind, buckets) {
        (Kind::Histogram, None) => {
            return Err(Error::invalid_arg(format!(
                "a metric of histogram family '{name}' needs buckets"
            )))
        }
        (Kind::Histogram, Some(bounds)) => {
            if bounds.iter().any(|b| b.is_nan()) || bounds.windows(2).any(|w| w[0] >= w[1]) {
                return Err(Error::invalid_arg(
                    "histogram buckets must be numbers in ascending order",
                ));
            }
            let counts = vec![0; bounds.len() + 1];
            Value::Histogram {
                bounds,
                counts,
                sum: 0.0,
                count: 0,
            }
        }
        (_, Some(_)) => {
            return Err(Error::invalid_arg(format!(
                "buckets are only for histogram metrics; family '{name}' is a {}",
                f.kind.name()
            )))
        }
        (_, None) => Value::Number(0.0),
    };
    match f.metrics.get_mut(&labels) {
        Some(m) => {
            if let (Value::Histogram { bounds: have, .. }, Value::Histogram { bounds: want, .. }) =
                (&m.value, &value)
            {
                if have != want {
                    return Err(Error::invalid_arg(format!(
                        "a metric of family '{name}' with these labels already exists with other buckets"
                    )));
                }
            }
            m.users += 1;
        }
        None => {
            f.metrics.insert(labels.clone(), Metric { users: 1, value });
        }
    }
    f.users += 1;
    Ok(Handle::Metric(name.to_string(), labels))
}

fn with_metric<T>(handle: &Handle, f: impl FnOnce(Kind, &mut Value) -> Result<T>) -> Result<T> {
    let Handle::Metric(name, labels) = handle else {
        return Err(Error::invalid_arg("not a metric"));
    };
    let mut all = families();
    let family = all.get_mut(name.as_str());
    match family.and_then(|fam| fam.metrics.get_mut(labels).map(|m| (fam.kind, m))) {
        Some((kind, m)) => f(kind, &mut m.value),
        None => Err(Error::not_found(format!(
            "metric of family '{name}' is gone"
        ))),
    }
}

/// Applies `update` to the metric (the caller checked that the update
/// fits the kind; a misfit is an error here too).
pub fn update(handle: &Handle, update: Update) -> Result<()> {
    with_metric(handle, |kind, value| match (kind, value, update) {
        (Kind::Counter, Value::Number(v), Update::Increment(d)) if d >= 0.0 => {
            *v += d;
            Ok(())
        }
        (Kind::Gauge, Value::Number(v), Update::Increment(d)) => {
            *v += d;
            Ok(())
        }
        (Kind::Gauge, Value::Number(v), Update::Set(x)) => {
            *v = x;
            Ok(())
        }
        (
            Kind::Histogram,
            Value::Histogram {
                bounds,
                counts,
                sum,
                count,
            },
            Update::Observe(x),
        ) => {
            let at = bounds.iter().position(|b| x <= *b).unwrap_or(bounds.len());
            counts[at] += 1;
            *sum += x;
            *count += 1;
            Ok(())
        }
        (kind, _, update) => Err(Error::invalid_arg(format!(
            "{update:?} does not apply to a {} metric",
            kind.name()
        ))),
    })
}

/// A counter's or gauge's value.
pub fn value(handle: &Handle) -> Result<f64> {
    with_metric(handle, |kind, value| match value {
        Value::Number(v) => Ok(*v),
        Value::Histogram { .. } => Err(Error::invalid_arg(format!(
            "value() is not supported for a {} metric",
            kind.name()
        ))),
    })
}

fn number(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        format!("{v}")
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn label_text(labels: &Labels, extra: Option<(&str, String)>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{v}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// The families in the text exposition format, appended to `out`.
pub fn render(out: &mut String) {
    let all = families();
    for (name, f) in all.iter() {
        let help = f.help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {}", f.kind.name());
        for (labels, m) in &f.metrics {
            match &m.value {
                Value::Number(v) => {
                    let _ = writeln!(out, "{name}{} {}", label_text(labels, None), number(*v));
                }
                Value::Histogram {
                    bounds,
                    counts,
                    sum,
                    count,
                } => {
                    let mut cumulative = 0;
                    for (i, c) in counts.iter().enumerate() {
                        cumulative += c;
                        let le = bounds.get(i).map_or("+Inf".to_string(), |b| number(*b));
                        let _ = writeln!(
                            out,
                            "{name}_bucket{} {cumulative}",
                            label_text(labels, Some(("le", le)))
                        );
                    }
                    let _ = writeln!(
                        out,
                        "{name}_sum{} {}",
                        label_text(labels, None),
                        number(*sum)
                    );
                    let _ = writeln!(out, "{name}_count{} {count}", label_text(labels, None));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown() -> String {
        let mut out = String::new();
        render(&mut out);
        out
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn families_are_shared_and_live_while_someone_holds_them() {
        let a = family("test_shared_total", "Shared", Kind::Counter).unwrap();
        let b = family("test_shared_total", "Shared", Kind::Counter).unwrap();
        // Another description joins the family (Triton's), which keeps its
        // first; another kind is refused.
        let c = family("test_shared_total", "Other help", Kind::Counter).unwrap();
        let mut text = String::new();
        render(&mut text);
        assert!(text.contains("# HELP test_shared_total Shared\n"), "{text}");
        drop(c);
        assert!(family("test_shared_total", "Shared", Kind::Gauge).is_err());
        let m1 = metric(
            "test_shared_total",
            labels(&[("model", "m"), ("v", "1")]),
            None,
        )
        .unwrap();
        let m2 = metric(
            "test_shared_total",
            labels(&[("v", "1"), ("model", "m")]),
            None,
        )
        .unwrap();
        update(&m1, Update::Increment(2.0)).unwrap();
        update(&m2, Update::Increment(3.0)).unwrap();
        assert_eq!(value(&m1).unwrap(), 5.0);
        assert!(
            update(&m1, Update::Increment(-1.0)).is_err(),
            "a counter only grows"
        );
        assert!(
            update(&m1, Update::Set(1.0)).is_err(),
            "a counter is not set"
        );
        assert!(shown().contains(
            "# HELP test_shared_total Shared\n# TYPE test_shared_total counter\ntest_shared_total{model=\"m\",v=\"1\"} 5\n"
        ));
        drop((a, m1));
        assert!(
            shown().contains("test_shared_total{"),
            "b and m2 still hold it"
        );
        drop(m2);
        assert!(
            shown().contains("# TYPE test_shared_total counter")
                && !shown().contains("test_shared_total{")
        );
        drop(b);
        assert!(!shown().contains("test_shared_total"));
        // A metric keeps its family: the family's own handle may go first.
        let f = family("test_kept", "Kept", Kind::Gauge).unwrap();
        let m = metric("test_kept", Vec::new(), None).unwrap();
        drop(f);
        update(&m, Update::Set(2.0)).unwrap();
        assert!(shown().contains("test_kept 2\n"));
        drop(m);
        assert!(!shown().contains("test_kept"));
    }

    #[test]
    fn gauges_and_histograms_render_as_prometheus_expects() {
        let _g = family("test_gauge", "A gauge", Kind::Gauge).unwrap();
        let g = metric("test_gauge", Vec::new(), None).unwrap();
        update(&g, Update::Set(-2.5)).unwrap();
        update(&g, Update::Increment(1.0)).unwrap();
        assert!(shown().contains("test_gauge -1.5\n"));
        let _h = family("test_hist", "A histogram", Kind::Histogram).unwrap();
        assert!(
            metric("test_hist", Vec::new(), None).is_err(),
            "buckets needed"
        );
        assert!(metric("test_hist", Vec::new(), Some(vec![2.0, 1.0])).is_err());
        let h = metric("test_hist", labels(&[("a", "x\"y")]), Some(vec![1.0, 10.0])).unwrap();
        for x in [0.5, 5.0, 50.0] {
            update(&h, Update::Observe(x)).unwrap();
        }
        assert!(value(&h).is_err());
        let text = shown();
        for line in [
            "test_hist_bucket{a=\"x\\\"y\",le=\"1\"} 1",
            "test_hist_bucket{a=\"x\\\"y\",le=\"10\"} 2",
            "test_hist_bucket{a=\"x\\\"y\",le=\"+Inf\"} 3",
            "test_hist_sum{a=\"x\\\"y\"} 55.5",
            "test_hist_count{a=\"x\\\"y\"} 3",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(family("9lives", "", Kind::Counter).is_err());
        assert!(family("nv_mine", "", Kind::Counter).is_err());
        let _f = family("test_labels", "", Kind::Counter).unwrap();
        assert!(metric("test_labels", labels(&[("bad-name", "x")]), None).is_err());
        assert!(metric("test_labels", labels(&[("a", "1"), ("a", "2")]), None).is_err());
        assert!(metric("test_missing", Vec::new(), None).is_err());
    }
}
