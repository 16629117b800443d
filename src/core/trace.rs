//! Request tracing (Triton's trace extension, TIMESTAMPS level): settings
//! global and per model, sampling by rate and count, and each sampled
//! request's timestamps written to the trace file as a JSON array.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::core::error::{Error, Result};

/// The settings Triton names, with their values as strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSettings {
    pub file: String,
    /// OFF, or any of TIMESTAMPS and TENSORS.
    pub level: Vec<String>,
    /// Trace one request in every `rate`.
    pub rate: u64,
    /// Traces left to take; -1 is unlimited.
    pub count: i64,
    pub log_frequency: u64,
}

impl Default for TraceSettings {
    fn default() -> Self {
        TraceSettings {
            file: String::new(),
            level: vec!["OFF".to_string()],
            rate: 1000,
            count: -1,
            log_frequency: 0,
        }
    }
}

impl TraceSettings {
    /// As the protocols report them: name → list of strings.
    pub fn to_map(&self) -> BTreeMap<&'static str, Vec<String>> {
        BTreeMap::from([
            ("trace_file", vec![self.file.clone()]),
            ("trace_level", self.level.clone()),
            ("trace_rate", vec![self.rate.to_string()]),
            ("trace_count", vec![self.count.to_string()]),
            ("log_frequency", vec![self.log_frequency.to_string()]),
        ])
    }

    fn timestamps(&self) -> bool {
        self.level.iter().any(|l| l == "TIMESTAMPS") && !self.file.is_empty()
    }
}

/// A request chosen for tracing.
pub struct Sampled {
    id: u64,
    file: String,
}

/// The tracer of one server.
#[derive(Default)]
pub struct Tracer {
    /// Whether any settings could trace (the request path checks only this
    /// when tracing is off).
    active: std::sync::atomic::AtomicBool,
    global: Mutex<TraceSettings>,
    per_model: Mutex<BTreeMap<String, TraceSettings>>,
    /// Requests seen, for the sampling rate.
    seen: AtomicU64,
    next_id: AtomicU64,
    /// Traces written so far, per file (the file holds them as one array).
    written: Mutex<BTreeMap<String, Vec<Value>>>,
}

fn one(key: &str, values: &[String]) -> Result<String> {
    match values {
        [v] => Ok(v.clone()),
        _ => Err(Error::invalid_arg(format!(
            "expect only 1 value for '{key}'"
        ))),
    }
}

impl Tracer {
    /// The settings in force for a model (its own, else the global ones), or
    /// the global ones.
    pub fn settings(&self, model: Option<&str>) -> TraceSettings {
        if let Some(m) = model {
            if let Some(s) = self.per_model.lock().unwrap().get(m) {
                return s.clone();
            }
        }
        self.global.lock().unwrap().clone()
    }

    /// Applies updates (`None` clears a model's override of that setting,
    /// as JSON `null` does in Triton) and returns the resulting settings.
    pub fn update(
        &self,
        model: Option<&str>,
        updates: &BTreeMap<String, Option<Vec<String>>>,
    ) -> Result<TraceSettings> {
        let global = self.global.lock().unwrap().clone();
        let mut s = self.settings(model);
        for (key, value) in updates {
            let Some(values) = value else {
                let fallback = global.clone();
                match key.as_str() {
                    "trace_file" => s.file = fallback.file,
                    "trace_level" => s.level = fallback.level,
                    "trace_rate" => s.rate = fallback.rate,
                    "trace_count" => s.count = fallback.count,
                    "log_frequency" => s.log_frequency = fallback.log_frequency,
                    _ => return Err(Error::invalid_arg(format!("unknown trace setting '{key}'"))),
                }
                continue;
            };
            let number = |v: String| -> Result<i64> {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| Error::invalid_arg(format!("Unable to parse '{key}', got: {v}")))
            };
            match key.as_str() {
                "trace_file" => s.file = one(key, values)?,
                "trace_level" => {
                    for level in values {
                        if !["OFF", "TIMESTAMPS", "TENSORS"].contains(&level.as_str()) {
                            return Err(Error::invalid_arg(format!(
                                "invalid value for 'trace_level', expected OFF, TIMESTAMPS or TENSORS, got: {level}"
                            )));
                        }
                    }
                    s.level = values.clone();
                }
                "trace_rate" => {
                    let rate = number(one(key, values)?)?;
                    if rate < 1 {
                        return Err(Error::invalid_arg("'trace_rate' must be at least 1"));
                    }
                    s.rate = rate as u64;
                }
                "trace_count" => s.count = number(one(key, values)?)?.max(-1),
                "log_frequency" => s.log_frequency = number(one(key, values)?)?.max(0) as u64,
                _ => return Err(Error::invalid_arg(format!("unknown trace setting '{key}'"))),
            }
        }
        match model {
            Some(m) => {
                self.per_model
                    .lock()
                    .unwrap()
                    .insert(m.to_string(), s.clone());
            }
            None => *self.global.lock().unwrap() = s.clone(),
        }
        let active = self.global.lock().unwrap().timestamps()
            || self
                .per_model
                .lock()
                .unwrap()
                .values()
                .any(TraceSettings::timestamps);
        self.active.store(active, Relaxed);
        Ok(s)
    }

    /// Decides whether this request of `model` is traced.
    pub fn sample(&self, model: &str) -> Option<Sampled> {
        if !self.active.load(Relaxed) {
            return None;
        }
        let s = self.settings(Some(model));
        if !s.timestamps() || s.count == 0 {
            return None;
        }
        let n = self.seen.fetch_add(1, Relaxed);
        if n % s.rate != 0 {
            return None;
        }
        if s.count > 0 {
            let mut per_model = self.per_model.lock().unwrap();
            let target = per_model.get_mut(model);
            match target {
                Some(t) => t.count -= 1,
                None => {
                    let mut g = self.global.lock().unwrap();
                    if g.count == 0 {
                        return None;
                    }
                    g.count -= 1;
                }
            }
        }
        Some(Sampled {
            id: self.next_id.fetch_add(1, Relaxed) + 1,
            file: s.file,
        })
    }

    /// Writes a sampled request's timestamps (ns since the epoch).
    pub fn record(
        &self,
        sampled: Sampled,
        model: &str,
        version: &str,
        timestamps: &[(&str, SystemTime)],
    ) {
        let stamps: Vec<Value> = timestamps
            .iter()
            .map(|(name, t)| {
                let ns = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64;
                json!({ "name": name, "ns": ns })
            })
            .collect();
        let trace = json!({
            "id": sampled.id,
            "model_name": model,
            "model_version": version.parse::<i64>().unwrap_or(-1),
            "timestamps": stamps,
        });
        let mut written = self.written.lock().unwrap();
        let traces = written.entry(sampled.file.clone()).or_default();
        traces.push(trace);
        let text = serde_json::to_string_pretty(&Value::Array(traces.clone())).unwrap_or_default();
        if let Err(e) = std::fs::write(&sampled.file, text) {
            crate::core::logging::log(
                'E',
                &format!("failed to write trace file {}: {e}", sampled.file),
            );
        }
    }
}
