//! The instances' work queue: bounded, first in first out for the work, and
//! when work comes it wakes the taker (instance thread) that went idle last.
//!
//! Hand-written rather than a channel: crossbeam's and std's channels wake
//! the receiver that has waited longest, so at low load successive requests
//! go round a model's instances, and each finds its own copy of the weights
//! cold in the caches. Measured with the compute bench's MLP (32 MB of
//! weights per copy, a 32 MB L3): ONNX Runtime alternating between two
//! sessions runs a batch of one in 740 µs, one session run again and again
//! in 511 µs. Waking the most recently idle instance keeps a lightly loaded
//! model on one instance whose data is still cached; under load every
//! instance is busy and which one is woken does not matter.
//!
//! A taker busy with work may also watch the queue (`try_take_or_watch`):
//! an item that comes while no taker is idle then calls the watcher's
//! signal once, so a pipelined instance (`instance::run_pipelined`) can
//! hand its backend the next batch while the one before still runs.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// What a watching taker is told with when an item comes.
pub type Signal = Arc<dyn Fn() + Send + Sync>;

/// Why `push` gave the item back.
#[derive(Debug)]
pub enum Refused<T> {
    /// `capacity` items wait already.
    Full(T),
    /// The queue was closed.
    Closed(T),
}

pub struct WorkQueue<T> {
    state: Mutex<State<T>>,
    /// One per taker: taker `i` waits on `wake[i]`.
    wake: Vec<Condvar>,
    capacity: usize,
}

struct State<T> {
    items: VecDeque<T>,
    /// The takers waiting for work, the one that went idle last on top.
    idle: Vec<usize>,
    /// Busy takers that watch for work (`try_take_or_watch`), each once.
    watching: Vec<(usize, Signal)>,
    closed: bool,
}

