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

use crate::core::config::pb::{
    batch_input::Kind, model_config::SchedulingChoice, DataType as ConfigType, ModelConfig,
};
use crate::core::error::{Error, Result};
use crate::core::types::{element_count, DataType, Tensor};

#[derive(Debug, Clone, PartialEq, Eq)]
struct BatchInputSpec {
    kind: Kind,
    /// Names the model gets the tensor under (each the same tensor).
    targets: Vec<String>,
    fp32: bool,
    /// The config input it describes.
    source: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ScatterSpec {
    output: String,
    source: String,
    /// `[-1]` (batching models) then the output's dims (or reshape).
    template: Vec<i64>,
}

/// A model's batch inputs, scattered outputs and ragged inputs. Inputs are
/// found by name: a request may leave out optional inputs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchIo {
    inputs: Vec<BatchInputSpec>,
    scatter: Vec<ScatterSpec>,
    /// Inputs the model gets flattened (`allow_ragged_batch` on a model
    /// that batches, except under the sequence batcher, which batches
    /// rows of equal shapes only).
    ragged: Vec<String>,
}

/// A request's element count of one input, whole shape.
fn count(t: &Tensor) -> Result<usize> {
    element_count(&t.shape).ok_or_else(|| {
        Error::invalid_arg(format!(
            "input '{}' has shape {:?}, too large to batch",
            t.name, t.shape
        ))
    })
}

/// Running sums of `counts`.
fn running(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0usize, |sum, c| {
            *sum = sum.saturating_add(*c);
            Some(*sum)
        })
        .collect()
}

impl BatchIo {
    /// From a validated config (sources name config inputs, targets config
    /// outputs).
    pub fn from_config(c: &ModelConfig) -> Self {
        let batching = c.max_batch_size > 0;
        let sequence = matches!(
            c.scheduling_choice,
            Some(SchedulingChoice::SequenceBatching(_))
        );
        let inputs = c
            .batch_input
            .iter()
            .filter_map(|b| {
                Some(BatchInputSpec {
                    kind: Kind::try_from(b.kind).ok()?,
                    targets: b.target_name.clone(),
                    fp32: b.data_type == ConfigType::TypeFp32 as i32,
                    source: b.source_input.first()?.clone(),
                })
            })
            .collect();
        let scatter = c
            .batch_output
            .iter()
            .flat_map(|b| {
                let source = b.source_input.first().cloned();
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
                        source: source.clone()?,
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
                .filter(|i| batching && !sequence && i.allow_ragged_batch)
                .map(|i| i.name.clone())
                .collect(),
        }
    }

    /// Nothing to add, flatten or scatter.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty() && self.scatter.is_empty() && self.ragged.is_empty()
    }

    /// Whether the input named `name` reaches the model flattened (and
    /// so batches whatever its shape).
    pub fn is_ragged(&self, name: &str) -> bool {
        self.ragged.iter().any(|r| r == name)
    }

    /// The names of the tensors `model_inputs` adds, in its order.
    pub fn input_names(&self) -> impl Iterator<Item = &str> {
        self.inputs
            .iter()
            .flat_map(|b| b.targets.iter().map(String::as_str))
    }

    /// Refuses a request that leaves out an input a batch input or a
    /// scattered output is made from.
    pub fn check(&self, inputs: &[Tensor]) -> Result<()> {
        let sources = self
            .inputs
            .iter()
            .map(|b| (&b.source, "batch input", b.targets.first()))
            .chain(
                self.scatter
                    .iter()
                    .map(|s| (&s.source, "batch output", Some(&s.output))),
            );
        for (source, what, target) in sources {
            if !inputs.iter().any(|t| &t.name == source) {
                return Err(Error::invalid_arg(format!(
                    "input '{source}' is required: {what} '{}' is made from it",
                    target.map_or("", String::as_str)
                )));
            }
        }
        Ok(())
    }

    /// The tensors a batch of requests (each request's inputs, the same
    /// names in the same order) reaches the model as: each input
    /// concatenated along dim 0 (ragged inputs flattened to one dimension of
    /// all their elements), then the batch inputs. A lone request's inputs
    /// are moved, not copied, and pass untouched when the model has nothing
    /// ragged, no batch inputs and no scattered outputs.
    pub fn model_inputs(&self, mut requests: Vec<Vec<Tensor>>) -> Result<Vec<Tensor>> {
        if self.is_empty() && requests.len() == 1 {
            return Ok(requests.pop().unwrap_or_default());
        }
        let extra = {
            let views: Vec<&[Tensor]> = requests.iter().map(Vec::as_slice).collect();
            self.batch_inputs(&views)?
        };
        let mut inputs = if requests.len() == 1 {
            let mut inputs = requests.into_iter().next().unwrap_or_default();
            for t in inputs.iter_mut().filter(|t| self.is_ragged(&t.name)) {
                t.shape = vec![count(t)? as i64];
            }
            inputs
        } else {
            concat(&requests, self)?
        };
        inputs.extend(extra);
        Ok(inputs)
    }

