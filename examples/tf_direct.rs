//! A bench helper, not a user example: a TensorFlow SavedModel run directly
//! in-process through trtis's binding of the C API
//! (`trtis::core::backend::tensorflow::capi`), with no server around it.
//!
//! The reference `scripts/bench.sh tensorflow` sets the TensorFlow backend
//! against: the SavedModel is loaded with the session `ConfigProto` the
//! backend gives an instance whose config sets no parameters
//! (`TfSettings::default()`: TensorFlow's own thread counts, no GPU), the
//! signature's input and output tensors are fed and fetched by their
//! TensorInfo names, and one input tensor of random floats (made once) is
//! run at batch B, a few times to warm up, then for S seconds. One JSON
//! line on stdout: `{"batch", "runs", "infer_per_s", "mean_ms", "p50_ms",
//! "p99_ms", "cpu_us"}`: inferences (batch elements) per second, the
//! latency of one run, and the process's CPU time (getrusage) per
//! inference.
//!
//! ```text
//! cargo run --release --example tf_direct -- [--model DIR] [--batch B] [--seconds S]
//!     [--input serving_default_input:0] [--output StatefulPartitionedCall:0]
//!     [--shape 3,224,224] [--tag serve] [--warmup N] [--pause-ms MS]
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::json;

use trtis::core::backend::tensorflow::capi::{self, dt, Graph, Output, Session, TfTensor};
use trtis::core::backend::tensorflow::settings::TfSettings;

#[derive(Parser)]
#[command(about = "Runs a TensorFlow SavedModel in-process through the C API and times it")]
struct Args {
    /// The SavedModel directory.
    #[arg(
        long,
        default_value = "examples/tensorflow_repository/efficientnet_lite0_savedmodel/1/model.savedmodel"
    )]
    model: PathBuf,
    /// The MetaGraph's tag.
    #[arg(long, default_value = "serve")]
    tag: String,
    /// The input's TensorInfo name (`op:index`).
    #[arg(long, default_value = "serving_default_input:0")]
    input: String,
    /// The output's TensorInfo name (`op:index`).
    #[arg(long, default_value = "StatefulPartitionedCall:0")]
    output: String,
    /// One element's shape, without the batch dimension.
    #[arg(long, default_value = "3,224,224", value_delimiter = ',')]
    shape: Vec<i64>,
    /// The batch size of each run.
    #[arg(long, default_value_t = 1)]
    batch: i64,
    /// How long to run, after the warm-up.
    #[arg(long, default_value_t = 6.0)]
    seconds: f64,
    /// Runs before the timing starts.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Sleep this long between runs (a server's idle gap between requests:
    /// TensorFlow's threads may go to sleep in it); counts in infer_per_s,
    /// not in the latencies.
    #[arg(long, default_value_t = 0.0)]
    pause_ms: f64,
    /// The session's ConfigProto with TensorFlow's thread spinning off (the
    /// model parameter `TF_DISABLE_THREAD_SPINNING`).
    #[arg(long)]
    disable_thread_spinning: bool,
}

/// `op:index` (or `op`) → the graph's output.
fn tensor(graph: &Graph, name: &str) -> Output {
    let (op, index) = match name.rsplit_once(':') {
        Some((op, i)) if !i.is_empty() && i.chars().all(|c| c.is_ascii_digit()) => {
            (op, i.parse().expect("an output index"))
        }
        _ => (name, 0),
    };
    graph
        .output(op, index)
        .unwrap_or_else(|| panic!("no tensor '{name}' in the graph"))
}

/// This process's user + system CPU time.
fn process_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The `q` quantile (0..=1) of sorted `xs`.
fn quantile(xs: &[f64], q: f64) -> f64 {
    xs[((xs.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let args = Args::parse();
    let api = capi::api().unwrap_or_else(|e| panic!("{}", e.message));
    let proto = TfSettings {
        disable_thread_spinning: args.disable_thread_spinning,
        ..TfSettings::default()
    }
    .config_proto();
    let (session, _meta) = Session::load_saved_model(api, &args.model, &[&args.tag], &proto)
        .unwrap_or_else(|(code, m)| panic!("loading {}: {m} (code {code})", args.model.display()));
    let input = tensor(&session.graph, &args.input);
    let output = tensor(&session.graph, &args.output);

    let mut dims = vec![args.batch];
    dims.extend(&args.shape);
    let elements: i64 = dims.iter().product();
    // Uniform floats in [-1, 1) from a fixed xorshift seed: the same input
    // every run, made once.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut bytes = Vec::with_capacity(elements as usize * 4);
    for _ in 0..elements {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let x = (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    let x = TfTensor::from_bytes(api, dt::FLOAT, &dims, &bytes);
    let run = || {
        let out = session
            .run(&[(input, &x)], &[output], &[])
            .unwrap_or_else(|(code, m)| panic!("run: {m} (code {code})"));
        assert_eq!(out[0].dims().first(), Some(&args.batch));
        out
    };

    for _ in 0..args.warmup {
        run();
    }
    let mut latencies = Vec::new();
    let (t0, cpu0) = (Instant::now(), process_cpu());
    while t0.elapsed().as_secs_f64() < args.seconds {
        let start = Instant::now();
        std::hint::black_box(run());
        latencies.push(start.elapsed().as_secs_f64() * 1e3);
        if args.pause_ms > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(args.pause_ms / 1e3));
        }
    }
    let (elapsed, cpu) = (t0.elapsed().as_secs_f64(), process_cpu() - cpu0);
    latencies.sort_by(f64::total_cmp);
    let inferences = latencies.len() as f64 * args.batch as f64;
    println!(
        "{}",
        json!({
            "batch": args.batch,
            "runs": latencies.len(),
            "infer_per_s": inferences / elapsed,
            "mean_ms": latencies.iter().sum::<f64>() / latencies.len() as f64,
            "p50_ms": quantile(&latencies, 0.5),
            "p99_ms": quantile(&latencies, 0.99),
            "cpu_us": cpu.as_secs_f64() / inferences * 1e6,
        })
    );
}
