//! The server's log (Triton's logging extension) on `tracing` and
//! `tracing-subscriber`: Triton's line format, which levels are printed, the
//! verbose level, the format and the log file, readable and settable at run
//! time over HTTP (`/v2/logging`) and gRPC (`LogSettings`).
//!
//! Lines look like Triton's (`triton/common` `LogMessage`), in UTC:
//!
//! ```text
//! default: I1123 20:14:05.123456 1234 serve.rs:279] Started HTTPService at 0.0.0.0:8000
//! ISO8601: 2024-11-23T20:14:05Z I 1234 serve.rs:279] Started HTTPService at 0.0.0.0:8000
//! ```
//!
//! The letter is the level (`E`, `W`, `I`, and `V` for verbose lines), the
//! number the process id (Triton prints `getpid()`), then the source file
//! (base name) and line of the call. They go to stderr, or appended to
//! `--log-file`.
//!
//! How it fits together: one global `tracing` subscriber, a `Registry` with
//! two `reload` layers, the level filter (`Levels`) and a `fmt` layer whose
//! event formatter is `TritonFormat` and whose writer is the stderr or file
//! sink. [`update`] (the logging extension) and [`init`] (`trtis serve`'s
//! flags) store the settings and reload both layers, which also rebuilds
//! `tracing`'s callsite interest, so a disabled level costs nothing.
//!
//! Levels map onto `tracing`'s: `E` ERROR, `W` WARN, `I` INFO, verbose level
//! 1 DEBUG and levels 2 and up TRACE. Only events of this crate (targets
//! `trtis` and `trtis::...`) are printed, as Triton prints only its own
//! messages; the libraries' own `tracing` events (hyper, h2, tonic) are not.
//!
//! [`log`] and [`verbose`] are the API the rest of the server calls: thin
//! shims that emit a `tracing` event carrying the caller's file and line
//! (`#[track_caller]`). Code may also use `tracing::info!` and friends
//! directly. The subscriber installs itself on the first line logged when
//! nothing else installed one (like Triton's global logger); a program that
//! installed its own subscriber gets the events instead.

use std::fmt::{self, Write as _};
use std::fs::{File, OpenOptions};
use std::io;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::fmt::format::{DefaultFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::layer::{Context, Layer, Layered, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{reload, Registry};

use crate::core::error::{Error, Result};

static INFO: AtomicBool = AtomicBool::new(true);
static WARNING: AtomicBool = AtomicBool::new(true);
static ERROR: AtomicBool = AtomicBool::new(true);
static VERBOSE: AtomicU32 = AtomicU32::new(0);
static ISO8601: AtomicBool = AtomicBool::new(false);

/// Where lines go: the `--log-file` name as given ("" for stderr) and its
/// sink.
struct Output {
    name: String,
    sink: Sink,
}

static OUTPUT: Mutex<Output> = Mutex::new(Output {
    name: String::new(),
    sink: Sink::Stderr,
});

/// Serializes changes of the settings with the reload of the layers, so the
/// subscriber always ends up with the last settings stored.
static CONFIG: Mutex<()> = Mutex::new(());

/// A setting's value, as both protocols carry them.
#[derive(Debug, Clone, PartialEq)]
pub enum Setting {
    Bool(bool),
    Uint(u32),
    String(String),
}

/// Triton's two line formats (`--log-format`, `log_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `I1123 20:14:05.123456 1234 file.rs:12] message`
    #[default]
    Default,
    /// `2024-11-23T20:14:05Z I 1234 file.rs:12] message`
    Iso8601,
}

impl Format {
    /// Triton's name: `default` or `ISO8601`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Default => "default",
            Format::Iso8601 => "ISO8601",
        }
    }

    /// The format of Triton's name (exact, as Triton compares it).
    pub fn parse(name: &str) -> Option<Format> {
        match name {
            "default" => Some(Format::Default),
            "ISO8601" => Some(Format::Iso8601),
            _ => None,
        }
    }

    fn current() -> Format {
        if ISO8601.load(Relaxed) {
            Format::Iso8601
        } else {
            Format::Default
        }
    }
}

