//! The `fil` backend, as Triton's FIL backend serves tree models: XGBoost
//! (JSON, UBJSON and the legacy binary format), LightGBM (text) and Treelite checkpoints
//! (scikit-learn's forests), read into one [`forest::Forest`] and evaluated
//! on the CPU by our own evaluator (`forest.rs` says why its layout is
//! fast).
//!
//! A model has one input, `input__0` (FP32, `[num_features]`, NaN for a
//! missing value), and the output `output__0` (FP32): a regressor's
//! prediction; a classifier's class (a binary one: 1 when the probability
//! is above `threshold`; a multi-class one: the most probable class), or
//! with `predict_proba` each class's probability (a binary model's `[1-p,
//! p]`, or `p` alone for `dims: [1]`). As in Triton, dimensions of 1 are
//! dropped from the output's shape (`dims: [1]` answers `[batch]`).
//! Parameters: `settings.rs`. Differences from Triton, deliberate: the
//! input's dims must equal the model's feature count (Triton reads past a
//! short row), and the output's dims must fit what the model predicts;
//! both refused at load with the reason.

pub mod forest;
mod lightgbm;
pub mod settings;
mod treelite;
mod ubjson;
mod xgboost;
mod xgboost_binary;

use std::path::{Path, PathBuf};

use self::forest::{Forest, Transform};
use self::settings::{FilSettings, ModelType};
use super::{load_failed, LoadContext};
use crate::core::config::{Issue, ModelConfig};
use crate::core::error::{Error, Result};
use crate::core::types::{DataType, Tensor};

/// The input and output names Triton's FIL backend fixes.
pub const INPUT: &str = "input__0";
pub const OUTPUT: &str = "output__0";
pub const SHAP_OUTPUT: &str = "treeshap_output";

/// Reads the model file of `settings.model_type`.
pub fn read_forest(path: &Path, model_type: ModelType) -> Result<Forest> {
    let bytes = crate::core::fsutil::read_regular(path).map_err(|e| {
        Error::unavailable(format!(
            "unable to open model file {}: {}",
            path.display(),
            crate::core::error::os_reason(&e)
        ))
    })?;
    let read = match model_type {
        ModelType::XgboostJson => xgboost::read_json(&bytes),
        ModelType::XgboostUbj => xgboost::read_ubjson(&bytes),
        ModelType::Lightgbm => match std::str::from_utf8(&bytes) {
            Ok(text) => lightgbm::read(text),
            Err(_) => Err("not a LightGBM text model (it is not UTF-8 text)".into()),
        },
        ModelType::TreeliteCheckpoint => treelite::read(&bytes),
        ModelType::Xgboost => xgboost_binary::read(&bytes),
    };
    read.map_err(|why| forest::unreadable(path, why))
}

/// The model file: `default_model_filename`, else the one `model_type`
/// names.
pub fn model_path(config: &ModelConfig, version_dir: &Path, model_type: ModelType) -> PathBuf {
    version_dir.join(super::model_file(config, model_type.default_file()))
}

/// What an execution writes to `output__0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// The transformed prediction(s) as they are.
    Values,
    /// A binary model's `[1-p, p]`.
    BothClasses,
    /// The class: above the threshold (binary) or the most probable.
    Class,
}

/// How `config` asks `forest` to answer, or why it cannot.
fn answer(
    config: &ModelConfig,
    settings: &FilSettings,
    forest: &Forest,
) -> std::result::Result<(Answer, usize), String> {
    let inputs: Vec<&str> = config.input.iter().map(|i| i.name.as_str()).collect();
    if inputs != [INPUT] {
        return Err(format!(
            "a FIL model has one input, '{INPUT}'; the config has {inputs:?}"
        ));
    }
    let input = &config.input[0];
    if input.data_type != crate::core::config::pb::DataType::TypeFp32 as i32 {
        return Err(format!("input '{INPUT}' must be TYPE_FP32"));
    }
    if input.dims != [forest.num_features as i64] {
        return Err(format!(
            "input '{INPUT}' has dims {:?}, but the {} model has {} features: dims must be [ {} ]",
            input.dims, forest.made_by, forest.num_features, forest.num_features
        ));
    }
    if config.output.iter().any(|o| o.name == SHAP_OUTPUT) {
        return Err(format!(
            "output '{SHAP_OUTPUT}' (SHAP values) is not computed by trtis yet; leave it out of the config"
        ));
    }
    let Some(output) = config.output.iter().find(|o| o.name == OUTPUT) else {
        return Err(format!(
            "a FIL model answers in output '{OUTPUT}', which the config lacks"
        ));
    };
    if let Some(other) = config.output.iter().find(|o| o.name != OUTPUT) {
        return Err(format!(
            "a FIL model's outputs are '{OUTPUT}' and '{SHAP_OUTPUT}'; the config has '{}'",
            other.name
        ));
    }
    if output.data_type != crate::core::config::pb::DataType::TypeFp32 as i32 {
        return Err(format!("output '{OUTPUT}' must be TYPE_FP32"));
    }
    let dims = output.reshape.as_ref().map_or(&output.dims, |r| &r.shape);
    let width = dims.iter().product::<i64>();
    let k = forest.num_outputs;
    let (want, answer) = if !settings.classifier {
        (vec![k as i64], Answer::Values)
    } else if !settings.predict_proba {
        (vec![1], Answer::Class)
    } else if k == 1 && width == 2 {
        (vec![2], Answer::BothClasses)
    } else {
        (vec![k as i64], Answer::Values)
    };
    if width != want[0] {
        let (what, hold) = match (settings.classifier, settings.predict_proba) {
            (false, _) => ("a prediction per output", format!("{k} value(s)")),
            (true, false) => ("one class per row", "1 value".into()),
            (true, true) if k == 1 => (
                "a binary probability",
                "1 (p) or 2 ([1-p, p]) values".into(),
            ),
            (true, true) => ("a probability per class", format!("{k} values")),
        };
        return Err(format!(
            "output '{OUTPUT}' has dims {dims:?}, but the {} model answers {what}: dims must hold {hold}",
            forest.made_by
        ));
    }
    Ok((answer, want[0] as usize))
}

