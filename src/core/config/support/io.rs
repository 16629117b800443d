//! Inputs and outputs: reshapes the server cannot apply, TensorRT's
//! shape tensors and formats, batch inputs and outputs under the sequence
//! batcher.

use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::ModelConfig;

use super::Findings;

pub(super) fn check(config: &ModelConfig, out: &mut Findings) {
    for (i, input) in config.input.iter().enumerate() {
        let field = format!("input[{i}]");
        if input.reshape.is_some() && input.allow_ragged_batch {
            out.refuse(
                format!("{field}.reshape"),
                "a ragged input reaches the model flattened, so it cannot also be reshaped",
            );
        }
        if input.is_shape_tensor {
            out.refuse(
                format!("{field}.is_shape_tensor"),
                "shape tensors are a TensorRT feature",
            );
        }
        if input.is_non_linear_format_io {
            out.refuse(
                format!("{field}.is_non_linear_format_io"),
                "non-linear formats are a TensorRT feature",
            );
        }
    }
    for (i, output) in config.output.iter().enumerate() {
        let field = format!("output[{i}]");
        let scattered = config
            .batch_output
            .iter()
            .any(|b| b.target_name.contains(&output.name));
        if output.reshape.is_some() && scattered {
            out.refuse(
                format!("{field}.reshape"),
                "an output scattered by batch_output cannot also be reshaped",
            );
        }
        if output.is_shape_tensor {
            out.refuse(
                format!("{field}.is_shape_tensor"),
                "shape tensors are a TensorRT feature",
            );
        }
        if output.is_non_linear_format_io {
            out.refuse(
                format!("{field}.is_non_linear_format_io"),
                "non-linear formats are a TensorRT feature",
            );
        }
    }

    let sequence = matches!(
        config.scheduling_choice,
        Some(SchedulingChoice::SequenceBatching(_))
    );
    if sequence && !config.batch_input.is_empty() {
        out.refuse("batch_input",
            "batch inputs are supported with the default scheduler and the dynamic batcher, not with the sequence batcher",
        );
    }
    if sequence && !config.batch_output.is_empty() {
        out.refuse("batch_output",
            "batch outputs are supported with the default scheduler and the dynamic batcher, not with the sequence batcher",
        );
    }
}