/// The settings at start (`trtis serve`'s `--log-*` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub info: bool,
    pub warning: bool,
    pub error: bool,
    pub verbose: u32,
    pub format: Format,
    /// Lines are appended to this file (created if missing) instead of
    /// going to stderr; `None` or "" is stderr.
    pub file: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            info: true,
            warning: true,
            error: true,
            verbose: 0,
            format: Format::Default,
            file: None,
        }
    }
}

/// Applies the settings at start and installs the subscriber. A log file
/// that cannot be opened is an error; lines then go to stderr, with every
/// other setting applied.
pub fn init(options: &Options) -> Result<()> {
    let _config = CONFIG.lock().unwrap_or_else(|e| e.into_inner());
    INFO.store(options.info, Relaxed);
    WARNING.store(options.warning, Relaxed);
    ERROR.store(options.error, Relaxed);
    VERBOSE.store(options.verbose, Relaxed);
    ISO8601.store(options.format == Format::Iso8601, Relaxed);
    let mut outcome = Ok(());
    match options.file.as_deref() {
        None | Some("") => {}
        Some(name) => match OpenOptions::new().create(true).append(true).open(name) {
            Ok(file) => {
                *output() = Output {
                    name: name.to_string(),
                    sink: Sink::File(Arc::new(file)),
                }
            }
            Err(e) => {
                outcome = Err(Error::invalid_arg(format!(
                    "failed to open log file '{name}': {e}"
                )))
            }
        },
    }
    apply();
    outcome
}

fn output() -> std::sync::MutexGuard<'static, Output> {
    OUTPUT.lock().unwrap_or_else(|e| e.into_inner())
}

/// The current settings, by Triton's names.
pub fn settings() -> Vec<(&'static str, Setting)> {
    let _config = CONFIG.lock().unwrap_or_else(|e| e.into_inner());
    vec![
        ("log_file", Setting::String(output().name.clone())),
        ("log_info", Setting::Bool(INFO.load(Relaxed))),
        ("log_warning", Setting::Bool(WARNING.load(Relaxed))),
        ("log_error", Setting::Bool(ERROR.load(Relaxed))),
        ("log_verbose_level", Setting::Uint(VERBOSE.load(Relaxed))),
        (
            "log_format",
            Setting::String(Format::current().name().to_string()),
        ),
    ]
}

/// Applies updates; all are checked before any is applied. The log file
/// cannot be changed (Triton, since CVE-2024-0087).
pub fn update(updates: &[(String, Setting)]) -> Result<()> {
    for (key, value) in updates {
        let ok = match (key.as_str(), value) {
            ("log_info" | "log_warning" | "log_error", Setting::Bool(_)) => true,
            ("log_verbose_level", Setting::Uint(_)) => true,
            ("log_format", Setting::String(f)) => {
                if Format::parse(f).is_none() {
                    return Err(Error::invalid_arg(format!(
                        "invalid argument for log_format, got: {f}"
                    )));
                }
                true
            }
            ("log_file", _) => {
                return Err(Error::unsupported(
                    "log file location can not be updated through network protocol",
                ));
            }
            _ => false,
        };
        if !ok {
            return Err(Error::invalid_arg(format!(
                "invalid value or unknown log setting '{key}'"
            )));
        }
    }
    let _config = CONFIG.lock().unwrap_or_else(|e| e.into_inner());
    for (key, value) in updates {
        match (key.as_str(), value) {
            ("log_info", Setting::Bool(b)) => INFO.store(*b, Relaxed),
            ("log_warning", Setting::Bool(b)) => WARNING.store(*b, Relaxed),
            ("log_error", Setting::Bool(b)) => ERROR.store(*b, Relaxed),
            ("log_verbose_level", Setting::Uint(v)) => VERBOSE.store(*v, Relaxed),
            ("log_format", Setting::String(f)) => ISO8601.store(f == "ISO8601", Relaxed),
            _ => {}
        }
    }
    apply();
    Ok(())
}

/// Sets the verbose level (`--log-verbose`).
pub fn set_verbose(level: u32) {
    let _config = CONFIG.lock().unwrap_or_else(|e| e.into_inner());
    VERBOSE.store(level, Relaxed);
    apply();
}

