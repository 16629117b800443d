//! Model warmup (`model_warmup` in the config): each instance runs the
//! configured samples right after it loads, before the model version is
//! READY; a failing sample fails the load with the reason, as in Triton.
//!
//! A sample of `batch_size` N runs as one execution of N batched requests
//! (`[N] + dims` for a batching model; N runs of `dims` otherwise),
//! repeated `count` times (at least once); `batch_size` 0 skips it. Data is
//! zeros, pseudo-random bytes (zeros for BYTES, as Triton does), or a file
//! under `<model>/warmup/`.

use std::path::Path;

use crate::core::backend::{Instance, ListExec};
use crate::core::config::pb::model_warmup::input::InputDataType;
use crate::core::config::pb::ModelWarmup;
use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::types::{DataType, Tensor};

/// One sample's requests, ready to execute.
pub struct Sample {
    pub name: String,
    /// One execution's inputs (config order first).
    pub runs: Vec<Vec<Tensor>>,
    pub count: usize,
}

/// Builds the samples of a config (reading data files under
/// `<model_dir>/warmup/`).
pub fn samples(config: &ModelConfig, model_dir: &Path) -> Result<Vec<Sample>> {
    let mut out = Vec::new();
    for w in &config.model_warmup {
        if w.batch_size == 0 {
            crate::core::logging::verbose(&format!("Skipping batch 0 warmup sample '{}'", w.name));
            continue;
        }
        out.push(sample(config, model_dir, w)?);
    }
    Ok(out)
}

/// The most data one warmup input may ask for (1 GiB).
const MAX_SAMPLE_BYTES: usize = 1 << 30;

fn prefix() -> &'static str {
    "[request id: <id_unknown>] "
}

/// The data of one input of one request.
fn input_data(
    name: &str,
    input: &crate::core::config::pb::model_warmup::Input,
    model_dir: &Path,
    seed: &mut u64,
) -> Result<(DataType, Vec<u8>)> {
    let dt = DataType::from_config(input.data_type).ok_or_else(|| {
        Error::invalid_arg(format!(
            "{}warmup setting expects input '{name}' to have a valid data_type",
            prefix()
        ))
    })?;
    if input.dims.iter().any(|&d| d < 0) {
        return Err(Error::invalid_arg(format!(
            "warmup setting expects all variable-size dimensions are specified for input '{name}'"
        )));
    }
    // BYTES elements are 4-byte lengths: zeros are empty strings.
    let size = crate::core::types::element_count(&input.dims)
        .and_then(|n| n.checked_mul(dt.size().unwrap_or(4)))
        .filter(|&n| n <= MAX_SAMPLE_BYTES)
        .ok_or_else(|| {
            Error::invalid_arg(format!(
                "warmup setting for input '{name}' asks for more than {MAX_SAMPLE_BYTES} bytes (dims {:?})",
                input.dims
            ))
        })?;
    let data = match &input.input_data_type {
        None => {
            return Err(Error::invalid_arg(format!(
                "{}warmup setting expects input '{name}' to have input_data_type set",
                prefix()
            )))
        }
        Some(InputDataType::ZeroData(_)) => vec![0; size],
        Some(InputDataType::RandomData(_)) if dt == DataType::Bytes => vec![0; size],
        Some(InputDataType::RandomData(_)) => {
            let mut data = Vec::with_capacity(size + 8);
            while data.len() < size {
                data.extend_from_slice(&crate::core::types::xorshift64(seed).to_le_bytes());
            }
            data.truncate(size);
            if dt == DataType::Fp32
                || dt == DataType::Fp64
                || dt == DataType::Fp16
                || dt == DataType::Bf16
            {
                // Finite values: random bits would include NaNs and infinities.
                finite(dt, &mut data);
            }
            data
        }
        Some(InputDataType::InputDataFile(file)) => {
            let path = model_dir.join("warmup").join(file);
            let bytes = crate::core::fsutil::read_regular(&path).map_err(|e| {
                Error::internal(format!(
                    "failed to open text file for read {}: {}",
                    path.display(),
                    crate::core::error::os_reason(&e)
                ))
            })?;
            if dt == DataType::Bytes {
                bytes
            } else if bytes.len() < size {
                return Err(Error::invalid_arg(format!(
                    "{}warmup setting expects {size} bytes, but the data provided from {file}only has {} bytes",
                    prefix(),
                    bytes.len()
                )));
            } else {
                bytes[..size].to_vec()
            }
        }
    };
    Ok((dt, data))
}

