//! Triton's classic `simple_client`, with trtis's client library: sends two
//! INT32 vectors of 16 to the `simple` model (`OUTPUT0 = INPUT0 + INPUT1`,
//! `OUTPUT1 = INPUT0 - INPUT1`), prints each sum and difference as Triton's
//! example does and checks them.
//!
//! Start a server on the example model repository, in one terminal:
//!
//! ```text
//! ./scripts/examples.sh
//! # or: cargo run --release -- serve --model-store examples/model_repository
//! ```
//!
//! then, in another:
//!
//! ```text
//! cargo run --example simple_client              # HTTP, localhost:8000
//! cargo run --example simple_client -- -i grpc   # gRPC, localhost:8001
//! cargo run --example simple_client -- -u localhost:18700
//! ```
//!
//! The output is 32 lines, `0 + 1 = 1`, `0 - 1 = -1`, `1 + 1 = 2`, ... On a
//! wrong result, or when the server cannot be reached, it prints an
//! `error: ...` line and exits with status 1.

use clap::{Parser, ValueEnum};
use trtis::client::{Client, ClientError, Protocol};
use trtis::core::types::{DataType, RequestedOutput, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProtocolArg {
    Http,
    Grpc,
}

/// Triton's simple_client: adds and subtracts two INT32 vectors on the
/// `simple` model.
#[derive(Debug, Parser)]
struct Args {
    /// Server address, `host:port` (default localhost:8000 for HTTP,
    /// localhost:8001 for gRPC).
    #[arg(short = 'u', long = "url")]
    url: Option<String>,

    /// Protocol.
    #[arg(short = 'i', long = "protocol", value_enum, default_value_t = ProtocolArg::Http)]
    protocol: ProtocolArg,

    /// Model name.
    #[arg(short = 'm', long = "model", default_value = "simple")]
    model: String,
}

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

async fn run(args: &Args) -> Result<(), String> {
    let (protocol, default_url) = match args.protocol {
        ProtocolArg::Http => (Protocol::Http, "localhost:8000"),
        ProtocolArg::Grpc => (Protocol::Grpc, "localhost:8001"),
    };
    let url = args.url.as_deref().unwrap_or(default_url);
    let mut client = Client::connect(url, protocol)
        .await
        .map_err(|e| failure(url, "connecting", e))?;

    // INPUT0 = 0, 1, ..., 15 and INPUT1 = 1, 1, ..., 1, a batch of one.
    let input0: Vec<i32> = (0..16).collect();
    let input1: Vec<i32> = vec![1; 16];
    let inputs = vec![int32("INPUT0", &input0), int32("INPUT1", &input1)];
    let outputs = ["OUTPUT0", "OUTPUT1"]
        .map(|name| RequestedOutput {
            name: name.to_string(),
            classification: None,
            shm: None,
        })
        .to_vec();
    let response = client
        .infer(&args.model, "", inputs, outputs)
        .await
        .map_err(|e| failure(url, &format!("inference on '{}'", args.model), e))?;

    let output = |name: &str| -> Result<Vec<i32>, String> {
        let t = response
            .outputs
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| format!("the response has no {name}"))?;
        if t.datatype != DataType::Int32 || t.shape != [1, 16] || t.data.len() != 16 * 4 {
            return Err(format!(
                "{name} is {} {:?} ({} bytes), expected INT32 [1, 16]",
                t.datatype.name(),
                t.shape,
                t.data.len()
            ));
        }
        Ok(t.data
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    };
    let sum = output("OUTPUT0")?;
    let diff = output("OUTPUT1")?;

    for i in 0..16 {
        let (a, b) = (input0[i], input1[i]);
        println!("{a} + {b} = {}", sum[i]);
        println!("{a} - {b} = {}", diff[i]);
        if sum[i] != a + b {
            return Err(format!("incorrect sum: {a} + {b} = {}", sum[i]));
        }
        if diff[i] != a - b {
            return Err(format!("incorrect difference: {a} - {b} = {}", diff[i]));
        }
    }
    Ok(())
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

/// An INT32 tensor of shape [1, n]: little-endian bytes.
fn int32(name: &str, values: &[i32]) -> Tensor {
    Tensor {
        name: name.to_string(),
        datatype: DataType::Int32,
        shape: vec![1, values.len() as i64],
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}
