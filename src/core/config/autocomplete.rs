//! Auto-complete: filling a config's inputs, outputs and max batch size from
//! what the model file declares, as Triton's backends do unless
//! `--disable-auto-complete-config`. Pure: the caller reads the model file
//! (`core::backend::onnx::model_io`) and hands in its tensors.

use super::pb::{
    model_config::SchedulingChoice, ModelConfig, ModelDynamicBatching, ModelInput, ModelOutput,
};
use crate::core::types::DataType;

/// Triton's `default-max-batch-size` backend setting.
pub const DEFAULT_MAX_BATCH_SIZE: i32 = 4;

/// A tensor the model file declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelTensor {
    pub name: String,
    pub datatype: Option<DataType>,
    /// With the batch dimension, if any; -1 is dynamic.
    pub shape: Vec<i64>,
}

/// Checks the config's dims of the model's scalar (rank-0) tensors, as
/// Triton's ONNX Runtime backend does at load: every dim must be 1 (a
/// scalar is served as shape [1]). `inputs` and `outputs` are the model
/// file's tensors.
pub fn check_scalars(
    config: &ModelConfig,
    inputs: &[ModelTensor],
    outputs: &[ModelTensor],
) -> crate::core::error::Result<()> {
    let batch_outputs: Vec<&str> = config
        .batch_output
        .iter()
        .flat_map(|b| b.target_name.iter().map(String::as_str))
        .collect();
    let config_ios = config
        .input
        .iter()
        .map(|i| {
            (
                &i.name,
                i.reshape.as_ref().map(|r| &r.shape).unwrap_or(&i.dims),
                inputs,
            )
        })
        .chain(
            config
                .output
                .iter()
                .filter(|o| !batch_outputs.contains(&o.name.as_str()))
                .map(|o| {
                    (
                        &o.name,
                        o.reshape.as_ref().map(|r| &r.shape).unwrap_or(&o.dims),
                        outputs,
                    )
                }),
        );
    for (name, dims, tensors) in config_ios {
        let scalar = tensors
            .iter()
            .any(|t| &t.name == name && t.shape.is_empty());
        if scalar && dims.iter().any(|&d| d != 1) {
            let shown: Vec<String> = dims.iter().map(i64::to_string).collect();
            return Err(crate::core::error::Error::invalid_arg(format!(
                "unable to load model '{}', scalar tensor '{name}', should only provide 1 in the model configuration when the model doesn't support batching. Model configuration provided: [{}].",
                config.name,
                shown.join(",")
            )));
        }
    }
    Ok(())
}

/// `config` completed from a model file's `inputs` and `outputs` (the
/// ONNX and SavedModel backends): `complete`, choosing the batching (with
/// `max_batch_size`: [`DEFAULT_MAX_BATCH_SIZE`] or the server's
/// `--backend-config=default-max-batch-size=N`) when the config sets none
/// of max_batch_size, inputs and outputs.
pub fn completed(
    config: &ModelConfig,
    inputs: &[ModelTensor],
    outputs: &[ModelTensor],
    max_batch_size: i32,
) -> Result<ModelConfig, String> {
    let mut config = config.clone();
    let unset = config.max_batch_size == 0 && config.input.is_empty() && config.output.is_empty();
    complete(
        &mut config,
        inputs,
        outputs,
        unset.then_some(max_batch_size),
    )?;
    Ok(config)
}

/// Completes `config` from the model's tensors: inputs and outputs the
/// config does not list are added. With `choose_batching` (Triton does so
/// when the config says nothing about batching: max_batch_size 0 and no
/// inputs or outputs), a model whose every tensor has a dynamic first
/// dimension is taken to batch: max_batch_size `choose_batching` (4 unless
/// the server says otherwise), dynamic batching on.
pub fn complete(
    config: &mut ModelConfig,
    inputs: &[ModelTensor],
    outputs: &[ModelTensor],
    choose_batching: Option<i32>,
) -> Result<(), String> {
    let all: Vec<&ModelTensor> = inputs.iter().chain(outputs).collect();
    let batchable = !all.is_empty() && all.iter().all(|t| t.shape.first() == Some(&-1));
    if let Some(max_batch_size) = choose_batching.filter(|_| batchable) {
        config.max_batch_size = max_batch_size;
        if config.scheduling_choice.is_none() {
            config.scheduling_choice = Some(SchedulingChoice::DynamicBatching(
                ModelDynamicBatching::default(),
            ));
        }
    }
    let strip = config.max_batch_size > 0;
    let dims_of = |t: &ModelTensor| -> Vec<i64> {
        if strip && !t.shape.is_empty() {
            t.shape[1..].to_vec()
        } else {
            t.shape.clone()
        }
    };
    let type_of = |t: &ModelTensor| -> Result<i32, String> {
        t.datatype
            .map(|d| d.to_config() as i32)
            .ok_or_else(|| format!("tensor '{}' has a type trtis cannot serve", t.name))
    };
    for t in inputs {
        if !config.input.iter().any(|i| i.name == t.name) {
            config.input.push(ModelInput {
                name: t.name.clone(),
                data_type: type_of(t)?,
                dims: dims_of(t),
                ..Default::default()
            });
        }
    }
    for t in outputs {
        if !config.output.iter().any(|o| o.name == t.name) {
            config.output.push(ModelOutput {
                name: t.name.clone(),
                data_type: type_of(t)?,
                dims: dims_of(t),
                ..Default::default()
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, dt: DataType, shape: &[i64]) -> ModelTensor {
        ModelTensor {
            name: name.into(),
            datatype: Some(dt),
            shape: shape.to_vec(),
        }
    }

    #[test]
    fn a_batchable_model_gets_batching_and_dims_without_the_batch() {
        let mut c = ModelConfig::default();
        complete(
            &mut c,
            &[t("input", DataType::Fp32, &[-1, 3, 224, 224])],
            &[t("output", DataType::Fp32, &[-1, 1000])],
            Some(DEFAULT_MAX_BATCH_SIZE),
        )
        .unwrap();
        assert_eq!(c.max_batch_size, 4);
        assert!(matches!(
            c.scheduling_choice,
            Some(SchedulingChoice::DynamicBatching(_))
        ));
        assert_eq!(c.input[0].dims, vec![3, 224, 224]);
        assert_eq!(c.output[0].dims, vec![1000]);
    }

    #[test]
    fn a_fixed_shape_model_does_not_batch_and_given_fields_stay() {
        let mut c = ModelConfig {
            output: vec![ModelOutput {
                name: "y".into(),
                label_filename: "labels.txt".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        complete(
            &mut c,
            &[t("x", DataType::Int64, &[2, 2])],
            &[t("y", DataType::Int64, &[2, 2])],
            Some(DEFAULT_MAX_BATCH_SIZE),
        )
        .unwrap();
        assert_eq!(c.max_batch_size, 0);
        assert_eq!(c.input[0].dims, vec![2, 2]);
        assert_eq!(c.output.len(), 1);
        assert_eq!(c.output[0].label_filename, "labels.txt");
    }
}
