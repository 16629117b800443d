//! What `trtis perf` prints and writes: perf_client's report per step and
//! summary, perf_analyzer's CSV (same header, same column meanings, rows by
//! ascending throughput), and the whole result as JSON.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::load::{Load, Step, Window};

/// A number as C++ streams print a double by default (`%g`, 6 significant
/// digits), which is how perf_analyzer writes throughput in its CSV.
pub fn g6(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_finite() {
            "0".into()
        } else {
            v.to_string()
        };
    }
    let exp = v.abs().log10().floor() as i32;
    if !(-5..6).contains(&exp) {
        let s = format!("{:.5e}", v);
        let (mantissa, e) = s.split_once('e').unwrap_or((&s, "0"));
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        let e: i32 = e.parse().unwrap_or(0);
        return format!("{mantissa}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    let s = format!("{:.*}", decimals, v);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The label of a load, as perf_client prints it.
fn load_line(load: Load) -> String {
    match load {
        Load::Concurrency(n) => format!("Request concurrency: {n}"),
        Load::Rate(r) => format!("Request Rate: {}", g6(r)),
    }
}

/// A load in a sentence: `concurrency 4`, `200 requests/s`.
pub fn load_name(load: Load) -> String {
    match load {
        Load::Concurrency(n) => format!("concurrency {n}"),
        Load::Rate(r) => format!("{r} requests/s"),
    }
}

/// A warning when this process used more than 80% of the machine's
/// `cores` during a step: the client may be the bottleneck.
pub fn client_cpu_warning(step: &Step, cores: usize) -> Option<String> {
    let w = &step.result;
    let busy = w.client_cpu.as_secs_f64() / w.elapsed.as_secs_f64().max(1e-9);
    (busy > 0.8 * cores as f64).then(|| {
        format!(
            "trtis perf used {:.0}% of this machine's {cores} CPUs at {}: the client may be the bottleneck",
            100.0 * busy / cores as f64,
            load_name(step.load)
        )
    })
}

/// The per-step report (perf_client's layout).
pub fn step_text(step: &Step, grpc: bool, percentile: Option<f64>) -> String {
    let w = &step.result;
    let mut out = String::new();
    let _ = writeln!(out, "{}", load_line(step.load));
    let _ = writeln!(out, "  Client: ");
    let _ = writeln!(out, "    Request count: {}", w.completed);
    if w.errors > 0 {
        let _ = writeln!(
            out,
            "    Failed requests: {} (first: {})",
            w.errors,
            w.first_error.as_deref().unwrap_or("")
        );
    }
    let _ = writeln!(out, "    Throughput: {} infer/sec", g6(w.throughput()));
    if let Some(p) = percentile {
        let _ = writeln!(out, "    p{} latency: {} usec", g6(p), w.percentile_us(p));
    } else {
        let _ = writeln!(
            out,
            "    Avg latency: {:.0} usec (standard deviation {:.0} usec)",
            w.avg_latency_us(),
            w.std_dev_us()
        );
    }
    for p in [50.0, 90.0, 95.0, 99.0] {
        let _ = writeln!(out, "    p{p} latency: {} usec", w.percentile_us(p));
    }
    let total = w.send_us() + w.wait_us() + w.recv_us();
    if grpc {
        let _ = writeln!(
            out,
            "    Avg gRPC time: {:.0} usec ((un)marshal request/response {:.0} usec + response wait {:.0} usec)",
            total,
            w.send_us() + w.recv_us(),
            w.wait_us()
        );
    } else {
        let _ = writeln!(
            out,
            "    Avg HTTP time: {:.0} usec (send/recv {:.0} usec + response wait {:.0} usec)",
            total,
            w.send_us() + w.recv_us(),
            w.wait_us()
        );
    }
    if let Some(s) = &w.server {
        let _ = writeln!(out, "  Server: ");
        let _ = writeln!(out, "    Inference count: {}", s.inferences);
        let _ = writeln!(out, "    Execution count: {}", s.executions);
        let _ = writeln!(out, "    Successful request count: {}", s.requests);
        let _ = writeln!(
            out,
            "    Avg request latency: {:.0} usec (overhead {:.0} usec + queue {:.0} usec + compute input {:.0} usec + compute infer {:.0} usec + compute output {:.0} usec)",
            s.per_request_us(s.request_ns),
            s.per_request_us(s.overhead_ns()),
            s.per_request_us(s.queue_ns),
            s.per_request_us(s.compute_input_ns),
            s.per_request_us(s.compute_infer_ns),
            s.per_request_us(s.compute_output_ns),
        );
    }
    if !step.stable {
        let _ = writeln!(
            out,
            "  Unstable: no 3 consecutive windows agreed within the stability percentage in {} windows",
            step.trials
        );
    }
    out
}

/// The closing summary.
pub fn summary_text(steps: &[Step], percentile: Option<f64>) -> String {
    let mut out = String::new();
    let what = match percentile {
        Some(p) => format!("p{} Batch Latency", g6(p)),
        None => "Client Average Batch Latency".to_string(),
    };
    let _ = writeln!(out, "Inferences/Second vs. {what}");
    for s in steps {
        let label = match s.load {
            Load::Concurrency(n) => format!("Concurrency: {n}"),
            Load::Rate(r) => format!("Request Rate: {}", g6(r)),
        };
        let _ = writeln!(
            out,
            "{label}, throughput: {} infer/sec, latency {:.0} usec{}",
            g6(s.result.throughput()),
            s.result.latency_metric_us(percentile),
            if s.stable { "" } else { " (unstable)" }
        );
    }
    out
}

/// The CSV header perf_analyzer 2.51 writes (`Request Rate` first in rate
/// mode).
pub fn csv_header(rate: bool) -> [&'static str; 13] {
    [
        if rate { "Request Rate" } else { "Concurrency" },
        "Inferences/Second",
        "Client Send",
        "Network+Server Send/Recv",
        "Server Queue",
        "Server Compute Input",
        "Server Compute Infer",
        "Server Compute Output",
        "Client Recv",
        "p50 latency",
        "p90 latency",
        "p95 latency",
        "p99 latency",
    ]
}

fn csv_row(s: &Step) -> Vec<String> {
    let w = &s.result;
    let server = w.server.unwrap_or_default();
    let queue = server.per_request_us(server.queue_ns);
    let input = server.per_request_us(server.compute_input_ns);
    let infer = server.per_request_us(server.compute_infer_ns);
    let output = server.per_request_us(server.compute_output_ns);
    let (send, recv) = (w.send_us(), w.recv_us());
    let network = (w.avg_latency_us() - queue - input - infer - output - send - recv).max(0.0);
    let int = |v: f64| format!("{}", v as u64);
    let load = match s.load {
        Load::Concurrency(n) => n.to_string(),
        Load::Rate(r) => g6(r),
    };
    vec![
        load,
        g6(w.throughput()),
        int(send),
        int(network),
        int(queue),
        int(input),
        int(infer),
        int(output),
        int(recv),
        w.percentile_us(50.0).to_string(),
        w.percentile_us(90.0).to_string(),
        w.percentile_us(95.0).to_string(),
        w.percentile_us(99.0).to_string(),
    ]
}

/// The CSV file: perf_analyzer's header, one row per step by ascending
/// throughput, values in microseconds.
pub fn write_csv(path: &std::path::Path, steps: &[Step]) -> Result<(), String> {
    let rate = steps.iter().any(|s| matches!(s.load, Load::Rate(_)));
    let mut sorted: Vec<&Step> = steps.iter().collect();
    sorted.sort_by(|a, b| a.result.throughput().total_cmp(&b.result.throughput()));
    let mut w = csv::Writer::from_path(path).map_err(|e| format!("{}: {e}", path.display()))?;
    w.write_record(csv_header(rate))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    for s in sorted {
        w.write_record(csv_row(s))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    w.flush().map_err(|e| format!("{}: {e}", path.display()))
}

fn window_json(w: &Window) -> Value {
    let server = w.server.map(|s| {
        json!({
            "request_count": s.requests,
            "inference_count": s.inferences,
            "execution_count": s.executions,
            "avg_request_latency_us": s.per_request_us(s.request_ns),
            "avg_overhead_us": s.per_request_us(s.overhead_ns()),
            "avg_queue_us": s.per_request_us(s.queue_ns),
            "avg_compute_input_us": s.per_request_us(s.compute_input_ns),
            "avg_compute_infer_us": s.per_request_us(s.compute_infer_ns),
            "avg_compute_output_us": s.per_request_us(s.compute_output_ns),
        })
    });
    json!({
        "request_count": w.completed,
        "failed_count": w.errors,
        "first_error": w.first_error,
        "throughput_infer_per_sec": w.throughput(),
        "avg_latency_us": w.avg_latency_us(),
        "std_dev_latency_us": w.std_dev_us(),
        "p50_latency_us": w.percentile_us(50.0),
        "p90_latency_us": w.percentile_us(90.0),
        "p95_latency_us": w.percentile_us(95.0),
        "p99_latency_us": w.percentile_us(99.0),
        "avg_send_us": w.send_us(),
        "avg_response_wait_us": w.wait_us(),
        "avg_recv_us": w.recv_us(),
        "client_cpu_us_per_request": if w.completed == 0 { 0.0 } else {
            w.client_cpu.as_secs_f64() * 1e6 / w.completed as f64 },
        "measured_seconds": w.elapsed.as_secs_f64(),
        "server": server,
    })
}

/// The whole result.
pub fn json(model: &str, protocol: &str, steps: &[Step]) -> Value {
    json!({
        "model": model,
        "protocol": protocol,
        "steps": steps.iter().map(|s| {
            let mut v = window_json(&s.result);
            match s.load {
                Load::Concurrency(n) => v["concurrency"] = json!(n),
                Load::Rate(r) => v["request_rate"] = json!(r),
            }
            v["stable"] = json!(s.stable);
            v["windows"] = json!(s.trials);
            v
        }).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_cpp_streams_do() {
        assert_eq!(g6(2014.7834), "2014.78");
        assert_eq!(g6(411.0), "411");
        assert_eq!(g6(12345.67), "12345.7");
        assert_eq!(g6(0.5), "0.5");
        assert_eq!(g6(1234567.0), "1.23457e+06");
        assert_eq!(g6(0.0), "0");
    }

    #[test]
    fn a_busy_client_is_warned_about() {
        let step = |load, cpu_ms| {
            let mut result = Window::empty(1);
            result.elapsed = std::time::Duration::from_secs(1);
            result.client_cpu = std::time::Duration::from_millis(cpu_ms);
            Step {
                load,
                result,
                stable: true,
                trials: 3,
            }
        };
        assert_eq!(
            client_cpu_warning(&step(Load::Concurrency(4), 1500), 2),
            None
        );
        assert_eq!(
            client_cpu_warning(&step(Load::Concurrency(4), 1700), 2).as_deref(),
            Some("trtis perf used 85% of this machine's 2 CPUs at concurrency 4: the client may be the bottleneck")
        );
        assert_eq!(
            client_cpu_warning(&step(Load::Rate(250.0), 900), 1).as_deref(),
            Some("trtis perf used 90% of this machine's 1 CPUs at 250 requests/s: the client may be the bottleneck")
        );
    }

    #[test]
    fn the_csv_header_is_perf_analyzers() {
        assert_eq!(
            csv_header(false).join(","),
            "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency"
        );
        assert_eq!(csv_header(true)[0], "Request Rate");
    }
}
