//! A request's cancellation signal: a cheap shared flag that whoever runs
//! the request reads (`is_cancelled`) or hears about (`on_cancel`), and
//! that the request's owner sets once when nobody waits for the answer any
//! more (the engine's drop guard: a client that hung up, a cancelled gRPC
//! call or stream).
//!
//! The token travels with the request's [`RequestInfo`](super::RequestInfo)
//! to the schedulers and the backends that take requests apart. A token
//! made by `Default` can never be cancelled and costs no allocation
//! (warmup samples, a sequence batcher's filler rows).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

type Hook = Box<dyn FnOnce() + Send>;

/// One request's cancellation flag; clones share it.
#[derive(Clone, Default)]
pub struct CancelToken(Option<Arc<Shared>>);

#[derive(Default)]
struct Shared {
    cancelled: AtomicBool,
    /// Run once, by `cancel`. Set under this lock together with the flag,
    /// so a hook added while the token is being cancelled is never lost.
    hooks: Mutex<Vec<Hook>>,
}

impl CancelToken {
    /// A token its owner can cancel.
    pub fn new() -> Self {
        CancelToken(Some(Arc::default()))
    }

    /// Whether the request was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|s| s.cancelled.load(Ordering::Acquire))
    }

    /// Whether this token can ever be cancelled (one made by `new`).
    pub fn can_cancel(&self) -> bool {
        self.0.is_some()
    }

    /// Cancels the request: the flag is set and every hook runs, on this
    /// thread. Only the first call does anything; returns whether this was
    /// it.
    pub fn cancel(&self) -> bool {
        let Some(shared) = &self.0 else { return false };
        let hooks = {
            let mut hooks = shared.hooks.lock().unwrap_or_else(|p| p.into_inner());
            if shared.cancelled.swap(true, Ordering::AcqRel) {
                return false;
            }
            std::mem::take(&mut *hooks)
        };
        for hook in hooks {
            // A hook that panics (a bug) must not take the canceller with
            // it: cancelling happens in drop guards.
            let _ = catch_unwind(AssertUnwindSafe(hook));
        }
        true
    }

    /// Runs `hook` when the request is cancelled: at once (on this thread)
    /// if it already is, else on the thread that cancels it, which is
    /// often an async runtime's: a hook must not block. A token that can
    /// never be cancelled drops the hook.
    pub fn on_cancel(&self, hook: impl FnOnce() + Send + 'static) {
        let Some(shared) = &self.0 else { return };
        {
            let mut hooks = shared.hooks.lock().unwrap_or_else(|p| p.into_inner());
            if !shared.cancelled.load(Ordering::Acquire) {
                hooks.push(Box::new(hook));
                return;
            }
        }
        let _ = catch_unwind(AssertUnwindSafe(hook));
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("CancelToken(never)"),
            Some(_) => write!(f, "CancelToken(cancelled: {})", self.is_cancelled()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn counter() -> (Arc<AtomicUsize>, impl Fn() -> Box<dyn FnOnce() + Send>) {
        let n = Arc::new(AtomicUsize::new(0));
        let m = Arc::clone(&n);
        (n, move || {
            let m = Arc::clone(&m);
            Box::new(move || {
                m.fetch_add(1, Ordering::SeqCst);
            })
        })
    }

    #[test]
    fn a_cancel_sets_the_flag_for_every_clone_and_runs_each_hook_once() {
        let token = CancelToken::new();
        let clone = token.clone();
        let (n, hook) = counter();
        token.on_cancel(hook());
        clone.on_cancel(hook());
        assert!(!clone.is_cancelled());
        assert_eq!(n.load(Ordering::SeqCst), 0);
        assert!(clone.cancel());
        assert!(token.is_cancelled());
        assert_eq!(n.load(Ordering::SeqCst), 2);
        assert!(!token.cancel(), "only the first cancel counts");
        assert_eq!(n.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_hook_added_after_the_cancel_runs_at_once() {
        let token = CancelToken::new();
        token.cancel();
        let (n, hook) = counter();
        token.on_cancel(hook());
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_default_token_is_never_cancelled_and_drops_its_hooks() {
        let token = CancelToken::default();
        assert!(!token.can_cancel());
        let (n, hook) = counter();
        token.on_cancel(hook());
        assert!(!token.cancel());
        assert!(!token.is_cancelled());
        assert_eq!(n.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_panicking_hook_does_not_stop_the_others() {
        let token = CancelToken::new();
        let (n, hook) = counter();
        token.on_cancel(|| panic!("a bug in a hook"));
        token.on_cancel(hook());
        assert!(token.cancel());
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn cancels_racing_with_new_hooks_lose_none() {
        for _ in 0..200 {
            let token = CancelToken::new();
            let (n, hook) = counter();
            let adder = {
                let token = token.clone();
                let hooks: Vec<_> = (0..8).map(|_| hook()).collect();
                std::thread::spawn(move || {
                    for h in hooks {
                        token.on_cancel(h);
                    }
                })
            };
            token.cancel();
            adder.join().unwrap();
            assert_eq!(n.load(Ordering::SeqCst), 8);
        }
    }
}
