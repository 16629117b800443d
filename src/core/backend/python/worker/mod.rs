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
//!
//! Here: the process (start, wait, stop) and the link the threads share;
//! `routing` is the reader thread, `calls` the model's calls into the
//! server (metrics, model control, BLS), `stderr` the worker's last lines
//! and what they say of its death.

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

use serde_json::json;

mod calls;
mod routing;
mod stderr;

use super::frame::Frame;
use crate::core::backend::Host;
use crate::core::error::{Error, Result};
use crate::core::metrics::custom;
use crate::core::responder::Responder;
use crate::core::types::CancelToken;
use routing::{read_frames, respond};
use stderr::{diagnose, StderrTail};

const WORKER: &str = include_str!("../worker.py");
const UTILS: &str = include_str!("../triton_python_backend_utils.py");

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
    metrics: Mutex<HashMap<u64, custom::Handle>>,
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