pub struct FilInstance {
    forest: Forest,
    answer: Answer,
    /// Values per row of `output__0`.
    width: usize,
    threshold: f64,
    threads: usize,
    /// `output__0`'s shape after the batch dimension, dims of 1 dropped.
    shape: Vec<i64>,
    batching: bool,
    margins: Vec<f64>,
}

impl FilInstance {
    pub fn load(ctx: &LoadContext) -> Result<FilInstance> {
        let config = ctx.config;
        let settings =
            FilSettings::from_config(config).map_err(|e| load_failed(config, e.message))?;
        for note in &settings.notes {
            crate::core::logging::log('I', note);
        }
        let path = model_path(config, &ctx.version_dir, settings.model_type);
        let mut forest =
            read_forest(&path, settings.model_type).map_err(|e| load_failed(config, e.message))?;
        let (answer, width) =
            answer(config, &settings, &forest).map_err(|e| load_failed(config, e))?;
        // Triton's FIL: probabilities of a multi-class model of one tree
        // group per class are a softmax, whatever its own transform.
        if settings.predict_proba && forest.num_outputs > 1 && !forest.vector_leaves {
            forest.transform = Transform::Softmax;
        }
        let output = config.output.iter().find(|o| o.name == OUTPUT).unwrap();
        let dims = output.reshape.as_ref().map_or(&output.dims, |r| &r.shape);
        let threads = if settings.threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            settings.threads
        };
        Ok(FilInstance {
            forest,
            answer,
            width,
            threshold: settings.threshold,
            threads,
            shape: dims.iter().copied().filter(|&d| d != 1).collect(),
            batching: config.max_batch_size > 0,
            margins: Vec::new(),
        })
    }

    /// `output__0` of `rows` (row-major, `num_features` each).
    fn predict(&mut self, rows: &[f32]) -> Vec<f32> {
        let f = &self.forest;
        let (n, k) = (rows.len() / f.num_features.max(1), f.num_outputs);
        self.margins.resize(n * k, 0.0);
        f.margins(rows, &mut self.margins, self.threads);
        let mut out = Vec::with_capacity(n * self.width);
        for row in self.margins.chunks_exact_mut(k) {
            f.transform(row);
            match self.answer {
                Answer::Values => out.extend(row.iter().map(|&v| v as f32)),
                Answer::BothClasses => out.extend([(1.0 - row[0]) as f32, row[0] as f32]),
                Answer::Class if k == 1 => out.push(f32::from(u8::from(row[0] > self.threshold))),
                Answer::Class => {
                    // The first of the most probable classes.
                    let mut best = (0, row[0]);
                    for (i, &p) in row.iter().enumerate().skip(1) {
                        if p > best.1 {
                            best = (i, p);
                        }
                    }
                    out.push(best.0 as f32);
                }
            }
        }
        out
    }
}

impl super::BatchExec for FilInstance {
    fn execute(&mut self, inputs: Vec<Tensor>, outputs: &[String]) -> Result<Vec<Tensor>> {
        let input = inputs
            .into_iter()
            .next()
            .ok_or_else(|| Error::invalid_arg(format!("input '{INPUT}' is missing")))?;
        let rows: Vec<f32> = input
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let n = rows.len() / self.forest.num_features.max(1);
        let values = self.predict(&rows);
        let mut shape = Vec::with_capacity(self.shape.len() + 1);
        if self.batching {
            shape.push(n as i64);
        }
        shape.extend(&self.shape);
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        outputs
            .iter()
            .map(|name| {
                if name != OUTPUT {
                    return Err(Error::invalid_arg(format!(
                        "No output with name {name} in configuration."
                    )));
                }
                Ok(Tensor {
                    name: name.clone(),
                    datatype: DataType::Fp32,
                    shape: shape.clone(),
                    data: data.clone(),
                })
            })
            .collect()
    }
}

/// The backend's entry in the registry.
pub struct Fil;

impl super::Backend for Fil {
    fn name(&self) -> &'static str {
        "fil"
    }

    fn load(&self, ctx: &LoadContext) -> Result<super::Instance> {
        Ok(super::Instance::Batches(Box::new(FilInstance::load(ctx)?)))
    }

    /// Its parameters; with `model_files`, the model file read and the
    /// config's input and output held against it.
    fn check(
        &self,
        config: &ModelConfig,
        version_dirs: &[PathBuf],
        model_files: bool,
    ) -> Vec<Issue> {
        let settings = match FilSettings::from_config(config) {
            Ok(s) => s,
            Err(e) => return vec![Issue::error("parameters", e.message)],
        };
        let mut out = Vec::new();
        if model_files {
            for dir in version_dirs {
                let path = model_path(config, dir, settings.model_type);
                match read_forest(&path, settings.model_type) {
                    Err(e) => out.push(Issue::error("parameters[\"model_type\"]", e.message)),
                    Ok(forest) => {
                        if let Err(why) = answer(config, &settings, &forest) {
                            let field = if why.contains(INPUT) {
                                "input"
                            } else {
                                "output"
                            };
                            out.push(Issue::error(field, why));
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
