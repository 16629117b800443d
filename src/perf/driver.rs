//! The real load generator: requests prepared once (`client::Prepared`)
//! and sent from async tasks, a fixed number outstanding (concurrency) or
//! started on a schedule (request rate, constant or Poisson), each window
//! bracketed by the server's statistics and this process's CPU time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

use crate::client::{Client, Prepared};
use crate::core::types::xorshift64;

use super::load::{new_histogram, Load, Measure, ServerDelta, Window};

/// The request-rate schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Distribution {
    Constant,
    Poisson,
}

/// Sequences for sequence models (perf_analyzer's `--sequence-length`,
/// `--sequence-length-variation`, `--sequence-id-range`): each concurrency
/// worker runs one sequence at a time, START on its first request and END
/// on its last; ids count up from the range's start and wrap at its end.
#[derive(Debug, Clone)]
pub struct Sequences {
    pub length: usize,
    /// Percent the length varies either way.
    pub variation: f64,
    pub id_start: u64,
    /// Ids in the range (0: unbounded).
    pub id_range: u64,
    /// Sequences in flight in request-rate mode (`--num-of-sequences`).
    pub rate_sequences: usize,
    next: Arc<std::sync::atomic::AtomicU64>,
    /// Ids of sequences in flight: a wrapped range skips them (as
    /// perf_analyzer does), so two sequences never share an id.
    live: Arc<Mutex<std::collections::HashSet<u64>>>,
}

impl Sequences {
    pub fn new(
        length: usize,
        variation: f64,
        id_start: u64,
        id_range: u64,
        rate_sequences: usize,
    ) -> Self {
        Sequences {
            length: length.max(1),
            variation: variation.max(0.0),
            id_start,
            id_range,
            rate_sequences: rate_sequences.max(1),
            next: Arc::default(),
            live: Arc::default(),
        }
    }

    /// The next sequence id not in flight (call `release` when its
    /// sequence ends). With more sequences in flight than ids in the
    /// range, ids are shared.
    pub fn next_id(&self) -> u64 {
        let mut live = self.live.lock().unwrap();
        let tries = if self.id_range == 0 { 1 } else { self.id_range };
        let mut id = 0;
        for _ in 0..tries {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            id = match self.id_range {
                0 => self.id_start.wrapping_add(n),
                r => self.id_start.wrapping_add(n % r),
            };
            if !live.contains(&id) {
                break;
            }
        }
        live.insert(id);
        id
    }

    /// A sequence ended: its id may be used again.
    pub fn release(&self, id: u64) {
        self.live.lock().unwrap().remove(&id);
    }

    /// A sequence length: `length` ± `variation` percent, at least 1.
    fn draw_length(&self, seed: &mut u64) -> usize {
        let u = (xorshift64(seed) >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
        let spread = (2.0 * u - 1.0) * self.variation / 100.0 * self.length as f64;
        ((self.length as f64 + spread).round() as i64).max(1) as usize
    }
}

/// What the running requests record, swapped out at each window's end.
struct Collector {
    window: Window,
}

/// One kind of load running in the background.
struct Running {
    load: Load,
    stop: Arc<AtomicBool>,
    /// Wakes a rate scheduler sleeping until its next request.
    wake: Arc<tokio::sync::Notify>,
    tasks: Vec<JoinHandle<()>>,
}

pub struct Driver {
    rt: Runtime,
    /// The requests, sent in turn (one per `--input-data` entry).
    requests: Arc<Vec<Prepared>>,
    stats: Client,
    model: String,
    version: String,
    window: Duration,
    batch: u64,
    distribution: Distribution,
    collector: Arc<Mutex<Collector>>,
    running: Option<Running>,
    sequences: Option<Sequences>,
}

/// Seconds of CPU this process has used (user + system).
pub fn process_cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    let Some(rest) = stat.rsplit(')').next() else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    // Linux reports /proc times in USER_HZ, 100 per second.
    Duration::from_millis(ticks * 10)
}

