//! The `parameters` of a FIL model, read as Triton's FIL backend reads them
//! (pure, unit-tested): every value is a string; a boolean is exactly
//! `true` or `false`; a parameter that tunes FIL on a GPU is accepted and
//! noted, since instances here run on the CPU.
//!
//! - `model_type`: the file's format, which also picks the default file
//!   name ([`ModelType::default_file`]); `xgboost` when absent.
//! - `is_classifier` (Triton 25.09's name) or `output_class` (its name
//!   before, which wins when both are there, as in Triton): required.
//! - `threshold`: a binary classifier's cut (a probability above it is
//!   class 1). Triton's docs give it an implicit 0.5 while its code refuses
//!   a classifier without one; here it is 0.5 when absent.
//! - `predict_proba`: per-class probabilities instead of a class.
//! - `cpu_nthread`: the threads an execution may use (0 or less: every
//!   core), honoured.
//! - `use_experimental_optimizations`, `xgboost_allow_unknown_field`: a
//!   boolean each, noted: there is one CPU engine here, and the readers
//!   take the fields they need and skip any other.
//! - GPU tuning (`algo`, `storage_type`, `blocks_per_sm`,
//!   `threads_per_tree`, `transfer_threshold`, `layout`, `chunk_size`):
//!   values checked where Triton names the allowed ones, then noted.

use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};

/// Every parameter this backend reads (the catalog's list; a test ties the
/// two together).
pub const PARAMETERS: &[&str] = &[
    "model_type",
    "is_classifier",
    "output_class",
    "threshold",
    "predict_proba",
    "cpu_nthread",
    "use_experimental_optimizations",
    "xgboost_allow_unknown_field",
    "algo",
    "storage_type",
    "blocks_per_sm",
    "threads_per_tree",
    "transfer_threshold",
    "layout",
    "chunk_size",
];

/// The serialization formats (`model_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelType {
    /// XGBoost's legacy binary format.
    Xgboost,
    XgboostJson,
    XgboostUbj,
    Lightgbm,
    TreeliteCheckpoint,
}

impl ModelType {
    pub const ALL: [ModelType; 5] = [
        ModelType::Xgboost,
        ModelType::XgboostJson,
        ModelType::XgboostUbj,
        ModelType::Lightgbm,
        ModelType::TreeliteCheckpoint,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ModelType::Xgboost => "xgboost",
            ModelType::XgboostJson => "xgboost_json",
            ModelType::XgboostUbj => "xgboost_ubj",
            ModelType::Lightgbm => "lightgbm",
            ModelType::TreeliteCheckpoint => "treelite_checkpoint",
        }
    }

    /// The file Triton's FIL backend loads when the config sets no
    /// `default_model_filename`.
    pub fn default_file(self) -> &'static str {
        match self {
            ModelType::Xgboost => "xgboost.model",
            ModelType::XgboostJson => "xgboost.json",
            ModelType::XgboostUbj => "xgboost.ubj",
            ModelType::Lightgbm => "model.txt",
            ModelType::TreeliteCheckpoint => "checkpoint.tl",
        }
    }
}

/// What a FIL model's instances run with.
#[derive(Debug, Clone, PartialEq)]
pub struct FilSettings {
    pub model_type: ModelType,
    pub classifier: bool,
    pub threshold: f64,
    pub predict_proba: bool,
    /// Threads per execution; 0: every core.
    pub threads: usize,
    /// What is accepted but changes nothing here, one I-line each.
    pub notes: Vec<String>,
}

fn string<'a>(config: &'a ModelConfig, key: &str) -> Option<&'a str> {
    config.parameters.get(key).map(|p| p.string_value.as_str())
}

/// Triton's boolean: exactly `true` or `false`.
fn boolean(config: &ModelConfig, key: &str) -> Result<Option<bool>> {
    match string(config, key) {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(v) => Err(Error::invalid_arg(format!(
            "Expected 'true' or 'false' for parameter '{key}', got: '{v}'"
        ))),
    }
}

fn number<T: std::str::FromStr>(config: &ModelConfig, key: &str) -> Result<Option<T>> {
    match string(config, key) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| Error::invalid_arg(format!("Bad input for parameter {key}"))),
    }
}

