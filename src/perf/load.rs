//! The measurement logic of `trtis perf`, free of sockets and clocks: a
//! step measures windows until the last three agree (stable) or the trials
//! run out (unstable, reported as such); a sweep runs steps over a plan of
//! concurrencies or request rates and stops where the latency limit is
//! passed. Windows come from a [`Measure`], the real load generator
//! (`driver`) or a scripted one in tests.

use std::time::Duration;

use hdrhistogram::Histogram;

/// The load of one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// This many requests outstanding at all times.
    Concurrency(usize),
    /// This many requests started per second.
    Rate(f64),
}

impl Load {
    pub fn value(&self) -> f64 {
        match *self {
            Load::Concurrency(n) => n as f64,
            Load::Rate(r) => r,
        }
    }
}

/// The server's side of a window: deltas of the model's statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerDelta {
    pub requests: u64,
    pub inferences: u64,
    pub executions: u64,
    pub request_ns: u64,
    pub queue_ns: u64,
    pub compute_input_ns: u64,
    pub compute_infer_ns: u64,
    pub compute_output_ns: u64,
}

impl ServerDelta {
    fn add(&mut self, o: &ServerDelta) {
        self.requests += o.requests;
        self.inferences += o.inferences;
        self.executions += o.executions;
        self.request_ns += o.request_ns;
        self.queue_ns += o.queue_ns;
        self.compute_input_ns += o.compute_input_ns;
        self.compute_infer_ns += o.compute_infer_ns;
        self.compute_output_ns += o.compute_output_ns;
    }

    /// A cumulative duration as microseconds per request.
    pub fn per_request_us(&self, ns: u64) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            ns as f64 / self.requests as f64 / 1000.0
        }
    }

    /// Request latency not in the queue or the compute phases.
    pub fn overhead_ns(&self) -> u64 {
        self.request_ns.saturating_sub(
            self.queue_ns + self.compute_input_ns + self.compute_infer_ns + self.compute_output_ns,
        )
    }
}

/// What one measurement window saw.
#[derive(Debug, Clone)]
pub struct Window {
    pub elapsed: Duration,
    /// Successful requests completed in the window.
    pub completed: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Latencies of the successful requests, in microseconds.
    pub latency: Histogram<u64>,
    /// Sums over the successful requests, in nanoseconds.
    pub send_ns: u64,
    pub wait_ns: u64,
    pub recv_ns: u64,
    pub server: Option<ServerDelta>,
    /// CPU time this process used during the window.
    pub client_cpu: Duration,
    /// Inferences per request (the batch size).
    pub batch: u64,
}

/// A latency histogram in microseconds (1 µs to 1 hour, 3 digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

impl Window {
    pub fn empty(batch: u64) -> Window {
        Window {
            elapsed: Duration::ZERO,
            completed: 0,
            errors: 0,
            first_error: None,
            latency: new_histogram(),
            send_ns: 0,
            wait_ns: 0,
            recv_ns: 0,
            server: None,
            client_cpu: Duration::ZERO,
            batch,
        }
    }

    /// Inferences per second.
    pub fn throughput(&self) -> f64 {
        if self.elapsed.is_zero() {
            return 0.0;
        }
        (self.completed * self.batch) as f64 / self.elapsed.as_secs_f64()
    }

    pub fn avg_latency_us(&self) -> f64 {
        self.latency.mean()
    }

    pub fn std_dev_us(&self) -> f64 {
        self.latency.stdev()
    }

    pub fn percentile_us(&self, p: f64) -> u64 {
        self.latency.value_at_quantile(p / 100.0)
    }

    /// The latency that stability and the limit look at: the average, or
    /// a percentile.
    pub fn latency_metric_us(&self, percentile: Option<f64>) -> f64 {
        match percentile {
            Some(p) => self.percentile_us(p) as f64,
            None => self.avg_latency_us(),
        }
    }

