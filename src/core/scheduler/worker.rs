//! The one skeleton both batchers run on: a named thread (the sequence
//! batcher's makes its batching decisions; the dynamic batcher's, whose
//! decisions the instance threads make, keeps its queue timeouts), the
//! state it shares with submitters under one mutex and condition variable,
//! the open flag (closed on unload: new requests refused, queued ones sent
//! at once), join on drop, and a panic guard. The thread runs with no timer
//! slack, so a queue delay ends on time (`precise_timers`, which the
//! dynamic batcher's instance threads call too).
//!
//! If a batcher's thread panics (a bug), the guard marks the batcher
//! broken (`broken`), answers every queued request with an error and makes
//! later submissions fail at once, so no caller waits forever and the lock
//! is not left poisoned.

use std::ops::{Deref, DerefMut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::core::error::{Error, Result};
use crate::core::instance::{Work, WorkSource};

/// What a batcher brings to the skeleton: its state under the lock, its
/// thread's loop and how to fail what is queued.
pub(crate) trait Batcher: Send + Sync + Sized + 'static {
    /// The state submitters and the thread share (queues, free instances).
    type State: Send;

    /// What only the thread holds (the instance pool it submits to). Kept
    /// out of `Shared`, which completion callbacks hold on the instance
    /// threads: a callback must never drop the last handle of the pool
    /// whose thread it runs on.
    type Context: Send + 'static;

    /// What the thread is called (`trtis:batch:<model>`, cut to 15 bytes).
    fn thread_name(&self) -> String;

    /// The thread's loop; returns once the batcher is closed and drained.
    fn run(shared: &Arc<Shared<Self>>, context: &Self::Context);

    /// After the loop panicked: takes every queued request out of `state`
    /// and answers it with `error`.
    fn fail_queued(&self, state: &mut Self::State, error: &Error);

    /// The condition variables the instances wait on in `take`, one per
    /// instance (woken when the batcher closes).
    fn takers(&self) -> &[Condvar];

    /// The next work for instance `taker`, formed on its thread, waiting
    /// as long as it takes; None once the batcher is closed and has
    /// nothing left for it.
    fn take(shared: &Arc<Shared<Self>>, taker: usize) -> Option<Work>;
}

/// What a batcher's instances take their work from (`Batcher::take`, on
/// the instance's thread, with no timer slack; a panic there marks the
/// batcher broken as one on its own thread does).
pub(crate) struct Source<B: Batcher>(pub Arc<Shared<B>>);

impl<B: Batcher> WorkSource for Source<B> {
    fn take(&self, taker: usize) -> Option<Work> {
        let shared = &self.0;
        precise_timers_once();
        catch_unwind(AssertUnwindSafe(|| B::take(shared, taker))).unwrap_or_else(|_| {
            broken(
                shared,
                format!(
                    "the batcher {} stopped unexpectedly on an instance thread",
                    shared.batcher.thread_name()
                ),
            );
            None
        })
    }

    fn close(&self) {
        close(&self.0);
    }
}

/// Refuses new requests; what is queued is sent without waiting for
/// fuller batches, then the instances' `take` ends.
fn close<B: Batcher>(shared: &Shared<B>) {
    shared.lock().open = false;
    shared.cv.notify_all();
    for taker in shared.batcher.takers() {
        taker.notify_all();
    }
}

/// The state under the lock: the batcher's own, and the lifecycle.
pub(crate) struct Locked<S> {
    state: S,
    /// False once closed (unloading).
    pub open: bool,
    /// Why the thread stopped, if it panicked.
    pub broken: Option<String>,
}

impl<S> Deref for Locked<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.state
    }
}

impl<S> DerefMut for Locked<S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.state
    }
}

/// What the submitters and the thread share.
pub(crate) struct Shared<B: Batcher> {
    batcher: B,
    pub state: Mutex<Locked<B::State>>,
    pub cv: Condvar,
}

impl<B: Batcher> Shared<B> {
    /// The state, also after a panic poisoned its lock (what it guards
    /// stays consistent: `broken` cleans up after a panic).
    pub fn lock(&self) -> MutexGuard<'_, Locked<B::State>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<B: Batcher> Deref for Shared<B> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.batcher
    }
}

/// A running batcher: its thread and what it shares.
pub(crate) struct Worker<B: Batcher> {
    shared: Arc<Shared<B>>,
    thread: Option<JoinHandle<()>>,
}

impl<B: Batcher> Worker<B> {
    /// Starts the thread once `context` is made from what it shares (the
    /// batchers' instances take their work from it); fails, with no thread
    /// started, when `context` does.
    pub fn start_with(
        batcher: B,
        state: B::State,
        context: impl FnOnce(&Arc<Shared<B>>) -> Result<B::Context>,
    ) -> Result<Self> {
        let name = crate::core::instance::thread_name(&batcher.thread_name());
        let shared = Arc::new(Shared {
            batcher,
            state: Mutex::new(Locked {
                state,
                open: true,
                broken: None,
            }),
            cv: Condvar::new(),
        });
        let context = context(&shared)?;
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                precise_timers();
                guarded(&thread_shared, &context)
            })
            .map_err(|e| Error::internal(format!("failed to start thread {name}: {e}")))?;
        Ok(Worker {
            shared,
            thread: Some(thread),
        })
    }

    pub fn shared(&self) -> &Arc<Shared<B>> {
        &self.shared
    }

    /// Locks the state for a submission: refused when the batcher is
    /// closed (`unloading`, the model's name in Triton's message) or broken.
    pub fn lock_open(&self, label: &str) -> Result<MutexGuard<'_, Locked<B::State>>> {
        let state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = &state.broken {
            return Err(Error::internal(why.clone()));
        }
        if !state.open {
            return Err(Error::unavailable(format!("model '{label}' is unloading")));
        }
        Ok(state)
    }

    /// Wakes the thread (after a submission, once the lock is released).
    pub fn notify(&self) {
        self.shared.cv.notify_all();
    }

    /// Stops taking requests; the queued ones are sent without waiting for
    /// fuller batches, then the instances' `take` ends.
    pub fn close(&self) {
        close(&self.shared);
    }
}

