//! Request tracing (Triton's trace extension, TIMESTAMPS level): settings
//! global and per model, sampling by rate and count, and each sampled
//! request's timestamps written to the trace file as a JSON array.
//!
//! The trace file is set when the server starts (`--trace-config
//! triton,file=...`), never through the API: like Triton since
//! CVE-2024-0087, an update naming `trace_file` is refused, so a client
//! cannot make the server write over a file of its choice.
//!
//! Each trace is appended: the file always holds one valid JSON array (the
//! closing `]` is overwritten by `,` and the next trace), so the cost of a
//! traced request stays flat however many came before. With
//! `log_frequency` N > 0, every N traces start a new file `<file>.<k>`
//! (k = 0, 1, ...), each a JSON array of its own, as Triton names them.
//!
//! `--trace-config mode=opentelemetry` sends the same requests' timestamps
//! as OpenTelemetry spans to an OTLP collector instead (`otel`); a request
//! that carries a W3C `traceparent` is then always traced, as a child of
//! the caller's span (rate 0: only those).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::core::error::{Error, Result};
use crate::core::types::TraceContext;

pub mod otel;

/// Where sampled requests go: Triton's trace file, or OpenTelemetry spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceMode {
    #[default]
    Triton,
    OpenTelemetry,
}

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
    /// Chosen at start (`--trace-config mode=...`), never by the API.
    pub mode: TraceMode,
    /// OpenTelemetry mode's exporter settings.
    pub otel: otel::OtelSettings,
}

impl Default for TraceSettings {
    fn default() -> Self {
        TraceSettings {
            file: String::new(),
            level: vec!["OFF".to_string()],
            rate: 1000,
            count: -1,
            log_frequency: 0,
            mode: TraceMode::Triton,
            otel: otel::OtelSettings::default(),
        }
    }
}

