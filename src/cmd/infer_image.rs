//! `trtis infer -m MODEL IMAGE|DIR...`: Triton's image_client. Each image
//! is decoded, resized and centre-cropped to the model's image input,
//! scaled (`-s`) and sent in batches of `-b` (the image list repeated to
//! fill the last one); the output's top `-c` classes come back through the
//! classification extension and print as image_client prints them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Value};
use trtis::client::image::{self, ImageInput, Scaling};
use trtis::client::{Client, ClientError, Prepared, Protocol};
use trtis::core::config::ModelConfig;
use trtis::core::types::{InferResponse, ModelMetadata, RequestedOutput, Tensor};
use trtis::perf::report::g6;

/// What image mode needs from the command line.
pub struct ImageArgs<'a> {
    pub model: &'a str,
    pub version: &'a str,
    pub paths: &'a [PathBuf],
    pub scaling: Scaling,
    pub classes: usize,
    pub batch: i64,
    pub async_mode: bool,
    pub streaming: bool,
    pub json: bool,
    pub protocol: Protocol,
    pub url: &'a str,
}

fn error_line(message: impl std::fmt::Display) {
    eprintln!("error: {message}");
}

/// The image files named: files as given, directories as their files in
/// name order. Paths that cannot be listed are reported and skipped.
fn image_files(paths: &[PathBuf], failures: &mut usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            match std::fs::read_dir(p) {
                Ok(entries) => {
                    let mut files: Vec<PathBuf> = entries
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|f| f.is_file())
                        .collect();
                    files.sort();
                    out.extend(files);
                }
                Err(e) => {
                    error_line(format!("{}: {e}", p.display()));
                    *failures += 1;
                }
            }
        } else {
            out.push(p.clone());
        }
    }
    out
}

fn load(path: &Path, input: &ImageInput, scaling: Scaling) -> Result<Vec<u8>, String> {
    // A regular file only: a FIFO would block until a writer came.
    let bytes = trtis::core::fsutil::read_regular(path)
        .map_err(|e| format!("cannot read the file: {e}"))?;
    image::preprocess(&bytes, input, scaling)
}

fn classes_of(response: &InferResponse, output: &str) -> Result<Vec<Vec<image::Class>>, String> {
    let t = response
        .outputs
        .iter()
        .find(|t| t.name == output)
        .ok_or_else(|| format!("the response has no output '{output}'"))?;
    let elements = Tensor::bytes_elements(&t.data)
        .map_err(|_| "the classification output is not BYTES".to_string())?;
    let per_image = t.shape.last().copied().unwrap_or(1).max(1) as usize;
    Ok(elements
        .chunks(per_image)
        .map(|chunk| {
            chunk
                .iter()
                .filter_map(|e| image::parse_class(&String::from_utf8_lossy(e)))
                .collect()
        })
        .collect())
}

pub async fn run(
    args: ImageArgs<'_>,
    client: Client,
    meta: &ModelMetadata,
    config: &ModelConfig,
) -> ExitCode {
    let input = match image::image_input(meta, config) {
        Ok(i) => i,
        Err(m) => {
            error_line(m);
            return ExitCode::from(2);
        }
    };
    let batch = args.batch.max(1) as usize;
    if !input.batching && batch > 1 {
        error_line(format!(
            "model '{}' does not batch (max_batch_size 0): -b must be 1",
            args.model
        ));
        return ExitCode::from(2);
    }
    if args.streaming && args.protocol != Protocol::Grpc {
        error_line("--streaming needs the gRPC protocol (-i grpc)");
        return ExitCode::from(2);
    }
    let mut failures = 0;
    let mut images: Vec<(String, Vec<u8>)> = Vec::new();
    for path in image_files(args.paths, &mut failures) {
        match load(&path, &input, args.scaling) {
            Ok(data) => images.push((path.display().to_string(), data)),
            Err(m) => {
                error_line(format!("{}: {m}", path.display()));
                failures += 1;
            }
        }
    }
    if images.is_empty() {
        error_line("no image to classify");
        return ExitCode::from(1);
    }
    // Batches of `batch`, the list repeated to fill the last one.
    let count = images.len().div_ceil(batch);
    let batches: Vec<Vec<usize>> = (0..count)
        .map(|r| (0..batch).map(|k| (r * batch + k) % images.len()).collect())
        .collect();
    let requests: Vec<Vec<Tensor>> = batches
        .iter()
        .map(|members| {
            let mut shape = input.dims();
            if input.batching {
                shape.insert(0, members.len() as i64);
            }
            let data = members
                .iter()
                .flat_map(|&i| images[i].1.iter().copied())
                .collect();
            vec![Tensor {
                name: input.name.clone(),
                datatype: input.datatype,
                shape,
                data,
            }]
        })
        .collect();
    let outputs = vec![RequestedOutput {
        name: input.output.clone(),
        classification: Some(args.classes.max(1)),
        shm: None,
    }];
    // The v1 client sends its requests one after another.
    let one_by_one = args.streaming || matches!(client, Client::V1(_));
    let results: Vec<Result<InferResponse, ClientError>> = if one_by_one {
        // One gRPC stream; the answers come back in order.
        let mut client = client;
        match client
            .stream_infer_with_outputs(args.model, args.version, requests, outputs)
            .await
        {
            Ok(r) => r,
            Err(e) => vec![Err(e)],
        }
    } else {
        let prepared: Result<Vec<Prepared>, ClientError> = requests
            .into_iter()
            .map(|r| client.prepare(args.model, args.version, r, outputs.clone()))
            .collect();
        let prepared = match prepared {
            Ok(p) => p,
            Err(e) => {
                error_line(e);
                return ExitCode::from(1);
            }
        };
        if args.async_mode {
            let futures = prepared.iter().map(|p| p.infer(None));
            futures_util::future::join_all(futures)
                .await
                .into_iter()
                .map(|r| r.map(|(_, resp)| resp))
                .collect()
        } else {
            let mut out = Vec::new();
            for p in &prepared {
                out.push(p.infer(None).await.map(|(_, resp)| resp));
            }
            out
        }
    };
    let mut doc = Vec::new();
    for (r, (members, result)) in batches.iter().zip(results).enumerate() {
        let response = match result {
            Ok(resp) => resp,
            Err(e) => {
                if e.is_transport() {
                    error_line(format!(
                        "cannot reach a server at {}: {}",
                        args.url,
                        e.message()
                    ));
                } else {
                    error_line(format!("request {r}: {}", e.message()));
                }
                failures += 1;
                continue;
            }
        };
        let classes = match classes_of(&response, &input.output) {
            Ok(c) => c,
            Err(m) => {
                error_line(format!("request {r}: {m}"));
                failures += 1;
                continue;
            }
        };
        if !args.json {
            println!("Request {r}, batch size {}", members.len());
        }
        let mut image_docs = Vec::new();
        for (k, &i) in members.iter().enumerate() {
            let name = &images[i].0;
            let list = classes.get(k).cloned().unwrap_or_default();
            if args.json {
                image_docs.push(json!({
                    "image": name,
                    "classes": list.iter().map(|c| json!({"index": c.index, "label": c.label, "score": c.score})).collect::<Vec<_>>(),
                }));
            } else {
                println!("Image '{name}':");
                for c in &list {
                    if c.label.is_empty() {
                        println!("  {} = {}", c.index, g6(c.score));
                    } else {
                        println!("  {} ({}) = {}", c.index, c.label, g6(c.score));
                    }
                }
            }
        }
        doc.push(json!({"request": r, "batch_size": members.len(), "images": image_docs}));
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&Value::Array(doc)).unwrap_or_default()
        );
    }
    if failures > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