/// Whether a message of this level (`I`, `W`, `E`, or `V` with its verbose
/// level) is printed.
pub fn enabled(level: char, verbose: u32) -> bool {
    match level {
        'I' => INFO.load(Relaxed),
        'W' => WARNING.load(Relaxed),
        'E' => ERROR.load(Relaxed),
        _ => VERBOSE.load(Relaxed) >= verbose.max(1),
    }
}

/// Logs a line of this level (`I`, `W`, `E`; anything else is verbose level
/// 1) when it is enabled, located at the caller.
#[track_caller]
pub fn log(level: char, message: &str) {
    if enabled(level, 1) {
        installed();
        emit(level, message, Location::caller());
    }
}

/// Logs a verbose (level 1) line when `--log-verbose` is on, located at the
/// caller.
#[track_caller]
pub fn verbose(message: &str) {
    if enabled('V', 1) {
        installed();
        emit('V', message, Location::caller());
    }
}

/// The `tracing` event of a line, with the caller's file and line as the
/// `src_file` and `src_line` fields (which `TritonFormat` prints in place of
/// this function's own location).
fn emit(level: char, message: &str, at: &Location<'_>) {
    let (file, line) = (at.file(), at.line());
    match level {
        'I' => tracing::info!(target: "trtis", src_file = file, src_line = line, "{message}"),
        'W' => tracing::warn!(target: "trtis", src_file = file, src_line = line, "{message}"),
        'E' => tracing::error!(target: "trtis", src_file = file, src_line = line, "{message}"),
        _ => tracing::debug!(target: "trtis", src_file = file, src_line = line, "{message}"),
    }
}

// -- the subscriber -----------------------------------------------------------

type Base = Layered<reload::Layer<Levels, Registry>, Registry>;
type Lines = tracing_subscriber::fmt::Layer<Base, DefaultFields, TritonFormat, Sink>;

/// The handles of the installed subscriber's two reloadable layers.
struct Installed {
    levels: reload::Handle<Levels, Registry>,
    lines: reload::Handle<Lines, Base>,
}

static INSTALLED: OnceLock<Option<Installed>> = OnceLock::new();

/// The subscriber, installed as the global default on first use unless
/// another one was installed first (`None` then).
fn installed() -> Option<&'static Installed> {
    INSTALLED.get_or_init(install).as_ref()
}

fn install() -> Option<Installed> {
    let (levels, levels_handle) = reload::Layer::new(Levels::current());
    let (lines, lines_handle) = reload::Layer::new(lines_layer(Format::current(), current_sink()));
    let subscriber = Registry::default().with(levels).with(lines);
    tracing::subscriber::set_global_default(subscriber).ok()?;
    Some(Installed {
        levels: levels_handle,
        lines: lines_handle,
    })
}

fn current_sink() -> Sink {
    output().sink.clone()
}

fn lines_layer(format: Format, sink: Sink) -> Lines {
    tracing_subscriber::fmt::Layer::default()
        .event_format(TritonFormat::new(format))
        .with_writer(sink)
}

/// Brings the subscriber in line with the stored settings (the caller holds
/// `CONFIG`).
fn apply() {
    if let Some(installed) = installed() {
        let _ = installed.levels.reload(Levels::current());
        let _ = installed
            .lines
            .reload(lines_layer(Format::current(), current_sink()));
    }
}

/// The level filter: which of Triton's levels are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Levels {
    info: bool,
    warning: bool,
    error: bool,
    verbose: u32,
}

impl Levels {
    fn current() -> Levels {
        Levels {
            info: INFO.load(Relaxed),
            warning: WARNING.load(Relaxed),
            error: ERROR.load(Relaxed),
            verbose: VERBOSE.load(Relaxed),
        }
    }

    fn allows(&self, level: &Level) -> bool {
        match *level {
            Level::ERROR => self.error,
            Level::WARN => self.warning,
            Level::INFO => self.info,
            Level::DEBUG => self.verbose >= 1,
            _ => self.verbose >= 2,
        }
    }

    fn passes(&self, metadata: &Metadata<'_>) -> bool {
        let target = metadata.target();
        let ours = target == "trtis" || target.starts_with("trtis::");
        ours && self.allows(metadata.level())
    }