/// Maps random floating point bits into [-1, 1).
fn finite(dt: DataType, data: &mut [u8]) {
    match dt {
        DataType::Fp32 => {
            for c in data.chunks_exact_mut(4) {
                let bits = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                let v = (bits >> 8) as f32 / (1u32 << 23) as f32 - 1.0;
                c.copy_from_slice(&v.to_le_bytes());
            }
        }
        DataType::Fp64 => {
            for c in data.chunks_exact_mut(8) {
                let bits = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
                let v = (bits >> 11) as f64 / (1u64 << 52) as f64 - 1.0;
                c.copy_from_slice(&v.to_le_bytes());
            }
        }
        // Half precision: clear the top exponent bit, which keeps |v| < 2.
        _ => {
            for c in data.chunks_exact_mut(2) {
                c[1] &= 0b1011_1111;
            }
        }
    }
}

fn sample(config: &ModelConfig, model_dir: &Path, w: &ModelWarmup) -> Result<Sample> {
    let batching = config.max_batch_size > 0;
    let n = w.batch_size as usize;
    // A batching model takes at most max_batch_size; without batching the
    // sample runs n times (bounded, so a typo cannot take the memory).
    let most = if batching {
        config.max_batch_size as usize
    } else {
        1024
    };
    if n > most {
        return Err(Error::invalid_arg(format!(
            "warmup sample '{}' has batch_size {n}; model '{}' takes at most {most}",
            w.name, config.name
        )));
    }
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    // Config inputs first, in config order, then any others.
    let mut names: Vec<&String> = config
        .input
        .iter()
        .filter_map(|i| w.inputs.get_key_value(&i.name).map(|(k, _)| k))
        .collect();
    names.extend(
        w.inputs
            .keys()
            .filter(|k| !config.input.iter().any(|i| &i.name == *k)),
    );
    let mut one = Vec::new();
    for name in names {
        let input = &w.inputs[name];
        let (dt, data) = input_data(name, input, model_dir, &mut seed)?;
        one.push((name.clone(), dt, input.dims.clone(), data));
    }
    let runs = if batching {
        let inputs = one
            .into_iter()
            .map(|(name, datatype, dims, data)| Tensor {
                name,
                datatype,
                shape: std::iter::once(n as i64).chain(dims).collect(),
                data: data.repeat(n),
            })
            .collect();
        vec![inputs]
    } else {
        let inputs: Vec<Tensor> = one
            .into_iter()
            .map(|(name, datatype, dims, data)| Tensor {
                name,
                datatype,
                shape: dims,
                data,
            })
            .collect();
        vec![inputs; n]
    };
    Ok(Sample {
        name: w.name.clone(),
        runs,
        count: w.count.max(1) as usize,
    })
}

