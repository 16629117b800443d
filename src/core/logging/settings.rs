//! The logging settings: which levels are printed, the verbose level, the
//! line format and the log file, set at start ([`init`]) and read and
//! changed at run time ([`settings`], [`update`]); each change reloads the
//! subscriber's layers.

use std::fs::OpenOptions;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::core::error::{Error, Result};

use super::format::Format;
use super::subscriber::{self, Levels, Sink};

pub(super) static INFO: AtomicBool = AtomicBool::new(true);
pub(super) static WARNING: AtomicBool = AtomicBool::new(true);
pub(super) static ERROR: AtomicBool = AtomicBool::new(true);
pub(super) static VERBOSE: AtomicU32 = AtomicU32::new(0);
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
    reload();
    outcome
}

fn output() -> std::sync::MutexGuard<'static, Output> {
    OUTPUT.lock().unwrap_or_else(|e| e.into_inner())
}

/// Installs the subscriber if it is not yet, and brings it in line with
/// the stored settings (the caller holds `CONFIG`).
fn reload() {
    subscriber::installed(current);
    subscriber::apply(current());
}

/// The stored settings, as the subscriber takes them.
pub(super) fn current() -> (Levels, Format, Sink) {
    let levels = Levels {
        info: INFO.load(Relaxed),
        warning: WARNING.load(Relaxed),
        error: ERROR.load(Relaxed),
        verbose: VERBOSE.load(Relaxed),
    };
    (levels, current_format(), output().sink.clone())
}

fn current_format() -> Format {
    if ISO8601.load(Relaxed) {
        Format::Iso8601
    } else {
        Format::Default
    }
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
            Setting::String(current_format().name().to_string()),
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
    reload();
    Ok(())
}

/// Sets the verbose level (`--log-verbose`).
pub fn set_verbose(level: u32) {
    let _config = CONFIG.lock().unwrap_or_else(|e| e.into_inner());
    VERBOSE.store(level, Relaxed);
    reload();
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

#[cfg(test)]
mod tests {
    use super::*;

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
