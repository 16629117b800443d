//! What the sequence batcher takes from a model's config: the control
//! inputs it fills (START, END, READY, CORRID), the implicit states it
//! carries, and the strategy's settings.

use std::path::Path;
use std::time::Duration;

use super::places::{SeqConfig, Strategy};
use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::pb::model_sequence_batching::control::Kind as PbKind;
use crate::core::config::pb::model_sequence_batching::initial_state::StateData;
use crate::core::config::pb::model_sequence_batching::StrategyChoice;
use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::scheduler::dynamic::queue::preferred_sizes;
use crate::core::types::{element_count, DataType, SequenceId, Tensor};

/// A control input's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlKind {
    Start,
    End,
    Ready,
    CorrId,
}

/// One control input tensor the batcher fills.
#[derive(Debug, Clone)]
pub struct Control {
    pub name: String,
    pub kind: ControlKind,
    pub datatype: DataType,
    /// The encoded element for false and for true (START, END, READY).
    pub values: [Vec<u8>; 2],
}

/// One implicit state.
#[derive(Debug, Clone)]
pub struct StateSpec {
    pub input: String,
    pub output: String,
    pub datatype: DataType,
    /// The state a sequence starts with, per request (no batch dim).
    pub initial_shape: Vec<i64>,
    pub initial_data: Vec<u8>,
}

/// Everything the batcher needs from the model config.
#[derive(Debug, Clone)]
pub struct SeqSettings {
    pub seq: SeqConfig,
    pub controls: Vec<Control>,
    pub states: Vec<StateSpec>,
    /// `max_batch_size > 0`: tensors have a batch dimension.
    pub batching: bool,
    /// `iterative_sequence`: a request without a correlation id starts a
    /// sequence of its own; the model may reschedule a request (it runs
    /// again in its sequence's place); a request released ends its
    /// sequence.
    pub iterative: bool,
}

impl SeqSettings {
    /// The settings of a model with `sequence_batching` (None otherwise).
    /// `model_dir` holds `initial_state/` files.
    pub fn from_config(
        c: &ModelConfig,
        instances: usize,
        model_dir: &Path,
    ) -> Result<Option<Self>> {
        let Some(SchedulingChoice::SequenceBatching(sb)) = &c.scheduling_choice else {
            return Ok(None);
        };
        let max_batch = c.max_batch_size.max(1) as usize;
        let idle = Duration::from_micros(sb.max_sequence_idle_microseconds);
        // `oldest.preserve_ordering` needs nothing more: an instance runs
        // one batch at a time and answers it before the next, so answers
        // leave each instance in batch order (Triton orders per instance).
        let seq = match &sb.strategy_choice {
            Some(StrategyChoice::Oldest(o)) => {
                let preferred = preferred_sizes(&o.preferred_batch_size);
                SeqConfig {
                    strategy: Strategy::Oldest,
                    instances,
                    // Triton: max(1, max_batch_size) when not set.
                    places: if o.max_candidate_sequences > 0 {
                        o.max_candidate_sequences as usize
                    } else {
                        max_batch
                    },
                    max_batch,
                    preferred,
                    max_queue_delay: Duration::from_micros(o.max_queue_delay_microseconds),
                    min_slot_utilization: 0.0,
                    idle,
                }
            }
            direct => {
                let d = match direct {
                    Some(StrategyChoice::Direct(d)) => *d,
                    _ => Default::default(),
                };
                SeqConfig {
                    strategy: Strategy::Direct,
                    instances,
                    places: max_batch,
                    max_batch,
                    preferred: vec![],
                    max_queue_delay: Duration::from_micros(d.max_queue_delay_microseconds),
                    min_slot_utilization: d.minimum_slot_utilization,
                    idle,
                }
            }
        };
        let mut controls = Vec::new();
        for input in &sb.control_input {
            for control in &input.control {
                let kind = match PbKind::try_from(control.kind) {
                    Ok(PbKind::ControlSequenceStart) => ControlKind::Start,
                    Ok(PbKind::ControlSequenceEnd) => ControlKind::End,
                    Ok(PbKind::ControlSequenceReady) => ControlKind::Ready,
                    Ok(PbKind::ControlSequenceCorrid) => ControlKind::CorrId,
                    Err(_) => continue,
                };
                let (datatype, values) = if kind == ControlKind::CorrId {
                    let dt = DataType::from_config(control.data_type).ok_or_else(|| {
                        Error::invalid_arg(format!(
                            "sequence batching control '{}' has no valid data_type",
                            input.name
                        ))
                    })?;
                    (dt, [vec![], vec![]])
                } else if control.int32_false_true.len() == 2 {
                    let v = &control.int32_false_true;
                    (
                        DataType::Int32,
                        [v[0].to_le_bytes().to_vec(), v[1].to_le_bytes().to_vec()],
                    )
                } else if control.fp32_false_true.len() == 2 {
                    let v = &control.fp32_false_true;
                    (
                        DataType::Fp32,
                        [v[0].to_le_bytes().to_vec(), v[1].to_le_bytes().to_vec()],
                    )
                } else if control.bool_false_true.len() == 2 {
                    let v = &control.bool_false_true;
                    (DataType::Bool, [vec![v[0] as u8], vec![v[1] as u8]])
                } else {
                    return Err(Error::invalid_arg(format!(
                        "sequence batching control '{}' must have exactly 2 false/true values",
                        input.name
                    )));
                };
                controls.push(Control {
                    name: input.name.clone(),
                    kind,
                    datatype,
                    values,
                });
            }
        }
        let mut states = Vec::new();
        for s in &sb.state {
            let datatype = DataType::from_config(s.data_type).ok_or_else(|| {
                Error::invalid_arg(format!("state '{}' has no valid data_type", s.input_name))
            })?;
            let (shape, data) = match s.initial_state.first() {
                Some(init) => {
                    let shape = init.dims.clone();
                    let data = match &init.state_data {
                        Some(StateData::DataFile(file)) => {
                            let path = model_dir.join("initial_state").join(file);
                            let mut data = std::fs::read(&path).map_err(|e| {
                                Error::invalid_arg(format!(
                                    "failed to read initial state file '{}': {}",
                                    path.display(),
                                    crate::core::error::os_reason(&e)
                                ))
                            })?;
                            // As Triton: the expected bytes of a fixed-size
                            // type, from the start of a longer file.
                            if let (Some(size), Some(n)) = (datatype.size(), element_count(&shape))
                            {
                                data.truncate(size * n);
                            }
                            data
                        }
                        _ => zeros(datatype, &shape),
                    };
                    (shape, data)
                }
                None => {
                    // Variable dims start at 1 (the seed).
                    let shape: Vec<i64> =
                        s.dims.iter().map(|&d| if d < 0 { 1 } else { d }).collect();
                    let data = zeros(datatype, &shape);
                    (shape, data)
                }
            };
            states.push(StateSpec {
                input: s.input_name.clone(),
                output: s.output_name.clone(),
                datatype,
                initial_shape: shape,
                initial_data: data,
            });
        }
        Ok(Some(SeqSettings {
            seq,
            controls,
            states,
            batching: c.max_batch_size > 0,
            iterative: sb.iterative_sequence,
        }))
    }