/// Runs the samples on a loaded instance; the first failure fails it.
pub fn run(
    config: &ModelConfig,
    instance: &mut Instance,
    instance_name: &str,
    samples: &[Sample],
    sequence: Option<&crate::core::scheduler::SeqSettings>,
    io: &crate::core::batch_io::BatchIo,
) -> Result<()> {
    let outputs: Vec<String> = config.output.iter().map(|o| o.name.clone()).collect();
    for s in samples {
        for i in 0..s.count {
            crate::core::logging::verbose(&format!(
                "model '{}' instance {instance_name} is running warmup sample '{}' for iteration {}",
                config.name,
                s.name,
                i + 1
            ));
            for inputs in &s.runs {
                // A sequence model's sample runs as a sequence of one
                // request per row: the control and state inputs the sample
                // gives (as Triton's samples do) are kept, the others added.
                let (supplied, inputs): (Vec<Tensor>, Vec<Tensor>) = match sequence {
                    Some(seq) => {
                        let names: Vec<&str> = seq.supplied_inputs().collect();
                        inputs
                            .iter()
                            .cloned()
                            .partition(|t| names.contains(&t.name.as_str()))
                    }
                    None => (Vec::new(), inputs.clone()),
                };
                let checked =
                    crate::core::request::check_inputs(config, inputs).map(|mut inputs| {
                        if let Some(seq) = sequence {
                            let rows = inputs
                                .first()
                                .and_then(|t| t.shape.first())
                                .copied()
                                .unwrap_or(1)
                                .max(1) as usize;
                            for t in seq.standalone_inputs(rows) {
                                match supplied.iter().find(|s| s.name == t.name) {
                                    Some(given) => inputs.push(given.clone()),
                                    None => inputs.push(t),
                                }
                            }
                        }
                        inputs
                    });
                let result = checked.and_then(|inputs| match instance {
                    Instance::Lists(lists) => run_request(config, lists.as_mut(), inputs, &outputs),
                    // A sample is one request, as the model takes it alone.
                    Instance::Batches(batches) => io
                        .model_inputs(vec![inputs])
                        .and_then(|inputs| batches.execute(inputs, &outputs))
                        .map(drop),
                });
                if let Err(e) = result {
                    return Err(Error::invalid_arg(format!(
                        "failed to run warmup sample '{}': {}; ",
                        s.name, e.message
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Runs one sample as a request of its own (a backend that takes requests
/// apart) and waits for its answers: one, or a decoupled model's stream
/// until its final flag. The first error fails it.
fn run_request(
    config: &ModelConfig,
    instance: &mut dyn ListExec,
    inputs: Vec<Tensor>,
    outputs: &[String],
) -> Result<()> {
    use crate::core::responder::{Responder, Sink};
    let decoupled = config
        .model_transaction_policy
        .as_ref()
        .is_some_and(|p| p.decoupled);
    // Read once the execution returned: the stream never makes it wait.
    let (tx, mut rx) = crate::core::responder::stream_channel_within(usize::MAX);
    let sink = if decoupled {
        Sink::Stream(tx)
    } else {
        Sink::Once(Box::new(move |done| {
            let _ = tx.send(done);
        }))
    };
    let respond = Responder::new(sink, std::time::Instant::now());
    instance.execute_requests(vec![crate::core::responder::BackendRequest {
        inputs,
        outputs: outputs.to_vec(),
        info: Default::default(),
        respond,
        reschedule: None,
    }])?;
    while let Some(done) = rx.blocking_recv() {
        done.result?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(warmup: &str) -> ModelConfig {
        let text = format!(
            r#"name: "m" backend: "identity" max_batch_size: 4
            input [{{ name: "IN" data_type: TYPE_INT32 dims: [2] }}]
            output [{{ name: "OUT" data_type: TYPE_INT32 dims: [2] }}]
            model_warmup [{warmup}]"#
        );
        crate::core::config::parse_config(text.as_bytes())
            .expect("parses")
            .config
    }

    #[test]
    fn a_sample_becomes_one_batched_execution_repeated_count_times() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("warmup")).unwrap();
        std::fs::write(dir.path().join("warmup/in.bin"), [1u8, 0, 0, 0, 2, 0, 0, 0]).unwrap();
        let c = config(
            r#"{ name: "z" batch_size: 3 count: 2 inputs { key: "IN" value { data_type: TYPE_INT32 dims: [2] input_data_file: "in.bin" } } },
               { name: "skipped" batch_size: 0 inputs { key: "IN" value { data_type: TYPE_INT32 dims: [2] zero_data: true } } }"#,
        );
        let s = samples(&c, dir.path()).expect("builds");
        assert_eq!(s.len(), 1, "batch_size 0 is skipped");
        assert_eq!(s[0].count, 2);
        assert_eq!(s[0].runs.len(), 1);
        let t = &s[0].runs[0][0];
        assert_eq!(t.shape, vec![3, 2]);
        assert_eq!(t.data, [1u8, 0, 0, 0, 2, 0, 0, 0].repeat(3));
    }

    #[test]
    fn data_file_errors_read_as_tritons() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("warmup")).unwrap();
        std::fs::write(dir.path().join("warmup/short.bin"), [0u8; 4]).unwrap();
        let c = config(
            r#"{ name: "s" batch_size: 1 inputs { key: "IN" value { data_type: TYPE_INT32 dims: [2] input_data_file: "short.bin" } } }"#,
        );
        let e = samples(&c, dir.path()).err().expect("too short");
        assert_eq!(
            e.message,
            "[request id: <id_unknown>] warmup setting expects 8 bytes, but the data provided from short.binonly has 4 bytes"
        );
        let c = config(
            r#"{ name: "s" batch_size: 1 inputs { key: "IN" value { data_type: TYPE_INT32 dims: [2] input_data_file: "none.bin" } } }"#,
        );
        let e = samples(&c, dir.path()).err().expect("missing");
        assert!(
            e.message.starts_with("failed to open text file for read ")
                && e.message
                    .ends_with("warmup/none.bin: No such file or directory"),
            "{}",
            e.message
        );
    }

    #[test]
    fn oversized_samples_are_refused_before_allocating() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(
            r#"{ name: "huge" batch_size: 1 inputs { key: "IN" value { data_type: TYPE_INT32 dims: [4294967296, 4294967296] zero_data: true } } }"#,
        );
        let e = samples(&c, dir.path()).err().expect("refused");
        assert!(
            e.message.contains("more than 1073741824 bytes"),
            "{}",
            e.message
        );
        let c = config(
            r#"{ name: "big_batch" batch_size: 5 inputs { key: "IN" value { data_type: TYPE_INT32 dims: [2] zero_data: true } } }"#,
        );
        let e = samples(&c, dir.path()).err().expect("refused");
        assert_eq!(
            e.message,
            "warmup sample 'big_batch' has batch_size 5; model 'm' takes at most 4"
        );
    }

    #[test]
    fn random_floats_are_finite() {
        let mut data: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        finite(DataType::Fp32, &mut data);
        assert!(data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .all(|v| (-1.0..1.0).contains(&v)));
    }
}