fn record(
    collector: &Mutex<Collector>,
    result: Result<crate::client::Timing, crate::client::ClientError>,
) {
    let mut c = collector.lock().unwrap();
    let w = &mut c.window;
    match result {
        Ok(t) => {
            w.completed += 1;
            let _ = w.latency.record((t.total().as_micros() as u64).max(1));
            w.send_ns += t.send.as_nanos() as u64;
            w.wait_ns += t.wait.as_nanos() as u64;
            w.recv_ns += t.recv.as_nanos() as u64;
        }
        Err(e) => {
            w.errors += 1;
            if w.first_error.is_none() {
                w.first_error = Some(e.to_string());
            }
        }
    }
}

impl Driver {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rt: Runtime,
        requests: Vec<Prepared>,
        stats: Client,
        model: &str,
        version: &str,
        window: Duration,
        batch: u64,
        distribution: Distribution,
    ) -> Driver {
        Driver {
            rt,
            requests: Arc::new(requests),
            stats,
            model: model.to_string(),
            version: version.to_string(),
            window,
            batch,
            distribution,
            collector: Arc::new(Mutex::new(Collector {
                window: Window::empty(batch),
            })),
            running: None,
            sequences: None,
        }
    }

    /// Sends sequences (a sequence model) instead of single requests.
    pub fn with_sequences(mut self, sequences: Sequences) -> Self {
        self.sequences = Some(sequences);
        self
    }

    /// Stops whatever load is running and waits for its requests.
    pub fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            r.stop.store(true, Ordering::SeqCst);
            // A permit is kept if the scheduler is not waiting yet.
            r.wake.notify_one();
            self.rt.block_on(async {
                for t in r.tasks {
                    let _ = t.await;
                }
            });
        }
    }

    fn start(&mut self, load: Load) {
        if self.running.as_ref().is_some_and(|r| r.load == load) {
            return;
        }
        // A new concurrency above the running one just adds workers.
        if let (Some(Load::Concurrency(m)), Load::Concurrency(n)) =
            (self.running.as_ref().map(|r| r.load), load)
        {
            if n > m {
                let stop = Arc::clone(&self.running.as_ref().unwrap().stop);
                let added: Vec<JoinHandle<()>> =
                    (m..n).map(|i| self.worker(i, Arc::clone(&stop))).collect();
                let r = self.running.as_mut().unwrap();
                r.tasks.extend(added);
                r.load = load;
                return;
            }
        }
        self.stop();
        let stop = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(tokio::sync::Notify::new());
        let tasks = match load {
            Load::Concurrency(n) => (0..n).map(|i| self.worker(i, Arc::clone(&stop))).collect(),
            Load::Rate(r) => vec![self.scheduler(r, Arc::clone(&stop), Arc::clone(&wake))],
        };
        self.running = Some(Running {
            load,
            stop,
            wake,
            tasks,
        });
    }

    /// One request outstanding at all times.
    fn worker(&self, index: usize, stop: Arc<AtomicBool>) -> JoinHandle<()> {
        let requests = Arc::clone(&self.requests);
        let collector = Arc::clone(&self.collector);
        if let Some(sequences) = self.sequences.clone() {
            return self.rt.spawn(async move {
                let mut cursor = SeqCursor::new(sequences, index);
                let mut i = index;
                loop {
                    // Stopping mid-sequence: its next request ends it.
                    let stopping = stop.load(Ordering::Relaxed);
                    if stopping && !cursor.in_sequence() {
                        break;
                    }
                    let seq = cursor.next(stopping);
                    let result = requests[i % requests.len()].send_seq(Some(seq)).await;
                    record(&collector, result);
                    i += 1;
                }
            });
        }
        self.rt.spawn(async move {
            let mut i = index;
            while !stop.load(Ordering::Relaxed) {
                let result = requests[i % requests.len()].send().await;
                record(&collector, result);
                i += 1;
            }
        })
    }

    /// Starts requests at `rate` per second.
    fn scheduler(
        &self,
        rate: f64,
        stop: Arc<AtomicBool>,
        wake: Arc<tokio::sync::Notify>,
    ) -> JoinHandle<()> {
        let requests = Arc::clone(&self.requests);
        let collector = Arc::clone(&self.collector);
        let poisson = self.distribution == Distribution::Poisson;
        let sequences = self.sequences.clone();
        self.rt.spawn(async move {
            // Sequence models: each scheduled request goes to the next of
            // `rate_sequences` sequences in turn; a sequence sends its
            // requests one after another (perf_analyzer's
            // --serial-sequences), so a late answer delays that sequence.
            let mut lanes: Vec<tokio::sync::mpsc::UnboundedSender<()>> = Vec::new();
            let mut lane_tasks = tokio::task::JoinSet::new();
            if let Some(seqs) = &sequences {
                for lane in 0..seqs.rate_sequences.max(1) {
                    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                    lane_tasks.spawn(sequence_lane(
                        lane,
                        seqs.clone(),
                        Arc::clone(&requests),
                        Arc::clone(&collector),
                        rx,
                        Arc::clone(&stop),
                    ));
                    lanes.push(tx);
                }
            }
            let mean = 1.0 / rate.max(1e-6);
            let mut seed = 0x853c_49e6_748f_ea9bu64;
            let mut next = tokio::time::Instant::now();
            let mut inflight = tokio::task::JoinSet::new();
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let gap = if poisson {
                    let u = ((xorshift64(&mut seed) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                    -u.ln() * mean
                } else {
                    mean
                };
                next += Duration::from_secs_f64(gap);
                tokio::select! {
                    _ = tokio::time::sleep_until(next) => {}
                    _ = wake.notified() => break,
                }
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if !lanes.is_empty() {
                    let _ = lanes[i % lanes.len()].send(());
                    i += 1;
                    continue;
                }
                let request = requests[i % requests.len()].clone();
                let collector = Arc::clone(&collector);
                inflight.spawn(async move {
                    let result = request.send().await;
                    record(&collector, result);
                });
                while inflight.try_join_next().is_some() {}
                i += 1;
            }
            while inflight.join_next().await.is_some() {}
            drop(lanes);
            while lane_tasks.join_next().await.is_some() {}
        })
    }

    fn server_snapshot(&mut self) -> Option<crate::core::metrics::stats::Snapshot> {
        let model = self.model.clone();
        let version = self.version.clone();
        let stats = self.rt.block_on(self.stats.statistics(&model)).ok()?;
        let mut total = crate::core::metrics::stats::Snapshot::default();
        for s in stats
            .iter()
            .filter(|s| version.is_empty() || s.version == version)
        {
            let t = &s.stats;
            total.inference_count += t.inference_count;
            total.execution_count += t.execution_count;
            for (a, b) in [
                (&mut total.success, t.success),
                (&mut total.queue, t.queue),
                (&mut total.compute_input, t.compute_input),
                (&mut total.compute_infer, t.compute_infer),
                (&mut total.compute_output, t.compute_output),
            ] {
                a.0 += b.0;
                a.1 += b.1;
            }
        }
        Some(total)
    }
}

