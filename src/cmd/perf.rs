//! `trtis perf -m MODEL`: Triton's perf_client / perf_analyzer. Takes their
//! flags (`-t`, `-d -l -c`, `--concurrency-range`, `--request-rate-range`,
//! `-p`, `-s`, `-r`, `--percentile`, `--shape`, `--input-data`, `-f`, ...),
//! prints perf_client's report per step and the summary, writes
//! perf_analyzer's CSV, and adds `--plot FILE.svg`, `--json` and a progress
//! bar on a terminal.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use trtis::client::inputs::{self, Generate};
use trtis::client::{Client, Protocol, SeqFlags};
use trtis::core::types::{RequestedOutput, ShmRef};
use trtis::perf::driver::{Distribution, Driver, Sequences};
use trtis::perf::load::{self, Load, Plan, Settings, Step, Window};
use trtis::perf::{plot, report};

use super::client_args::ServerArgs;
use super::client_args::{fail, server_error};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    server: ServerArgs,

    /// The model.
    #[arg(short = 'm', long = "model")]
    model: String,

    /// The model version (default: the server's choice).
    #[arg(short = 'x', long = "model-version", default_value = "")]
    version: String,

    /// Batch size of each request.
    #[arg(short = 'b', long = "batch-size", default_value_t = 1)]
    batch: i64,

    /// One concurrency (perf_client's -t).
    #[arg(short = 't', long = "concurrency")]
    concurrency: Option<usize>,

    /// Dynamic concurrency: from 1 up by 1 until the latency passes -l or
    /// the concurrency reaches -c (perf_client's -d).
    #[arg(short = 'd', long = "dynamic-concurrency")]
    dynamic: bool,

    /// Latency threshold in ms: the sweep stops after the step that passes it.
    #[arg(short = 'l', long = "latency-threshold", value_name = "MS")]
    latency_ms: Option<f64>,

    /// Maximum concurrency with -d (0: no maximum).
    #[arg(short = 'c', long = "max-concurrency", default_value_t = 0)]
    max_concurrency: usize,

    /// Concurrencies start:end:step (end 0: until -l is passed).
    #[arg(long = "concurrency-range", value_name = "START:END:STEP")]
    concurrency_range: Option<String>,

    /// Request rates start:end:step (requests per second).
    #[arg(long = "request-rate-range", value_name = "START:END:STEP")]
    rate_range: Option<String>,

    /// How requests are spread in rate mode.
    #[arg(long = "request-distribution", value_enum, default_value_t = Distribution::Constant)]
    distribution: Distribution,

    /// Measurement window in ms.
    #[arg(short = 'p', long = "measurement-interval", default_value_t = 5000)]
    window_ms: u64,

    /// Stability: the last three windows within this percentage.
    #[arg(short = 's', long = "stability-percentage", default_value_t = 10.0)]
    stability: f64,

    /// Windows per step before it is reported unstable.
    #[arg(short = 'r', long = "max-trials", default_value_t = 10)]
    max_trials: usize,

    /// Judge stability and the latency threshold by this percentile
    /// instead of the average.
    #[arg(long = "percentile")]
    percentile: Option<f64>,

    /// The shape of a variable-size input: NAME:d1,d2 (repeatable).
    #[arg(long = "shape", value_name = "NAME:DIMS")]
    shapes: Vec<String>,

    /// Input data: zero, random, or a JSON file in perf_analyzer's format.
    #[arg(long = "input-data", default_value = "random")]
    input_data: String,

    /// Zero input data (perf_client's -z).
    #[arg(short = 'z', long = "zero-input")]
    zero: bool,

    /// Where tensors travel: in the requests (none), or in system shared
    /// memory regions registered with the server (system).
    #[arg(long = "shared-memory", value_enum, default_value_t = SharedMemory::None)]
    shared_memory: SharedMemory,

    /// Requests per sequence, for sequence models (each concurrency slot
    /// runs one sequence at a time).
    #[arg(long = "sequence-length", default_value_t = 20)]
    sequence_length: usize,

    /// How much sequence lengths vary, in percent either way.
    #[arg(long = "sequence-length-variation", default_value_t = 20.0)]
    sequence_length_variation: f64,

    /// Sequence ids start[:end] (ids wrap at end; default from 1 without
    /// end).
    #[arg(long = "sequence-id-range", value_name = "START[:END]")]
    sequence_id_range: Option<String>,

    /// Sequences in flight in request-rate mode (sequence models); each
    /// sends its requests one after another.
    #[arg(long = "num-of-sequences", default_value_t = 4)]
    num_of_sequences: usize,

    /// Accepted for compatibility: in request-rate mode a sequence always
    /// has at most one request in flight.
    #[arg(long = "serial-sequences")]
    serial_sequences: bool,

    /// Bytes of the shared memory region of each output.
    #[arg(long = "output-shared-memory-size", default_value_t = 102400)]
    output_shm_size: usize,

    /// Accepted for compatibility: requests are always sent from async
    /// tasks.
    #[arg(short = 'a', long = "async", conflicts_with = "sync")]
    async_mode: bool,

    /// Accepted for compatibility (see --async).
    #[arg(long = "sync")]
    sync: bool,

    /// Accepted for compatibility (the async client needs no threads per
    /// request).
    #[arg(long = "max-threads")]
    max_threads: Option<usize>,

    /// Write perf_analyzer's CSV here.
    #[arg(short = 'f', long = "filename", value_name = "FILE.csv")]
    csv: Option<PathBuf>,

    /// Draw throughput against p50/p99 latency into this SVG file.
    #[arg(long = "plot", value_name = "FILE.svg")]
    plot: Option<PathBuf>,

    /// Print the whole result as JSON instead of the text report.
    #[arg(long)]
    json: bool,

    /// Print every measurement window.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SharedMemory {
    None,
    System,
}

