//! Request data for the client commands (`trtis infer`, `trtis perf`):
//! inputs in a model's shape, generated (random or zero, repeatable) or
//! read from perf_analyzer's `--input-data` JSON format, with variable
//! dimensions given as `--shape NAME:d1,d2`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::core::types::{element_count, xorshift64, DataType, Tensor, TensorMetadata};
use crate::server::protocol::kserve_json::{elements_to_bytes, flat_elements};

/// How to fill inputs that no file provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Generate {
    Random,
    Zero,
}

/// `NAME:d1,d2` specs → dims by input name.
pub fn parse_shapes(specs: &[String]) -> Result<BTreeMap<String, Vec<i64>>, String> {
    let mut shapes = BTreeMap::new();
    for spec in specs {
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
    Ok(shapes)
}

/// What the inputs of one request are made of.
pub struct InputSpec<'a> {
    pub batching: bool,
    pub batch: i64,
    pub shapes: &'a BTreeMap<String, Vec<i64>>,
    pub generate: Generate,
    /// One entry of an `--input-data` file, if any.
    pub entry: Option<&'a serde_json::Map<String, Value>>,
}

/// The inputs of one request in the model's order: from the JSON entry
/// where it has them, else generated. `seed` advances, so successive calls
/// give different (but repeatable) data.
pub fn build(
    specs: &[TensorMetadata],
    how: &InputSpec,
    seed: &mut u64,
) -> Result<Vec<Tensor>, String> {
    specs
        .iter()
        .map(|spec| {
            let datatype = DataType::from_name(&spec.datatype).ok_or_else(|| {
                format!(
                    "input '{}' has unknown datatype '{}'",
                    spec.name, spec.datatype
                )
            })?;
            if let Some(entry) = how.entry.and_then(|e| e.get(&spec.name)) {
                return json_input(
                    &spec.name,
                    datatype,
                    entry,
                    spec,
                    how.batching,
                    how.batch,
                    how.shapes,
                );
            }
            let shape = full_shape(spec, how.batching, how.batch, how.shapes)?;
            let n = generated_elements(&spec.name, datatype, &shape)?;
            Ok(Tensor {
                name: spec.name.clone(),
                datatype,
                shape,
                data: generate(datatype, n, how.generate, seed),
            })
        })
        .collect()
}

/// The most bytes one generated input may take (2 GiB, gRPC's and
/// protobuf's own limit on a message): a mistyped `--shape` is refused
/// with a message instead of allocating until memory runs out.
pub const MAX_GENERATED_BYTES: usize = 1 << 31;

/// The elements of a generated input of `shape`, refused when a dimension
/// is negative or the data would exceed `MAX_GENERATED_BYTES` (counted
/// without overflow; a BYTES element as its 4-byte length at least).
fn generated_elements(name: &str, datatype: DataType, shape: &[i64]) -> Result<usize, String> {
    if shape.iter().any(|&d| d < 0) {
        return Err(format!(
            "input '{name}': shape {shape:?} has a negative dimension (give variable dimensions with --shape {name}:d1,d2)"
        ));
    }
    element_count(shape)
        .filter(|&n| {
            n.checked_mul(datatype.size().unwrap_or(4))
                .is_some_and(|bytes| bytes <= MAX_GENERATED_BYTES)
        })
        .ok_or_else(|| {
            format!(
                "input '{name}': shape {shape:?} of {} takes more than {} GiB (check --shape and -b)",
                datatype.name(),
                MAX_GENERATED_BYTES >> 30
            )
        })
}

/// The request shape of an input: the batch size, then its dims with the
/// variable ones from --shape.
pub fn full_shape(
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

/// The entries of a perf_analyzer `--input-data` file (`{"data": [...]}`).
pub fn read_input_data(path: &Path) -> Result<Vec<serde_json::Map<String, Value>>, String> {
    // A regular file only: a FIFO would block until a writer came.
    let text = crate::core::fsutil::read_regular_to_string(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = || {
        format!(
            "{}: expected {{\"data\": [{{\"INPUT\": [...]}}]}}",
            path.display()
        )
    };
    let entries = doc.get("data").and_then(Value::as_array).ok_or_else(bad)?;
    let entries: Vec<serde_json::Map<String, Value>> = entries
        .iter()
        .map(|e| e.as_object().cloned().ok_or_else(bad))
        .collect::<Result<_, _>>()?;
    if entries.is_empty() {
        return Err(bad());
    }
    Ok(entries)
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
    let elements = flat_elements(content);
    let data = elements_to_bytes(datatype, &elements)
        .map_err(|v| format!("input '{name}': cannot read {v} as {}", datatype.name()))?;
    Ok(Tensor {
        name: name.to_string(),
        datatype,
        shape,
        data,
    })
}

/// `n` generated elements (a small xorshift, so runs are repeatable).
pub fn generate(dt: DataType, n: usize, how: Generate, seed: &mut u64) -> Vec<u8> {
    let mut next = || xorshift64(seed);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, datatype: &str, shape: &[i64]) -> TensorMetadata {
        TensorMetadata {
            name: name.to_string(),
            datatype: datatype.to_string(),
            shape: shape.to_vec(),
        }
    }

    #[test]
    fn a_generated_input_is_bounded() {
        let specs = [spec("INPUT0", "FP32", &[-1])];
        let build_with = |dims: &str| {
            let shapes = parse_shapes(&[format!("INPUT0:{dims}")]).unwrap();
            let how = InputSpec {
                batching: false,
                batch: 1,
                shapes: &shapes,
                generate: Generate::Zero,
                entry: None,
            };
            build(&specs, &how, &mut 1)
        };
        assert_eq!(build_with("16").unwrap()[0].data.len(), 64);
        // Over the bound, overflowing, negative: a message, no allocation.
        for dims in [
            "99999999999",
            "4294967296,4294967296",
            "9223372036854775807,2",
        ] {
            let e = build_with(dims).unwrap_err();
            assert!(e.contains("takes more than 2 GiB"), "{dims}: {e}");
        }
        let e = build_with("-4").unwrap_err();
        assert!(e.contains("negative dimension"), "{e}");
        // Just at the bound is accepted (counted, not built here).
        assert!(generated_elements("I", DataType::Fp32, &[1 << 29]).is_ok());
        assert!(generated_elements("I", DataType::Fp32, &[(1 << 29) + 1]).is_err());
    }
}