/// One sequence lane of request-rate mode: sends a request of its current
/// sequence per tick, one at a time; when the ticks stop (the channel
/// closes), ends the sequence it is in.
async fn sequence_lane(
    lane: usize,
    sequences: Sequences,
    requests: Arc<Vec<Prepared>>,
    collector: Arc<Mutex<Collector>>,
    mut ticks: tokio::sync::mpsc::UnboundedReceiver<()>,
    stop: Arc<AtomicBool>,
) {
    let mut cursor = SeqCursor::new(sequences, lane);
    let mut i = lane;
    loop {
        let more = ticks.recv().await.is_some() && !stop.load(Ordering::Relaxed);
        if !more && !cursor.in_sequence() {
            return;
        }
        let seq = cursor.next(!more);
        let result = requests[i % requests.len()].send_seq(Some(seq)).await;
        record(&collector, result);
        i += 1;
        if !more {
            return;
        }
    }
}

/// One sender's place in its sequences: which sequence it is in and how
/// many of its requests are left.
struct SeqCursor {
    sequences: Sequences,
    seed: u64,
    /// (id, requests left including the next one).
    current: Option<(u64, usize)>,
}

impl SeqCursor {
    fn new(sequences: Sequences, index: usize) -> Self {
        SeqCursor {
            sequences,
            seed: 0x2545_f491_4f6c_dd1du64 ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9),
            current: None,
        }
    }

    fn in_sequence(&self) -> bool {
        self.current.is_some()
    }

    /// The flags of the next request: START on a new sequence's first,
    /// END on its last (or now, when `ending`); an ended sequence's id is
    /// released.
    fn next(&mut self, ending: bool) -> crate::client::SeqFlags {
        let start = self.current.is_none();
        let (id, left) = match self.current {
            Some(c) => c,
            None => (
                self.sequences.next_id(),
                self.sequences.draw_length(&mut self.seed),
            ),
        };
        let end = left <= 1 || ending;
        if end {
            self.sequences.release(id);
            self.current = None;
        } else {
            self.current = Some((id, left - 1));
        }
        crate::client::SeqFlags { id, start, end }
    }
}

