//! A worker's standard error: its last lines kept (they go on to the
//! server's standard error) for the error that says why it died, and the
//! diagnosis of a death from them (a missing numpy, an import that failed).

use std::io::BufReader;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The last lines a worker wrote to its standard error, kept for the error
/// that says why it died (the lines themselves go on to the server's
/// standard error, as they always did).
#[derive(Default)]
pub(super) struct StderrTail {
    state: Mutex<TailState>,
    changed: Condvar,
}

#[derive(Default)]
struct TailState {
    lines: std::collections::VecDeque<String>,
    /// The pipe reached its end (every process holding it exited).
    ended: bool,
}

/// How many of the worker's last standard error lines are kept, and how
/// many of them (the last, not empty) an error message quotes.
const TAIL_KEPT: usize = 40;
const TAIL_QUOTED: usize = 3;

impl StderrTail {
    /// Starts the thread that copies `pipe` to our standard error line by
    /// line, keeping the last lines.
    pub(super) fn follow(pipe: std::process::ChildStderr) -> std::io::Result<Arc<StderrTail>> {
        let tail = Arc::new(StderrTail::default());
        let ours = Arc::clone(&tail);
        std::thread::Builder::new()
            .name("trtis:py-stderr".to_string())
            .spawn(move || {
                use std::io::{BufRead, Write};
                let mut pipe = BufReader::new(pipe);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match pipe.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    let _ = std::io::stderr().lock().write_all(&line);
                    let text = String::from_utf8_lossy(&line).trim_end().to_string();
                    let mut state = ours.state.lock().unwrap_or_else(|p| p.into_inner());
                    if state.lines.len() == TAIL_KEPT {
                        state.lines.pop_front();
                    }
                    state.lines.push_back(text);
                }
                let mut state = ours.state.lock().unwrap_or_else(|p| p.into_inner());
                state.ended = true;
                ours.changed.notify_all();
            })?;
        Ok(tail)
    }

    /// The kept lines, once the pipe ended or `wait` passed (a process the
    /// worker forked may hold it open).
    pub(super) fn lines(&self, wait: Duration) -> Vec<String> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (state, _) = self
            .changed
            .wait_timeout_while(state, wait, |s| !s.ended)
            .unwrap_or_else(|p| p.into_inner());
        state.lines.iter().cloned().collect()
    }
}

/// What a worker's standard error says about why it ended: the fix when
/// the interpreter could not import what the backend needs (numpy), else
/// its last lines quoted; None when it wrote nothing.
pub(super) fn diagnose(lines: &[String], python: &Path, env_dir: Option<&Path>) -> Option<String> {
    let quoted: Vec<&str> = lines
        .iter()
        .map(|l| l.trim_end())
        .filter(|l| !l.trim().is_empty())
        .collect();
    if quoted.is_empty() {
        return None;
    }
    // The exception the output ends with (a traceback's last line), when
    // it is an import failure.
    let last = quoted[quoted.len() - 1];
    if last.starts_with("ModuleNotFoundError:") || last.starts_with("ImportError:") {
        let error = clip(last, 300);
        let (what, module) = if error.contains("No module named 'numpy'") {
            ("has no numpy", "numpy")
        } else if error.contains("numpy") {
            ("cannot import numpy", "numpy")
        } else {
            ("cannot import a module", "the missing module")
        };
        let fix = match env_dir {
            Some(env) => format!(
                "install {module} in the model's EXECUTION_ENV_PATH environment '{}', or make EXECUTION_ENV_PATH name one that has it",
                env.display()
            ),
            None => format!(
                "install {module} for that interpreter, or point trtis at one that has it with --python PATH (or TRTIS_PYTHON, or the model's EXECUTION_ENV_PATH parameter)"
            ),
        };
        return Some(format!(
            "the Python interpreter {} {what} ({error}), which the Python backend needs: {fix}",
            shown_interpreter(python)
        ));
    }
    let last = &quoted[quoted.len().saturating_sub(TAIL_QUOTED)..];
    Some(format!("its last output: {}", clip(&last.join("\n"), 1000)))
}

/// The interpreter as the user can find it: quoted, with the file a bare
/// name resolves to on PATH.
fn shown_interpreter(python: &Path) -> String {
    if python.components().count() == 1 {
        if let Some(found) = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(python))
                .find(|p| p.is_file())
        }) {
            return format!("'{}' ({})", python.display(), found.display());
        }
    }
    format!("'{}'", python.display())
}

/// `text` cut to at most `max` bytes (at a character boundary), marked when cut.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn a_missing_numpy_says_what_to_do() {
        let out = lines(
            "Traceback (most recent call last):\n  File \"worker.py\", line 52, in <module>\n    import numpy as np\nModuleNotFoundError: No module named 'numpy'\n",
        );
        let why = diagnose(&out, Path::new("/opt/py/bin/python3"), None).unwrap();
        assert!(
            why.starts_with("the Python interpreter '/opt/py/bin/python3' has no numpy (ModuleNotFoundError: No module named 'numpy')"),
            "{why}"
        );
        assert!(why.contains("--python PATH"), "{why}");
        assert!(why.contains("TRTIS_PYTHON"), "{why}");
        let why = diagnose(&out, Path::new("/e/bin/python3"), Some(Path::new("/e"))).unwrap();
        assert!(
            why.contains("install numpy in the model's EXECUTION_ENV_PATH environment '/e'"),
            "{why}"
        );
    }

    #[test]
    fn another_import_failure_is_named() {
        let out = lines("ImportError: cannot import name 'x' from 'y'");
        let why = diagnose(&out, Path::new("/p"), None).unwrap();
        assert!(
            why.contains("cannot import a module (ImportError: cannot import name 'x' from 'y')"),
            "{why}"
        );
    }

    #[test]
    fn other_deaths_quote_the_last_lines() {
        let out = lines("a\nb\n\nc\nd\n");
        assert_eq!(
            diagnose(&out, Path::new("/p"), None).unwrap(),
            "its last output: b\nc\nd"
        );
        assert_eq!(diagnose(&lines("\n \n"), Path::new("/p"), None), None);
        // An import failure followed by more output is not the cause.
        let out = lines("ModuleNotFoundError: No module named 'numpy'\nSegmentation fault");
        assert!(diagnose(&out, Path::new("/p"), None)
            .unwrap()
            .starts_with("its last output:"));
    }

    #[test]
    fn clip_cuts_at_a_character_boundary() {
        assert_eq!(clip("abc", 5), "abc");
        assert_eq!(clip("aé", 2), "a...");
    }
}
