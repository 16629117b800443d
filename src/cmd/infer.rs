//! `trtis infer -m MODEL`: one inference against any Triton-protocol server;
//! with image files (`trtis infer -m MODEL IMAGE|DIR...`), Triton's
//! image_client (`infer_image`).
//! Inputs come from a perf_analyzer-style JSON file (`--input-data`), from
//! `.npy` files (`--input NAME=file.npy`), or are generated (random or zero)
//! in the model's shape; outputs are printed, or written with
//! `--output-dir`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Value};
use trtis::client::image::Scaling;
use trtis::client::inputs::{self, Generate};
use trtis::client::SeqFlags;
use trtis::core::types::{
    element_count, DataType, InferResponse, RequestedOutput, Tensor, TensorMetadata,
};
use trtis::server::protocol::kserve_json;

use super::client_args::{fail, server_error};
use super::client_args::{runtime, ServerArgs};
use super::infer_image::ImageArgs;
use super::npy;

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

    /// An input from a .npy file: NAME=PATH (repeatable).
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    inputs: Vec<String>,

    /// Inputs from a JSON file in perf_analyzer's --input-data format (the
    /// first entry of "data" is used).
    #[arg(long = "input-data", value_name = "FILE.json")]
    input_data: Option<PathBuf>,

    /// Data for inputs given no other way.
    #[arg(long = "data", value_enum, default_value_t = Generate::Random)]
    generate: Generate,

    /// The shape of a variable-size input: NAME:d1,d2 (without the batch
    /// dimension; repeatable).
    #[arg(long = "shape", value_name = "NAME:DIMS")]
    shapes: Vec<String>,

    /// Batch size for generated inputs of a batching model.
    #[arg(short = 'b', long = "batch-size", default_value_t = 1)]
    batch: i64,

    /// Return the top N classes of each output instead of the tensor
    /// (image mode: default 1).
    #[arg(short = 'c', long = "classification", value_name = "N")]
    classification: Option<usize>,

    /// Images to classify (files, or directories of them): image_client
    /// mode.
    #[arg(value_name = "IMAGE|DIR")]
    images: Vec<PathBuf>,

    /// Image scaling: NONE, INCEPTION (x/127.5 - 1) or VGG (minus the
    /// channel means).
    #[arg(short = 's', long = "scaling", value_enum, default_value_t = Scaling::None)]
    scaling: Scaling,

    /// Image mode: send every request at once.
    #[arg(short = 'a', long = "async")]
    async_mode: bool,

    /// Image mode: send the requests on one gRPC stream.
    #[arg(long)]
    streaming: bool,

    /// Write each output to DIR (`<name>.npy`, or `<name>.json` for BYTES).
    #[arg(long = "output-dir", value_name = "DIR")]
    output_dir: Option<PathBuf>,

    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,

    /// Send the request as part of this sequence (a sequence model's
    /// correlation id; the server keeps the sequence's state between runs).
    #[arg(long = "sequence-id", value_name = "ID")]
    sequence_id: Option<u64>,

    /// Mark the request as the first of its sequence (with --sequence-id).
    #[arg(long = "sequence-start", requires = "sequence_id")]
    sequence_start: bool,

    /// Mark the request as the last of its sequence (with --sequence-id).
    #[arg(long = "sequence-end", requires = "sequence_id")]
    sequence_end: bool,
}

pub fn run(args: Args) -> ExitCode {
    runtime().block_on(infer(args))
}