impl<B: Batcher> Drop for Worker<B> {
    fn drop(&mut self) {
        self.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs the batcher's loop; if it panics, every queued request is failed
/// and later ones are refused.
fn guarded<B: Batcher>(shared: &Arc<Shared<B>>, context: &B::Context) {
    if catch_unwind(AssertUnwindSafe(|| B::run(shared, context))).is_ok() {
        return;
    }
    broken(
        shared,
        format!(
            "the batcher thread {} stopped unexpectedly",
            shared.batcher.thread_name()
        ),
    );
}

/// After the batcher's code panicked (a bug): marks it broken with `why`,
/// fails every queued request with it, and leaves the lock usable.
pub(crate) fn broken<B: Batcher>(shared: &Shared<B>, why: String) {
    shared.state.clear_poison();
    crate::core::logging::log('E', &why);
    let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
    state.broken = Some(why.clone());
    let error = Error::internal(why);
    shared.batcher.fail_queued(&mut state.state, &error);
}

/// `precise_timers` for the calling thread, once (the instance threads
/// that form their batches wait out queue delays too).
pub(crate) fn precise_timers_once() {
    thread_local! {
        static SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !SET.get() {
        precise_timers();
        SET.set(true);
    }
}

/// Makes this thread's timed waits end on time: Linux lets a thread's
/// timers fire up to its "timer slack" late (50 µs by default), which a
/// batcher waiting out a 100 µs queue delay pays on every batch it waits
/// for (measured: a model with `max_queue_delay_microseconds: 100` answered
/// about 50 µs later at concurrency 1). 1 ns is the least the kernel takes.
fn precise_timers() {
    // SAFETY: PR_SET_TIMERSLACK takes a value and changes only the calling
    // thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A batcher whose loop panics when it sees a request marked so.
    struct Toy;

    impl Batcher for Toy {
        type State = Vec<(bool, mpsc::Sender<Result<()>>)>;
        type Context = ();

        fn takers(&self) -> &[Condvar] {
            &[]
        }

        fn take(_: &Arc<Shared<Self>>, _: usize) -> Option<Work> {
            None
        }

        fn thread_name(&self) -> String {
            "trtis:toy".to_string()
        }

        fn run(shared: &Arc<Shared<Self>>, _: &()) {
            let mut state = shared.state.lock().unwrap();
            loop {
                if state.iter().any(|(boom, _)| *boom) {
                    panic!("a bug in the batcher");
                }
                if !state.open && state.is_empty() {
                    return;
                }
                state = shared.cv.wait(state).unwrap();
            }
        }

        fn fail_queued(&self, state: &mut Self::State, error: &Error) {
            for (_, tx) in state.drain(..) {
                let _ = tx.send(Err(error.clone()));
            }
        }
    }

    fn submit(w: &Worker<Toy>, boom: bool) -> Result<mpsc::Receiver<Result<()>>> {
        let (tx, rx) = mpsc::channel();
        w.lock_open("toy")?.push((boom, tx));
        w.notify();
        Ok(rx)
    }

    /// The timer slack of this process's threads named `name`.
    fn slacks(name: &str) -> Vec<u64> {
        let mut out = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim_end() == name {
                // Only /proc/<id>/ has the file; a thread's id works there.
                let tid = task.file_name();
                let slack = std::fs::read_to_string(
                    std::path::Path::new("/proc")
                        .join(tid)
                        .join("timerslack_ns"),
                );
                out.push(
                    slack
                        .ok()
                        .and_then(|s| s.trim().parse().ok())
                        .unwrap_or(u64::MAX),
                );
            }
        }
        out
    }

    #[test]
    fn the_batcher_thread_waits_with_no_timer_slack() {
        let w = Worker::start_with(Toy, Vec::new(), |_| Ok(())).unwrap();
        // The thread sets it first thing; give it the time to start.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let found = loop {
            let found = slacks("trtis:toy");
            if found.contains(&1) || std::time::Instant::now() > deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(
            found.contains(&1),
            "timer slacks of trtis:toy threads: {found:?}"
        );
        drop(w);
    }

    #[test]
    fn a_panicking_batcher_answers_its_queued_callers_and_refuses_later_ones() {
        let w = Worker::start_with(Toy, Vec::new(), |_| Ok(())).unwrap();
        let queued: Vec<_> = (0..3).map(|_| submit(&w, false).unwrap()).collect();
        let boom = submit(&w, true).unwrap();
        for rx in queued.iter().chain([&boom]) {
            let answer = rx.recv_timeout(Duration::from_secs(10)).expect("answered");
            let e = answer.unwrap_err();
            assert!(e.message.contains("stopped unexpectedly"), "{e:?}");
        }
        // Later submissions fail at once; the lock is not poisoned.
        let e = submit(&w, false).map(|_| ()).unwrap_err();
        assert!(
            e.message.contains("trtis:toy stopped unexpectedly"),
            "{e:?}"
        );
        drop(w); // joins without hanging
    }

    #[test]
    fn a_closed_batcher_refuses_as_unloading_and_its_thread_ends() {
        let w = Worker::start_with(Toy, Vec::new(), |_| Ok(())).unwrap();
        w.close();
        let e = submit(&w, false).map(|_| ()).unwrap_err();
        assert_eq!(e.message, "model 'toy' is unloading");
        drop(w);
    }
}