    /// The most verbose level that passes.
    fn max(&self) -> LevelFilter {
        [
            (Level::TRACE, LevelFilter::TRACE),
            (Level::DEBUG, LevelFilter::DEBUG),
            (Level::INFO, LevelFilter::INFO),
            (Level::WARN, LevelFilter::WARN),
            (Level::ERROR, LevelFilter::ERROR),
        ]
        .into_iter()
        .find(|(level, _)| self.allows(level))
        .map_or(LevelFilter::OFF, |(_, filter)| filter)
    }
}

impl<S: Subscriber> Layer<S> for Levels {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.passes(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        self.passes(metadata)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max())
    }
}

/// Where the `fmt` layer writes: stderr, or the log file (opened to append;
/// each line is one `write`).
#[derive(Debug, Clone)]
enum Sink {
    Stderr,
    File(Arc<File>),
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = SinkWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        SinkWriter(self)
    }
}

/// One line's writer. Stderr is written directly (not with `eprint!`, which
/// panics when stderr is gone).
struct SinkWriter<'a>(&'a Sink);

impl io::Write for SinkWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.0 {
            Sink::Stderr => io::stderr().lock().write(buf),
            Sink::File(file) => (&**file).write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self.0 {
            Sink::Stderr => io::stderr().lock().write_all(buf),
            Sink::File(file) => (&**file).write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.0 {
            Sink::Stderr => io::stderr().flush(),
            Sink::File(file) => (&**file).flush(),
        }
    }
}

// -- the line format ------------------------------------------------------------

/// The `tracing-subscriber` event formatter of Triton's log lines.
#[derive(Debug, Clone, Copy)]
pub struct TritonFormat {
    format: Format,
    pid: u32,
}

impl TritonFormat {
    pub fn new(format: Format) -> TritonFormat {
        TritonFormat {
            format,
            pid: std::process::id(),
        }
    }
}

impl<S, N> FormatEvent<S, N> for TritonFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let metadata = event.metadata();
        let file = fields.file.as_deref().or(metadata.file()).unwrap_or("");
        let line = fields.line.or(metadata.line()).unwrap_or(0);
        let head = Head {
            format: self.format,
            letter: letter(metadata.level()),
            time: Utc::from(SystemTime::now()),
            pid: self.pid,
            file: base_name(file),
            line,
        };
        writeln!(writer, "{head}{}{}", fields.message, fields.rest)
    }
}

/// Triton's level letter (`V` for verbose lines).
fn letter(level: &Level) -> char {
    match *level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        Level::INFO => 'I',
        _ => 'V',
    }
}

/// The file name without its directories, as Triton prints `__FILE__`.
fn base_name(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// An event's fields: the message, the caller's location from [`log`]
/// (`src_file`, `src_line`), and any others, printed after the message as
/// ` name=value`.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
    file: Option<String>,
    line: Option<u32>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message.push_str(value),
            "src_file" => self.file = Some(value.to_string()),
            name => {
                let _ = write!(self.rest, " {name}={value}");
            }
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "src_line" {
            self.line = u32::try_from(value).ok();
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => {
                let _ = write!(self.message, "{value:?}");
            }
            "src_file" | "src_line" => {}
            name => {
                let _ = write!(self.rest, " {name}={value:?}");
            }
        }
    }
}

/// A line's heading, everything before the message.
struct Head<'a> {
    format: Format,
    letter: char,
    time: Utc,
    pid: u32,
    file: &'a str,
    line: u32,
}

impl fmt::Display for Head<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.time;
        match self.format {
            // LMMDD hh:mm:ss.uuuuuu <pid> <file>:<line>]
            Format::Default => write!(
                f,
                "{}{:02}{:02} {:02}:{:02}:{:02}.{:06} {} {}:{}] ",
                self.letter,
                t.month,
                t.day,
                t.hour,
                t.minute,
                t.second,
                t.micros,
                self.pid,
                self.file,
                self.line
            ),
            // YYYY-MM-DDThh:mm:ssZ L <pid> <file>:<line>]
            Format::Iso8601 => write!(
                f,
                "{}-{:02}-{:02}T{:02}:{:02}:{:02}Z {} {} {}:{}] ",
                t.year,
                t.month,
                t.day,
                t.hour,
                t.minute,
                t.second,
                self.letter,
                self.pid,
                self.file,
                self.line
            ),
        }
    }
}

/// A UTC calendar time with microseconds (Triton's `gmtime_r` of
/// `gettimeofday`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Utc {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    micros: u32,
}

