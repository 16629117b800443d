//! The sequence batcher's bookkeeping, kept free of threads, clocks and
//! tensors so it is unit-tested as pure state (times are passed in).
//!
//! Each instance has a fixed number of places: batch slots with the
//! `direct` strategy (one per batch row, `max(1, max_batch_size)`), and
//! candidate sequences with `oldest` (`max_candidate_sequences`). A
//! sequence takes a place when its START request arrives and keeps it until
//! its END request is taken into a batch, or until it has been idle for
//! `max_sequence_idle_microseconds`; a sequence that finds no free place
//! waits in the backlog, and the oldest backlogged sequence takes the next
//! place freed.
//!
//! The idle clock is Triton's: it runs from the sequence's last request's
//! arrival, in the backlog too. A sequence is never freed while a request
//! of it is queued or running, nor sooner than `REAP_GRACE` after its last
//! request completed (Triton's reaper looks every 50 ms); so a backlogged
//! sequence that was abandoned runs what it queued and gives its place up
//! at once, and a backlog of abandoned sequences drains as fast as the
//! model runs, not one idle period at a time. An END request removes the id at once, so a later request
//! with that id must START a new sequence.
//!
//! An instance runs one batch at a time (a sequence's requests run in
//! order). `direct` batches hold one row per slot up to the highest slot
//! with a request ready; slots in between without one are empty rows (READY
//! false). `oldest` batches take the oldest request of each candidate
//! sequence, at most one per sequence, like the dynamic batcher.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// How sequences share an instance's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Direct,
    Oldest,
}

/// The sequence batcher's settings, from the model config.
#[derive(Debug, Clone, PartialEq)]
pub struct SeqConfig {
    pub strategy: Strategy,
    pub instances: usize,
    /// Places per instance: batch slots (direct) or candidate sequences
    /// (oldest).
    pub places: usize,
    /// The largest batch (oldest): `max(1, max_batch_size)`.
    pub max_batch: usize,
    /// Oldest: batch sizes sent as soon as they form.
    pub preferred: Vec<usize>,
    /// How long the oldest ready request may wait for a fuller batch.
    pub max_queue_delay: Duration,
    /// Direct: the share of an instance's slots that must have a request
    /// before a batch goes without waiting out `max_queue_delay`.
    pub min_slot_utilization: f32,
    /// A sequence in a place with no request for this long loses it.
    pub idle: Duration,
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not the START of a sequence, and its id names no active sequence.
    NoStart,
}

/// A queued request of a sequence.
#[derive(Debug)]
pub struct Entry<R> {
    pub request: R,
    pub start: bool,
    pub end: bool,
    pub arrived: Instant,
}

/// One row of a batch: the sequence (by serial, unique for the batcher's
/// life) and its request.
#[derive(Debug)]
pub struct Row<R> {
    pub serial: u64,
    pub entry: Entry<R>,
}

/// A batch for one instance. With `direct`, row *i* is slot *i* (`None`:
/// no request in that slot); with `oldest`, every row has a request.
#[derive(Debug)]
pub struct Batch<R> {
    pub instance: usize,
    pub rows: Vec<Option<Row<R>>>,
}

/// What an instance should do now.
#[derive(Debug)]
pub enum Next<R> {
    Run(Batch<R>),
    /// Ask again at this time (a batch is waiting out the queue delay).
    WaitUntil(Instant),
    /// Nothing to do until something changes.
    Nothing,
}

#[derive(Debug)]
struct Sequence<K, R> {
    key: K,
    queue: VecDeque<Entry<R>>,
    /// (instance, place), or None while in the backlog.
    place: Option<(usize, usize)>,
    /// The last request's arrival: the idle clock.
    last: Instant,
    /// Not freed as idle before this (its last completion + `REAP_GRACE`).
    grace: Option<Instant>,
    /// A request of this sequence is executing.
    running: bool,
    /// While in the backlog: when its requests give up waiting (the
    /// earliest request timeout among them).
    deadline: Option<Instant>,
    /// Groups sequences whose batched tensors have equal shapes (set by
    /// the caller, e.g. from the implicit state's shapes).
    shape_key: u64,
}

