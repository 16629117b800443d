//! `trtis status`: a server's liveness, readiness, version and extensions,
//! and each model's versions, state and statistics. Usable as a probe: the
//! exit code is 0 only when the server is reachable and ready.

use std::process::ExitCode;

use serde_json::json;
use trtis::client::{Client, ClientError, Devices, IndexEntry, ModelStats};
use trtis::core::types::TensorMetadata;

use super::client_args::{runtime, ServerArgs};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    server: ServerArgs,

    /// Only this model (with its inputs and outputs).
    #[arg(short = 'm', long = "model")]
    model: Option<String>,

    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> ExitCode {
    runtime().block_on(status(args))
}

async fn status(args: Args) -> ExitCode {
    let url = args.server.url();
    let mut client = match args.server.connect().await {
        Ok(c) => c,
        Err(e) => return unreachable(&url, &e),
    };
    let live = match client.live().await {
        Ok(l) => l,
        Err(e) => return unreachable(&url, &e),
    };
    let ready = client.ready().await.unwrap_or(false);
    let meta = match client.server_metadata().await {
        Ok(m) => m,
        Err(e) => return failed(&e),
    };
    let mut index = client.index().await.unwrap_or_default();
    if let Some(model) = &args.model {
        index.retain(|e| &e.name == model);
        if index.is_empty() {
            eprintln!("error: model '{model}' is not in the server's repository");
            return ExitCode::from(1);
        }
    }
    let stats = stats_of(&mut client, args.model.as_deref()).await;
    // trtis's own endpoint: a Triton server, or gRPC, has none to ask.
    let devices = client.devices().await.ok();
    let model_meta = match &args.model {
        Some(m) => client.model_metadata(m, "").await.ok(),
        None => None,
    };

    if args.json {
        let models: Vec<_> = index
            .iter()
            .map(|e| {
                let s = stats
                    .iter()
                    .find(|s| s.name == e.name && s.version == e.version);
                json!({
                    "name": e.name, "version": e.version, "state": e.state, "reason": e.reason,
                    "inference_count": s.map(|s| s.stats.inference_count),
                    "execution_count": s.map(|s| s.stats.execution_count),
                    "avg_batch_size": s.map(avg_batch),
                    "avg_queue_us": s.map(|s| avg_us(s.stats.queue)),
                    "avg_compute_us": s.map(|s| avg_us(s.stats.compute_infer)),
                })
            })
            .collect();
        let mut doc = json!({
            "url": url, "live": live, "ready": ready,
            "name": meta.name, "version": meta.version, "extensions": meta.extensions,
            "models": models,
            "devices": devices,
        });
        if let Some(m) = &model_meta {
            let tensors = |ts: &[TensorMetadata]| {
                ts.iter()
                    .map(|t| json!({"name": t.name, "datatype": t.datatype, "shape": t.shape}))
                    .collect::<Vec<_>>()
            };
            doc["inputs"] = json!(tensors(&m.inputs));
            doc["outputs"] = json!(tensors(&m.outputs));
        }
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        println!(
            "server {} {} at {url}: {}, {}",
            meta.name,
            meta.version,
            if live { "live" } else { "not live" },
            if ready { "ready" } else { "NOT READY" }
        );
        println!("extensions: {}", meta.extensions.join(", "));
        if let Some(d) = &devices {
            print_gpus(d);
        }
        print_table(&index, &stats);
        if let Some(m) = &model_meta {
            for (what, ts) in [("input", &m.inputs), ("output", &m.outputs)] {
                for t in ts {
                    println!("{what} {} {} {:?}", t.name, t.datatype, t.shape);
                }
            }
        }
    }
    if live && ready {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn print_gpus(d: &Devices) {
    if let Some(why) = &d.no_gpu_reason {
        println!("GPUs: none ({why})");
    }
    for g in &d.gpus {
        println!(
            "GPU {}: {}, {:.1} GiB, compute capability {}, {}{}",
            g.id,
            g.name,
            g.memory_total as f64 / (1u64 << 30) as f64,
            g.compute_capability,
            g.uuid,
            if g.used { "" } else { " (not used)" }
        );
    }
}

async fn stats_of(client: &mut Client, model: Option<&str>) -> Vec<ModelStats> {
    client
        .statistics(model.unwrap_or(""))
        .await
        .unwrap_or_default()
}

fn avg_us((count, ns): (u64, u64)) -> f64 {
    if count == 0 {
        0.0
    } else {
        ns as f64 / count as f64 / 1000.0
    }
}

/// Batch elements per execution (the average batch the model ran).
fn avg_batch(s: &ModelStats) -> f64 {
    if s.stats.execution_count == 0 {
        0.0
    } else {
        s.stats.inference_count as f64 / s.stats.execution_count as f64
    }
}

fn print_table(index: &[IndexEntry], stats: &[ModelStats]) {
    let width = index.iter().map(|e| e.name.len()).max().unwrap_or(5).max(5);
    println!(
        "{:<width$}  {:>7}  {:<11}  {:>9}  {:>10}  {:>9}  {:>13}  {:>15}  REASON",
        "MODEL",
        "VERSION",
        "STATE",
        "REQUESTS",
        "EXECUTIONS",
        "AVG BATCH",
        "AVG QUEUE µs",
        "AVG COMPUTE µs"
    );
    for e in index {
        let s = stats
            .iter()
            .find(|s| s.name == e.name && s.version == e.version);
        let (requests, executions, batch, queue, compute) = match s {
            Some(s) => (
                s.stats.success.0.to_string(),
                s.stats.execution_count.to_string(),
                format!("{:.2}", avg_batch(s)),
                format!("{:.1}", avg_us(s.stats.queue)),
                format!("{:.1}", avg_us(s.stats.compute_infer)),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
        };
        let state = if e.state.is_empty() { "-" } else { &e.state };
        let version = if e.version.is_empty() {
            "-"
        } else {
            &e.version
        };
        println!(
            "{:<width$}  {:>7}  {:<11}  {:>9}  {:>10}  {:>9}  {:>13}  {:>15}  {}",
            e.name, version, state, requests, executions, batch, queue, compute, e.reason
        );
    }
}

fn unreachable(url: &str, e: &ClientError) -> ExitCode {
    eprintln!("error: cannot reach a server at {url}: {}", e.message());
    ExitCode::from(2)
}

fn failed(e: &ClientError) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(1)
}