impl<T> WorkQueue<T> {
    /// A queue holding up to `capacity` items (at least one) for `takers`
    /// takers, numbered from 0.
    pub fn new(capacity: usize, takers: usize) -> Self {
        WorkQueue {
            state: Mutex::new(State {
                items: VecDeque::new(),
                idle: Vec::with_capacity(takers),
                watching: Vec::new(),
                closed: false,
            }),
            wake: (0..takers).map(|_| Condvar::new()).collect(),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Nothing here panics with the lock held; a poisoned lock still
        // guards consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `item` (never blocks), waking the most recently idle taker,
    /// or when none is idle signalling a watching one.
    pub fn push(&self, item: T) -> Result<(), Refused<T>> {
        let mut state = self.lock();
        if state.closed {
            return Err(Refused::Closed(item));
        }
        if state.items.len() >= self.capacity {
            return Err(Refused::Full(item));
        }
        state.items.push_back(item);
        let taker = state.idle.pop();
        let watcher = match taker {
            None => state.watching.pop().map(|(_, signal)| signal),
            Some(_) => None,
        };
        // Woken after the lock is let go: a taker woken while it is held
        // would only block on it again (measured: 1.7 thread switches per
        // request for an idle instance instead of 1). The taker off the
        // list and not yet woken is not woken by anyone else; if it wakes
        // by itself first it finds the item, and this wake-up then finds
        // it waiting again or not at all, which `take` allows.
        drop(state);
        if let Some(taker) = taker {
            self.wake[taker].notify_one();
        }
        if let Some(signal) = watcher {
            signal();
        }
        Ok(())
    }

    /// The oldest item without waiting; when there is none, taker `taker`
    /// watches: the next item that comes while no taker is idle calls
    /// `signal` (once; the taker then calls this again). `take` ends the
    /// watch.
    pub fn try_take_or_watch(&self, taker: usize, signal: &Signal) -> Option<T> {
        let mut state = self.lock();
        if let Some(item) = state.items.pop_front() {
            return Some(item);
        }
        if !state.closed && !state.watching.iter().any(|(t, _)| *t == taker) {
            state.watching.push((taker, Arc::clone(signal)));
        }
        None
    }

    /// The oldest item, for taker `taker`, waiting until there is one; None
    /// once the queue is closed and empty.
    pub fn take(&self, taker: usize) -> Option<T> {
        let mut state = self.lock();
        state.watching.retain(|(t, _)| *t != taker);
        loop {
            if let Some(item) = state.items.pop_front() {
                return Some(item);
            }
            if state.closed {
                return None;
            }
            state.idle.push(taker);
            state = self.wake[taker]
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
            // Woken by `push` (which took it off the list) or spuriously.
            state.idle.retain(|&t| t != taker);
        }
    }

    /// Refuses new items; takers get what is queued, then None.
    pub fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.idle.clear();
        for (_, signal) in std::mem::take(&mut state.watching) {
            signal();
        }
        for wake in &self.wake {
            wake.notify_all();
        }
    }

    /// Items waiting.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().items.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    /// Waits until `n` takers wait.
    fn until_idle<T>(q: &WorkQueue<T>, n: usize) {
        for _ in 0..2000 {
            if q.lock().idle.len() == n {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("the takers did not go idle");
    }

    /// Starts `n` takers that report (taker, item) for each item.
    fn takers(q: &Arc<WorkQueue<u32>>, n: usize) -> mpsc::Receiver<(usize, u32)> {
        let (tx, rx) = mpsc::channel();
        for t in 0..n {
            let (q, tx) = (Arc::clone(q), tx.clone());
            std::thread::spawn(move || {
                while let Some(item) = q.take(t) {
                    let _ = tx.send((t, item));
                }
            });
        }
        rx
    }

    #[test]
    fn the_taker_idle_last_gets_the_next_item() {
        let q = Arc::new(WorkQueue::new(8, 3));
        let rx = takers(&q, 3);
        until_idle(&q, 3);
        // One item at a time, each taken before the next: the taker that
        // went idle last (the one that took the item before) takes it.
        q.push(1).unwrap();
        let (first, _) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        for item in 2..20 {
            until_idle(&q, 3);
            q.push(item).unwrap();
            let (t, got) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!((t, got), (first, item), "a round-robin would change takers");
        }
        q.close();
    }

    #[test]
    fn every_item_is_taken_once_with_every_taker_busy() {
        let q = Arc::new(WorkQueue::new(100, 4));
        let rx = takers(&q, 4);
        until_idle(&q, 4);
        for item in 0..100 {
            q.push(item).unwrap();
        }
        let mut got: Vec<u32> = (0..100)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap().1)
            .collect();
        got.sort_unstable();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        q.close();
    }

    #[test]
    fn a_full_queue_refuses_and_a_closed_one_drains_then_ends() {
        let q = WorkQueue::new(2, 1);
        q.push(1).unwrap();
        q.push(2).unwrap();
        assert!(matches!(q.push(3), Err(Refused::Full(3))));
        assert_eq!(q.len(), 2);
        q.close();
        assert!(matches!(q.push(4), Err(Refused::Closed(4))));
        assert_eq!(q.take(0), Some(1));
        assert_eq!(q.take(0), Some(2));
        assert_eq!(q.take(0), None);
    }

    fn counting_signal() -> (Signal, Arc<std::sync::atomic::AtomicUsize>) {
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = Arc::clone(&count);
        let signal: Signal = Arc::new(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        (signal, count)
    }

    #[test]
    fn a_watching_taker_is_signalled_once_when_no_taker_is_idle() {
        let q = WorkQueue::new(8, 2);
        let (signal, count) = counting_signal();
        let signals = || count.load(std::sync::atomic::Ordering::SeqCst);
        // Taker 0 is busy and watches; taker 1 is busy and does not.
        assert_eq!(q.try_take_or_watch(0, &signal), None);
        assert_eq!(q.try_take_or_watch(0, &signal), None); // still once
        q.push(1).unwrap();
        assert_eq!(signals(), 1);
        q.push(2).unwrap();
        assert_eq!(signals(), 1, "a watch is signalled once");
        assert_eq!(q.try_take_or_watch(0, &signal), Some(1));
        assert_eq!(q.try_take_or_watch(0, &signal), Some(2));
        assert_eq!(q.try_take_or_watch(0, &signal), None);
        q.close();
        assert_eq!(signals(), 2, "closing ends every watch with its signal");
    }

    #[test]
    fn an_idle_taker_is_woken_rather_than_a_watching_one() {
        let q = Arc::new(WorkQueue::new(8, 2));
        let (signal, count) = counting_signal();
        assert_eq!(q.try_take_or_watch(0, &signal), None);
        let (tx, rx) = mpsc::channel();
        {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                while let Some(item) = q.take(1) {
                    let _ = tx.send(item);
                }
            });
        }
        until_idle(&q, 1);
        q.push(7).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 7);
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 0);
        // Taking (blocking) ends the watch: closing signals nobody.
        let waiting = Arc::clone(&q);
        let t = std::thread::spawn(move || waiting.take(0));
        until_idle(&q, 2);
        q.close();
        assert_eq!(t.join().unwrap(), None);
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[test]
    fn closing_wakes_waiting_takers() {
        let q = Arc::new(WorkQueue::<u32>::new(1, 2));
        let (tx, rx) = mpsc::channel();
        for t in 0..2 {
            let (q, tx) = (Arc::clone(&q), tx.clone());
            std::thread::spawn(move || {
                let _ = tx.send(q.take(t));
            });
        }
        until_idle(&q, 2);
        q.close();
        for _ in 0..2 {
            assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), None);
        }
    }
}