impl<K, R> Sequence<K, R> {
    /// When this sequence counts as idle (if nothing arrives before).
    fn idle_due(&self, idle: Duration) -> Instant {
        let due = self.last + idle;
        self.grace.map_or(due, |g| due.max(g))
    }
}

/// How long after its last request completed a sequence is kept at least,
/// even when its idle time has passed (a client answering at once still
/// finds it).
pub const REAP_GRACE: Duration = Duration::from_millis(50);

/// Sequences, their places and the backlog of one model version.
#[derive(Debug)]
pub struct Sequences<K, R> {
    config: SeqConfig,
    /// Active ids (END not yet received) → serial.
    active: HashMap<K, u64>,
    sequences: HashMap<u64, Sequence<K, R>>,
    /// places[instance][place] = the serial there.
    places: Vec<Vec<Option<u64>>>,
    backlog: VecDeque<u64>,
    busy: Vec<bool>,
    next_serial: u64,
    queued: usize,
    /// The shape key of a START request.
    start_key: u64,
    /// Per instance: the sequences in a place with a request queued (what
    /// `next` looks at, instead of every place).
    ready: Vec<HashSet<u64>>,
    /// No sequence can idle out before this (None: none is idle); a lower
    /// bound, so `reap` scans only when something may be due.
    idle_from: Option<Instant>,
}

impl<K: Hash + Eq + Clone, R> Sequences<K, R> {
    pub fn new(config: SeqConfig) -> Self {
        let instances = config.instances.max(1);
        let places = config.places.max(1);
        Sequences {
            places: vec![vec![None; places]; instances],
            busy: vec![false; instances],
            config,
            active: HashMap::new(),
            sequences: HashMap::new(),
            backlog: VecDeque::new(),
            next_serial: 1,
            queued: 0,
            start_key: 0,
            ready: vec![HashSet::new(); instances],
            idle_from: None,
        }
    }

    /// Requests waiting (in places and in the backlog).
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Sequences holding a place or waiting for one.
    #[cfg(test)]
    pub fn sequences(&self) -> usize {
        self.sequences.len()
    }

    /// Requests of the sequences waiting for a place.
    pub fn backlog_queued(&self) -> usize {
        self.backlog
            .iter()
            .filter_map(|s| self.sequences.get(s))
            .map(|s| s.queue.len())
            .sum()
    }

    /// Sequences waiting for a place.
    pub fn backlog_len(&self) -> usize {
        self.backlog.len()
    }

    /// Where a sequence is: (instance, place), None in the backlog or when
    /// unknown.
    #[cfg(test)]
    pub fn place_of(&self, key: &K) -> Option<(usize, usize)> {
        self.active
            .get(key)
            .and_then(|s| self.sequences.get(s))
            .and_then(|s| s.place)
    }

    /// The instance holding sequence `serial`'s place (None in the
    /// backlog or when unknown).
    pub fn instance_of(&self, serial: u64) -> Option<usize> {
        self.sequences
            .get(&serial)
            .and_then(|s| s.place)
            .map(|(i, _)| i)
    }

    /// The serial of an active sequence.
    pub fn serial_of(&self, key: &K) -> Option<u64> {
        self.active.get(key).copied()
    }

    /// Queues a request of sequence `key`; returns the sequence's serial.
    /// A START for an active id restarts it in its place.
    pub fn submit(
        &mut self,
        key: K,
        start: bool,
        end: bool,
        request: R,
        now: Instant,
    ) -> Result<u64, (Refusal, R)> {
        let serial = match self.active.get(&key) {
            Some(&s) => s,
            None if !start => return Err((Refusal::NoStart, request)),
            None => {
                let serial = self.next_serial;
                self.next_serial += 1;
                self.sequences.insert(
                    serial,
                    Sequence {
                        key: key.clone(),
                        queue: VecDeque::new(),
                        place: None,
                        last: now,
                        grace: None,
                        running: false,
                        deadline: None,
                        shape_key: self.start_key,
                    },
                );
                self.active.insert(key.clone(), serial);
                match self.free_place() {
                    Some((i, p)) => self.settle(serial, i, p),
                    None => self.backlog.push_back(serial),
                }
                serial
            }
        };
        let seq = self.sequences.get_mut(&serial).expect("active sequence");
        seq.queue.push_back(Entry {
            request,
            start,
            end,
            arrived: now,
        });
        seq.last = now;
        if let Some((i, _)) = seq.place {
            self.ready[i].insert(serial);
        }
        self.queued += 1;
        if end {
            self.active.remove(&key);
        }
        Ok(serial)
    }

