//! Image classification through the example ensemble, with trtis's client
//! library: the client only decodes, resizes and centre-crops the image to
//! 224x224 RGB pixels (UINT8, HWC) and sends them to
//! `efficientnet_ensemble`; the server scales them (`preprocess_inception`,
//! an ONNX model) and classifies them (`efficientnet_lite0`) in one request,
//! and returns the top classes (the classification extension).
//!
//! With the example server running (`./scripts/examples.sh`):
//!
//! ```text
//! cargo run --example ensemble_client -- examples/images/coffee.jpg
//! cargo run --example ensemble_client -- -i grpc -c 3 examples/images/*.jpg
//! ```
//!
//! It prints, per image, `<file>: <score> (<index>) <label>` for each of the
//! top classes; an unreadable image or an unreachable server prints an
//! `error: ...` line and exits with status 1.

use clap::{Parser, ValueEnum};
use trtis::client::image::{decode, parse_class, resize_crop};
use trtis::client::{Client, ClientError, Protocol};
use trtis::core::types::{DataType, RequestedOutput, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProtocolArg {
    Http,
    Grpc,
}

/// Classifies images with the preprocessing + classifier ensemble.
#[derive(Debug, Parser)]
struct Args {
    /// Server address, `host:port` (default localhost:8000 for HTTP,
    /// localhost:8001 for gRPC).
    #[arg(short = 'u', long = "url")]
    url: Option<String>,

    /// Protocol.
    #[arg(short = 'i', long = "protocol", value_enum, default_value_t = ProtocolArg::Http)]
    protocol: ProtocolArg,

    /// The ensemble.
    #[arg(short = 'm', long = "model", default_value = "efficientnet_ensemble")]
    model: String,

    /// Top classes to print per image.
    #[arg(short = 'c', long = "classes", default_value_t = 1)]
    classes: usize,

    /// JPEG or PNG images.
    #[arg(required = true)]
    images: Vec<std::path::PathBuf>,
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
    for path in &args.images {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let image = decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let pixels = Tensor {
            name: "IMAGE".into(),
            datatype: DataType::Uint8,
            shape: vec![1, 224, 224, 3],
            data: resize_crop(&image, 3, 224, 224),
        };
        let output = RequestedOutput {
            name: "CLASSES".into(),
            classification: Some(args.classes.max(1)),
            shm: None,
        };
        let response = client
            .infer(&args.model, "", vec![pixels], vec![output])
            .await
            .map_err(|e| failure(url, &format!("inference on '{}'", args.model), e))?;
        let classes = response
            .outputs
            .first()
            .ok_or("the response has no output")?;
        let entries = Tensor::bytes_elements(&classes.data).map_err(|e| e.message)?;
        for entry in entries {
            let text = String::from_utf8_lossy(entry);
            let class = parse_class(&text).ok_or_else(|| format!("not a class: '{text}'"))?;
            println!(
                "{}: {:.4} ({}) {}",
                path.display(),
                class.score,
                class.index,
                class.label
            );
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
