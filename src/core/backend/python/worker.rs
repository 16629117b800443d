//! One Python worker process and the thread that reads its frames.
//!
//! The worker is the user's `python3` running our `worker.py` (written
//! once per content into a cache directory, beside our
//! `triton_python_backend_utils.py`), connected by three Unix socket pairs:
//! it reads frames from `--fd N`, writes a batch's answer (the responses
//! `execute` returned, then `executed`) to `--answer-fd A` and everything
//! else to `--write-fd M`. With `--native PATH` it loads its native core
//! (`lib_trtis_native.so`, backends/python-native). The reader thread routes what the worker
//! sends on `M`: responses to the requests' responders, log lines to the
//! server log, BLS calls to the server (`Host`), and everything else
//! (`ready`, `config`, `error`, `finalized`) to the instance thread. The
//! instance thread reads the answer socket itself while it waits for a
//! batch, so a request costs one thread wake-up each way between the
//! server and the worker (measured in PROTOCOL.md).
//! When the worker dies, the reader fails every request still open and
//! closes the instance thread's channel, so nobody waits for it. A request
//! cancelled while the worker holds it gets a `cancel` frame, written by a
//! thread of its own (started at the first cancel) so that the canceller
//! never waits on the socket.

use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};

use super::frame::{code_name, Frame};
use crate::core::backend::{Host, ModelControl};
use crate::core::custom_metrics;
use crate::core::error::{Error, Result};
use crate::core::responder::Responder;
use crate::core::types::{
    CancelToken, InferRequest, RequestedOutput, SequenceId, SequenceParams, TraceContext,
};

const WORKER: &str = include_str!("worker.py");
const UTILS: &str = include_str!("triton_python_backend_utils.py");

/// What the instance thread and the reader thread share.
pub(super) struct Link {
    writer: Mutex<UnixStream>,
    /// Open requests by id.
    pub requests: Mutex<HashMap<u64, Responder>>,
    /// Of those, the ids of requests in a batch sent behind the one that
    /// runs: should the worker die, they did not run (the instance sends
    /// them to a new worker) and are not failed here.
    pub waiting: Mutex<std::collections::HashSet<u64>>,
    next_id: AtomicU64,
    /// The model instance's name, for messages.
    pub instance: String,
    host: Option<Arc<dyn Host>>,
    /// The worker's process (group) id.
    pid: i32,
    /// Set when the reader stopped: the worker is of no use any more.
    dead: std::sync::atomic::AtomicBool,
    /// Frames for the thread that writes them (`post`), started at the
    /// first.
    outgoing: Mutex<Option<mpsc::Sender<Outgoing>>>,
    /// The custom metric families and metrics the worker made, by its ids
    /// for them; let go of when the worker says so or is gone.
    metrics: Mutex<HashMap<u64, custom_metrics::Handle>>,
    /// How far the reader thread got: see `wait_routed`.
    routed: Mutex<Routed>,
    routed_changed: Condvar,
    /// The last lines the worker wrote to its standard error.
    stderr: Arc<StderrTail>,
}

/// The bytes of the write socket the reader thread has routed, whether it
/// stopped, and whether the instance thread waits for it to go on.
#[derive(Default)]
struct Routed {
    bytes: u64,
    ended: bool,
    waiting: bool,
}

impl Link {
    /// Sends a frame; a worker that is gone is an error.
    pub fn send(&self, frame: &Frame) -> Result<()> {
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        frame.write_to(&mut *w).map_err(|e| {
            Error::internal(format!(
                "the Python worker of model instance '{}' is gone: {e}",
                self.instance
            ))
        })
    }