    /// Queues a request of sequence `serial` again, neither START nor END
    /// (a request its model rescheduled: an iterative sequence keeps its
    /// place); gives the request back when the sequence is gone.
    pub fn requeue(&mut self, serial: u64, request: R, now: Instant) -> Result<(), R> {
        let Some(seq) = self.sequences.get_mut(&serial) else {
            return Err(request);
        };
        seq.queue.push_back(Entry {
            request,
            start: false,
            end: false,
            arrived: now,
        });
        seq.last = now;
        if let Some((i, _)) = seq.place {
            self.ready[i].insert(serial);
        }
        self.queued += 1;
        Ok(())
    }

    /// Ends sequence `serial` without an END request (an iterative
    /// sequence whose request was released): its id is forgotten at once
    /// and its place freed, or, with requests of it still queued, once the
    /// last of them (which becomes its END) is taken.
    pub fn end(&mut self, serial: u64) {
        let Some(seq) = self.sequences.get_mut(&serial) else {
            return;
        };
        match seq.queue.back_mut() {
            Some(last) => {
                last.end = true;
                let key = seq.key.clone();
                if self.active.get(&key) == Some(&serial) {
                    self.active.remove(&key);
                }
            }
            None => self.remove(serial),
        }
    }

    /// The shape key of START requests (and of new sequences).
    pub fn set_start_key(&mut self, key: u64) {
        self.start_key = key;
    }

    /// The shape key of START requests.
    pub fn start_key(&self) -> u64 {
        self.start_key
    }

    /// Sets the shape key of a sequence (requests batch together only with
    /// equal keys; a START request has the start key).
    pub fn set_shape_key(&mut self, serial: u64, key: u64) {
        if let Some(s) = self.sequences.get_mut(&serial) {
            s.shape_key = key;
        }
    }

    /// Whether a sequence still exists (its END not yet taken, not idled
    /// out).
    pub fn alive(&self, serial: u64) -> bool {
        self.sequences.contains_key(&serial)
    }

    /// The free place to give a new sequence. `direct`: the lowest slot
    /// index (batches stay small), then an instance not running a batch,
    /// then the one with the fewest sequences; `oldest` (where the place
    /// index means nothing): an idle instance, then the fewest sequences.
    fn free_place(&self) -> Option<(usize, usize)> {
        let mut best: Option<([usize; 4], (usize, usize))> = None;
        for (i, places) in self.places.iter().enumerate() {
            let load = places.iter().filter(|p| p.is_some()).count();
            let busy = self.busy[i] as usize;
            if let Some(p) = places.iter().position(Option::is_none) {
                let key = match self.config.strategy {
                    Strategy::Direct => [p, busy, load, i],
                    Strategy::Oldest => [busy, load, p, i],
                };
                if best.is_none_or(|(b, _)| key < b) {
                    best = Some((key, (i, p)));
                }
            }
        }
        best.map(|(_, place)| place)
    }

    fn settle(&mut self, serial: u64, instance: usize, place: usize) {
        self.places[instance][place] = Some(serial);
        if let Some(s) = self.sequences.get_mut(&serial) {
            s.place = Some((instance, place));
            s.deadline = None; // no longer waiting for a place
            if !s.queue.is_empty() {
                self.ready[instance].insert(serial);
            }
        }
    }

    /// Gives a backlogged sequence a deadline for getting a place (the
    /// earliest of those set); no effect on a sequence with a place.
    pub fn set_backlog_deadline(&mut self, serial: u64, deadline: Instant) {
        if let Some(s) = self.sequences.get_mut(&serial) {
            if s.place.is_none() {
                s.deadline = Some(s.deadline.map_or(deadline, |d| d.min(deadline)));
            }
        }
    }

