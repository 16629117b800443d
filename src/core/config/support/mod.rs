//! What trtis does with each part of a model configuration, in one place.
//!
//! Every field of `ModelConfig` is one of:
//! - honoured: it does what Triton does (most of the schema);
//! - honoured because there is nothing to do: settings that only act on a
//!   GPU instance or GPU memory (`optimization.cuda`, pinned memory,
//!   `gather_kernel_buffer_threshold`, `cc_model_filenames`, a state's
//!   buffer hints) do nothing for a CPU instance, in Triton as here, and a
//!   GPU instance is refused elsewhere when there is no GPU;
//! - refused: the model does not load, and the finding says why (an error);
//! - a warning: serving stays correct, but a setting that only tunes speed
//!   has no effect here.
//!
//! `check` turns a normalized config into those findings, one file per
//! config section (as `config/validate/` is split). `validate-config`
//! and `serve` both run it through `repository::check`, so what one passes
//! the other loads. docs/model-configuration.md is the
//! same table in prose; keep the two together.

mod backend;
mod instance_group;
mod io;
mod optimization;
mod top_level;

use crate::core::config::{Issue, ModelConfig};

use super::catalog;
use super::normalize::ENSEMBLE_PLATFORM;

/// The findings about what this server does not do of `config` (already
/// normalized: the backend is known), section by section.
pub fn check(config: &ModelConfig) -> Vec<Issue> {
    let mut out = Findings::default();
    let ensemble = config.platform == ENSEMBLE_PLATFORM;
    let spec = catalog::spec(&config.backend);
    backend::found(config, spec, ensemble, &mut out);
    io::check(config, &mut out);
    optimization::check(config, spec, &mut out);
    top_level::ensemble(config, &mut out);
    instance_group::check(config, &mut out);
    backend::reads(config, spec, ensemble, &mut out);
    top_level::check(config, &mut out);
    out.0
}

/// The findings of one config, in the order the sections add them.
#[derive(Default)]
struct Findings(Vec<Issue>);

impl Findings {
    /// What this server does not do: the model does not load.
    fn refuse(&mut self, field: impl Into<String>, why: &str) {
        self.0.push(Issue::error(
            field,
            format!("not supported by trtis: {why}"),
        ));
    }

    /// A setting that only tunes speed and has no effect here.
    fn hint(&mut self, field: impl Into<String>, why: &str) {
        self.0.push(Issue::warning(
            field,
            format!("has no effect in trtis: {why}"),
        ));
    }

    /// Any other finding, with its own words.
    fn push(&mut self, issue: Issue) {
        self.0.push(issue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::catalog::LIST_BACKEND_STATE;
    use crate::core::config::pb;
    use crate::core::config::Severity;

    fn onnx() -> ModelConfig {
        ModelConfig {
            name: "m".into(),
            platform: "onnxruntime_onnx".into(),
            backend: "onnxruntime".into(),
            ..Default::default()
        }
    }

    fn fields(issues: &[Issue], severity: Severity) -> Vec<String> {
        issues
            .iter()
            .filter(|i| i.severity == severity)
            .map(|i| i.field.clone())
            .collect()
    }

    #[test]
    fn a_plain_model_is_fully_honoured() {
        assert!(check(&onnx()).is_empty());
        let ensemble = ModelConfig {
            platform: ENSEMBLE_PLATFORM.into(),
            ..Default::default()
        };
        assert!(check(&ensemble).is_empty());
    }

    #[test]
    fn unknown_backends_and_runtimes_are_refused_with_tritons_message() {
        let mut c = onnx();
        c.backend = "tensorrt".into();
        let issues = check(&c);
        assert_eq!(fields(&issues, Severity::Error), ["backend"]);
        assert!(issues[0]
            .message
            .starts_with("unable to find backend library for backend 'tensorrt'"));
        let mut c = onnx();
        c.runtime = "libtriton_onnxruntime.so".into();
        assert!(check(&c).is_empty(), "the default runtime is fine");
        c.runtime = "model.py".into();
        assert_eq!(fields(&check(&c), Severity::Error), ["runtime"]);
    }

    #[test]
    fn each_unsupported_section_is_refused_at_its_field() {
        let mut c = onnx();
        c.model_transaction_policy = Some(pb::ModelTransactionPolicy { decoupled: true });
        c.instance_group = vec![pb::ModelInstanceGroup {
            passive: true,
            ..Default::default()
        }];
        c.input = vec![pb::ModelInput {
            is_shape_tensor: true,
            ..Default::default()
        }];
        assert_eq!(
            fields(&check(&c), Severity::Error),
            [
                "input[0].is_shape_tensor",
                "instance_group[0].passive",
                "model_transaction_policy.decoupled",
            ]
        );
    }

    #[test]
    fn speed_hints_and_unread_parameters_are_warnings() {
        let mut c = onnx();
        c.parameters.insert(
            "intra_op_thread_count".into(),
            pb::ModelParameter {
                string_value: "1".into(),
            },
        );
        c.parameters.insert(
            "no_such_knob".into(),
            pb::ModelParameter {
                string_value: "1".into(),
            },
        );
        c.optimization = Some(pb::ModelOptimizationPolicy {
            eager_batching: true,
            ..Default::default()
        });
        let issues = check(&c);
        assert!(fields(&issues, Severity::Error).is_empty());
        assert_eq!(
            fields(&issues, Severity::Warning),
            [
                "optimization.eager_batching",
                "parameters[\"no_such_knob\"]",
            ]
        );
    }

    #[test]
    fn reshape_is_refused_where_the_tensor_is_ragged_or_scattered() {
        let mut c = onnx();
        let reshape = Some(pb::ModelTensorReshape { shape: vec![4] });
        c.input = vec![pb::ModelInput {
            name: "IN".into(),
            allow_ragged_batch: true,
            reshape: reshape.clone(),
            ..Default::default()
        }];
        c.output = vec![pb::ModelOutput {
            name: "OUT".into(),
            reshape,
            ..Default::default()
        }];
        c.batch_output = vec![pb::BatchOutput {
            target_name: vec!["OUT".into()],
            ..Default::default()
        }];
        assert_eq!(
            fields(&check(&c), Severity::Error),
            ["input[0].reshape", "output[0].reshape"]
        );
    }

    #[test]
    fn a_python_sequence_model_is_served_but_not_with_implicit_state() {
        use pb::model_config::SchedulingChoice;
        let mut c = ModelConfig {
            name: "m".into(),
            backend: "python".into(),
            ..Default::default()
        };
        let mut sequence = pb::ModelSequenceBatching::default();
        c.scheduling_choice = Some(SchedulingChoice::SequenceBatching(sequence.clone()));
        assert!(check(&c).is_empty(), "{:?}", check(&c));
        sequence.state = vec![Default::default()];
        c.scheduling_choice = Some(SchedulingChoice::SequenceBatching(sequence));
        let issues = check(&c);
        assert_eq!(
            fields(&issues, Severity::Error),
            ["sequence_batching.state"]
        );
        assert!(issues[0].message.contains(LIST_BACKEND_STATE));
        // Another backend carries the state itself.
        c.backend = "onnxruntime".into();
        c.platform = "onnxruntime_onnx".into();
        assert!(fields(&check(&c), Severity::Error).is_empty());
    }
}