async fn infer(args: Args) -> ExitCode {
    let url = args.server.url();
    let mut client = match args.server.connect().await {
        Ok(c) => c,
        Err(e) => return server_error(&url, e),
    };
    let meta = match client.model_metadata(&args.model, &args.version).await {
        Ok(m) => m,
        Err(e) => return server_error(&url, e),
    };
    let config = match client.model_config(&args.model, &args.version).await {
        Ok(c) => c,
        Err(e) => return server_error(&url, e),
    };
    if !args.images.is_empty() {
        let image_args = ImageArgs {
            model: &args.model,
            version: &args.version,
            paths: &args.images,
            scaling: args.scaling,
            classes: args.classification.unwrap_or(1),
            batch: args.batch,
            async_mode: args.async_mode,
            streaming: args.streaming,
            json: args.json,
            protocol: args.server.protocol(),
            url: &url,
        };
        return super::infer_image::run(image_args, client, &meta, &config).await;
    }
    let batching = config.max_batch_size > 0;
    let inputs = match build_inputs(&args, &meta.inputs, batching) {
        Ok(i) => i,
        Err(message) => return fail(message, 2),
    };
    let outputs: Vec<RequestedOutput> = match args.classification {
        Some(n) => meta
            .outputs
            .iter()
            .map(|o| RequestedOutput {
                name: o.name.clone(),
                classification: Some(n),
                shm: None,
            })
            .collect(),
        None => Vec::new(),
    };
    let sent = match args.sequence_id {
        None => {
            client
                .infer(&args.model, &args.version, inputs, outputs)
                .await
        }
        Some(id) => {
            let seq = SeqFlags {
                id,
                start: args.sequence_start,
                end: args.sequence_end,
            };
            client
                .infer_in_sequence(&args.model, &args.version, inputs, outputs, seq)
                .await
        }
    };
    let response = match sent {
        Ok(r) => r,
        Err(e) => return server_error(&url, e),
    };
    if let Some(dir) = &args.output_dir {
        if let Err(e) = write_outputs(dir, &response) {
            return fail(format!("{}: {e}", dir.display()), 1);
        }
    }
    if args.json {
        let outputs: Vec<Value> = response
            .outputs
            .iter()
            .map(|t| json!({"name": t.name, "datatype": t.datatype.name(), "shape": t.shape, "data": values(t, usize::MAX)}))
            .collect();
        let doc = json!({"model_name": response.model_name, "model_version": response.model_version, "outputs": outputs});
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        println!(
            "model {} version {}",
            response.model_name, response.model_version
        );
        for t in &response.outputs {
            let v = values(t, 16);
            let total = element_count(&t.shape).unwrap_or(0);
            let more = if total > 16 {
                format!(" ... ({total} values)")
            } else {
                String::new()
            };
            let shown: Vec<String> = v.iter().map(|x| x.to_string()).collect();
            println!(
                "{} {} {:?}: [{}]{more}",
                t.name,
                t.datatype.name(),
                t.shape,
                shown.join(", ")
            );
        }
    }
    ExitCode::SUCCESS
}

/// The inputs, from .npy files, JSON or generated, in the model's order.
fn build_inputs(
    args: &Args,
    specs: &[TensorMetadata],
    batching: bool,
) -> Result<Vec<Tensor>, String> {
    let mut from_npy: BTreeMap<String, PathBuf> = BTreeMap::new();
    for spec in &args.inputs {
        let (name, path) = spec
            .split_once('=')
            .ok_or_else(|| format!("--input expects NAME=FILE.npy, got '{spec}'"))?;
        if !specs.iter().any(|s| s.name == name) {
            return Err(format!("model '{}' has no input '{name}'", args.model));
        }
        from_npy.insert(name.to_string(), PathBuf::from(path));
    }
    let shapes = inputs::parse_shapes(&args.shapes)?;
    let entries = match &args.input_data {
        Some(path) => inputs::read_input_data(path)?,
        None => Vec::new(),
    };
    let rest: Vec<TensorMetadata> = specs
        .iter()
        .filter(|s| !from_npy.contains_key(&s.name))
        .cloned()
        .collect();
    let how = inputs::InputSpec {
        batching,
        batch: args.batch,
        shapes: &shapes,
        generate: args.generate,
        entry: entries.first(),
    };
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut generated = inputs::build(&rest, &how, &mut seed)?.into_iter();
    specs
        .iter()
        .map(|spec| match from_npy.get(&spec.name) {
            Some(path) => {
                let (dt, shape, data) = npy::read(path)?;
                if dt.name() != spec.datatype {
                    return Err(format!(
                        "{}: holds {} data, input '{}' is {}",
                        path.display(),
                        dt.name(),
                        spec.name,
                        spec.datatype
                    ));
                }
                Ok(Tensor {
                    name: spec.name.clone(),
                    datatype: dt,
                    shape,
                    data,
                })
            }
            None => generated
                .next()
                .ok_or_else(|| "internal: an input was not generated".to_string()),
        })
        .collect()
}

/// A tensor's elements as JSON values (the first `limit`).
fn values(t: &Tensor, limit: usize) -> Vec<Value> {
    match kserve_json::json_values(t) {
        Ok(Value::Array(items)) => items.into_iter().take(limit).collect(),
        _ => Vec::new(),
    }
}

fn write_outputs(dir: &Path, response: &InferResponse) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for t in &response.outputs {
        if t.datatype == DataType::Bytes {
            let strings = values(t, usize::MAX);
            std::fs::write(
                dir.join(format!("{}.json", t.name)),
                serde_json::to_vec(&strings)?,
            )?;
        } else {
            npy::write(&dir.join(format!("{}.npy", t.name)), t)?;
        }
    }
    Ok(())
}
