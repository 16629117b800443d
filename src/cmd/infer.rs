//! `trtis infer -m MODEL`: one inference against any Triton-protocol server.
//! Inputs come from a perf_analyzer-style JSON file (`--input-data`), from
//! `.npy` files (`--input NAME=file.npy`), or are generated (random or zero)
//! in the model's shape; outputs are printed, or written with
//! `--output-dir`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Value};
use trtis::client::ClientError;
use trtis::core::protocol::kserve_json;
use trtis::core::types::{
    element_count, DataType, InferResponse, RequestedOutput, Tensor, TensorMetadata,
};

use super::client_args::{runtime, ServerArgs};
use super::npy;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Generate {
    Random,
    Zero,
}

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

    /// Return the top N classes of each output instead of the tensor.
    #[arg(long = "classification", value_name = "N")]
    classification: Option<usize>,

    /// Write each output to DIR (`<name>.npy`, or `<name>.json` for BYTES).
    #[arg(long = "output-dir", value_name = "DIR")]
    output_dir: Option<PathBuf>,

    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> ExitCode {
    runtime().block_on(infer(args))
}

fn fail(message: impl std::fmt::Display, code: u8) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(code)
}

fn server_error(url: &str, e: ClientError) -> ExitCode {
    if e.is_transport() {
        fail(
            format!("cannot reach a server at {url}: {}", e.message()),
            2,
        )
    } else {
        fail(e.message(), 1)
    }
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
    let batching = match client.model_config(&args.model, &args.version).await {
        Ok(c) => c.max_batch_size > 0,
        Err(e) => return server_error(&url, e),
    };
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
    let response = match client
        .infer(&args.model, &args.version, inputs, outputs)
        .await
    {
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

/// The inputs, from files, JSON or generated, in the model's order.
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
    let mut shapes: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for spec in &args.shapes {
        let (name, dims) = spec
            .split_once(':')
            .ok_or_else(|| format!("--shape expects NAME:d1,d2, got '{spec}'"))?;
        let dims = dims
            .split(',')
            .map(|d| {
                d.trim()
                    .parse::<i64>()
                    .map_err(|_| format!("bad dimension in --shape '{spec}'"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        shapes.insert(name.to_string(), dims);
    }
    let json_entry = match &args.input_data {
        Some(path) => Some(read_input_data(path)?),
        None => None,
    };
    let mut seed = 0x9e3779b97f4a7c15u64;
    specs
        .iter()
        .map(|spec| {
            let datatype = DataType::from_name(&spec.datatype).ok_or_else(|| {
                format!(
                    "input '{}' has unknown datatype '{}'",
                    spec.name, spec.datatype
                )
            })?;
            if let Some(path) = from_npy.get(&spec.name) {
                let (dt, shape, data) = npy::read(path)?;
                if dt != datatype {
                    return Err(format!(
                        "{}: holds {} data, input '{}' is {}",
                        path.display(),
                        dt.name(),
                        spec.name,
                        datatype.name()
                    ));
                }
                return Ok(Tensor {
                    name: spec.name.clone(),
                    datatype,
                    shape,
                    data,
                });
            }
            if let Some(entry) = json_entry.as_ref().and_then(|e| e.get(&spec.name)) {
                return json_input(
                    &spec.name, datatype, entry, spec, batching, args.batch, &shapes,
                );
            }
            let shape = full_shape(spec, batching, args.batch, &shapes)?;
            let n = element_count(&shape).ok_or("shape too large")?;
            Ok(Tensor {
                name: spec.name.clone(),
                datatype,
                shape,
                data: generate(datatype, n, args.generate, &mut seed),
            })
        })
        .collect()
}

/// The request shape of an input: the batch size, then its dims with the
/// variable ones from --shape.
fn full_shape(
    spec: &TensorMetadata,
    batching: bool,
    batch: i64,
    shapes: &BTreeMap<String, Vec<i64>>,
) -> Result<Vec<i64>, String> {
    let dims: Vec<i64> = if batching {
        spec.shape[1..].to_vec()
    } else {
        spec.shape.clone()
    };
    let dims = match shapes.get(&spec.name) {
        Some(given) => given.clone(),
        None if dims.contains(&-1) => {
            return Err(format!(
                "input '{}' has variable dimensions {:?}: give them with --shape {}:d1,d2",
                spec.name, dims, spec.name
            ))
        }
        None => dims,
    };
    Ok(if batching {
        std::iter::once(batch).chain(dims).collect()
    } else {
        dims
    })
}

/// The first entry of a perf_analyzer `--input-data` file.
fn read_input_data(path: &Path) -> Result<serde_json::Map<String, Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    doc.get("data")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_object)
        .cloned()
        .ok_or_else(|| {
            format!(
                "{}: expected {{\"data\": [{{\"INPUT\": [...]}}]}}",
                path.display()
            )
        })
}

/// One input from the JSON file: a flat list, or `{"content": [...], "shape": [...]}`.
fn json_input(
    name: &str,
    datatype: DataType,
    entry: &Value,
    spec: &TensorMetadata,
    batching: bool,
    batch: i64,
    shapes: &BTreeMap<String, Vec<i64>>,
) -> Result<Tensor, String> {
    let (content, shape) = match entry {
        Value::Object(o) => {
            let content = o
                .get("content")
                .ok_or_else(|| format!("input '{name}': expected \"content\""))?;
            let shape = match o.get("shape").and_then(Value::as_array) {
                Some(s) => {
                    let dims: Vec<i64> = s.iter().filter_map(Value::as_i64).collect();
                    if batching {
                        std::iter::once(batch).chain(dims).collect()
                    } else {
                        dims
                    }
                }
                None => full_shape(spec, batching, batch, shapes)?,
            };
            (content, shape)
        }
        other => (other, full_shape(spec, batching, batch, shapes)?),
    };
    let elements = kserve_json::flat_elements(content);
    let data = kserve_json::elements_to_bytes(datatype, &elements)
        .map_err(|v| format!("input '{name}': cannot read {v} as {}", datatype.name()))?;
    Ok(Tensor {
        name: name.to_string(),
        datatype,
        shape,
        data,
    })
}

/// `n` generated elements (a small xorshift, so runs are repeatable).
fn generate(dt: DataType, n: usize, how: Generate, seed: &mut u64) -> Vec<u8> {
    let mut next = || {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    };
    let zero = how == Generate::Zero;
    match dt {
        DataType::Bytes => {
            let elements: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    if zero {
                        Vec::new()
                    } else {
                        format!("{}", next() % 1000).into_bytes()
                    }
                })
                .collect();
            Tensor::serialize_bytes(elements.iter().map(|e| e.as_slice()))
        }
        DataType::Bool => (0..n)
            .map(|_| if zero { 0 } else { (next() & 1) as u8 })
            .collect(),
        DataType::Fp32 => (0..n)
            .flat_map(|_| {
                (if zero {
                    0.0f32
                } else {
                    (next() % 2000) as f32 / 1000.0 - 1.0
                })
                .to_le_bytes()
            })
            .collect(),
        DataType::Fp64 => (0..n)
            .flat_map(|_| {
                (if zero {
                    0.0f64
                } else {
                    (next() % 2000) as f64 / 1000.0 - 1.0
                })
                .to_le_bytes()
            })
            .collect(),
        DataType::Fp16 => (0..n)
            .flat_map(|_| {
                half::f16::from_f32(if zero {
                    0.0
                } else {
                    (next() % 2000) as f32 / 1000.0 - 1.0
                })
                .to_le_bytes()
            })
            .collect(),
        DataType::Bf16 => (0..n)
            .flat_map(|_| {
                half::bf16::from_f32(if zero {
                    0.0
                } else {
                    (next() % 2000) as f32 / 1000.0 - 1.0
                })
                .to_le_bytes()
            })
            .collect(),
        other => {
            let size = other.size().unwrap_or(1);
            (0..n)
                .flat_map(|_| {
                    let v = if zero { 0 } else { next() % 100 };
                    v.to_le_bytes()[..size].to_vec()
                })
                .collect()
        }
    }
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
