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
//!
//! The parts: `settings` holds what is logged and where, with the functions
//! that read and change it; `subscriber` the installed subscriber, its level
//! filter and its sink; `format` the line formatter.

mod format;
mod settings;
mod subscriber;

use std::panic::Location;

pub use format::{Format, TritonFormat};
pub use settings::{enabled, init, set_verbose, settings, update, Options, Setting};

use subscriber::installed;

/// Logs a line of this level (`I`, `W`, `E`; anything else is verbose level
/// 1) when it is enabled, located at the caller.
#[track_caller]
pub fn log(level: char, message: &str) {
    if enabled(level, 1) {
        installed(settings::current);
        emit(level, message, Location::caller());
    }
}

/// Logs a verbose (level 1) line when `--log-verbose` is on, located at the
/// caller.
#[track_caller]
pub fn verbose(message: &str) {
    if enabled('V', 1) {
        installed(settings::current);
        emit('V', message, Location::caller());
    }
}

/// Logs a line of this level located at `file`:`line` (a Python model's
/// `pb_utils.Logger` call, located in the model's file).
pub fn log_at(level: char, message: &str, file: &str, line: u32) {
    if enabled(level, 1) {
        installed(settings::current);
        emit_at(level, message, file, line);
    }
}

/// The `tracing` event of a line, with the caller's file and line as the
/// `src_file` and `src_line` fields (which `TritonFormat` prints in place of
/// this function's own location).
fn emit(level: char, message: &str, at: &Location<'_>) {
    emit_at(level, message, at.file(), at.line())
}

fn emit_at(level: char, message: &str, file: &str, line: u32) {
    match level {
        'I' => tracing::info!(target: "trtis", src_file = file, src_line = line, "{message}"),
        'W' => tracing::warn!(target: "trtis", src_file = file, src_line = line, "{message}"),
        'E' => tracing::error!(target: "trtis", src_file = file, src_line = line, "{message}"),
        _ => tracing::debug!(target: "trtis", src_file = file, src_line = line, "{message}"),
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Registry;

    use super::subscriber::Levels;
    use super::*;

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
}
