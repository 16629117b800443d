//! A bench helper, not a user example: one instance of a model of the
//! repository loaded by its backend and run directly in-process, with no
//! server around it (the backend's own load and execute, the same code an
//! instance thread runs), the reference `scripts/bench.sh openvino` sets
//! each engine's numbers through the server against.
//!
//! The model's config is read and normalized as the server does; its first
//! input gets one tensor of uniform random floats in [-1, 1) (made once) at
//! batch B, or with `--rows FILE` (raw little-endian f32, rows of the
//! input's size) the file's rows, B at a time, from the start again when
//! they run out; the run repeats a few times to warm up, then for S seconds. One
//! JSON line on stdout: `{"batch", "runs", "infer_per_s", "p50_ms",
//! "cpu_us"}`: inferences (batch elements) per second, the median latency of
//! one run, the process's CPU time (getrusage) per inference.
//!
//! ```text
//! cargo run --release --example engine_direct -- --model-dir examples/model_repository/efficientnet_lite0_openvino \
//!     [--batch B] [--seconds S] [--warmup N] [--rows FILE]
//! ```

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use serde_json::json;

use trtis::core::backend::{load_instance, BackendOptions, Instance, LoadContext};
use trtis::core::config::normalize::{normalize, NormalizeContext};
use trtis::core::config::parse_config;
use trtis::core::device::Device;
use trtis::core::types::{DataType, Tensor};

#[derive(Parser)]
#[command(
    about = "Runs one instance of a repository model in-process through its backend and times it"
)]
struct Args {
    /// The model's directory (config.pbtxt and version 1).
    #[arg(long)]
    model_dir: PathBuf,
    /// The batch size of each run.
    #[arg(long, default_value_t = 1)]
    batch: i64,
    /// How long to run, after the warm-up.
    #[arg(long, default_value_t = 6.0)]
    seconds: f64,
    /// Runs before the timing starts.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// The input's rows from this file (raw little-endian f32) instead of
    /// random numbers.
    #[arg(long)]
    rows: Option<PathBuf>,
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

fn main() {
    let args = Args::parse();
    let text =
        std::fs::read(args.model_dir.join("config.pbtxt")).expect("the model's config.pbtxt");
    let mut config = parse_config(&text).expect("a config that parses").config;
    let version_dir = args.model_dir.join("1");
    let entries = std::fs::read_dir(&version_dir)
        .expect("version 1 of the model")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let name = args
        .model_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    normalize(
        &mut config,
        &NormalizeContext {
            model_name: name,
            first_version_entries: entries,
            gpus: &[],
            gpu_backends: &[],
        },
    )
    .expect("a config that normalizes");
    let options = BackendOptions::default();
    let Instance::Batches(mut instance) = load_instance(&LoadContext {
        config: &config,
        model_dir: &args.model_dir,
        version_dir,
        instance_name: format!("{}_0", config.name),
        instance_index: 0,
        device: Device::Cpu,
        options: &options,
    })
    .expect("the instance loads") else {
        panic!("a model whose backend takes lists of requests is not for this example");
    };
    let input = &config.input[0];
    assert_eq!(
        DataType::from_config(input.data_type),
        Some(DataType::Fp32),
        "FP32 inputs only"
    );
    let mut shape = vec![args.batch];
    shape.extend(&input.dims);
    let count: i64 = shape.iter().product();
    // A fixed-seed xorshift: uniform floats in [-1, 1).
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..count)
        .flat_map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 23) as f32 - 1.0).to_le_bytes()
        })
        .collect();
    // The batches to run, in turn: the one random batch, or the file's
    // rows B at a time.
    let batches: Vec<Tensor> = match &args.rows {
        None => vec![Tensor {
            name: input.name.clone(),
            datatype: DataType::Fp32,
            shape,
            data,
        }],
        Some(path) => {
            let bytes = std::fs::read(path).expect("the rows file");
            let batch_bytes = data.len();
            assert!(
                bytes.len() >= batch_bytes,
                "fewer rows in the file than one batch"
            );
            bytes
                .chunks_exact(batch_bytes)
                .map(|chunk| Tensor {
                    name: input.name.clone(),
                    datatype: DataType::Fp32,
                    shape: shape.clone(),
                    data: chunk.to_vec(),
                })
                .collect()
        }
    };
    let outputs: Vec<String> = config.output.iter().map(|o| o.name.clone()).collect();
    for tensor in batches.iter().cycle().take(args.warmup) {
        instance
            .execute(vec![tensor.clone()], &outputs)
            .expect("a run");
    }
    let (start, cpu0) = (Instant::now(), cpu_seconds());
    let mut latencies = Vec::new();
    let mut next = batches.iter().cycle();
    while start.elapsed().as_secs_f64() < args.seconds {
        let tensor = next.next().unwrap().clone();
        let t = Instant::now();
        instance.execute(vec![tensor], &outputs).expect("a run");
        latencies.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let inferences = (latencies.len() as i64 * args.batch) as f64;
    latencies.sort_by(f64::total_cmp);
    println!(
        "{}",
        json!({
            "batch": args.batch,
            "runs": latencies.len(),
            "infer_per_s": inferences / elapsed,
            "p50_ms": latencies[latencies.len() / 2],
            "cpu_us": (cpu_seconds() - cpu0) / inferences * 1e6,
        })
    );
}