    /// Removes the backlogged sequences whose deadline has passed (their
    /// ids are forgotten); returns their queued requests.
    pub fn expire_backlog(&mut self, now: Instant) -> Vec<R> {
        let gone: Vec<u64> = self
            .backlog
            .iter()
            .copied()
            .filter(|b| {
                self.sequences
                    .get(b)
                    .and_then(|s| s.deadline)
                    .is_some_and(|d| d <= now)
            })
            .collect();
        let mut out = Vec::new();
        for serial in gone {
            if let Some(s) = self.sequences.remove(&serial) {
                if self.active.get(&s.key) == Some(&serial) {
                    self.active.remove(&s.key);
                }
                self.queued -= s.queue.len();
                out.extend(s.queue.into_iter().map(|e| e.request));
            }
            self.backlog.retain(|&b| b != serial);
        }
        out
    }

    /// The earliest backlog deadline.
    pub fn next_backlog_deadline(&self) -> Option<Instant> {
        self.backlog
            .iter()
            .filter_map(|b| self.sequences.get(b).and_then(|s| s.deadline))
            .min()
    }

    /// Frees a place and gives it to the oldest backlogged sequence.
    fn release(&mut self, instance: usize, place: usize) {
        self.places[instance][place] = None;
        if let Some(next) = self.backlog.pop_front() {
            self.settle(next, instance, place);
        }
    }

    /// Removes a sequence (END taken, or idle), freeing its place.
    fn remove(&mut self, serial: u64) {
        if let Some(s) = self.sequences.remove(&serial) {
            if self.active.get(&s.key) == Some(&serial) {
                self.active.remove(&s.key);
            }
            self.queued -= s.queue.len();
            match s.place {
                Some((i, p)) => {
                    self.ready[i].remove(&serial);
                    self.release(i, p)
                }
                None => self.backlog.retain(|&b| b != serial),
            }
        }
    }

    /// What instance `instance` should run now. `compatible(a, b)` says
    /// whether two requests (with their shape keys) can share a batch.
    pub fn next(
        &mut self,
        instance: usize,
        now: Instant,
        compatible: impl Fn((&R, u64), (&R, u64)) -> bool,
    ) -> Next<R> {
        if self.busy.get(instance).copied().unwrap_or(true) {
            return Next::Nothing;
        }
        // The places with a request ready: (place, serial, arrival).
        let ready: Vec<(usize, u64, Instant)> = self.ready[instance]
            .iter()
            .filter_map(|&s| {
                let seq = self.sequences.get(&s)?;
                let (_, p) = seq.place?;
                seq.queue.front().map(|e| (p, s, e.arrived))
            })
            .collect();
        let Some(oldest) = ready.iter().min_by_key(|r| (r.2, r.0)).copied() else {
            return Next::Nothing;
        };
        let key_of = |s: u64| {
            let seq = &self.sequences[&s];
            let e = seq.queue.front().expect("ready");
            (
                &e.request,
                if e.start {
                    self.start_key
                } else {
                    seq.shape_key
                },
            )
        };
        // The requests that can join the oldest one's batch, oldest first.
        let mut picks: Vec<(usize, u64, Instant)> = ready
            .iter()
            .copied()
            .filter(|r| r.1 == oldest.1 || compatible(key_of(oldest.1), key_of(r.1)))
            .collect();
        picks.sort_by_key(|r| (r.2, r.0));
        let deadline = oldest.2 + self.config.max_queue_delay;
        let waited = now >= deadline;
        let go = match self.config.strategy {
            Strategy::Direct => {
                let used = picks.len() as f32 / self.config.places.max(1) as f32;
                waited || used >= self.config.min_slot_utilization
            }
            Strategy::Oldest => {
                // The dynamic batcher's rule: the maximum goes at once; else
                // the largest preferred size that has formed; else all of
                // it once the oldest has waited the delay.
                picks.truncate(self.config.max_batch.max(1));
                let n = picks.len();
                let preferred = self
                    .config
                    .preferred
                    .iter()
                    .copied()
                    .filter(|&p| p <= n)
                    .max();
                match preferred {
                    _ if n >= self.config.max_batch => true,
                    Some(p) => {
                        picks.truncate(p);
                        true
                    }
                    None => waited,
                }
            }
        };
        if !go {
            return Next::WaitUntil(deadline);
        }
        let rows = match self.config.strategy {
            Strategy::Direct => {
                // As Triton's direct batcher: the batch spans every slot up
                // to the highest one with a request ready, a slot whose
                // request does not join (another shape) padded like an
                // empty one, so the model's batch size is that span.
                let top = ready.iter().map(|r| r.0).max().unwrap_or(0);
                let mut rows: Vec<Option<Row<R>>> = (0..=top).map(|_| None).collect();
                // Taken in slot order, as Triton's batcher walks its slots:
                // the places END frees go to the backlog lowest first.
                picks.sort_by_key(|r| r.0);
                for &(p, s, _) in &picks {
                    rows[p] = self.take(s);
                }
                rows
            }
            Strategy::Oldest => picks.iter().map(|&(_, s, _)| self.take(s)).collect(),
        };
        self.busy[instance] = true;
        Next::Run(Batch { instance, rows })
    }