impl TraceSettings {
    /// As the protocols report them: name → list of strings.
    /// In OpenTelemetry mode the file and log frequency are absent and
    /// the exporter's settings are there instead, as Triton answers.
    pub fn to_map(&self) -> BTreeMap<&'static str, Vec<String>> {
        let mut map = BTreeMap::from([
            ("trace_level", self.level.clone()),
            ("trace_rate", vec![self.rate.to_string()]),
            ("trace_count", vec![self.count.to_string()]),
        ]);
        match self.mode {
            TraceMode::Triton => {
                map.insert("trace_file", vec![self.file.clone()]);
                map.insert("log_frequency", vec![self.log_frequency.to_string()]);
                map.insert("trace_mode", vec!["triton".to_string()]);
            }
            TraceMode::OpenTelemetry => {
                map.insert("trace_mode", vec!["opentelemetry".to_string()]);
                map.extend(self.otel.entries());
            }
        }
        map
    }

    /// Applies updates by the API's names; `None` takes the fallback's
    /// value (JSON `null` clearing a model's override). The file is not
    /// among them: it is set at start only.
    fn apply(
        &mut self,
        updates: &BTreeMap<String, Option<Vec<String>>>,
        fallback: &TraceSettings,
    ) -> Result<()> {
        for (key, value) in updates {
            let Some(values) = value else {
                match key.as_str() {
                    "trace_level" => self.level = fallback.level.clone(),
                    "trace_rate" => self.rate = fallback.rate,
                    "trace_count" => self.count = fallback.count,
                    "log_frequency" => self.log_frequency = fallback.log_frequency,
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
                "trace_level" => {
                    for level in values {
                        if !["OFF", "TIMESTAMPS", "TENSORS"].contains(&level.as_str()) {
                            return Err(Error::invalid_arg(format!(
                                "invalid value for 'trace_level', expected OFF, TIMESTAMPS or TENSORS, got: {level}"
                            )));
                        }
                    }
                    self.level = values.clone();
                }
                "trace_rate" => {
                    let rate = number(one(key, values)?)?;
                    // OpenTelemetry mode: 0 traces only the requests that
                    // carry a traceparent (Triton's documented workaround).
                    let least = if self.mode == TraceMode::OpenTelemetry {
                        0
                    } else {
                        1
                    };
                    if rate < least {
                        return Err(Error::invalid_arg(format!(
                            "'trace_rate' must be at least {least}"
                        )));
                    }
                    self.rate = rate as u64;
                }
                "trace_count" => self.count = number(one(key, values)?)?.max(-1),
                "log_frequency" => self.log_frequency = number(one(key, values)?)?.max(0) as u64,
                _ => return Err(Error::invalid_arg(format!("unknown trace setting '{key}'"))),
            }
        }
        Ok(())
    }

    /// The settings given at start, from Triton's `--trace-config` values
    /// (`[triton,]key=value`: `file`, `level` (repeatable: the levels add
    /// up), `rate`, `count`, `log-frequency`, `mode=triton|opentelemetry`;
    /// `opentelemetry,key=value`: `url`, `resource=k=v` (repeatable),
    /// `bsp_max_queue_size`, `bsp_schedule_delay`,
    /// `bsp_max_export_batch_size`), applied in order over the defaults.
    pub fn from_config(values: &[String]) -> Result<TraceSettings> {
        let mut settings = TraceSettings::default();
        // The mode first: it decides what a rate of 0 means.
        for value in values {
            if let Some(mode) = value.strip_prefix("mode=") {
                check_mode(mode)?;
                settings.mode = if mode.eq_ignore_ascii_case("opentelemetry") {
                    TraceMode::OpenTelemetry
                } else {
                    TraceMode::Triton
                };
            }
        }
        let mut levels: Vec<String> = Vec::new();
        for value in values {
            // `<mode>,<key>=<value>` or `<key>=<value>` (a comma after an
            // `=` belongs to the value).
            let (mode, pair) = match value.split_once(',') {
                Some((mode, pair)) if !mode.contains('=') => (Some(mode), pair),
                _ => (None, value.as_str()),
            };
            if let Some(mode) = mode {
                check_mode(mode)?;
            }
            let Some((key, v)) = pair.split_once('=') else {
                return Err(Error::invalid_arg(format!(
                    "--trace-config '{value}': expected [<mode>,]<setting>=<value>"
                )));
            };
            if mode.is_some_and(|m| m.eq_ignore_ascii_case("opentelemetry")) {
                settings.otel.set(key, v)?;
                continue;
            }
            let api_key = match key {
                "mode" => {
                    check_mode(v)?;
                    continue;
                }
                "file" => {
                    settings.file = v.to_string();
                    continue;
                }
                "level" => {
                    let v = command_line_level(v)?;
                    levels.retain(|l| l != "OFF");
                    if v == "OFF" {
                        levels.clear();
                    }
                    if !levels.iter().any(|l| l == v) {
                        levels.push(v.to_string());
                    }
                    settings.apply(
                        &BTreeMap::from([("trace_level".to_string(), Some(levels.clone()))]),
                        &TraceSettings::default(),
                    )?;
                    continue;
                }
                "rate" => "trace_rate",
                "count" => "trace_count",
                "log-frequency" | "log_frequency" => "log_frequency",
                _ => {
                    return Err(Error::invalid_arg(format!(
                        "--trace-config '{value}': unknown setting '{key}' (file, level, rate, count, log-frequency)"
                    )))
                }
            };
            settings.apply(
                &BTreeMap::from([(api_key.to_string(), Some(vec![v.to_string()]))]),
                &TraceSettings::default(),
            )?;
        }
        Ok(settings)
    }

    fn timestamps(&self) -> bool {
        self.level.iter().any(|l| l == "TIMESTAMPS")
            && (self.mode == TraceMode::OpenTelemetry || !self.file.is_empty())
    }
}

/// A traced request once it has ended: what its trace records.
pub struct Finished<'a> {
    pub model: &'a str,
    pub version: &'a str,
    pub request_id: &'a str,
    /// The caller's trace context, or the parent request's.
    pub parent: Option<&'a TraceContext>,
    /// Its timestamps, by Triton's names (REQUEST_START, QUEUE_START, ...).
    pub stamps: &'a [(&'a str, SystemTime)],
    /// Whether it ran on instances (not an ensemble: no compute span).
    pub compute: bool,
}

/// A request chosen for tracing.
pub struct Sampled {
    id: u64,
    file: String,
    log_frequency: u64,
    /// OpenTelemetry mode: the ids its spans will have.
    spans: Option<otel::SpanIds>,
}

impl Sampled {
    /// The trace context of the requests this one makes (an ensemble's
    /// steps), so that their spans are its children (OpenTelemetry mode).
    pub fn child_context(&self) -> Option<TraceContext> {
        self.spans.map(|ids| TraceContext {
            traceparent: ids.model_traceparent(),
            tracestate: None,
            parent_trace: Some(self.id),
        })
    }
}

