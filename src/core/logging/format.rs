//! Triton's log line: the two formats ([`Format`]), and [`TritonFormat`],
//! the event formatter that prints an event's heading (level letter, UTC
//! time, process id, file and line) before its message and fields.

use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

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
}

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
            file: &base_name(file),
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

/// The file name without its directories, as Triton prints `__FILE__`; a
/// module's `mod.rs` is named after its module (`cmd/serve/mod.rs` is
/// `serve.rs`), as the module's file would be.
fn base_name(path: &str) -> std::borrow::Cow<'_, str> {
    let mut parts = path.rsplit(['/', '\\']);
    let base = parts.next().unwrap_or(path);
    match (base, parts.next()) {
        ("mod.rs", Some(module)) if !module.is_empty() => format!("{module}.rs").into(),
        _ => base.into(),
    }
}

/// An event's fields: the message, the caller's location from [`log`](super::log)
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
}