impl From<SystemTime> for Utc {
    fn from(time: SystemTime) -> Utc {
        let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        Utc::from_unix(since.as_secs() as i64, since.subsec_micros())
    }
}

impl Utc {
    fn from_unix(secs: i64, micros: u32) -> Utc {
        let days = secs.div_euclid(86_400);
        let of_day = secs.rem_euclid(86_400) as u32;
        let (year, month, day) = civil_from_days(days);
        Utc {
            year,
            month,
            day,
            hour: of_day / 3600,
            minute: of_day / 60 % 60,
            second: of_day % 60,
            micros,
        }
    }
}

/// The proleptic Gregorian (year, month, day) of a count of days since
/// 1970-01-01: years counted from March (so the leap day ends a year) in
/// 400-year eras of 146097 days.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468; // days since 0000-03-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(format: Format, letter: char, time: Utc) -> String {
        Head {
            format,
            letter,
            time,
            pid: 1234,
            file: "file.rs",
            line: 123,
        }
        .to_string()
    }

    // 2024-11-23T20:14:05.123456Z
    const STAMP: i64 = 1_732_392_845;

    #[test]
    fn default_format_is_tritons() {
        let t = Utc::from_unix(STAMP, 123_456);
        assert_eq!(
            head(Format::Default, 'I', t),
            "I1123 20:14:05.123456 1234 file.rs:123] "
        );
        let early = Utc::from_unix(1_704_070_861, 42); // 2024-01-01T01:01:01
        assert_eq!(
            head(Format::Default, 'E', early),
            "E0101 01:01:01.000042 1234 file.rs:123] "
        );
    }

    #[test]
    fn iso8601_format_is_tritons() {
        let t = Utc::from_unix(STAMP, 123_456);
        assert_eq!(
            head(Format::Iso8601, 'W', t),
            "2024-11-23T20:14:05Z W 1234 file.rs:123] "
        );
    }

    #[test]
    fn calendar_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(19_783), (2024, 3, 1));
        assert_eq!(civil_from_days(47_541), (2100, 3, 1)); // 2100 is no leap year
        let t = Utc::from_unix(951_868_799, 999_999); // 2000-02-29T23:59:59
        assert_eq!((t.year, t.month, t.day), (2000, 2, 29));
        assert_eq!(
            (t.hour, t.minute, t.second, t.micros),
            (23, 59, 59, 999_999)
        );
    }

    #[test]
    fn levels_letters_and_names() {
        assert_eq!(letter(&Level::ERROR), 'E');
        assert_eq!(letter(&Level::WARN), 'W');
        assert_eq!(letter(&Level::INFO), 'I');
        assert_eq!(letter(&Level::DEBUG), 'V');
        assert_eq!(letter(&Level::TRACE), 'V');
        assert_eq!(base_name("src/cmd/serve.rs"), "serve.rs");
        assert_eq!(base_name("serve.rs"), "serve.rs");
        assert_eq!(Format::parse("ISO8601"), Some(Format::Iso8601));
        assert_eq!(Format::parse("default"), Some(Format::Default));
        assert_eq!(Format::parse("iso8601"), None);
    }

    #[test]
    fn level_filter() {
        let all = Levels {
            info: true,
            warning: true,
            error: true,
            verbose: 0,
        };
        assert!(all.allows(&Level::INFO) && !all.allows(&Level::DEBUG));
        assert_eq!(all.max(), LevelFilter::INFO);
        let loud = Levels { verbose: 2, ..all };
        assert!(loud.allows(&Level::TRACE));
        assert_eq!(loud.max(), LevelFilter::TRACE);
        let one = Levels { verbose: 1, ..all };
        assert!(one.allows(&Level::DEBUG) && !one.allows(&Level::TRACE));
        let quiet = Levels {
            info: false,
            verbose: 0,
            ..all
        };
        assert!(!quiet.allows(&Level::INFO) && quiet.allows(&Level::WARN));
        assert_eq!(quiet.max(), LevelFilter::WARN);
        let off = Levels {
            info: false,
            warning: false,
            error: false,
            verbose: 0,
        };
        assert_eq!(off.max(), LevelFilter::OFF);
    }

    /// A writer into a shared buffer, for a subscriber of the test's own.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Lines through the real pipeline (level filter, `fmt` layer with
    /// `TritonFormat`) on a subscriber local to this thread.
    fn lines_of(format: Format, levels: Levels, emit_lines: impl FnOnce()) -> Vec<String> {
        let buffer = Buffer::default();
        let sink = buffer.clone();
        let subscriber = Registry::default().with(levels).with(
            tracing_subscriber::fmt::Layer::default()
                .event_format(TritonFormat::new(format))
                .with_writer(move || sink.clone()),
        );
        tracing::subscriber::with_default(subscriber, emit_lines);
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    const ALL: Levels = Levels {
        info: true,
        warning: true,
        error: true,
        verbose: 1,
    };

    #[test]
    fn events_print_as_triton_lines_at_the_callers_location() {
        let here = Location::caller().line(); // not #[track_caller]: this line
        let lines = lines_of(Format::Default, ALL, || {
            emit(
                'I',
                "Started HTTPService at 0.0.0.0:8000",
                Location::caller(),
            );
            emit('V', "a verbose line", Location::caller());
            tracing::warn!(model = "m", "direct {}", 7);
            tracing::info!(target: "h2::proto", "a library's event");
        });
        assert_eq!(lines.len(), 3, "{lines:?}");
        let pid = std::process::id();
        // I1123 20:14:05.123456 <pid> logging.rs:<line>] message
        let shape = |line: &str, letter: char| {
            let mut parts = line.splitn(5, ' ');
            let date = parts.next().unwrap();
            let time = parts.next().unwrap();
            assert!(date.starts_with(letter) && date.len() == 5, "{line}");
            assert!(date[1..].bytes().all(|b| b.is_ascii_digit()), "{line}");
            assert_eq!(time.len(), 15, "{line}");
            assert_eq!(&time[2..3], ":");
            assert_eq!(&time[8..9], ".");
            assert_eq!(parts.next().unwrap(), pid.to_string());
            let location = parts.next().unwrap();
            assert!(location.starts_with("logging.rs:"), "{line}");
            assert!(location.ends_with(']'), "{line}");
            let number: u32 = location["logging.rs:".len()..location.len() - 1]
                .parse()
                .unwrap();
            assert!(number > here, "{line}");
            parts.next().unwrap().to_string()
        };
        assert_eq!(shape(&lines[0], 'I'), "Started HTTPService at 0.0.0.0:8000");
        assert_eq!(shape(&lines[1], 'V'), "a verbose line");
        assert_eq!(shape(&lines[2], 'W'), "direct 7 model=m");
    }

    #[test]
    fn iso8601_lines_and_levels_off() {
        let quiet = Levels {
            info: false,
            verbose: 0,
            ..ALL
        };
        let lines = lines_of(Format::Iso8601, quiet, || {
            emit('I', "hidden", Location::caller());
            emit('V', "hidden too", Location::caller());
            emit('E', "shown", Location::caller());
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        // 2024-11-23T20:14:05Z E <pid> logging.rs:<line>] shown
        let line = &lines[0];
        let (stamp, rest) = line.split_once(' ').unwrap();
        assert_eq!(stamp.len(), 20, "{line}");
        assert_eq!(&stamp[4..5], "-");
        assert_eq!(&stamp[10..11], "T");
        assert!(stamp.ends_with('Z'));
        let expected = format!("E {} logging.rs:", std::process::id());
        assert!(rest.starts_with(&expected), "{line}");
        assert!(rest.ends_with("] shown"), "{line}");
    }

    #[test]
    fn bad_updates_change_nothing() {
        let before = settings();
        let e = update(&[
            ("log_info".into(), Setting::Bool(false)),
            ("log_format".into(), Setting::String("fancy".into())),
        ])
        .unwrap_err();
        assert_eq!(e.message, "invalid argument for log_format, got: fancy");
        let e = update(&[("log_file".into(), Setting::String("/tmp/x".into()))]).unwrap_err();
        assert_eq!(
            e.message,
            "log file location can not be updated through network protocol"
        );
        assert!(update(&[("log_verbose_level".into(), Setting::Bool(true))]).is_err());
        assert!(update(&[("log_colour".into(), Setting::Bool(true))]).is_err());
        assert_eq!(settings(), before);
    }
}