    /// The CORRID control, if the model has one.
    pub fn corrid_control(&self) -> Option<&Control> {
        self.controls.iter().find(|c| c.kind == ControlKind::CorrId)
    }

    /// Names the batcher supplies (control and state inputs): not inputs a
    /// client sends.
    pub fn supplied_inputs(&self) -> impl Iterator<Item = &str> {
        self.controls
            .iter()
            .map(|c| c.name.as_str())
            .chain(self.states.iter().map(|s| s.input.as_str()))
    }

    /// A request's (or a batch row's) shape without the batch dimension.
    pub fn row_shape(&self, shape: &[i64]) -> Vec<i64> {
        match shape.split_first() {
            Some((_, rest)) if self.batching => rest.to_vec(),
            _ => shape.to_vec(),
        }
    }

    /// The shape of `n` rows of `row` (the batch dimension first when the
    /// model batches).
    pub fn batch_shape(&self, n: usize, row: &[i64]) -> Vec<i64> {
        if self.batching {
            std::iter::once(n as i64)
                .chain(row.iter().copied())
                .collect()
        } else {
            row.to_vec()
        }
    }

    /// The control and state inputs for a request of `rows` rows that
    /// are each a whole sequence (START, END and READY true, CORRID 0,
    /// initial states): what model warmup adds to its samples.
    pub fn standalone_inputs(&self, rows: usize) -> Vec<Tensor> {
        let shape = |row: &[i64]| self.batch_shape(rows, row);
        let rows = if self.batching { rows } else { 1 };
        let mut out = Vec::new();
        for c in &self.controls {
            let one = match c.kind {
                ControlKind::CorrId => corrid_element(c.datatype, None),
                _ => c.values[1].clone(),
            };
            out.push(Tensor {
                name: c.name.clone(),
                datatype: c.datatype,
                shape: shape(&[1]),
                data: one.repeat(rows),
            });
        }
        for s in &self.states {
            out.push(Tensor {
                name: s.input.clone(),
                datatype: s.datatype,
                shape: shape(&s.initial_shape),
                data: s.initial_data.repeat(rows),
            });
        }
        out
    }
}

/// Zero-filled data of a shape (BYTES: empty strings).
pub(super) fn zeros(datatype: DataType, shape: &[i64]) -> Vec<u8> {
    let n = element_count(shape).unwrap_or(0);
    vec![0; n * datatype.size().unwrap_or(4)]
}
/// One CORRID element: the row's sequence id in the control's type (0 or
/// "" for an empty row).
pub(super) fn corrid_element(datatype: DataType, id: Option<&SequenceId>) -> Vec<u8> {
    let number = match id {
        Some(SequenceId::Number(n)) => *n,
        _ => 0,
    };
    match datatype {
        DataType::Uint64 => number.to_le_bytes().to_vec(),
        DataType::Int64 => (number as i64).to_le_bytes().to_vec(),
        DataType::Uint32 => (number as u32).to_le_bytes().to_vec(),
        DataType::Int32 => (number as i32).to_le_bytes().to_vec(),
        _ => {
            let text = match id {
                Some(SequenceId::Text(s)) => s.clone(),
                Some(SequenceId::Number(n)) => n.to_string(),
                _ => String::new(),
            };
            Tensor::serialize_bytes([text.as_bytes()])
        }
    }
}