    fn avg_ns_us(&self, ns: u64) -> f64 {
        if self.completed == 0 {
            0.0
        } else {
            ns as f64 / self.completed as f64 / 1000.0
        }
    }

    /// Average time building and sending a request, in µs.
    pub fn send_us(&self) -> f64 {
        self.avg_ns_us(self.send_ns)
    }

    pub fn wait_us(&self) -> f64 {
        self.avg_ns_us(self.wait_ns)
    }

    pub fn recv_us(&self) -> f64 {
        self.avg_ns_us(self.recv_ns)
    }

    /// Several windows as one.
    pub fn merge(windows: &[Window]) -> Window {
        let mut out = Window::empty(windows.first().map(|w| w.batch).unwrap_or(1));
        for w in windows {
            out.elapsed += w.elapsed;
            out.completed += w.completed;
            out.errors += w.errors;
            if out.first_error.is_none() {
                out.first_error = w.first_error.clone();
            }
            let _ = out.latency.add(&w.latency);
            out.send_ns += w.send_ns;
            out.wait_ns += w.wait_ns;
            out.recv_ns += w.recv_ns;
            if let Some(s) = &w.server {
                out.server.get_or_insert_with(ServerDelta::default).add(s);
            }
            out.client_cpu += w.client_cpu;
        }
        out
    }
}

/// How steps are measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Stability: the last three windows' throughput and latency each
    /// within this fraction of their average.
    pub stability: f64,
    /// Windows before giving up on stability.
    pub max_trials: usize,
    /// Use this latency percentile instead of the average.
    pub percentile: Option<f64>,
    /// Stop the sweep after a step whose latency passes this (µs).
    pub latency_limit_us: Option<f64>,
}

/// A source of measurement windows.
pub trait Measure {
    fn window(&mut self, load: Load) -> Result<Window, String>;
}

/// The result of one step.
#[derive(Debug, Clone)]
pub struct Step {
    pub load: Load,
    /// The last (up to) three windows merged.
    pub result: Window,
    pub stable: bool,
    pub trials: usize,
}

fn within(values: &[f64], fraction: f64) -> bool {
    let avg = values.iter().sum::<f64>() / values.len() as f64;
    values.iter().all(|v| (v - avg).abs() <= avg * fraction)
}

/// Whether windows agree: no failed requests, something completed, and
/// throughput and latency each within the stability fraction.
pub fn stable(windows: &[Window], settings: &Settings) -> bool {
    if windows.iter().any(|w| w.errors > 0 || w.completed == 0) {
        return false;
    }
    let throughput: Vec<f64> = windows.iter().map(Window::throughput).collect();
    let latency: Vec<f64> = windows
        .iter()
        .map(|w| w.latency_metric_us(settings.percentile))
        .collect();
    within(&throughput, settings.stability) && within(&latency, settings.stability)
}

/// Measures one step: windows until the last three are stable, at most
/// `max_trials`. `on_window` sees each window as it ends.
pub fn measure_step(
    m: &mut dyn Measure,
    load: Load,
    settings: &Settings,
    on_window: &mut dyn FnMut(&Window, usize),
) -> Result<Step, String> {
    let mut windows: Vec<Window> = Vec::new();
    for trial in 1..=settings.max_trials.max(1) {
        let w = m.window(load)?;
        on_window(&w, trial);
        windows.push(w);
        let last = &windows[windows.len().saturating_sub(3)..];
        if last.len() == 3 && stable(last, settings) {
            return Ok(Step {
                load,
                result: Window::merge(last),
                stable: true,
                trials: trial,
            });
        }
    }
    let last = &windows[windows.len().saturating_sub(3)..];
    Ok(Step {
        load,
        result: Window::merge(last),
        stable: false,
        trials: windows.len(),
    })
}

/// The loads of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// `end` 0: no end (the latency limit stops it).
    Concurrency {
        start: usize,
        end: usize,
        step: usize,
    },
    Rate {
        start: f64,
        end: f64,
        step: f64,
    },
}

