//! The server's log settings (Triton's logging extension): which levels are
//! printed, the verbose level and the format, readable and settable at run
//! time over HTTP (`/v2/logging`) and gRPC (`LogSettings`).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Mutex;

use crate::core::error::{Error, Result};

static INFO: AtomicBool = AtomicBool::new(true);
static WARNING: AtomicBool = AtomicBool::new(true);
static ERROR: AtomicBool = AtomicBool::new(true);
static VERBOSE: AtomicU32 = AtomicU32::new(0);
static ISO8601: AtomicBool = AtomicBool::new(false);
static FILE: Mutex<String> = Mutex::new(String::new());

/// A setting's value, as both protocols carry them.
#[derive(Debug, Clone, PartialEq)]
pub enum Setting {
    Bool(bool),
    Uint(u32),
    String(String),
}

/// The current settings, by Triton's names.
pub fn settings() -> Vec<(&'static str, Setting)> {
    vec![
        (
            "log_file",
            Setting::String(FILE.lock().map(|f| f.clone()).unwrap_or_default()),
        ),
        ("log_info", Setting::Bool(INFO.load(Relaxed))),
        ("log_warning", Setting::Bool(WARNING.load(Relaxed))),
        ("log_error", Setting::Bool(ERROR.load(Relaxed))),
        ("log_verbose_level", Setting::Uint(VERBOSE.load(Relaxed))),
        (
            "log_format",
            Setting::String(
                if ISO8601.load(Relaxed) {
                    "ISO8601"
                } else {
                    "default"
                }
                .to_string(),
            ),
        ),
    ]
}

/// Applies updates; all are checked before any is applied.
pub fn update(updates: &[(String, Setting)]) -> Result<()> {
    for (key, value) in updates {
        let ok = match (key.as_str(), value) {
            ("log_info" | "log_warning" | "log_error", Setting::Bool(_)) => true,
            ("log_verbose_level", Setting::Uint(_)) => true,
            ("log_format", Setting::String(f)) => {
                if f != "default" && f != "ISO8601" {
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
    Ok(())
}

/// Sets the verbose level (`--log-verbose`).
pub fn set_verbose(level: u32) {
    VERBOSE.store(level, Relaxed);
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

/// Prints a log line to stderr when its level is enabled.
pub fn log(level: char, message: &str) {
    if enabled(level, 1) {
        eprintln!("{level} trtis] {message}");
    }
}

/// Prints a verbose (level 1) log line when `--log-verbose` is on.
pub fn verbose(message: &str) {
    if enabled('V', 1) {
        eprintln!("V trtis] {message}");
    }
}
