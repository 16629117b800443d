//! Ragged batching's model-side tensors: `batch_input` (tensors the server
//! makes from the batch it formed, such as each request's element count)
//! and `batch_output` (`BATCH_SCATTER_WITH_INPUT_SHAPE`: an output split
//! among the requests by the shape of one of their inputs), and the
//! flattening of ragged inputs, as Triton's framework backends present
//! them to a model:
//!
//! - an input with `allow_ragged_batch` reaches the model as one dimension
//!   of all its elements, the requests' data back to back, whatever the
//!   number of requests (one request `[1, 5]` becomes `[5]`);
//! - a request's element count is the product of its source input's whole
//!   shape, batch dimension included; the counting kinds give one entry per
//!   request (N requests): `BATCH_ELEMENT_COUNT` `[N]`,
//!   `BATCH_ACCUMULATED_ELEMENT_COUNT` `[N]` (running sums),
//!   `..._WITH_ZERO` `[N + 1]` (0 first), `BATCH_MAX_ELEMENT_COUNT_AS_SHAPE`
//!   `[max count]` (only the shape carries meaning; zeros here);
//!   `BATCH_ITEM_SHAPE` gives one row per batch item, the source shape
//!   without its batch dimension (`[items, rank - 1]`), and
//!   `BATCH_ITEM_SHAPE_FLATTEN` the same flattened; values are INT32 or
//!   FP32 as `data_type` says, and no batch dimension is added;
//! - a scattered output gives each request, in order, the next elements of
//!   the model's output, shaped `[-1] + dims` with every -1 at index k taken
//!   from the request's source input shape at index k.
//!
//! Pure: the schedulers call it with the requests of a batch.

use crate::core::config::pb::{batch_input::Kind, DataType as ConfigType, ModelConfig};
use crate::core::error::{Error, Result};
use crate::core::types::{DataType, Tensor};

#[derive(Debug, Clone, PartialEq, Eq)]
struct BatchInputSpec {
    kind: Kind,
    /// Names the model gets the tensor under (each the same tensor).
    targets: Vec<String>,
    fp32: bool,
    /// Index of the source input among the config's inputs.
    source: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ScatterSpec {
    output: String,
    source: usize,
    /// `[-1]` (batching models) then the output's dims (or reshape).
    template: Vec<i64>,
}

/// A model's batch inputs, scattered outputs and ragged inputs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchIo {
    inputs: Vec<BatchInputSpec>,
    scatter: Vec<ScatterSpec>,
    /// Per config input: flattened for the model (`allow_ragged_batch` on
    /// a batching model).
    ragged: Vec<bool>,
}

impl BatchIo {
    /// From a validated config (sources name config inputs, targets config
    /// outputs).
    pub fn from_config(c: &ModelConfig) -> Self {
        let index = |name: &str| c.input.iter().position(|i| i.name == name);
        let batching = c.max_batch_size > 0;
        let inputs = c
            .batch_input
            .iter()
            .filter_map(|b| {
                Some(BatchInputSpec {
                    kind: Kind::try_from(b.kind).ok()?,
                    targets: b.target_name.clone(),
                    fp32: b.data_type == ConfigType::TypeFp32 as i32,
                    source: index(b.source_input.first()?)?,
                })
            })
            .collect();
        let scatter = c
            .batch_output
            .iter()
            .flat_map(|b| {
                let source = b.source_input.first().and_then(|s| index(s));
                b.target_name.iter().filter_map(move |t| {
                    let output = c.output.iter().find(|o| &o.name == t)?;
                    let dims = match &output.reshape {
                        Some(r) => r.shape.clone(),
                        None => output.dims.clone(),
                    };
                    let mut template = if batching { vec![-1] } else { Vec::new() };
                    template.extend(dims);
                    Some(ScatterSpec {
                        output: t.clone(),
                        source: source?,
                        template,
                    })
                })
            })
            .collect();
        BatchIo {
            inputs,
            scatter,
            ragged: c
                .input
                .iter()
                .map(|i| batching && i.allow_ragged_batch)
                .collect(),
        }
    }