    /// Waits until the reader thread has routed the first `bytes` bytes the
    /// worker wrote to its write socket (an `executed` frame's `after`: what
    /// the worker sent there before it, such as a response sender's answer
    /// or a log line, is dealt with before the batch counts as done), or
    /// stopped reading.
    fn wait_routed(&self, bytes: u64) {
        let mut routed = self.routed.lock().unwrap_or_else(|p| p.into_inner());
        while routed.bytes < bytes && !routed.ended {
            routed.waiting = true;
            routed = self
                .routed_changed
                .wait_timeout(routed, WATCH)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        routed.waiting = false;
    }

    /// The reader thread routed `bytes` more (`ended`: it stops).
    fn advance(&self, bytes: u64, ended: bool) {
        let mut routed = self.routed.lock().unwrap_or_else(|p| p.into_inner());
        routed.bytes += bytes;
        routed.ended |= ended;
        if routed.waiting {
            self.routed_changed.notify_all();
        }
    }

    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether request `rid` is still open (it has not had its final
    /// response).
    fn is_open(&self, rid: u64) -> bool {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&rid)
    }

    /// Sends `cancel` for request `rid` when `token` is cancelled, unless
    /// the request has ended by then (a `cancel` racing with the final
    /// response is harmless: the worker ignores an id it does not know).
    /// Call it once the worker has the request (after its `execute`).
    pub fn cancel_on(self: &Arc<Self>, rid: u64, token: &CancelToken) {
        if !token.can_cancel() {
            return;
        }
        let link = Arc::downgrade(self);
        token.on_cancel(move || {
            if let Some(link) = link.upgrade() {
                link.cancel(rid);
            }
        });
    }

    /// Queues `cancel` for `rid` to the writing thread; never blocks.
    fn cancel(self: &Arc<Self>, rid: u64) {
        if self.is_open(rid) {
            self.post(Outgoing::Cancel(rid));
        }
    }

    /// Queues a frame for the writing thread (started the first time), which
    /// writes it when the worker reads. Frames sent from a thread that must
    /// not wait on the worker go this way: cancels (from whoever drops a
    /// request, often an async runtime's thread), BLS answers (from the
    /// runtime) and metric replies (from the reader thread). The worker
    /// reads only while one of its threads waits for a frame, so a write
    /// may wait as long as its model likes.
    pub fn post(self: &Arc<Self>, frame: Outgoing) {
        let mut outgoing = self.outgoing.lock().unwrap_or_else(|p| p.into_inner());
        if outgoing.is_none() {
            let (tx, rx) = mpsc::channel::<Outgoing>();
            let link = Arc::downgrade(self);
            let started = std::thread::Builder::new()
                .name("trtis:py-write".to_string())
                .spawn(move || {
                    // Ends when the link (holding the sender) is gone.
                    for frame in rx {
                        let Some(link) = link.upgrade() else { return };
                        let frame = match frame {
                            Outgoing::Cancel(rid) if link.is_open(rid) => {
                                Frame::new(json!({"kind": "cancel", "rid": rid}))
                            }
                            Outgoing::Cancel(_) => continue,
                            Outgoing::Frame(frame) => frame,
                        };
                        let _ = link.send(&frame);
                    }
                });
            if let Err(e) = started {
                crate::core::logging::log(
                    'E',
                    &format!("failed to start a thread writing to a Python worker: {e}"),
                );
                return;
            }
            *outgoing = Some(tx);
        }
        if let Some(tx) = outgoing.as_ref() {
            let _ = tx.send(frame);
        }
    }
}

/// A frame for the writing thread.
pub(super) enum Outgoing {
    /// `cancel` for a request, unless it has ended by the time it is written.
    Cancel(u64),
    Frame(Frame),
}

/// A running worker.
pub(super) struct Worker {
    child: Child,
    pub link: Arc<Link>,
    /// The interpreter and environment it runs in, for messages.
    python: PathBuf,
    env_dir: Option<PathBuf>,
    /// Frames for the instance thread; closed when the worker is gone.
    pub control: mpsc::Receiver<Frame>,
    /// The answer socket, read by the instance thread (`answer`).
    answers: BufReader<Answers>,
}

/// The answer socket's reading end: a read that waits longer than `WATCH`
/// checks that the worker process still runs (a process the model forked
/// may hold the socket open after the worker died) and ends as at end of
/// file when it does not.
struct Answers {
    stream: UnixStream,
    pid: i32,
}

impl Read for Answers {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match self.stream.read(buf) {
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if !running(self.pid) {
                        return Ok(0);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }
}

/// Whether child `pid` has not exited (it is not reaped here).
fn running(pid: i32) -> bool {
    // SAFETY: a zeroed siginfo_t is valid for waitid to fill; WNOWAIT
    // leaves the child to be reaped by its `Child`.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        r == 0 && info.si_pid() == 0
    }
}

/// What `Worker::wait_readable` found.
enum Readable {
    Answer,
    Wake,
    /// The process exited (and a process it forked holds the socket).
    Gone,
}

/// A reader that counts the bytes read through it.
struct Counting<R> {
    inner: R,
    count: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

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
    fn follow(pipe: std::process::ChildStderr) -> std::io::Result<Arc<StderrTail>> {
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
    fn lines(&self, wait: Duration) -> Vec<String> {
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
fn diagnose(lines: &[String], python: &Path, env_dir: Option<&Path>) -> Option<String> {
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

/// How to start a worker.
pub(super) struct Launch<'a> {
    pub python: &'a Path,
    /// An `EXECUTION_ENV_PATH` environment (unpacked): activated for the
    /// worker as its `bin/activate` would.
    pub env_dir: Option<PathBuf>,
    pub instance: &'a str,
    pub host: Option<Arc<dyn Host>>,
}

impl Worker {
    /// The worker process's id (for its memory in the statistics).
    pub fn pid(&self) -> u32 {
        self.link.pid as u32
    }

    pub fn start(launch: &Launch) -> Result<Worker> {
        let dir = scripts_dir()?;
        // One socket pair per direction: a Unix socket wakes whoever waits
        // on its peer each time it frees send space, so with one pair the
        // worker reading a request would wake our reader thread (blocked on
        // the same socket) for nothing, and our reader taking a response
        // would wake the worker. Measured: 2.7 context switches per request
        // with one pair, 2.0 with two. The third carries batches' answers
        // to the instance thread.
        let pair = || {
            UnixStream::pair()
                .map_err(|e| Error::internal(format!("failed to make a socket pair: {e}")))
        };
        let (ours, theirs) = pair()?; // we write, the worker reads
        let (ours_in, theirs_out) = pair()?; // the worker writes, we read
        let (ours_answers, theirs_answers) = pair()?; // batches' answers
        ours_answers
            .set_read_timeout(Some(WATCH))
            .map_err(|e| Error::internal(format!("failed to set up a socket: {e}")))?;
        let fd = theirs.as_raw_fd();
        let write_fd = theirs_out.as_raw_fd();
        let answer_fd = theirs_answers.as_raw_fd();
        let mut command = Command::new(launch.python);
        command
            .arg("-u")
            .arg(dir.join("worker.py"))
            .arg("--fd")
            .arg(fd.to_string())
            .arg("--write-fd")
            .arg(write_fd.to_string())
            .arg("--answer-fd")
            .arg(answer_fd.to_string());
        if let Some(native) = native_core() {
            command.arg("--native").arg(native);
        }
        if let Some(env) = &launch.env_dir {
            // What the environment's `activate` does (Triton sources it):
            // its bin first on PATH, its lib first on LD_LIBRARY_PATH, and
            // CONDA_PREFIX (a conda-pack environment) or VIRTUAL_ENV.
            let prepend = |var: &str, dir: PathBuf| {
                let mut path = dir.into_os_string();
                if let Some(old) = std::env::var_os(var) {
                    path.push(":");
                    path.push(old);
                }
                path
            };
            command.env("PATH", prepend("PATH", env.join("bin")));
            command.env(
                "LD_LIBRARY_PATH",
                prepend("LD_LIBRARY_PATH", env.join("lib")),
            );
            if env.join("conda-meta").is_dir() {
                command.env("CONDA_PREFIX", env);
            } else if env.join("pyvenv.cfg").is_file() {
                command.env("VIRTUAL_ENV", env);
            }
        }
        // SAFETY: between fork and exec only async-signal-safe calls:
        // fcntl to let the child keep its ends of the sockets, setpgid so the
        // worker and whatever it forks are one group the server can kill
        // (and a terminal's Ctrl-C reaches the server alone), prctl so the
        // worker dies with the server.
        unsafe {
            command.pre_exec(move || {
                for fd in [fd, write_fd, answer_fd] {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                libc::setpgid(0, 0);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        // Its standard error goes on to ours, through a thread that keeps
        // the last lines: they say why a worker that died did.
        command.stderr(Stdio::piped());
        let mut child = spawn_from_server_thread(command).map_err(|e| {
            Error::internal(format!(
                "failed to start the Python interpreter '{}' for model instance '{}': {e} (choose one with --python or TRTIS_PYTHON)",
                launch.python.display(),
                launch.instance
            ))
        })?;
        drop(theirs);
        drop(theirs_out);
        drop(theirs_answers);
        let pid = child.id() as i32;
        let stderr = match child.stderr.take().map(StderrTail::follow) {
            Some(Ok(tail)) => tail,
            Some(Err(e)) => {
                // SAFETY: as in `Worker::kill`.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::internal(format!("failed to start a thread: {e}")));
            }
            None => Arc::new(StderrTail::default()),
        };
        let (tx, control) = mpsc::channel();
        // From here the worker is killed and reaped on every error path.
        let mut worker = Worker {
            child,
            link: Arc::new(Link {
                writer: Mutex::new(ours),
                requests: Mutex::new(HashMap::new()),
                waiting: Default::default(),
                next_id: AtomicU64::new(1),
                instance: launch.instance.to_string(),
                host: launch.host.clone(),
                pid,
                dead: Default::default(),
                outgoing: Mutex::new(None),
                metrics: Mutex::new(HashMap::new()),
                routed: Mutex::new(Routed::default()),
                routed_changed: Condvar::new(),
                stderr,
            }),
            python: launch.python.to_path_buf(),
            env_dir: launch.env_dir.clone(),
            control,
            answers: BufReader::with_capacity(
                1 << 16,
                Answers {
                    stream: ours_answers,
                    pid,
                },
            ),
        };
        let reader = ours_in;
        let thread_link = Arc::clone(&worker.link);
        std::thread::Builder::new()
            .name("trtis:py-reader".to_string())
            .spawn(move || read_frames(reader, &thread_link, tx))
            .map_err(|e| {
                worker.kill();
                Error::internal(format!("failed to start a thread: {e}"))
            })?;
        Ok(worker)
    }

    /// The next control frame within `timeout`; an error when the worker
    /// died or the time ran out. The process is watched as well as the
    /// socket: a process the model forked may hold the socket open after the
    /// worker died. (A batch's answer comes through `answer`.)
    pub fn control(&mut self, timeout: Duration) -> Result<Frame> {
        let deadline = std::time::Instant::now() + timeout;
        let got = loop {
            let slice = deadline
                .saturating_duration_since(std::time::Instant::now())
                .min(WATCH);
            match self.control.recv_timeout(slice) {
                Ok(frame) => break Ok(frame),
                Err(mpsc::RecvTimeoutError::Disconnected) => break Err(Some(())),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if !self.alive() {
                        // A worker may write its answer and exit at once
                        // (auto-complete's does): the reader thread routes
                        // what it wrote, then ends. Under load that can
                        // come after the process is gone.
                        break self
                            .control
                            .recv_timeout(Duration::from_secs(2))
                            .map_err(|_| Some(()));
                    }
                    if std::time::Instant::now() >= deadline {
                        break Err(None);
                    }
                }
            }
        };
        match got {
            Ok(frame) => Ok(frame),
            Err(None) => {
                self.kill();
                Err(Error::internal(format!(
                    "the Python worker of model instance '{}' did not answer within {} s",
                    self.link.instance,
                    timeout.as_secs()
                )))
            }
            Err(Some(())) => Err(self.died()),
        }
    }

    /// The answer to the oldest batch sent: routes the responses that come
    /// with it and returns its `executed` frame once the reader thread has
    /// routed what the worker wrote before it (an error when the worker
    /// died or its answer cannot be read). Given `wake`, returns None as
    /// soon as `wake` is signalled while no answer is to be read (the
    /// frames read so far are routed; the next call goes on with the rest).
    pub fn answer_or_wake(&mut self, wake: Option<&super::super::Wake>) -> Option<Result<Frame>> {
        loop {
            if let Some(wake) = wake {
                if self.answers.buffer().is_empty() {
                    match self.wait_readable(wake) {
                        Readable::Answer => {}
                        Readable::Wake => return None,
                        Readable::Gone => return Some(Err(self.died())),
                    }
                }
            }
            let frame = match Frame::read_from(&mut self.answers) {
                Ok(Some(frame)) => frame,
                Ok(None) => return Some(Err(self.died())),
                Err(e) => {
                    self.kill();
                    return Some(Err(Error::internal(format!(
                        "reading from the Python worker of model instance '{}': {e}",
                        self.link.instance
                    ))));
                }
            };
            match frame.kind() {
                "response" => respond(&self.link, frame),
                "executed" => {
                    self.link.wait_routed(frame.u64("after"));
                    return Some(Ok(frame));
                }
                other => {
                    self.kill();
                    return Some(Err(Error::internal(format!(
                        "the Python worker of model instance '{}' sent '{other}' with a batch's answer",
                        self.link.instance
                    ))));
                }
            }
        }
    }

    /// Waits until the answer socket or `wake` is readable, watching the
    /// process every `WATCH` as `Answers::read` does.
    fn wait_readable(&mut self, wake: &super::super::Wake) -> Readable {
        use std::os::fd::AsRawFd;
        let answer_fd = self.answers.get_ref().stream.as_raw_fd();
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: answer_fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: wake.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: polls two live descriptors through a live array.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, WATCH.as_millis() as libc::c_int) };
            if n < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Readable::Answer; // the read says what is wrong
            }
            if n == 0 {
                if !running(self.link.pid) {
                    return Readable::Gone;
                }
                continue;
            }
            // An answer (or the socket's end) first: it is what ends a batch.
            if fds[0].revents != 0 {
                return Readable::Answer;
            }
            return Readable::Wake;
        }
    }

    /// Why the worker is gone: its exit status and what its standard error
    /// ended with (what to do when its interpreter lacks numpy).
    pub fn died(&mut self) -> Error {
        let status = self.child.try_wait().ok().flatten().or_else(|| {
            std::thread::sleep(Duration::from_millis(50));
            self.child.try_wait().ok().flatten()
        });
        let lines = self.link.stderr.lines(if status.is_some() {
            Duration::from_millis(500)
        } else {
            Duration::from_millis(50)
        });
        let status = status
            .map(|s| s.to_string())
            .unwrap_or_else(|| "its socket closed".to_string());
        let why = diagnose(&lines, &self.python, self.env_dir.as_deref());
        // Triton's words first ("Stub process 'X' is not healthy."), then
        // how and why it died.
        Error::internal(match why {
            Some(why) => format!(
                "Stub process '{}' is not healthy. The Python worker exited unexpectedly ({status}): {why}",
                self.link.instance
            ),
            None => format!(
                "Stub process '{}' is not healthy. The Python worker exited unexpectedly ({status})",
                self.link.instance
            ),
        })
    }

    /// Sends a frame; a worker that is gone answers why it died.
    pub fn send(&mut self, frame: &Frame) -> Result<()> {
        self.link.send(frame).map_err(|_| self.died())
    }

    /// Whether the process still runs and its socket is still read.
    pub fn alive(&mut self) -> bool {
        !self.link.dead.load(Ordering::Relaxed) && matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the worker and whatever it forked, and reaps it.
    fn kill(&mut self) {
        // SAFETY: kill has no memory-safety preconditions; the group is the
        // worker's own (setpgid at start).
        unsafe {
            libc::kill(-self.link.pid, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asks the worker to finalize and waits for it (`timeout`), then makes
    /// sure it is gone.
    pub fn stop(&mut self, timeout: Duration) {
        if self.alive()
            && self
                .link
                .send(&Frame::new(json!({"kind": "finalize"})))
                .is_ok()
        {
            let deadline = std::time::Instant::now() + timeout;
            while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
                match self.control.recv_timeout(left) {
                    Ok(f) if f.kind() == "finalized" => break,
                    Ok(_) => continue,
                    Err(_) => break,
                }
            }
            // It exits by itself after `finalized`; give it a moment.
            for _ in 0..50 {
                if !self.alive() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.kill();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How often a waiting instance checks that its worker still lives.
const WATCH: Duration = Duration::from_millis(500);

/// The reader thread: routes every frame until the worker is gone, then
/// fails what is still open.
fn read_frames(stream: UnixStream, link: &Arc<Link>, control: mpsc::Sender<Frame>) {
    let mut reader = Counting {
        inner: BufReader::with_capacity(1 << 16, stream),
        count: 0,
    };
    let end = loop {
        let before = reader.count;
        let frame = match Frame::read_from(&mut reader) {
            Ok(Some(frame)) => frame,
            Ok(None) => break None,
            Err(e) => break Some(e.to_string()),
        };
        match frame.kind() {
            "response" => respond(link, frame),
            "log" => {
                let level = frame.str("level").chars().next().unwrap_or('I');
                let level = if level == 'V' { 'V' } else { level };
                crate::core::logging::log_at(
                    level,
                    frame.str("message"),
                    frame.str("file"),
                    frame.u64("line") as u32,
                );
            }
            "bls" => bls(link, frame),
            "metric" => metric(link, &frame),
            "model_control" => model_control(link, &frame),
            _ => {
                if control.send(frame).is_err() {
                    // Nobody listens (the instance is going away); keep
                    // reading so responses still reach their callers.
                }
            }
        }
        link.advance(reader.count - before, false);
    };
    // A worker whose frames cannot be read is of no use: it is killed, and
    // the next batch starts a new one.
    link.dead.store(true, Ordering::Relaxed);
    if let Some(why) = end {
        // SAFETY: as in `Worker::kill`.
        unsafe {
            libc::kill(-link.pid, libc::SIGKILL);
        }
        crate::core::logging::log(
            'E',
            &format!(
                "reading from the Python worker of model instance '{}': {why}",
                link.instance
            ),
        );
    }
    link.metrics
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
    let waiting = std::mem::take(&mut *link.waiting.lock().unwrap_or_else(|p| p.into_inner()));
    let open: Vec<Responder> = link
        .requests
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain()
        .filter(|(id, _)| !waiting.contains(id))
        .map(|(_, r)| r)
        .collect();
    let error = Error::internal(format!(
        "the Python worker of model instance '{}' exited while running the request",
        link.instance
    ));
    for r in open {
        r.fail(error.clone());
    }
    link.advance(0, true);
}

/// A `metric` frame (pb_utils.MetricFamily / Metric): makes, updates, reads
/// or lets go of one; `family`, `metric` and `value` answer with a `reply`.
fn metric(link: &Arc<Link>, frame: &Frame) {
    let mut held = link.metrics.lock().unwrap_or_else(|p| p.into_inner());
    let id = frame.u64("id");
    let number = frame
        .header
        .get("value")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let answer: Option<Result<Value>> = match frame.str("op") {
        "family" => Some(
            custom_metrics::Kind::from_code(frame.u64("metric_kind"))
                .ok_or_else(|| Error::invalid_arg("unknown metric kind"))
                .and_then(|kind| {
                    custom_metrics::family(frame.str("name"), frame.str("description"), kind)
                })
                .map(|handle| {
                    let id = link.next_id();
                    held.insert(id, handle);
                    json!(id)
                }),
        ),
        "metric" => Some((|| {
            let family = match held.get(&frame.u64("family")) {
                Some(custom_metrics::Handle::Family(name)) => name.clone(),
                _ => return Err(Error::invalid_arg("the metric's family is gone")),
            };
            let labels = frame
                .header
                .get("labels")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                        .collect()
                })
                .unwrap_or_default();
            let buckets = frame
                .header
                .get("buckets")
                .and_then(Value::as_array)
                .map(|b| b.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect());
            let handle = custom_metrics::metric(&family, labels, buckets)?;
            let id = link.next_id();
            held.insert(id, handle);
            Ok(json!(id))
        })()),
        "value" => Some(match held.get(&id) {
            Some(handle) => custom_metrics::value(handle).map(|v| json!(v)),
            None => Err(Error::invalid_arg("the metric is gone")),
        }),
        op @ ("increment" | "set" | "observe") => {
            let update = match op {
                "increment" => custom_metrics::Update::Increment(number),
                "set" => custom_metrics::Update::Set(number),
                _ => custom_metrics::Update::Observe(number),
            };
            // Checked in the worker already: an error here is logged.
            if let Some(Err(e)) = held.get(&id).map(|h| custom_metrics::update(h, update)) {
                crate::core::logging::log('W', &format!("model instance '{}': {e}", link.instance));
            }
            None
        }
        "drop" => {
            held.remove(&id);
            None
        }
        _ => Some(Err(Error::invalid_arg("unknown metric operation"))),
    };
    drop(held);
    if let Some(answer) = answer {
        let (value, error) = match answer {
            Ok(v) => (v, Value::Null),
            Err(e) => (Value::Null, json!(e.message)),
        };
        let reply = Frame::new(json!({
            "kind": "reply",
            "bid": frame.u64("bid"),
            "value": value,
            "error": error,
        }));
        link.post(Outgoing::Frame(reply));
    }
}

/// A `model_control` frame (pb_utils.load_model / unload_model /
/// is_model_ready): runs on the server's model control, answered with a
/// `reply` (`value`: true, or whether the model is ready).
fn model_control(link: &Arc<Link>, frame: &Frame) {
    let bid = frame.u64("bid");
    let reply = {
        let link = Arc::clone(link);
        move |answer: Result<bool>| {
            let (value, error) = match answer {
                Ok(v) => (json!(v), Value::Null),
                Err(e) => (Value::Null, json!(e.message)),
            };
            link.post(Outgoing::Frame(Frame::new(json!({
                "kind": "reply",
                "bid": bid,
                "value": value,
                "error": error,
            }))));
        }
    };
    let name = frame.str("model").to_string();
    let op = match frame.str("op") {
        "load" => {
            // The files' bytes follow one another in the body, in the
            // order of `files` (each with its name and size).
            let mut files = Vec::new();
            let mut at = 0usize;
            for f in frame
                .header
                .get("files")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let size = f.get("size").and_then(Value::as_u64).unwrap_or(0) as usize;
                let Some(bytes) = at.checked_add(size).and_then(|end| frame.body.get(at..end))
                else {
                    return reply(Err(Error::invalid_arg("a file's bytes are missing")));
                };
                at += size;
                let key = f.get("name").and_then(Value::as_str).unwrap_or_default();
                let path = key.strip_prefix("file:").unwrap_or(key);
                files.push((path.to_string(), bytes.to_vec()));
            }
            ModelControl::Load {
                name,
                config: frame.str("config").to_string(),
                files,
            }
        }
        "unload" => ModelControl::Unload {
            name,
            dependents: frame.bool("unload_dependents"),
        },
        "ready" => ModelControl::Ready {
            name,
            version: frame.str("version").to_string(),
        },
        other => {
            return reply(Err(Error::invalid_arg(format!(
                "unknown model control operation '{other}'"
            ))))
        }
    };
    match link.host.clone() {
        Some(host) => host.control(op, Box::new(reply)),
        None => reply(Err(Error::unavailable(
            "this server runs no model control for models",
        ))),
    }
}

/// A `response` frame: to its request's responder.
fn respond(link: &Link, mut frame: Frame) {
    let id = frame.u64("rid");
    let last = frame.bool("final");
    let responder = {
        let mut open = link.requests.lock().unwrap_or_else(|p| p.into_inner());
        if last {
            open.remove(&id)
        } else {
            open.get(&id).cloned()
        }
    };
    let Some(responder) = responder else { return };
    let has_tensors = frame
        .header
        .get("tensors")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    if let Some(e) = frame.error() {
        // The model's own error response counts as a success (Triton).
        let e = if frame.bool("answered") {
            e.answered()
        } else {
            e
        };
        responder.respond(Err(e), last);
    } else if last && !has_tensors && frame.bool("bare") {
        // A bare final flag: a decoupled stream ends; a one-answer request
        // cannot end without its answer.
        let instance = link.instance.clone();
        responder.finish(move || {
            Error::internal(format!(
                "Python model '{instance}' sent the final flag without a response"
            ))
        });
    } else {
        responder.respond(frame.take_tensors(), last);
    }
}

/// A `bls` frame: the request runs on the server; its answers go back as
/// `bls_response` frames.
fn bls(link: &Arc<Link>, frame: Frame) {
    let id = frame.u64("bid");
    let model = frame.str("model").to_string();
    let reply = {
        let link = Arc::clone(link);
        move |header: Value, tensors: Vec<crate::core::types::Tensor>| {
            let mut f = Frame::new(header);
            let list = f.add_owned_tensors(tensors);
            f.header.insert("tensors".into(), list);
            link.post(Outgoing::Frame(f));
        }
    };
    let error = {
        let model = model.clone();
        move |e: Error| {
            json!({"kind": "bls_response", "bid": id, "final": true, "error": {
                "message": format!("Model {model} - Error when running inference: {}", e.message),
                "code": code_name(e.kind),
            }})
        }
    };
    let request = match bls_request(&frame) {
        Ok(r) => r,
        Err(e) => return reply(error(e), Vec::new()),
    };
    let Some(host) = link.host.clone() else {
        return reply(
            error(Error::unavailable(
                "this server runs no inference for models",
            )),
            Vec::new(),
        );
    };
    let decoupled = frame.bool("decoupled");
    let mut answered = 0usize;
    // Whether the last reply ended the call: as Triton's iterator, a
    // decoupled call yields exactly the responses the model sent, and an
    // empty one only for a final flag sent bare.
    let mut ended = false;
    let each = move |answer: Option<Result<crate::core::types::InferResponse>>| match answer {
        Some(Ok(response)) => {
            answered += 1;
            ended = !decoupled || response.last;
            reply(
                json!({"kind": "bls_response", "bid": id, "final": ended, "error": null}),
                response.outputs,
            );
        }
        Some(Err(e)) => {
            answered += 1;
            ended = true;
            reply(error(e), Vec::new());
        }
        None => {
            if !ended || answered == 0 {
                reply(
                    json!({"kind": "bls_response", "bid": id, "final": true, "error": null}),
                    Vec::new(),
                );
            }
        }
    };
    host.infer(
        model.clone(),
        frame.str("version").to_string(),
        request,
        Box::new(each),
    );
}

/// The server request of a `bls` frame.
fn bls_request(frame: &Frame) -> Result<InferRequest> {
    let list = frame.header.get("inputs").cloned().unwrap_or(Value::Null);
    let inputs = frame.tensors_at(&list, &mut 0)?;
    let outputs = frame
        .header
        .get("outputs")
        .and_then(Value::as_array)
        .map(|o| {
            o.iter()
                .filter_map(Value::as_str)
                .map(|name| RequestedOutput::named(name.to_string()))
                .collect()
        })
        .unwrap_or_default();
    let flags = frame.u64("flags");
    let id = match frame.header.get("correlation_id") {
        Some(Value::String(s)) if !s.is_empty() => SequenceId::Text(s.clone()),
        Some(Value::Number(n)) if n.as_u64().unwrap_or(0) != 0 => {
            SequenceId::Number(n.as_u64().unwrap_or(0))
        }
        _ => SequenceId::None,
    };
    Ok(InferRequest {
        id: frame.str("id").to_string(),
        inputs,
        shm_inputs: Vec::new(),
        outputs,
        priority: 0,
        timeout_us: frame.u64("timeout"),
        sequence: SequenceParams {
            id,
            start: flags & 1 != 0,
            end: flags & 2 != 0,
        },
        parameters: frame
            .header
            .get("parameters")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
        // `InferenceRequest(..., trace=request.trace())`: the call's spans
        // hang under the calling request's.
        trace_context: frame.header.get("trace").and_then(|t| {
            Some(TraceContext {
                traceparent: t.get("traceparent")?.as_str()?.to_string(),
                tracestate: None,
                parent_trace: t.get("parent_trace").and_then(Value::as_u64),
            })
        }),
    })
}

/// The native core's file name (the `trtis-python-native` crate,
/// backends/python-native: a CPython extension for Python 3.11 and later).
pub const NATIVE_CORE: &str = "lib_trtis_native.so";

/// The worker's native core, passed to it as `--native PATH`: the file at
/// `TRTIS_PYTHON_NATIVE` (`0` or an empty value: none, the worker runs in
/// pure Python), else `lib_trtis_native.so` beside the executable (where
/// cargo builds it) or in its parent folder. A worker that cannot load it
/// (an older Python) logs why and runs in pure Python.
fn native_core() -> Option<&'static Path> {
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("TRTIS_PYTHON_NATIVE") {
            return (!path.is_empty() && path != "0").then(|| PathBuf::from(path));
        }
        crate::core::fsutil::beside_executable(NATIVE_CORE)
    })
    .as_deref()
}

/// The directory holding our `worker.py` and
/// `triton_python_backend_utils.py`, written once per content (a
/// directory named by their hash, so two trtis versions never share one).
fn scripts_dir() -> Result<PathBuf> {
    static DIR: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let hash = crate::core::fsutil::fnv1a(WORKER.as_bytes().iter().chain(UTILS.as_bytes()));
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let dir = std::env::temp_dir().join(format!("trtis-python-{uid}-{hash:016x}"));
        let write = || -> std::io::Result<()> {
            crate::core::fsutil::private_dir(&dir, uid)?;
            for (name, text) in [
                ("worker.py", WORKER),
                ("triton_python_backend_utils.py", UTILS),
            ] {
                let path = dir.join(name);
                if std::fs::read_to_string(&path).is_ok_and(|t| t == text) {
                    continue;
                }
                let tmp = dir.join(format!(".{name}.{}", std::process::id()));
                std::fs::write(&tmp, text)?;
                std::fs::rename(&tmp, &path)?;
            }
            Ok(())
        };
        write().map(|()| dir.clone()).map_err(|e| {
            format!(
                "failed to write the Python backend's files to {}: {e}",
                dir.display()
            )
        })
    })
    .clone()
    .map_err(Error::internal)
}

/// Starts a worker from one thread that lives as long as the server, not
/// from the instance's own thread: `PR_SET_PDEATHSIG` kills the child when
/// the thread that forked it ends, and an instance outlives its thread when
/// a reload keeps it (`instance::Loader::Handed`). Started on the calling
/// thread if that thread cannot be had.
fn spawn_from_server_thread(mut command: Command) -> std::io::Result<Child> {
    type Job = (Command, std::sync::mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Job>>> =
        std::sync::OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("trtis:spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            })
            .ok()
            .map(|_| tx)
    });
    let Some(spawner) = spawner else {
        return command.spawn();
    };
    let (reply, answer) = std::sync::mpsc::channel();
    if let Err(std::sync::mpsc::SendError((mut command, _))) = spawner.send((command, reply)) {
        return command.spawn();
    }
    answer
        .recv()
        .unwrap_or_else(|_| Err(std::io::Error::other("the worker spawner thread ended")))
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