/// The message Triton answers an update that names the trace file.
pub const FILE_NOT_SETTABLE: &str =
    "trace file location can not be updated through network protocol";

/// One trace file being written: a JSON array kept valid after each trace.
struct Sink {
    file: File,
    /// Traces in this file.
    traces: u64,
}

impl Sink {
    fn create(path: &str) -> std::io::Result<Sink> {
        Ok(Sink {
            file: File::create(path)?,
            traces: 0,
        })
    }

    /// Appends one trace, leaving a complete array behind.
    fn append(&mut self, trace: &Value) -> std::io::Result<()> {
        let text = serde_json::to_string(trace).map_err(std::io::Error::other)?;
        if self.traces == 0 {
            self.file.write_all(format!("[{text}]").as_bytes())?;
        } else {
            self.file.seek(SeekFrom::End(-1))?;
            self.file.write_all(format!(",\n{text}]").as_bytes())?;
        }
        self.traces += 1;
        Ok(())
    }
}

/// The files traces go to, by (trace file, log frequency): with a log
/// frequency N > 0 the current file is `<file>.<k>` and a new one starts
/// every N traces.
#[derive(Default)]
struct Files {
    sinks: BTreeMap<(String, u64), (u64, Sink)>,
    /// Whether a write error has been logged already (logged once).
    failed: bool,
}

impl Files {
    fn write(&mut self, file: &str, log_frequency: u64, trace: &Value) -> std::io::Result<()> {
        let key = (file.to_string(), log_frequency);
        let rotate = match self.sinks.get(&key) {
            None => Some(0),
            Some((k, sink)) if log_frequency > 0 && sink.traces >= log_frequency => Some(k + 1),
            Some(_) => None,
        };
        if let Some(k) = rotate {
            let path = if log_frequency > 0 {
                format!("{file}.{k}")
            } else {
                file.to_string()
            };
            self.sinks.insert(key.clone(), (k, Sink::create(&path)?));
        }
        let (_, sink) = self.sinks.get_mut(&key).expect("created above");
        sink.append(trace)
    }
}

/// What a model sets of its own; the rest follows the global settings,
/// also when they change later (Triton's per-model trace settings). JSON
/// `null` clears one of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Overrides {
    level: Option<Vec<String>>,
    rate: Option<u64>,
    count: Option<i64>,
    log_frequency: Option<u64>,
}

impl Overrides {
    /// The global settings with these applied.
    fn over(&self, global: &TraceSettings) -> TraceSettings {
        let mut s = global.clone();
        if let Some(level) = &self.level {
            s.level = level.clone();
        }
        if let Some(rate) = self.rate {
            s.rate = rate;
        }
        if let Some(count) = self.count {
            s.count = count;
        }
        if let Some(f) = self.log_frequency {
            s.log_frequency = f;
        }
        s
    }