    /// The batch input tensors of a batch of requests.
    pub fn batch_inputs(&self, requests: &[&[Tensor]]) -> Result<Vec<Tensor>> {
        let mut out = Vec::new();
        for spec in &self.inputs {
            let sources = requests
                .iter()
                .map(|r| {
                    r.iter().find(|t| t.name == spec.source).ok_or_else(|| {
                        Error::invalid_arg(format!(
                            "input '{}' is required: batch input '{}' is made from it",
                            spec.source,
                            spec.targets.first().map_or("", String::as_str)
                        ))
                    })
                })
                .collect::<Result<Vec<&Tensor>>>()?;
            let counts = sources
                .iter()
                .map(|t| count(t))
                .collect::<Result<Vec<usize>>>()?;
            let (shape, values): (Vec<usize>, Vec<usize>) = match spec.kind {
                Kind::BatchElementCount => (vec![counts.len()], counts),
                Kind::BatchAccumulatedElementCount => (vec![counts.len()], running(&counts)),
                Kind::BatchAccumulatedElementCountWithZero => (
                    vec![counts.len() + 1],
                    std::iter::once(0).chain(running(&counts)).collect(),
                ),
                Kind::BatchMaxElementCountAsShape => {
                    let max = counts.iter().copied().max().unwrap_or(0);
                    // Only the shape means anything (Triton leaves the
                    // data uninitialized); zeros, without a huge buffer.
                    (vec![max], Vec::new())
                }
                Kind::BatchItemShape | Kind::BatchItemShapeFlatten => {
                    let rank = sources
                        .first()
                        .map_or(0, |t| t.shape.len().saturating_sub(1));
                    let mut values = Vec::new();
                    let mut items = 0usize;
                    for t in &sources {
                        if t.shape.len() != rank + 1 {
                            return Err(Error::invalid_arg(format!(
                                "batch input '{}' needs every request's input '{}' to have {} dimensions",
                                spec.targets.first().map_or("", String::as_str),
                                spec.source,
                                rank + 1
                            )));
                        }
                        let dims: Vec<usize> =
                            t.shape[1..].iter().map(|&d| d.max(0) as usize).collect();
                        for _ in 0..t.shape[0].max(0) {
                            values.extend_from_slice(&dims);
                            items += 1;
                        }
                    }
                    let shape = if spec.kind == Kind::BatchItemShape {
                        vec![items, rank]
                    } else {
                        vec![items * rank]
                    };
                    (shape, values)
                }
            };
            let elements = element_count(&shape.iter().map(|&d| d as i64).collect::<Vec<_>>())
                .unwrap_or(usize::MAX);
            let data: Vec<u8> = if values.is_empty() {
                vec![0; elements.saturating_mul(4)]
            } else if spec.fp32 {
                values
                    .iter()
                    .flat_map(|&v| (v as f32).to_le_bytes())
                    .collect()
            } else {
                let mut data = Vec::with_capacity(values.len() * 4);
                for &v in &values {
                    let v = i32::try_from(v).map_err(|_| {
                        Error::invalid_arg(format!(
                            "batch input '{}': {v} does not fit INT32",
                            spec.targets.first().map_or("", String::as_str)
                        ))
                    })?;
                    data.extend_from_slice(&v.to_le_bytes());
                }
                data
            };
            let datatype = if spec.fp32 {
                DataType::Fp32
            } else {
                DataType::Int32
            };
            let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
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
                        let source = r
                            .iter()
                            .find(|t| t.name == s.source)
                            .map(|t| t.shape.as_slice())
                            .unwrap_or(&[]);
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

/// Concatenates the requests' inputs along dim 0 (ragged ones flattened).
fn concat(requests: &[Vec<Tensor>], io: &BatchIo) -> Result<Vec<Tensor>> {
    let Some(first) = requests.first() else {
        return Ok(Vec::new());
    };
    let mut inputs = Vec::with_capacity(first.len());
    for (i, t) in first.iter().enumerate() {
        // Batched requests have the same inputs in the same order.
        let column = requests
            .iter()
            .map(|r| {
                r.get(i).filter(|x| x.name == t.name).ok_or_else(|| {
                    Error::internal(format!("a batched request lacks input '{}'", t.name))
                })
            })
            .collect::<Result<Vec<&Tensor>>>()?;
        let mut data = Vec::with_capacity(column.iter().map(|x| x.data.len()).sum());
        for x in &column {
            data.extend_from_slice(&x.data);
        }
        let shape = if io.is_ragged(&t.name) {
            let mut elements = 0usize;
            for x in &column {
                elements = elements.saturating_add(count(x)?);
            }
            vec![elements as i64]
        } else {
            let mut shape = t.shape.clone();
            if let Some(d) = shape.first_mut() {
                *d = column.iter().filter_map(|x| x.shape.first()).sum();
            }
            shape
        };
        inputs.push(Tensor {
            name: t.name.clone(),
            datatype: t.datatype,
            shape,
            data,
        });
    }
    Ok(inputs)
}

/// Splits a scattered output among requests by their shapes of it: each
/// takes the next elements, in order. Shapes whose sizes overflow or do not
/// add up to the output are an error, never a short or shifted answer.
pub fn scatter(t: &Tensor, shapes: &[Vec<i64>]) -> Result<Vec<Tensor>> {
    let size = t.datatype.size().ok_or_else(|| {
        Error::unsupported(format!(
            "output '{}': BATCH_SCATTER_WITH_INPUT_SHAPE needs a fixed-size data type",
            t.name
        ))
    })?;
    let too_large = || {
        Error::invalid_arg(format!(
            "output '{}': the requests' input shapes are too large to scatter it",
            t.name
        ))
    };
    let mut lengths = Vec::with_capacity(shapes.len());
    let mut needed = 0usize;
    for s in shapes {
        let n = element_count(s)
            .and_then(|n| n.checked_mul(size))
            .ok_or_else(too_large)?;
        needed = needed.checked_add(n).ok_or_else(too_large)?;
        lengths.push(n);
    }
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
        .zip(lengths)
        .map(|(s, n)| {
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

/// `shape` (whose dims past the batch dimension match `from`) as `to`:
/// `to`'s variable dimensions take the values of `from`'s, in order (the
/// config's rule: both have the same variable dimensions, with fixed
/// chunks of equal size between them), or the one left over by the
/// element count. `None` when `shape` does not match `from`.
pub fn reshape_shape(shape: &[i64], from: &[i64], to: &[i64], batching: bool) -> Option<Vec<i64>> {
    let (batch, rest) = if batching {
        let (b, rest) = shape.split_first()?;
        (Some(*b), rest)
    } else {
        (None, shape)
    };
    let matches = rest.len() == from.len()
        && rest
            .iter()
            .zip(from)
            .all(|(&actual, &d)| d == -1 || actual == d);
    if !matches {
        return None;
    }
    let elements = dims_product(rest)?;
    let variables: Vec<i64> = rest
        .iter()
        .zip(from)
        .filter(|(_, &d)| d == -1)
        .map(|(&actual, _)| actual)
        .collect();
    let unknown = to.iter().filter(|&&d| d == -1).count();
    let mut values = variables.iter().copied();
    let in_order: Vec<i64> = to
        .iter()
        .map(|&d| {
            if d == -1 {
                values.next().unwrap_or(0)
            } else {
                d
            }
        })
        .collect();
    let inside = if unknown == variables.len() && dims_product(&in_order) == Some(elements) {
        in_order
    } else if unknown == 1 {
        let known = dims_product(&to.iter().copied().filter(|&d| d != -1).collect::<Vec<_>>())?;
        if known == 0 || elements % known != 0 {
            return None;
        }
        to.iter()
            .map(|&d| if d == -1 { elements / known } else { d })
            .collect()
    } else if unknown == 0 && dims_product(to) == Some(elements) {
        to.to_vec()
    } else {
        return None;
    };
    Some(batch.into_iter().chain(inside).collect())
}

/// The element count of `dims`; `None` on overflow (a hostile shape).
fn dims_product(dims: &[i64]) -> Option<i64> {
    dims.iter().try_fold(1i64, |n, &d| n.checked_mul(d))
}

#[cfg(test)]
mod reshape_tests {
    use super::*;

    #[test]
    fn fixed_shapes_keep_the_batch_dimension_outside() {
        assert_eq!(
            reshape_shape(&[3, 4, 4], &[4, 4], &[16], true),
            Some(vec![3, 16])
        );
        assert_eq!(
            reshape_shape(&[3, 16], &[16], &[4, 4], true),
            Some(vec![3, 4, 4])
        );
        assert_eq!(
            reshape_shape(&[4, 4], &[4, 4], &[2, 8], false),
            Some(vec![2, 8])
        );
    }

    #[test]
    fn the_scalar_case() {
        // dims [1], reshape [] on a batching model: the model sees [batch].
        assert_eq!(reshape_shape(&[5, 1], &[1], &[], true), Some(vec![5]));
        assert_eq!(reshape_shape(&[5], &[], &[1], true), Some(vec![5, 1]));
    }

    #[test]
    fn variable_dimensions_carry_over_in_order() {
        assert_eq!(
            reshape_shape(&[2, 3, 4, 5], &[-1, 4, -1], &[-1, 2, 2, -1], true),
            Some(vec![2, 3, 2, 2, 5])
        );
        assert_eq!(
            reshape_shape(&[6, 4], &[-1, 4], &[-1], false),
            Some(vec![24])
        );
        assert_eq!(
            reshape_shape(&[24], &[-1], &[-1, 4], false),
            Some(vec![6, 4])
        );
    }

    #[test]
    fn a_shape_that_does_not_match_is_refused() {
        assert_eq!(reshape_shape(&[3, 5], &[4], &[2, 2], true), None);
        assert_eq!(reshape_shape(&[3], &[4], &[2, 2], true), None);
        assert_eq!(reshape_shape(&[7], &[-1], &[-1, 4], false), None);
        let huge = 1i64 << 31;
        assert_eq!(
            reshape_shape(&[huge, huge, 2, 0], &[-1, -1, -1, -1], &[-1], false),
            None
        );
    }
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
        let inputs = io.model_inputs(vec![input(&[1, 5])]).unwrap();
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
        assert_eq!(
            plain.model_inputs(vec![input(&[1, 5])]).unwrap()[0].shape,
            vec![1, 5]
        );
    }

    #[test]
    fn a_batch_is_concatenated_with_ragged_inputs_flattened() {
        let io = BatchIo::from_config(&config(
            r#"name: "m" backend: "identity" max_batch_size: 8
               input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true },
                       { name: "B" data_type: TYPE_FP32 dims: [ 2 ] } ]
               output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]"#,
        ));
        let request = |len: i64| {
            let mut r = input(&[1, len]);
            r.push(Tensor {
                name: "B".into(),
                datatype: DataType::Fp32,
                shape: vec![1, 2],
                data: vec![0; 8],
            });
            r
        };
        let inputs = io.model_inputs(vec![request(2), request(3)]).unwrap();
        assert_eq!(inputs[0].shape, vec![5]);
        assert_eq!(inputs[0].data.len(), 20);
        assert_eq!(inputs[1].shape, vec![2, 2]);
        // Under the sequence batcher nothing is flattened (it batches rows
        // of one shape), so warmup and serving agree.
        let seq = BatchIo::from_config(&config(&format!("{RAGGED} sequence_batching {{ }}")));
        assert!(!seq.is_ragged("IN"));
    }

    #[test]
    fn requests_without_a_source_input_are_refused() {
        let io = BatchIo::from_config(&config(
            r#"name: "m" backend: "identity" max_batch_size: 8
               input [ { name: "A" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
                       { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true optional: true } ]
               output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
               batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 source_input: "IN" } ]"#,
        ));
        // Found by name, whatever else the request leaves out.
        assert!(io.check(&input(&[1, 3])).is_ok());
        let b = &io.batch_inputs(&[&input(&[1, 3])]).unwrap()[0];
        assert_eq!(ints(b), vec![3]);
        let only_a = vec![Tensor {
            name: "A".into(),
            datatype: DataType::Fp32,
            shape: vec![1, 1],
            data: vec![0; 4],
        }];
        let e = io.check(&only_a).unwrap_err();
        assert!(
            e.message.contains("input 'IN' is required"),
            "{}",
            e.message
        );
    }

    #[test]
    fn scatter_sizes_that_overflow_are_an_error() {
        let out = Tensor {
            name: "OUT".into(),
            datatype: DataType::Fp32,
            shape: vec![0],
            data: vec![],
        };
        let huge = vec![1, 3 << 61, 3];
        assert!(scatter(&out, &[huge.clone(), huge]).is_err());
        assert!(scatter(&out, &[vec![1, 0], vec![1, 0]]).is_ok());
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