impl FilSettings {
    pub fn from_config(config: &ModelConfig) -> Result<FilSettings> {
        let model_type = match string(config, "model_type") {
            None => ModelType::Xgboost,
            Some(v) => *ModelType::ALL
                .iter()
                .find(|t| t.name() == v)
                .ok_or_else(|| {
                    Error::unsupported(format!(
                        "{v} not recognized as a valid serialization format."
                    ))
                })?,
        };
        // Triton 25.09: a valid output_class wins and is_classifier is not
        // read; before, output_class was the only name.
        let classifier = match string(config, "output_class") {
            Some("true") => true,
            Some("false") => false,
            _ => boolean(config, "is_classifier")?.ok_or_else(|| {
                Error::invalid_arg(
                    "Required parameter is_classifier not found in config (or output_class, its name before Triton 25.09)",
                )
            })?,
        };
        let threshold = if classifier {
            number::<f64>(config, "threshold")?.unwrap_or(0.5)
        } else {
            0.5
        };
        let predict_proba = boolean(config, "predict_proba")?.unwrap_or(false);
        let threads = number::<i64>(config, "cpu_nthread")?.unwrap_or(-1).max(0) as usize;
        let mut notes = Vec::new();
        let name = &config.name;
        if let Some(on) = boolean(config, "use_experimental_optimizations")? {
            notes.push(format!(
                "model '{name}': use_experimental_optimizations={on} changes nothing: trtis has one CPU engine for trees"
            ));
        }
        if boolean(config, "xgboost_allow_unknown_field")?.is_some() {
            notes.push(format!(
                "model '{name}': xgboost_allow_unknown_field changes nothing: trtis reads the fields it needs from an XGBoost model and skips any other"
            ));
        }
        for (key, allowed) in [
            (
                "algo",
                &["ALGO_AUTO", "NAIVE", "TREE_REORG", "BATCH_TREE_REORG"][..],
            ),
            ("storage_type", &["AUTO", "DENSE", "SPARSE", "SPARSE8"][..]),
            (
                "layout",
                &[
                    "depth_first",
                    "breadth_first",
                    "layered",
                    "layered_children_together",
                ][..],
            ),
        ] {
            if let Some(v) = string(config, key) {
                if !allowed.contains(&v) {
                    let what = match key {
                        "algo" => "Unknown FIL algorithm name",
                        "storage_type" => "Unknown FIL storage type name",
                        _ => "Unknown nvForest layout name",
                    };
                    return Err(Error::invalid_arg(format!("{what}: {v}")));
                }
            }
        }
        for key in [
            "blocks_per_sm",
            "threads_per_tree",
            "transfer_threshold",
            "chunk_size",
        ] {
            number::<i64>(config, key)?;
        }
        for key in [
            "algo",
            "storage_type",
            "layout",
            "blocks_per_sm",
            "threads_per_tree",
            "transfer_threshold",
            "chunk_size",
        ] {
            if config.parameters.contains_key(key) {
                notes.push(format!(
                    "model '{name}': {key} tunes FIL on a GPU; this model's instances run on the CPU, where it changes nothing"
                ));
            }
        }
        Ok(FilSettings {
            model_type,
            classifier,
            threshold,
            predict_proba,
            threads,
            notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::pb::ModelParameter;

    fn config(params: &[(&str, &str)]) -> ModelConfig {
        let mut c = ModelConfig {
            name: "m".into(),
            backend: "fil".into(),
            ..Default::default()
        };
        for (k, v) in params {
            c.parameters.insert(
                k.to_string(),
                ModelParameter {
                    string_value: v.to_string(),
                },
            );
        }
        c
    }

    #[test]
    fn the_catalog_lists_the_parameters_read_here() {
        assert_eq!(
            crate::core::config::catalog::parameter_names("fil"),
            PARAMETERS
        );
    }

    #[test]
    fn tritons_defaults_and_names() {
        let s = FilSettings::from_config(&config(&[("output_class", "true")])).unwrap();
        assert_eq!(s.model_type, ModelType::Xgboost);
        assert!(s.classifier && !s.predict_proba);
        assert_eq!((s.threshold, s.threads), (0.5, 0));
        // output_class wins over is_classifier, as in Triton 25.09.
        let s = FilSettings::from_config(&config(&[
            ("output_class", "false"),
            ("is_classifier", "true"),
            ("model_type", "lightgbm"),
            ("cpu_nthread", "3"),
        ]))
        .unwrap();
        assert!(!s.classifier);
        assert_eq!((s.model_type.default_file(), s.threads), ("model.txt", 3));
    }

    #[test]
    fn bad_values_get_tritons_words() {
        let e = |p: &[(&str, &str)]| FilSettings::from_config(&config(p)).unwrap_err().message;
        assert!(e(&[]).starts_with("Required parameter is_classifier not found in config"));
        assert_eq!(
            e(&[("is_classifier", "True")]),
            "Expected 'true' or 'false' for parameter 'is_classifier', got: 'True'"
        );
        assert_eq!(
            e(&[("is_classifier", "true"), ("model_type", "pickle")]),
            "pickle not recognized as a valid serialization format."
        );
        assert_eq!(
            e(&[("is_classifier", "true"), ("threshold", "half")]),
            "Bad input for parameter threshold"
        );
        assert_eq!(
            e(&[("is_classifier", "true"), ("algo", "FAST")]),
            "Unknown FIL algorithm name: FAST"
        );
    }

    #[test]
    fn gpu_tuning_is_noted_not_ignored() {
        let s = FilSettings::from_config(&config(&[
            ("is_classifier", "true"),
            ("storage_type", "SPARSE"),
            ("threads_per_tree", "4"),
            ("use_experimental_optimizations", "true"),
        ]))
        .unwrap();
        assert_eq!(s.notes.len(), 3, "{:?}", s.notes);
        assert!(s
            .notes
            .iter()
            .any(|n| n.contains("storage_type tunes FIL on a GPU")));
    }
}