    /// Nothing to add, flatten or scatter.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty() && self.scatter.is_empty() && !self.ragged.contains(&true)
    }

    /// Whether config input `i` reaches the model flattened.
    pub fn is_ragged(&self, i: usize) -> bool {
        self.ragged.get(i).copied().unwrap_or(false)
    }

    /// The names of the tensors `batch_inputs` makes, in its order.
    pub fn input_names(&self) -> impl Iterator<Item = &str> {
        self.inputs
            .iter()
            .flat_map(|b| b.targets.iter().map(String::as_str))
    }

    /// The inputs of one request as the model takes them alone: ragged
    /// inputs flattened, then the batch inputs of a batch of one.
    pub fn single(&self, mut inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        if self.is_empty() {
            return Ok(inputs);
        }
        let extra = self.batch_inputs(&[&inputs])?;
        for (i, t) in inputs.iter_mut().enumerate() {
            if self.is_ragged(i) {
                t.shape = vec![t.shape.iter().product()];
            }
        }
        inputs.extend(extra);
        Ok(inputs)
    }

    /// The batch input tensors of a batch of requests (each request's
    /// inputs in config order).
    pub fn batch_inputs(&self, requests: &[&[Tensor]]) -> Result<Vec<Tensor>> {
        let mut out = Vec::new();
        for spec in &self.inputs {
            let shapes = requests
                .iter()
                .map(|r| {
                    r.get(spec.source)
                        .map(|t| t.shape.as_slice())
                        .ok_or_else(|| {
                            Error::internal(
                                "a batch input's source input is missing from a request",
                            )
                        })
                })
                .collect::<Result<Vec<&[i64]>>>()?;
            let counts: Vec<i64> = shapes.iter().map(|s| s.iter().product()).collect();
            let (shape, values): (Vec<i64>, Vec<i64>) = match spec.kind {
                Kind::BatchElementCount => (vec![counts.len() as i64], counts),
                Kind::BatchAccumulatedElementCount => (
                    vec![counts.len() as i64],
                    counts
                        .iter()
                        .scan(0, |sum, c| {
                            *sum += c;
                            Some(*sum)
                        })
                        .collect(),
                ),
                Kind::BatchAccumulatedElementCountWithZero => (
                    vec![counts.len() as i64 + 1],
                    std::iter::once(0)
                        .chain(counts.iter().scan(0, |sum, c| {
                            *sum += c;
                            Some(*sum)
                        }))
                        .collect(),
                ),
                Kind::BatchMaxElementCountAsShape => {
                    let max = counts.iter().copied().max().unwrap_or(0);
                    (vec![max], vec![0; max.max(0) as usize])
                }
                Kind::BatchItemShape | Kind::BatchItemShapeFlatten => {
                    let rank = shapes.first().map_or(0, |s| s.len().saturating_sub(1));
                    let mut values = Vec::new();
                    let mut items = 0i64;
                    for s in &shapes {
                        if s.len() != rank + 1 {
                            return Err(Error::invalid_arg(format!(
                                "batch input '{}' needs every request's source input to have {} dimensions",
                                spec.targets.first().map_or("", String::as_str),
                                rank + 1
                            )));
                        }
                        for _ in 0..s[0].max(0) {
                            values.extend_from_slice(&s[1..]);
                            items += 1;
                        }
                    }
                    let shape = if spec.kind == Kind::BatchItemShape {
                        vec![items, rank as i64]
                    } else {
                        vec![items * rank as i64]
                    };
                    (shape, values)
                }
            };
            let (datatype, data): (DataType, Vec<u8>) = if spec.fp32 {
                (
                    DataType::Fp32,
                    values
                        .iter()
                        .flat_map(|&v| (v as f32).to_le_bytes())
                        .collect(),
                )
            } else {
                (
                    DataType::Int32,
                    values
                        .iter()
                        .flat_map(|&v| (v as i32).to_le_bytes())
                        .collect(),
                )
            };
            for target in &spec.targets {
                out.push(Tensor {
                    name: target.clone(),
                    datatype,
                    shape: shape.clone(),
                    data: data.clone(),
                });
            }
        }
        Ok(out)
    }

    /// Per scattered output: each request's shape of it.
    pub fn scatter_shapes(&self, requests: &[&[Tensor]]) -> Vec<(String, Vec<Vec<i64>>)> {
        self.scatter
            .iter()
            .map(|s| {
                let shapes = requests
                    .iter()
                    .map(|r| {
                        let source = r.get(s.source).map(|t| t.shape.as_slice()).unwrap_or(&[]);
                        s.template
                            .iter()
                            .enumerate()
                            .map(|(k, &d)| {
                                if d == -1 {
                                    source.get(k).copied().unwrap_or(0)
                                } else {
                                    d
                                }
                            })
                            .collect()
                    })
                    .collect();
                (s.output.clone(), shapes)
            })
            .collect()
    }

    /// Gives a single request's scattered outputs (`scatter_shapes` of
    /// that request) their shape.
    pub fn apply_scatter(shapes: &[(String, Vec<Vec<i64>>)], outputs: &mut [Tensor]) -> Result<()> {
        for (name, shapes) in shapes {
            if let Some(t) = outputs.iter_mut().find(|t| &t.name == name) {
                let mut parts = scatter(t, shapes)?;
                *t = parts.remove(0);
            }
        }
        Ok(())
    }
}