fn delta(
    a: &crate::core::metrics::stats::Snapshot,
    b: &crate::core::metrics::stats::Snapshot,
) -> ServerDelta {
    ServerDelta {
        requests: b.success.0.saturating_sub(a.success.0),
        inferences: b.inference_count.saturating_sub(a.inference_count),
        executions: b.execution_count.saturating_sub(a.execution_count),
        request_ns: b.success.1.saturating_sub(a.success.1),
        queue_ns: b.queue.1.saturating_sub(a.queue.1),
        compute_input_ns: b.compute_input.1.saturating_sub(a.compute_input.1),
        compute_infer_ns: b.compute_infer.1.saturating_sub(a.compute_infer.1),
        compute_output_ns: b.compute_output.1.saturating_sub(a.compute_output.1),
    }
}

impl Measure for Driver {
    fn window(&mut self, load: Load) -> Result<Window, String> {
        self.start(load);
        let before = self.server_snapshot();
        let cpu0 = process_cpu();
        let t0 = Instant::now();
        self.collector.lock().unwrap().window = Window::empty(self.batch);
        std::thread::sleep(self.window);
        let mut w = std::mem::replace(
            &mut self.collector.lock().unwrap().window,
            Window::empty(self.batch),
        );
        w.elapsed = t0.elapsed();
        w.client_cpu = process_cpu().saturating_sub(cpu0);
        let after = self.server_snapshot();
        w.server = before.zip(after).map(|(a, b)| delta(&a, &b));
        if w.latency.is_empty() {
            w.latency = new_histogram();
        }
        Ok(w)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_ids_count_up_wrap_and_skip_live_ones() {
        let s = Sequences::new(20, 0.0, 5, 3, 4);
        assert_eq!((s.next_id(), s.next_id(), s.next_id()), (5, 6, 7));
        // All three in flight: the range is exhausted, ids are shared.
        s.release(6);
        assert_eq!(s.next_id(), 6, "5 and 7 are live; 6 is free");
        s.release(5);
        s.release(7);
        assert_eq!(s.next_id(), 7);
        let unbounded = Sequences::new(20, 0.0, 1, 0, 4);
        assert_eq!((unbounded.next_id(), unbounded.next_id()), (1, 2));
    }

    #[test]
    fn a_cursor_starts_ends_and_can_end_early() {
        let mut c = SeqCursor::new(Sequences::new(3, 0.0, 1, 0, 1), 0);
        let flags: Vec<(u64, bool, bool)> = (0..4)
            .map(|_| {
                let f = c.next(false);
                (f.id, f.start, f.end)
            })
            .collect();
        assert_eq!(
            flags,
            vec![
                (1, true, false),
                (1, false, false),
                (1, false, true),
                (2, true, false)
            ]
        );
        assert!(c.in_sequence());
        let f = c.next(true);
        assert_eq!((f.id, f.start, f.end), (2, false, true));
        assert!(!c.in_sequence());
    }

    #[test]
    fn sequence_lengths_vary_within_the_percentage() {
        let s = Sequences::new(20, 20.0, 1, 0, 4);
        let mut seed = 7u64;
        let lengths: Vec<usize> = (0..200).map(|_| s.draw_length(&mut seed)).collect();
        assert!(
            lengths.iter().all(|&l| (16..=24).contains(&l)),
            "{lengths:?}"
        );
        assert!(lengths.iter().any(|&l| l < 20) && lengths.iter().any(|&l| l > 20));
        let fixed = Sequences::new(5, 0.0, 1, 0, 4);
        assert_eq!(fixed.draw_length(&mut seed), 5);
    }
}