/// System shared memory regions made for a run: files under `/dev/shm`
/// registered with the server; `cleanup` unregisters and removes them.
#[derive(Default)]
struct Regions {
    names: Vec<String>,
}

impl Regions {
    /// A new region holding `data` (or `size` zero bytes).
    async fn create(
        &mut self,
        client: &mut Client,
        label: &str,
        data: Option<&[u8]>,
        size: usize,
    ) -> Result<ShmRef, String> {
        let name = format!("trtis_perf_{}_{label}", std::process::id());
        let path = std::path::Path::new("/dev/shm").join(&name);
        let bytes = match data {
            Some(d) => d.to_vec(),
            None => vec![0; size],
        };
        std::fs::write(&path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        self.names.push(name.clone());
        client
            .register_system_shared_memory(&name, &format!("/{name}"), 0, bytes.len() as u64)
            .await
            .map_err(|e| format!("registering shared memory region '{name}': {}", e.message()))?;
        Ok(ShmRef {
            region: name,
            byte_size: bytes.len(),
            offset: 0,
        })
    }

    /// Unregisters and removes the regions (on a fresh connection).
    fn cleanup(&self, url: &str, protocol: Protocol) {
        if self.names.is_empty() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(async {
                if let Ok(mut c) = Client::connect(url, protocol).await {
                    for n in &self.names {
                        let _ = c.unregister_system_shared_memory(n).await;
                    }
                }
            });
        }
        for n in &self.names {
            let _ = std::fs::remove_file(std::path::Path::new("/dev/shm").join(n));
        }
    }
}

/// `a:b:c` → up to three numbers.
fn range(spec: &str, flag: &str) -> Result<Vec<f64>, String> {
    let parts: Result<Vec<f64>, _> = spec.split(':').map(|p| p.trim().parse::<f64>()).collect();
    match parts {
        Ok(p) if !p.is_empty() && p.len() <= 3 && p.iter().all(|v| *v >= 0.0) => Ok(p),
        _ => Err(format!("{flag} expects start[:end[:step]], got '{spec}'")),
    }
}

