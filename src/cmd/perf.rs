//! `trtis perf -m MODEL`: Triton's perf_client / perf_analyzer. Takes their
//! flags (`-t`, `-d -l -c`, `--concurrency-range`, `--request-rate-range`,
//! `-p`, `-s`, `-r`, `--percentile`, `--shape`, `--input-data`, `-f`, ...),
//! prints perf_client's report per step and the summary, writes
//! perf_analyzer's CSV, and adds `--plot FILE.svg`, `--json` and a progress
//! bar on a terminal. The setup before measuring is `trtis::perf::setup`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use trtis::client::inputs::Generate;
use trtis::client::Protocol;
use trtis::perf::driver::{Distribution, Driver};
use trtis::perf::load::{self, Settings, Step, Window};
use trtis::perf::setup::{self, LoadFlags, Options, Regions, SequenceOptions, Setup, SetupError};
use trtis::perf::{plot, report};

use super::client_args::{fail, server_error};
use super::client_args::{ApiArg, ServerArgs};

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
    /// instead of the average (1 to 99, as perf_analyzer).
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

pub fn run(args: Args) -> ExitCode {
    if args.server.api == ApiArg::V1 {
        return fail(
            "trtis perf speaks the v2 API only: --api v1 is not supported (measure a v1 server with its own perf_client)",
            2,
        );
    }
    if let Some(p) = args.percentile.filter(|p| !(1.0..=99.0).contains(p)) {
        // perf_analyzer's range; p0 or p200 would be no percentile at all.
        return fail(
            format!(
                "--percentile must be between 1 and 99, got {}",
                report::g6(p)
            ),
            2,
        );
    }
    if args.plot.is_some() && !plot::AVAILABLE {
        return fail(plot::UNAVAILABLE, 2);
    }
    let plan = match setup::plan(&LoadFlags {
        concurrency: args.concurrency,
        dynamic: args.dynamic,
        max_concurrency: args.max_concurrency,
        concurrency_range: args.concurrency_range.as_deref(),
        rate_range: args.rate_range.as_deref(),
    }) {
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
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(setup::worker_threads(&plan, cores))
        .thread_name("trtis-perf")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format!("failed to start the async runtime: {e}"), 1),
    };
    let url = args.server.url();
    let protocol = args.server.protocol();
    let connect = match args.server.options() {
        Ok(c) => c,
        Err(m) => return fail(m, 2),
    };
    let options = Options {
        model: args.model.clone(),
        version: args.version.clone(),
        batch: args.batch,
        shapes: args.shapes.clone(),
        generate: if args.zero || args.input_data == "zero" {
            Generate::Zero
        } else {
            Generate::Random
        },
        input_data: match args.input_data.as_str() {
            "zero" | "random" => None,
            path => Some(PathBuf::from(path)),
        },
        shared_memory: args.shared_memory == SharedMemory::System,
        output_shm_size: args.output_shm_size,
        sequence: SequenceOptions {
            length: args.sequence_length,
            length_variation: args.sequence_length_variation,
            id_range: args.sequence_id_range.clone(),
            num_of_sequences: args.num_of_sequences,
        },
        connect: connect.clone(),
    };
    let mut regions = Regions::default();
    let setup = rt.block_on(setup::prepare(&url, protocol, &options, &mut regions));
    let Setup {
        client,
        requests,
        sequences,
    } = match setup {
        Ok(s) => s,
        Err(e) => {
            let code = match e {
                SetupError::Usage(m) => fail(m, 2),
                SetupError::Failed(m) => fail(m, 1),
                SetupError::Server(e) => server_error(&url, e),
            };
            regions.cleanup(&url, protocol, &connect);
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
        warnings.extend(report::client_cpu_warning(step, cores));
    };
    let result = load::sweep(&mut driver, &plan, &settings, &mut on_window, &mut on_step);
    drop(driver);
    regions.cleanup(&url, protocol, &connect);
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
            report::load_name(s.load),
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