impl Plan {
    /// The next load after `i` steps, or None when the plan is done.
    pub fn load(&self, i: usize) -> Option<Load> {
        match *self {
            Plan::Concurrency { start, end, step } => {
                let n = start + i * step.max(1);
                (end == 0 || n <= end).then_some(Load::Concurrency(n))
            }
            Plan::Rate { start, end, step } => {
                let r = start + i as f64 * step;
                let last = if step > 0.0 { end } else { start };
                (i == 0 || (step > 0.0 && r <= last + 1e-9)).then_some(Load::Rate(r))
            }
        }
    }

    pub fn is_unbounded(&self) -> bool {
        matches!(self, Plan::Concurrency { end: 0, .. })
    }
}

/// Runs the plan's steps; stops after a step whose latency passes the
/// limit. `on_step` sees each step as it ends.
pub fn sweep(
    m: &mut dyn Measure,
    plan: &Plan,
    settings: &Settings,
    on_window: &mut dyn FnMut(&Window, usize),
    on_step: &mut dyn FnMut(&Step),
) -> Result<Vec<Step>, String> {
    if plan.is_unbounded() && settings.latency_limit_us.is_none() {
        return Err(
            "an open-ended concurrency range needs a latency limit (-l MS) to stop".to_string(),
        );
    }
    let mut steps = Vec::new();
    let mut i = 0;
    while let Some(load) = plan.load(i) {
        let step = measure_step(m, load, settings, on_window)?;
        on_step(&step);
        let over = settings
            .latency_limit_us
            .is_some_and(|limit| step.result.latency_metric_us(settings.percentile) > limit);
        steps.push(step);
        if over {
            break;
        }
        i += 1;
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scripted windows: for each call, a (throughput per second, latency
    /// µs, errors) triple, repeating the last one.
    struct Script {
        windows: Vec<(u64, u64, u64)>,
        calls: Vec<Load>,
        /// Latency per concurrency instead of the script (sweeps).
        by_concurrency: Option<fn(usize) -> u64>,
    }

    impl Measure for Script {
        fn window(&mut self, load: Load) -> Result<Window, String> {
            let i = self.calls.len().min(self.windows.len() - 1);
            self.calls.push(load);
            let (per_second, mut latency, errors) = self.windows[i];
            if let (Some(f), Load::Concurrency(n)) = (self.by_concurrency, load) {
                latency = f(n);
            }
            let mut w = Window::empty(1);
            w.elapsed = Duration::from_secs(1);
            w.completed = per_second;
            w.errors = errors;
            for _ in 0..per_second {
                w.latency.record(latency).unwrap();
            }
            Ok(w)
        }
    }

    fn settings(limit_ms: Option<f64>) -> Settings {
        Settings {
            stability: 0.10,
            max_trials: 10,
            percentile: None,
            latency_limit_us: limit_ms.map(|ms| ms * 1000.0),
        }
    }

    fn script(windows: &[(u64, u64, u64)]) -> Script {
        Script {
            windows: windows.to_vec(),
            calls: Vec::new(),
            by_concurrency: None,
        }
    }

    #[test]
    fn a_step_ends_when_three_windows_agree() {
        let mut s = script(&[
            (100, 1000, 0),
            (200, 1000, 0),
            (100, 1000, 0),
            (104, 1040, 0),
            (98, 990, 0),
        ]);
        let step = measure_step(
            &mut s,
            Load::Concurrency(1),
            &settings(None),
            &mut |_, _| {},
        )
        .unwrap();
        assert!(step.stable);
        assert_eq!(step.trials, 5);
        assert_eq!(step.result.completed, 302);
        assert!((step.result.throughput() - 302.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_step_that_never_settles_is_reported_unstable_after_max_trials() {
        let mut s = script(&[(100, 1000, 0), (300, 1000, 0)]);
        // Alternate: 100, 300, 300, ... no: the script repeats its last entry,
        // so make the latency swing instead.
        s.windows = (0..20)
            .map(|i| (100, if i % 2 == 0 { 1000 } else { 3000 }, 0))
            .collect();
        let mut seen = 0;
        let step = measure_step(
            &mut s,
            Load::Concurrency(2),
            &settings(None),
            &mut |_, _| seen += 1,
        )
        .unwrap();
        assert!(!step.stable);
        assert_eq!(step.trials, 10);
        assert_eq!(seen, 10);
        assert_eq!(s.calls.len(), 10);
    }

    #[test]
    fn windows_with_failed_requests_are_never_stable() {
        let mut s = script(&[(100, 1000, 1)]);
        let mut set = settings(None);
        set.max_trials = 4;
        let step = measure_step(&mut s, Load::Concurrency(1), &set, &mut |_, _| {}).unwrap();
        assert!(!step.stable);
        assert_eq!(step.result.errors, 3, "the last three windows");
    }

    #[test]
    fn a_sweep_stops_at_the_first_step_over_the_latency_limit() {
        // Latency grows 20 ms per concurrency step: 20, 40, 60 ms.
        let mut s = script(&[(100, 0, 0)]);
        s.by_concurrency = Some(|n| n as u64 * 20_000);
        let plan = Plan::Concurrency {
            start: 1,
            end: 0,
            step: 1,
        };
        let mut steps_seen = Vec::new();
        let steps = sweep(
            &mut s,
            &plan,
            &settings(Some(50.0)),
            &mut |_, _| {},
            &mut |st| steps_seen.push(st.load),
        )
        .unwrap();
        let loads: Vec<Load> = steps.iter().map(|s| s.load).collect();
        assert_eq!(
            loads,
            [
                Load::Concurrency(1),
                Load::Concurrency(2),
                Load::Concurrency(3)
            ]
        );
        assert_eq!(steps_seen, loads);
        assert!(steps[2].result.avg_latency_us() > 50_000.0);
    }

    #[test]
    fn a_sweep_ends_at_the_plan_end_when_the_limit_is_not_reached() {
        let mut s = script(&[(100, 1000, 0)]);
        let plan = Plan::Concurrency {
            start: 1,
            end: 3,
            step: 1,
        };
        let steps = sweep(
            &mut s,
            &plan,
            &settings(Some(50.0)),
            &mut |_, _| {},
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(steps.len(), 3);
        let plan = Plan::Concurrency {
            start: 2,
            end: 8,
            step: 3,
        };
        let steps = sweep(&mut s, &plan, &settings(None), &mut |_, _| {}, &mut |_| {}).unwrap();
        let loads: Vec<f64> = steps.iter().map(|s| s.load.value()).collect();
        assert_eq!(loads, [2.0, 5.0, 8.0]);
        let plan = Plan::Rate {
            start: 100.0,
            end: 300.0,
            step: 100.0,
        };
        let steps = sweep(&mut s, &plan, &settings(None), &mut |_, _| {}, &mut |_| {}).unwrap();
        assert_eq!(steps.len(), 3);
    }

    #[test]
    fn an_open_ended_sweep_needs_a_limit() {
        let mut s = script(&[(100, 1000, 0)]);
        let plan = Plan::Concurrency {
            start: 1,
            end: 0,
            step: 1,
        };
        assert!(sweep(&mut s, &plan, &settings(None), &mut |_, _| {}, &mut |_| {}).is_err());
        assert!(s.calls.is_empty());
    }

    #[test]
    fn the_percentile_setting_judges_stability_and_the_limit_by_that_percentile() {
        let mut w = Window::empty(1);
        w.elapsed = Duration::from_secs(1);
        w.completed = 100;
        for i in 0..100 {
            w.latency
                .record(if i < 95 { 1000 } else { 90_000 })
                .unwrap();
        }
        assert!(w.latency_metric_us(None) < 10_000.0);
        assert!(w.latency_metric_us(Some(99.0)) > 80_000.0);
    }
}
