//! Static validation of a normalized [`ModelConfig`]: every rule of Triton's
//! `ValidateModelConfig`, `ValidateModelIOConfig`, `ValidateInstanceGroup`,
//! `ValidateEnsembleSchedulingConfig` and the sequence-batcher state checks
//! that need no loaded backend (facts file §2.5). Messages follow Triton's
//! text; each [`Issue`] names the field path it is about.
//!
//! Checks that need the file system (version directories, model and label
//! files, initial-state file sizes) or other models (ensemble steps) live in
//! `core::repository::check`.
//!
//! The rules are split by the part of the config they are about: the
//! top-level fields and file references (`top_level`), dynamic and sequence
//! batching (`batching`), ensemble scheduling (`ensemble`), inputs and
//! outputs (`io`) and instance groups (`instance_group`).

mod batching;
mod ensemble;
mod instance_group;
mod io;
mod top_level;

use super::diagnostic::{Issue, Severity};
use super::normalize::ENSEMBLE_PLATFORM;
use super::pb::{model_config::SchedulingChoice, DataType, ModelConfig};

pub use top_level::is_contained_path;

/// What validation needs to know about the machine.
#[derive(Debug, Clone, Copy)]
pub struct ValidateContext {
    /// The GPU ids this server may use.
    pub gpus: &'static [i32],
    /// How to report a KIND_GPU group that this machine cannot run: an error
    /// for `serve` (as Triton refuses it), a warning for `validate-config`
    /// (the config may be meant for another machine).
    pub missing_gpu: Severity,
    /// The least compute capability of the GPUs in `gpus` (6.0, or
    /// `--min-supported-compute-capability`), for the messages.
    pub min_compute_capability: f64,
}

/// Every problem found in `config`, which must already be normalized.
pub fn validate(config: &ModelConfig, ctx: &ValidateContext) -> Vec<Issue> {
    let mut v = Validator {
        config,
        name: &config.name,
        issues: Vec::new(),
    };
    v.top_level();
    v.file_references();
    match &config.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(db)) => v.dynamic_batching(db),
        Some(SchedulingChoice::SequenceBatching(sb)) => v.sequence_batching(sb),
        _ => {}
    }
    v.ensemble();
    v.io();
    if config.platform != ENSEMBLE_PLATFORM {
        v.instance_groups(ctx);
    }
    v.issues
}

/// The protobuf name of a data type (`TYPE_FP32`).
pub fn data_type_name(dt: i32) -> &'static str {
    DataType::try_from(dt)
        .map(|d| d.as_str_name())
        .unwrap_or("TYPE_INVALID")
}

struct Validator<'c> {
    config: &'c ModelConfig,
    name: &'c str,
    issues: Vec<Issue>,
}

impl Validator<'_> {
    fn error(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.issues.push(Issue::error(field, message));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const CTX: ValidateContext = ValidateContext {
        gpus: &[],
        missing_gpu: Severity::Error,
        min_compute_capability: 6.0,
    };

    fn messages(config: &ModelConfig) -> Vec<String> {
        validate(config, &CTX)
            .into_iter()
            .map(|i| i.message)
            .collect()
    }

    /// Rules 1, 5 and the empty-group half of 28 cannot fail from a file,
    /// because normalization fills those fields in (as in Triton); the
    /// validator still checks them for configs built in code.
    #[test]
    fn rules_that_normalization_makes_unreachable() {
        let config = ModelConfig {
            backend: "identity".into(),
            ..Default::default()
        };
        let m = messages(&config);
        assert!(
            m.contains(&"model configuration must specify 'name'".to_string()),
            "{m:?}"
        );
        assert!(
            m.contains(&"must specify 'version policy' for ".to_string()),
            "{m:?}"
        );
        assert!(
            m.contains(&"must specify one or more 'instance group's for ".to_string()),
            "{m:?}"
        );
    }
}