    /// Takes the head request of a sequence into a batch; an END request
    /// frees the place.
    fn take(&mut self, serial: u64) -> Option<Row<R>> {
        let seq = self.sequences.get_mut(&serial)?;
        let entry = seq.queue.pop_front()?;
        self.queued -= 1;
        seq.running = true;
        if seq.queue.is_empty() {
            if let Some((i, _)) = seq.place {
                self.ready[i].remove(&serial);
            }
        }
        if entry.end {
            // The END request still runs; the sequence is gone for the
            // scheduler, and its place goes to the backlog.
            let (instance, place) = seq.place.expect("a sequence in a batch has a place");
            let key = seq.key.clone();
            self.sequences.remove(&serial);
            if self.active.get(&key) == Some(&serial) {
                self.active.remove(&key);
            }
            self.release(instance, place);
        }
        Some(Row { serial, entry })
    }

    /// A batch of `instance` finished; `serials` were its sequences.
    pub fn finished(&mut self, instance: usize, serials: &[u64], now: Instant) {
        if let Some(b) = self.busy.get_mut(instance) {
            *b = false;
        }
        let idle = self.config.idle;
        for s in serials {
            if let Some(seq) = self.sequences.get_mut(s) {
                seq.running = false;
                seq.grace = Some(now + REAP_GRACE.min(idle));
                if seq.queue.is_empty() && seq.place.is_some() {
                    let due = seq.idle_due(idle);
                    self.idle_from = Some(self.idle_from.map_or(due, |t| t.min(due)));
                }
            }
        }
    }

    /// Frees the places of sequences idle for `idle` (no request queued
    /// or running); returns their serials and ids.
    pub fn reap(&mut self, now: Instant) -> Vec<(u64, K)> {
        if self.idle_from.is_none_or(|t| now < t) {
            return Vec::new();
        }
        let idle = self.config.idle;
        let gone: Vec<(u64, K)> = self
            .sequences
            .iter()
            .filter(|(_, s)| {
                s.place.is_some() && s.queue.is_empty() && !s.running && now >= s.idle_due(idle)
            })
            .map(|(&serial, s)| (serial, s.key.clone()))
            .collect();
        for (s, _) in &gone {
            self.remove(*s);
        }
        self.idle_from = self
            .sequences
            .values()
            .filter(|s| s.place.is_some() && s.queue.is_empty() && !s.running)
            .map(|s| s.idle_due(idle))
            .min();
        gone
    }

    /// When the next sequence could idle out (at the earliest).
    pub fn next_idle(&self) -> Option<Instant> {
        self.idle_from
    }

    /// The instances.
    pub fn instances(&self) -> usize {
        self.busy.len()
    }

    /// Removes every queued request and forgets every sequence (the
    /// batcher cannot go on); returns the requests.
    pub fn drain(&mut self) -> Vec<R> {
        let out: Vec<R> = self
            .sequences
            .drain()
            .flat_map(|(_, s)| s.queue.into_iter().map(|e| e.request))
            .collect();
        self.active.clear();
        self.backlog.clear();
        for places in &mut self.places {
            places.iter_mut().for_each(|p| *p = None);
        }
        self.ready.iter_mut().for_each(HashSet::clear);
        self.idle_from = None;
        self.queued = 0;
        out
    }
}

#[cfg(test)]
mod tests;