/// `--sequence-id-range start[:end]` → (start, ids in the range; 0:
/// unbounded). perf_analyzer's default starts at 1.
fn sequence_ids(spec: Option<&str>) -> Result<(u64, u64), String> {
    let Some(spec) = spec else {
        return Ok((1, 0));
    };
    let bad = || format!("--sequence-id-range expects start[:end] with start >= 1, got '{spec}'");
    let mut parts = spec.split(':').map(|p| p.trim().parse::<u64>());
    let start = parts
        .next()
        .and_then(|p| p.ok())
        .filter(|&s| s >= 1)
        .ok_or_else(bad)?;
    let range = match parts.next() {
        None => 0,
        Some(Ok(end)) if end > start => end - start,
        Some(_) => return Err(bad()),
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok((start, range))
}

fn plan(args: &Args) -> Result<Plan, String> {
    if let Some(spec) = &args.rate_range {
        let p = range(spec, "--request-rate-range")?;
        let start = p[0];
        if start <= 0.0 {
            return Err("--request-rate-range must start above 0".into());
        }
        let end = p.get(1).copied().unwrap_or(start);
        if end < start {
            return Err(format!(
                "--request-rate-range ends ({end}) below where it starts ({start})"
            ));
        }
        return Ok(Plan::Rate {
            start,
            end,
            step: p.get(2).copied().unwrap_or(1.0),
        });
    }
    if let Some(spec) = &args.concurrency_range {
        let p = range(spec, "--concurrency-range")?;
        let start = (p[0] as usize).max(1);
        let end = p.get(1).map(|&e| e as usize).unwrap_or(start);
        if end != 0 && end < start {
            return Err(format!(
                "--concurrency-range ends ({end}) below where it starts ({start}); 0 means no end"
            ));
        }
        return Ok(Plan::Concurrency {
            start,
            end,
            step: p.get(2).map(|&s| s as usize).unwrap_or(1).max(1),
        });
    }
    if args.dynamic {
        return Ok(Plan::Concurrency {
            start: 1,
            end: args.max_concurrency,
            step: 1,
        });
    }
    let n = args.concurrency.unwrap_or(1).max(1);
    Ok(Plan::Concurrency {
        start: n,
        end: n,
        step: 1,
    })
}

pub fn run(args: Args) -> ExitCode {
    let plan = match plan(&args) {
        Ok(p) => p,
        Err(m) => return fail(m, 2),
    };
    let settings = Settings {
        stability: args.stability / 100.0,
        max_trials: args.max_trials.max(1),
        percentile: args.percentile,
        latency_limit_us: args.latency_ms.map(|ms| ms * 1000.0),
    };
    if plan.is_unbounded() && settings.latency_limit_us.is_none() {
        return fail(
            "an open-ended concurrency sweep (-d without -c, or a range ending in 0) needs -l MS",
            2,
        );
    }
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    // No more worker threads than requests outstanding: idle workers cost
    // CPU in wake-ups (a concurrency-1 run on one thread is the cheapest).
    let most = match plan {
        Plan::Concurrency { start, end, .. } if end != 0 => start.max(end),
        _ => cores,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(most.clamp(1, cores.min(4)))
        .thread_name("trtis-perf")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format!("failed to start the async runtime: {e}"), 1),
    };
    let url = args.server.url();
    let protocol = args.server.protocol();
    let mut regions = Regions::default();
    let setup = rt.block_on(async {
        let client = Client::connect(&url, protocol)
            .await
            .map_err(|e| server_error(&url, e))?;
        let mut client = client;
        let meta = client
            .model_metadata(&args.model, &args.version)
            .await
            .map_err(|e| server_error(&url, e))?;
        let config = client
            .model_config(&args.model, &args.version)
            .await
            .map_err(|e| server_error(&url, e))?;
        let batching = config.max_batch_size > 0;
        if !batching && args.batch > 1 {
            return Err(fail(
                format!(
                    "model '{}' does not batch (max_batch_size 0): -b must be 1",
                    args.model
                ),
                2,
            ));
        }
        let shapes = inputs::parse_shapes(&args.shapes).map_err(|m| fail(m, 2))?;
        let generate = if args.zero || args.input_data == "zero" {
            Generate::Zero
        } else {
            Generate::Random
        };
        let entries = match args.input_data.as_str() {
            "zero" | "random" => Vec::new(),
            path => inputs::read_input_data(std::path::Path::new(path)).map_err(|m| fail(m, 2))?,
        };
        let shm = args.shared_memory == SharedMemory::System;
        let mut outputs = Vec::new();
        if shm {
            for (k, o) in meta.outputs.iter().enumerate() {
                let r = regions
                    .create(&mut client, &format!("out{k}"), None, args.output_shm_size)
                    .await
                    .map_err(|m| fail(m, 1))?;
                outputs.push(RequestedOutput {
                    name: o.name.clone(),
                    classification: None,
                    shm: Some(r),
                });
            }
        }
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut requests = Vec::new();
        for i in 0..entries.len().max(1) {
            let how = inputs::InputSpec {
                batching,
                batch: args.batch,
                shapes: &shapes,
                generate,
                entry: entries.get(i),
            };
            let tensors = inputs::build(&meta.inputs, &how, &mut seed).map_err(|m| fail(m, 2))?;
            let mut input_shm = Vec::new();
            if shm {
                for (j, t) in tensors.iter().enumerate() {
                    let r = regions
                        .create(&mut client, &format!("in{i}_{j}"), Some(&t.data), 0)
                        .await
                        .map_err(|m| fail(m, 1))?;
                    input_shm.push(Some(r));
                }
            }
            requests.push(
                client
                    .prepare_shm(
                        &args.model,
                        &args.version,
                        tensors,
                        &input_shm,
                        outputs.clone(),
                    )
                    .map_err(|e| fail(e, 1))?,
            );
        }
        let sequences = match &config.scheduling_choice {
            Some(trtis::core::config::pb::model_config::SchedulingChoice::SequenceBatching(_)) => {
                let (start, range) =
                    sequence_ids(args.sequence_id_range.as_deref()).map_err(|m| fail(m, 2))?;
                Some(Sequences::new(
                    args.sequence_length,
                    args.sequence_length_variation,
                    start,
                    range,
                    args.num_of_sequences,
                ))
            }
            _ => None,
        };
        // One request first: a model that cannot serve them fails here,
        // clearly (a sequence model gets a sequence of one).
        let probe = sequences.as_ref().map(|s| SeqFlags {
            id: s.next_id(),
            start: true,
            end: true,
        });
        let probed = requests[0].send_seq(probe).await;
        if let (Some(s), Some(p)) = (&sequences, probe) {
            s.release(p.id);
        }
        if let Err(e) = probed {
            return Err(server_error(&url, e));
        }
        Ok((client, requests, sequences))
    });
    let (client, requests, sequences) = match setup {
        Ok(v) => v,
        Err(code) => {
            regions.cleanup(&url, protocol);
            return code;
        }
    };
    let grpc = protocol == Protocol::Grpc;
    let driver = Driver::new(
        rt,
        requests,
        client,
        &args.model,
        &args.version,
        Duration::from_millis(args.window_ms.max(1)),
        args.batch.max(1) as u64,
        args.distribution,
    );
    let mut driver = match sequences {
        Some(s) => driver.with_sequences(s),
        None => driver,
    };
    if !args.json {
        println!("*** Measurement Settings ***");
        println!("  Batch size: {}", args.batch);
        println!("  Measurement window: {} msec", args.window_ms);
        println!(
            "  Stabilizing using {}",
            match args.percentile {
                Some(p) => format!("p{} latency", report::g6(p)),
                None => "average latency".to_string(),
            }
        );
        if let Some(ms) = args.latency_ms {
            println!("  Latency limit: {ms} msec");
        }
        println!();
    }
    let bar = if std::io::stderr().is_terminal() && !args.verbose {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(120));
        Some(bar)
    } else {
        None
    };
    let verbose = args.verbose;
    let mut on_window = |w: &Window, trial: usize| {
        if let Some(bar) = &bar {
            bar.set_message(format!(
                "window {trial}: {} infer/s, avg latency {:.0} usec",
                report::g6(w.throughput()),
                w.avg_latency_us()
            ));
        }
        if verbose {
            eprintln!(
                "  Pass [{trial}] throughput: {} infer/sec. Avg latency: {:.0} usec (std {:.0} usec){}",
                report::g6(w.throughput()),
                w.avg_latency_us(),
                w.std_dev_us(),
                if w.errors > 0 {
                    format!(", {} failed requests", w.errors)
                } else {
                    String::new()
                }
            );
        }
    };
    let json = args.json;
    let percentile = args.percentile;
    let mut warnings = Vec::new();
    let mut on_step = |step: &Step| {
        if let Some(bar) = &bar {
            bar.suspend(|| {
                if !json {
                    print!("{}", report::step_text(step, grpc, percentile));
                }
            });
        } else if !json {
            print!("{}", report::step_text(step, grpc, percentile));
        }
        let w = &step.result;
        let busy = w.client_cpu.as_secs_f64() / w.elapsed.as_secs_f64().max(1e-9);
        if busy > 0.8 * cores as f64 {
            warnings.push(format!(
                "trtis perf used {:.0}% of this machine's {cores} CPUs at {}: the client may be the bottleneck",
                100.0 * busy / cores as f64,
                match step.load {
                    Load::Concurrency(n) => format!("concurrency {n}"),
                    Load::Rate(r) => format!("{r} requests/s"),
                }
            ));
        }
    };
    let result = load::sweep(&mut driver, &plan, &settings, &mut on_window, &mut on_step);
    drop(driver);
    regions.cleanup(&url, protocol);
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let steps = match result {
        Ok(s) => s,
        Err(m) => return fail(m, 1),
    };
    if json {
        let proto = if grpc { "grpc" } else { "http" };
        println!(
            "{}",
            serde_json::to_string_pretty(&report::json(&args.model, proto, &steps))
                .unwrap_or_default()
        );
    } else {
        println!("{}", report::summary_text(&steps, percentile));
    }
    if let Some(path) = &args.csv {
        if let Err(m) = report::write_csv(path, &steps) {
            return fail(m, 1);
        }
    }
    if let Some(path) = &args.plot {
        let title = format!("{}: throughput vs latency", args.model);
        if let Err(m) = plot::write_svg(path, &title, &steps) {
            return fail(m, 1);
        }
    }
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    for s in steps.iter().filter(|s| !s.stable) {
        eprintln!(
            "warning: the measurement at {} did not stabilize within {} windows of {} ms (stability {}%); try a longer -p",
            match s.load {
                Load::Concurrency(n) => format!("concurrency {n}"),
                Load::Rate(r) => format!("{r} requests/s"),
            },
            s.trials,
            args.window_ms,
            args.stability
        );
    }
    let failed: u64 = steps.iter().map(|s| s.result.errors).sum();
    if failed > 0 {
        let first = steps
            .iter()
            .find_map(|s| s.result.first_error.clone())
            .unwrap_or_default();
        return fail(format!("{failed} requests failed; the first: {first}"), 1);
    }
    let _ = (args.async_mode, args.sync, args.max_threads);
    ExitCode::SUCCESS
}