/// Splits a scattered output among requests by their shapes of it: each
/// takes the next elements, in order.
pub fn scatter(t: &Tensor, shapes: &[Vec<i64>]) -> Result<Vec<Tensor>> {
    let size = t.datatype.size().ok_or_else(|| {
        Error::unsupported(format!(
            "output '{}': BATCH_SCATTER_WITH_INPUT_SHAPE needs a fixed-size data type",
            t.name
        ))
    })?;
    let needed: usize = shapes
        .iter()
        .map(|s| s.iter().product::<i64>().max(0) as usize * size)
        .sum();
    if needed != t.data.len() {
        return Err(Error::internal(format!(
            "output '{}' has {} elements; scattered by the requests' input shapes it needs {}",
            t.name,
            t.data.len() / size,
            needed / size
        )));
    }
    let mut at = 0;
    Ok(shapes
        .iter()
        .map(|s| {
            let n = s.iter().product::<i64>().max(0) as usize * size;
            let part = Tensor {
                name: t.name.clone(),
                datatype: t.datatype,
                shape: s.clone(),
                data: t.data[at..at + n].to_vec(),
            };
            at += n;
            part
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> ModelConfig {
        crate::core::config::parse_config(text.as_bytes())
            .expect("parses")
            .config
    }

    fn input(shape: &[i64]) -> Vec<Tensor> {
        let n: i64 = shape.iter().product();
        vec![Tensor {
            name: "IN".into(),
            datatype: DataType::Fp32,
            shape: shape.to_vec(),
            data: vec![0; n as usize * 4],
        }]
    }

    fn ints(t: &Tensor) -> Vec<i32> {
        t.data
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    const RAGGED: &str = r#"
        name: "m" backend: "identity" max_batch_size: 8
        input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
        output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
    "#;

    fn with_kind(kind: &str) -> BatchIo {
        BatchIo::from_config(&config(&format!(
            r#"{RAGGED} batch_input [ {{ kind: {kind} target_name: "B" data_type: TYPE_INT32 source_input: "IN" }} ]"#
        )))
    }

    #[test]
    fn counting_kinds_give_one_entry_per_request() {
        // Triton's QA: requests [1,2], [1,4], [1,1], [1,3].
        let reqs = [
            input(&[1, 2]),
            input(&[1, 4]),
            input(&[1, 1]),
            input(&[1, 3]),
        ];
        let reqs: Vec<&[Tensor]> = reqs.iter().map(Vec::as_slice).collect();
        let b = &with_kind("BATCH_ELEMENT_COUNT")
            .batch_inputs(&reqs)
            .unwrap()[0];
        assert_eq!((b.shape.clone(), ints(b)), (vec![4], vec![2, 4, 1, 3]));
        let b = &with_kind("BATCH_ACCUMULATED_ELEMENT_COUNT")
            .batch_inputs(&reqs)
            .unwrap()[0];
        assert_eq!((b.shape.clone(), ints(b)), (vec![4], vec![2, 6, 7, 10]));
        let b = &with_kind("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO")
            .batch_inputs(&reqs)
            .unwrap()[0];
        assert_eq!((b.shape.clone(), ints(b)), (vec![5], vec![0, 2, 6, 7, 10]));
        let b = &with_kind("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE")
            .batch_inputs(&reqs)
            .unwrap()[0];
        assert_eq!(b.shape, vec![4]);
        // A request of batch 2 counts its whole tensor, once.
        let two = [input(&[2, 3])];
        let two: Vec<&[Tensor]> = two.iter().map(Vec::as_slice).collect();
        let b = &with_kind("BATCH_ELEMENT_COUNT").batch_inputs(&two).unwrap()[0];
        assert_eq!((b.shape.clone(), ints(b)), (vec![1], vec![6]));
    }

    #[test]
    fn item_shapes_give_one_row_per_batch_item() {
        // Triton's QA: [2,1,2], [1,1,2], [1,2,2].
        let reqs = [input(&[2, 1, 2]), input(&[1, 1, 2]), input(&[1, 2, 2])];
        let reqs: Vec<&[Tensor]> = reqs.iter().map(Vec::as_slice).collect();
        let b = &with_kind("BATCH_ITEM_SHAPE").batch_inputs(&reqs).unwrap()[0];
        assert_eq!(b.shape, vec![4, 2]);
        assert_eq!(ints(b), vec![1, 2, 1, 2, 1, 2, 2, 2]);
        let b = &with_kind("BATCH_ITEM_SHAPE_FLATTEN")
            .batch_inputs(&reqs)
            .unwrap()[0];
        assert_eq!(b.shape, vec![8]);
        let mixed = [input(&[1, 2]), input(&[1, 2, 2])];
        let mixed: Vec<&[Tensor]> = mixed.iter().map(Vec::as_slice).collect();
        assert!(with_kind("BATCH_ITEM_SHAPE").batch_inputs(&mixed).is_err());
    }

    #[test]
    fn fp32_values_and_every_target_name() {
        let io = BatchIo::from_config(&config(&format!(
            r#"{RAGGED} batch_input [ {{ kind: BATCH_ELEMENT_COUNT target_name: [ "A", "B" ] data_type: TYPE_FP32 source_input: "IN" }} ]"#
        )));
        let reqs = [input(&[1, 3])];
        let reqs: Vec<&[Tensor]> = reqs.iter().map(Vec::as_slice).collect();
        let out = io.batch_inputs(&reqs).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].name.as_str(), out[1].name.as_str()), ("A", "B"));
        assert_eq!(out[1].datatype, DataType::Fp32);
        assert_eq!(out[1].data, 3f32.to_le_bytes().to_vec());
        assert_eq!(io.input_names().collect::<Vec<_>>(), vec!["A", "B"]);
    }

    #[test]
    fn a_single_request_is_flattened_and_gets_its_batch_inputs() {
        let io = with_kind("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO");
        let inputs = io.single(input(&[1, 5])).unwrap();
        assert_eq!(inputs[0].shape, vec![5]);
        assert_eq!(
            (inputs[1].name.as_str(), ints(&inputs[1])),
            ("B", vec![0, 5])
        );
        // Nothing ragged, nothing added: the request stays as it is.
        let plain = BatchIo::from_config(&config(
            r#"name: "m" backend: "identity" max_batch_size: 8
               input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
               output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]"#,
        ));
        assert!(plain.is_empty());
        assert_eq!(plain.single(input(&[1, 5])).unwrap()[0].shape, vec![1, 5]);
    }

    #[test]
    fn scattered_outputs_take_the_source_shapes_in_order() {
        let io = BatchIo::from_config(&config(&format!(
            r#"{RAGGED} batch_output [ {{ kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUT" source_input: "IN" }} ]"#
        )));
        let reqs = [input(&[1, 2]), input(&[1, 3])];
        let reqs: Vec<&[Tensor]> = reqs.iter().map(Vec::as_slice).collect();
        let shapes = io.scatter_shapes(&reqs);
        assert_eq!(
            shapes,
            vec![("OUT".to_string(), vec![vec![1, 2], vec![1, 3]])]
        );
        let out = Tensor {
            name: "OUT".into(),
            datatype: DataType::Int32,
            shape: vec![5],
            data: (0..5i32).flat_map(|v| v.to_le_bytes()).collect(),
        };
        let parts = scatter(&out, &shapes[0].1).unwrap();
        assert_eq!(ints(&parts[0]), vec![0, 1]);
        assert_eq!(
            (parts[1].shape.clone(), ints(&parts[1])),
            (vec![1, 3], vec![2, 3, 4])
        );
        // Too few elements for the shapes: an error, not a short answer.
        assert!(scatter(&out, &[vec![1, 2], vec![1, 4]]).is_err());
        // Fixed dims stay: dims [-1, 2] with a source [1, 3] → [1, 3, 2].
        let io = BatchIo::from_config(&config(
            r#"name: "m" backend: "identity" max_batch_size: 8
               input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
               output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]
               batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUT" source_input: "IN" } ]"#,
        ));
        let reqs = [input(&[1, 3])];
        let reqs: Vec<&[Tensor]> = reqs.iter().map(Vec::as_slice).collect();
        assert_eq!(io.scatter_shapes(&reqs)[0].1, vec![vec![1, 3, 2]]);
    }
}
