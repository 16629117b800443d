//! Triton's sequence client example (`simple_http_sequence_sync_infer_client`
//! / `simple_grpc_sequence_stream_infer_client`), with trtis's client
//! library: two sequences, ids 1000 and 1001, sent request by request,
//! interleaved, to a stateful model; the first request of each carries
//! `sequence_start`, the last `sequence_end`.
//!
//! Sequence 1000 sends 0, 11, 7, 5, 3, 2, 0, 1 and sequence 1001 sends 100
//! and the negated values. What comes back depends on the model:
//!
//! - `simple_sequence` (the default, Triton's example): INPUT + START, so
//!   1 then the values, and 101 then the negated values;
//! - `simple_dyna_sequence`: the same, and the END request adds the
//!   sequence id (1001 and 1000 at the end);
//! - `simple_accumulator`: the running sum the server keeps as implicit
//!   state (0, 11, 18, 23, ... and 100, 89, 82, ...).
//!
//! With the example server running (`./scripts/examples.sh`):
//!
//! ```text
//! cargo run --example sequence_client
//! cargo run --example sequence_client -- -i grpc -m simple_accumulator
//! ```
//!
//! It prints one line per step, `[i] result0 : result1`, then
//! `PASS: Sequence`; a wrong result or an unreachable server prints an
//! `error: ...` line and exits with status 1.

use clap::{Parser, ValueEnum};
use trtis::client::{Client, ClientError, Prepared, Protocol, SeqFlags};
use trtis::core::types::{DataType, RequestedOutput, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProtocolArg {
    Http,
    Grpc,
}

/// Two interleaved sequences against a stateful model.
#[derive(Debug, Parser)]
struct Args {
    /// Server address, `host:port` (default localhost:8000 for HTTP,
    /// localhost:8001 for gRPC).
    #[arg(short = 'u', long = "url")]
    url: Option<String>,

    /// Protocol.
    #[arg(short = 'i', long = "protocol", value_enum, default_value_t = ProtocolArg::Http)]
    protocol: ProtocolArg,

    /// Model: simple_sequence, simple_dyna_sequence or simple_accumulator.
    #[arg(short = 'm', long = "model", default_value = "simple_sequence")]
    model: String,
}

const VALUES: [i32; 7] = [11, 7, 5, 3, 2, 0, 1];

fn main() {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts");
    if let Err(e) = rt.block_on(run(&args)) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// The results the model should give for one sequence's inputs.
fn expected(model: &str, id: u64, inputs: &[i32]) -> Vec<i32> {
    let last = inputs.len() - 1;
    let mut sum = 0;
    inputs
        .iter()
        .enumerate()
        .map(|(i, &v)| match model {
            "simple_accumulator" => {
                sum += v;
                sum
            }
            "simple_dyna_sequence" => v + (i == 0) as i32 + if i == last { id as i32 } else { 0 },
            _ => v + (i == 0) as i32,
        })
        .collect()
}

async fn run(args: &Args) -> Result<(), String> {
    let (protocol, default_url) = match args.protocol {
        ProtocolArg::Http => (Protocol::Http, "localhost:8000"),
        ProtocolArg::Grpc => (Protocol::Grpc, "localhost:8001"),
    };
    let url = args.url.as_deref().unwrap_or(default_url);
    let client = Client::connect(url, protocol)
        .await
        .map_err(|e| failure(url, "connecting", e))?;

    let sequences: [(u64, Vec<i32>); 2] = [
        (1000, std::iter::once(0).chain(VALUES).collect()),
        (
            1001,
            std::iter::once(100).chain(VALUES.map(|v| -v)).collect(),
        ),
    ];
    let mut results: [Vec<i32>; 2] = [Vec::new(), Vec::new()];
    let steps = sequences[0].1.len();
    for step in 0..steps {
        for (k, (id, inputs)) in sequences.iter().enumerate() {
            let request = prepare(&client, &args.model, inputs[step])
                .map_err(|e| failure(url, "preparing a request", e))?;
            let seq = SeqFlags {
                id: *id,
                start: step == 0,
                end: step + 1 == steps,
            };
            let (_, response) = request
                .infer(Some(seq))
                .await
                .map_err(|e| failure(url, &format!("sequence {id} on '{}'", args.model), e))?;
            let out = response
                .outputs
                .iter()
                .find(|t| t.name == "OUTPUT")
                .ok_or("the response has no OUTPUT")?;
            if out.datatype != DataType::Int32 || out.data.len() != 4 {
                return Err(format!(
                    "OUTPUT is {} {:?}, expected one INT32",
                    out.datatype.name(),
                    out.shape
                ));
            }
            results[k].push(i32::from_le_bytes([
                out.data[0],
                out.data[1],
                out.data[2],
                out.data[3],
            ]));
        }
    }
    for (i, (r0, r1)) in results[0].iter().zip(&results[1]).enumerate() {
        println!("[{i}] {r0} : {r1}");
    }
    for (k, (id, inputs)) in sequences.iter().enumerate() {
        let want = expected(&args.model, *id, inputs);
        if results[k] != want {
            return Err(format!(
                "sequence {id}: got {:?}, expected {want:?}",
                results[k]
            ));
        }
    }
    println!("PASS: Sequence");
    Ok(())
}

/// One request with INPUT = [[value]].
fn prepare(client: &Client, model: &str, value: i32) -> Result<Prepared, ClientError> {
    let input = Tensor {
        name: "INPUT".into(),
        datatype: DataType::Int32,
        shape: vec![1, 1],
        data: value.to_le_bytes().to_vec(),
    };
    let output = RequestedOutput {
        name: "OUTPUT".into(),
        classification: None,
        shm: None,
    };
    client.prepare(model, "", vec![input], vec![output])
}

/// The `error:` line's text: an unreachable server says so with its
/// address; otherwise what failed and the server's answer.
fn failure(url: &str, what: &str, e: ClientError) -> String {
    if e.is_transport() {
        format!("cannot reach the server at {url}: {}", e.message())
    } else {
        format!("{what} at {url} failed: {e}")
    }
}
