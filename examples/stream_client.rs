//! Several inferences on one gRPC bidirectional stream
//! (`ModelStreamInfer`), without sequences: request `i` sends the `simple`
//! model `INPUT0 = 16*i, 16*i + 1, ..., 16*i + 15` and `INPUT1 = 1, ..., 1`;
//! the server runs them concurrently and answers in request order. Prints
//! the first four elements of each response's `OUTPUT0` (sum) and `OUTPUT1`
//! (difference) and checks all of them.
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
//! cargo run --example stream_client              # gRPC, localhost:8001, 4 requests
//! cargo run --example stream_client -- -n 8 -u localhost:18701
//! ```
//!
//! On a wrong or missing response, or when the server cannot be reached, it
//! prints an `error: ...` line and exits with status 1.

use clap::Parser;
use trtis::client::{Client, ClientError, Protocol};
use trtis::core::types::{DataType, Tensor};

/// Sends N requests to the `simple` model on one gRPC stream.
#[derive(Debug, Parser)]
struct Args {
    /// gRPC server address, `host:port`.
    #[arg(short = 'u', long = "url", default_value = "localhost:8001")]
    url: String,

    /// Number of requests.
    #[arg(short = 'n', long = "requests", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..))]
    requests: u32,

    /// Model name.
    #[arg(short = 'm', long = "model", default_value = "simple")]
    model: String,
}

const LEN: usize = 16;

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
    let url = &args.url;
    let mut client = Client::connect(url, Protocol::Grpc)
        .await
        .map_err(|e| failure(url, "connecting", e))?;

    let n = args.requests as usize;
    let input0 = |i: usize| -> Vec<i32> { (0..LEN).map(|k| (LEN * i + k) as i32).collect() };
    let input1 = vec![1i32; LEN];
    let requests: Vec<Vec<Tensor>> = (0..n)
        .map(|i| vec![int32("INPUT0", &input0(i)), int32("INPUT1", &input1)])
        .collect();
    let responses = client
        .stream_infer(&args.model, requests)
        .await
        .map_err(|e| failure(url, &format!("streaming to '{}'", args.model), e))?;
    if responses.len() != n {
        return Err(format!(
            "sent {n} requests, received {} responses",
            responses.len()
        ));
    }

    for (i, response) in responses.into_iter().enumerate() {
        let response = response.map_err(|e| format!("response {i}: {e}"))?;
        if response.id != i.to_string() {
            return Err(format!(
                "response {i} has id '{}', expected '{i}'",
                response.id
            ));
        }
        let output = |name: &str| -> Result<Vec<i32>, String> {
            let t = response
                .outputs
                .iter()
                .find(|t| t.name == name)
                .ok_or_else(|| format!("response {i} has no {name}"))?;
            if t.datatype != DataType::Int32
                || t.shape != [1, LEN as i64]
                || t.data.len() != LEN * 4
            {
                return Err(format!(
                    "response {i}: {name} is {} {:?} ({} bytes), expected INT32 [1, {LEN}]",
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
        println!(
            "response {i}: OUTPUT0[0..4] = {:?}  OUTPUT1[0..4] = {:?}",
            &sum[..4],
            &diff[..4]
        );
        let a = input0(i);
        for k in 0..LEN {
            let (x, y) = (a[k], input1[k]);
            if sum[k] != x + y || diff[k] != x - y {
                return Err(format!(
                    "response {i}, element {k}: {x} + {y} = {}, {x} - {y} = {}",
                    sum[k], diff[k]
                ));
            }
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