    /// Applies the API's updates: a value (checked as for the global
    /// settings) sets an override, `None` clears it.
    fn apply(
        &mut self,
        updates: &BTreeMap<String, Option<Vec<String>>>,
        global: &TraceSettings,
    ) -> Result<()> {
        for (key, value) in updates {
            match value {
                None => match key.as_str() {
                    "trace_level" => self.level = None,
                    "trace_rate" => self.rate = None,
                    "trace_count" => self.count = None,
                    "log_frequency" => self.log_frequency = None,
                    _ => return Err(Error::invalid_arg(format!("unknown trace setting '{key}'"))),
                },
                Some(_) => {
                    // Checked and parsed by the settings' own rules.
                    let mut s = self.over(global);
                    s.apply(&BTreeMap::from([(key.clone(), value.clone())]), global)?;
                    match key.as_str() {
                        "trace_level" => self.level = Some(s.level),
                        "trace_rate" => self.rate = Some(s.rate),
                        "trace_count" => self.count = Some(s.count),
                        "log_frequency" => self.log_frequency = Some(s.log_frequency),
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }
}

/// The tracer of one server.
#[derive(Default)]
pub struct Tracer {
    /// Whether any settings could trace (the request path checks only this
    /// when tracing is off).
    active: AtomicBool,
    global: Mutex<TraceSettings>,
    per_model: Mutex<BTreeMap<String, Overrides>>,
    /// Requests seen, for the sampling rate.
    seen: AtomicU64,
    next_id: AtomicU64,
    files: Mutex<Files>,
    /// OpenTelemetry mode's exporter.
    otel: Option<otel::Otel>,
}

/// A level as Triton's command line takes it (`ParseTraceLevelOption`):
/// any case; `false`/`off`, `true`/`on`/`min`/`max`/`timestamps` (the
/// legacy names mean TIMESTAMPS), `tensors`; as the trace API's name.
fn command_line_level(value: &str) -> Result<&'static str> {
    let lower = value.to_ascii_lowercase();
    match lower.as_str() {
        "false" | "off" => Ok("OFF"),
        "true" | "on" | "min" | "max" | "timestamps" => Ok("TIMESTAMPS"),
        "tensors" => Ok("TENSORS"),
        _ => Err(Error::invalid_arg(format!(
            "invalid value for trace level option: {lower}"
        ))),
    }
}

fn check_mode(mode: &str) -> Result<()> {
    if mode.eq_ignore_ascii_case("triton") || mode.eq_ignore_ascii_case("opentelemetry") {
        return Ok(());
    }
    Err(Error::invalid_arg(format!(
        "invalid value for trace mode option: {mode}. Available options are \"triton\" and \"opentelemetry\""
    )))
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
    /// A tracer starting from the settings given at start (`--trace-config`);
    /// in OpenTelemetry mode with its exporter started.
    pub fn new(initial: TraceSettings) -> Result<Tracer> {
        let otel = match initial.mode {
            TraceMode::OpenTelemetry => Some(otel::Otel::start(&initial.otel)?),
            TraceMode::Triton => None,
        };
        Ok(Tracer {
            active: AtomicBool::new(initial.timestamps()),
            global: Mutex::new(initial),
            otel,
            ..Tracer::default()
        })
    }

    /// Sends the spans still queued (OpenTelemetry mode), at shutdown.
    pub fn shutdown(&self) {
        if let Some(otel) = &self.otel {
            otel.shutdown();
        }
    }

    /// The settings in force for a model (the global ones with its own
    /// overrides), or the global ones.
    pub fn settings(&self, model: Option<&str>) -> TraceSettings {
        let global = self.global.lock().unwrap().clone();
        match model.and_then(|m| self.per_model.lock().unwrap().get(m).cloned()) {
            Some(o) => o.over(&global),
            None => global,
        }
    }

    /// Applies updates (`None` clears a model's override of that setting,
    /// as JSON `null` does in Triton; on the global settings it changes
    /// nothing) and returns the resulting settings.
    pub fn update(
        &self,
        model: Option<&str>,
        updates: &BTreeMap<String, Option<Vec<String>>>,
    ) -> Result<TraceSettings> {
        if updates.contains_key("trace_file") {
            return Err(Error::unsupported(FILE_NOT_SETTABLE));
        }
        let result = match model {
            Some(m) => {
                let global = self.global.lock().unwrap().clone();
                let mut per_model = self.per_model.lock().unwrap();
                let mut o = per_model.get(m).cloned().unwrap_or_default();
                o.apply(updates, &global)?;
                let s = o.over(&global);
                if o == Overrides::default() {
                    per_model.remove(m);
                } else {
                    per_model.insert(m.to_string(), o);
                }
                s
            }
            None => {
                let mut global = self.global.lock().unwrap();
                let mut s = global.clone();
                let fallback = s.clone();
                s.apply(updates, &fallback)?;
                *global = s.clone();
                s
            }
        };
        let global = self.global.lock().unwrap().clone();
        let active = global.timestamps()
            || self
                .per_model
                .lock()
                .unwrap()
                .values()
                .any(|o| o.over(&global).timestamps());
        self.active.store(active, Relaxed);
        Ok(result)
    }

    /// Decides whether this request of `model` is traced; in OpenTelemetry
    /// mode one that carries a caller's trace context (`propagated`) always
    /// is (while the level is not OFF), whatever the rate and count.
    pub fn sample(&self, model: &str, parent: Option<&TraceContext>) -> Option<Sampled> {
        if !self.active.load(Relaxed) {
            return None;
        }
        let s = self.settings(Some(model));
        if !s.timestamps() {
            return None;
        }
        // A caller's context is traced whatever the rate and count.
        let propagated = parent.is_some() && s.mode == TraceMode::OpenTelemetry;
        if !propagated && !self.take_by_rate(model, &s) {
            return None;
        }
        Some(Sampled {
            id: self.next_id.fetch_add(1, Relaxed) + 1,
            file: s.file,
            log_frequency: s.log_frequency,
            spans: self.otel.as_ref().map(|_| otel::SpanIds::new(parent)),
        })
    }

    /// Whether the rate picks this request of `model` (settings `s`) and a
    /// trace is left to take (one is then counted off).
    fn take_by_rate(&self, model: &str, s: &TraceSettings) -> bool {
        if s.count == 0 || s.rate == 0 {
            return false;
        }
        let n = self.seen.fetch_add(1, Relaxed);
        if n % s.rate != 0 {
            return false;
        }
        if s.count > 0 {
            // The model's own count when it has one, else the global one.
            let mut per_model = self.per_model.lock().unwrap();
            match per_model.get_mut(model).and_then(|o| o.count.as_mut()) {
                Some(count) if *count == 0 => return false,
                Some(count) => *count -= 1,
                None => {
                    let mut g = self.global.lock().unwrap();
                    if g.count == 0 {
                        return false;
                    }
                    g.count -= 1;
                }
            }
        }
        true
    }

    /// Writes a sampled request's timestamps (ns since the epoch) to the
    /// trace file, or sends them as spans (OpenTelemetry mode).
    pub fn record(&self, sampled: Sampled, done: &Finished) {
        if let (Some(otel), Some(ids)) = (&self.otel, sampled.spans) {
            otel.emit(sampled.id, ids, done);
            return;
        }
        let (model, version) = (done.model, done.version);
        let stamps: Vec<Value> = done
            .stamps
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
        let mut files = self.files.lock().unwrap();
        if let Err(e) = files.write(&sampled.file, sampled.log_frequency, &trace) {
            if !files.failed {
                files.failed = true;
                crate::core::logging::log(
                    'E',
                    &format!("failed to write trace file {}: {e}", sampled.file),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: Option<&str>) -> BTreeMap<String, Option<Vec<String>>> {
        BTreeMap::from([(key.to_string(), value.map(|v| vec![v.to_string()]))])
    }

    /// Triton's command line takes the legacy MIN and MAX (qa/L0_batcher
    /// starts servers with `--trace-level=MIN`) and any case.
    #[test]
    fn command_line_levels_take_tritons_legacy_names() {
        let levels = |given: &[&str]| {
            let values: Vec<String> = given.iter().map(|l| format!("level={l}")).collect();
            TraceSettings::from_config(&values).map(|s| s.level)
        };
        assert_eq!(levels(&["MIN"]).unwrap(), ["TIMESTAMPS"]);
        assert_eq!(levels(&["MAX"]).unwrap(), ["TIMESTAMPS"]);
        assert_eq!(
            levels(&["min", "tensors"]).unwrap(),
            ["TIMESTAMPS", "TENSORS"]
        );
        assert_eq!(levels(&["TIMESTAMPS", "false"]).unwrap(), ["OFF"]);
        assert_eq!(
            levels(&["MEDIUM"]).unwrap_err().message,
            "invalid value for trace level option: medium"
        );
    }

    #[test]
    fn a_cleared_model_override_follows_the_global_setting_again() {
        let t = Tracer::new(TraceSettings::default()).unwrap();
        t.update(Some("m"), &set("trace_rate", Some("1000")))
            .unwrap();
        t.update(None, &set("trace_rate", Some("42"))).unwrap();
        assert_eq!(t.settings(Some("m")).rate, 1000);
        t.update(Some("m"), &set("trace_rate", None)).unwrap();
        assert_eq!(t.settings(Some("m")).rate, 42);
        // And goes on following it.
        t.update(None, &set("trace_rate", Some("7"))).unwrap();
        assert_eq!(t.settings(Some("m")).rate, 7);
        // An override of one setting leaves the others following.
        t.update(Some("m"), &set("trace_count", Some("5"))).unwrap();
        t.update(None, &set("trace_rate", Some("9"))).unwrap();
        let s = t.settings(Some("m"));
        assert_eq!((s.rate, s.count), (9, 5));
        assert_eq!(t.settings(None).count, -1);
        assert!(t.update(Some("m"), &set("trace_rate", Some("0"))).is_err());
    }
}
