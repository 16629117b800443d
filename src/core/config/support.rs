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
//! `check` turns a normalized config into those findings. `validate-config`
//! and `serve` both run it through `repository::check`, so what one passes
//! the other loads. docs/model-configuration.md is the
//! same table in prose; keep the two together.

use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::pb::model_instance_group::Kind;
use crate::core::config::pb::model_optimization_policy::ModelPriority;
use crate::core::config::{Issue, ModelConfig};

use super::catalog::{self, Availability, Parameters};
use super::normalize::ENSEMBLE_PLATFORM;

/// The findings about what this server does not do of `config` (already
/// normalized: the backend is known).
pub fn check(config: &ModelConfig) -> Vec<Issue> {
    let mut out = Vec::new();
    let ensemble = config.platform == ENSEMBLE_PLATFORM;
    let refuse = |out: &mut Vec<Issue>, field: String, why: &str| {
        out.push(Issue::error(
            field,
            format!("not supported by trtis: {why}"),
        ));
    };
    let hint = |out: &mut Vec<Issue>, field: String, why: &str| {
        out.push(Issue::warning(
            field,
            format!("has no effect in trtis: {why}"),
        ));
    };

    let spec = catalog::spec(&config.backend);
    let built = spec.filter(|s| s.availability == Availability::Built);
    if !ensemble && built.is_none() {
        // Triton's message for a backend it cannot find.
        let why = spec
            .map_or(Availability::NotBuilt, |s| s.availability)
            .refusal();
        out.push(Issue::error(
            "backend",
            format!(
                "unable to find backend library for backend '{}'{why}",
                config.backend
            ),
        ));
    }
    let default_runtime = format!("libtriton_{}.so", config.backend);
    if !config.runtime.is_empty() && config.runtime != default_runtime {
        refuse(
            &mut out,
            "runtime".into(),
            "backends are built into the server; a backend's runtime can only be its default",
        );
    }

    for (i, input) in config.input.iter().enumerate() {
        let field = format!("input[{i}]");
        if input.reshape.is_some() && input.allow_ragged_batch {
            refuse(
                &mut out,
                format!("{field}.reshape"),
                "a ragged input reaches the model flattened, so it cannot also be reshaped",
            );
        }
        if input.is_shape_tensor {
            refuse(
                &mut out,
                format!("{field}.is_shape_tensor"),
                "shape tensors are a TensorRT feature",
            );
        }
        if input.is_non_linear_format_io {
            refuse(
                &mut out,
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
            refuse(
                &mut out,
                format!("{field}.reshape"),
                "an output scattered by batch_output cannot also be reshaped",
            );
        }
        if output.is_shape_tensor {
            refuse(
                &mut out,
                format!("{field}.is_shape_tensor"),
                "shape tensors are a TensorRT feature",
            );
        }
        if output.is_non_linear_format_io {
            refuse(
                &mut out,
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
        refuse(
            &mut out,
            "batch_input".into(),
            "batch inputs are supported with the default scheduler and the dynamic batcher, not with the sequence batcher",
        );
    }
    if sequence && !config.batch_output.is_empty() {
        refuse(
            &mut out,
            "batch_output".into(),
            "batch outputs are supported with the default scheduler and the dynamic batcher, not with the sequence batcher",
        );
    }

    if let Some(o) = &config.optimization {
        if o.graph.as_ref().is_some_and(|g| g.level != 0)
            && !spec.is_some_and(|s| s.graph_optimization)
        {
            hint(
                &mut out,
                "optimization.graph.level".into(),
                &format!(
                    "the '{}' backend has no graph optimizations",
                    config.backend
                ),
            );
        }
        if o.priority != ModelPriority::PriorityDefault as i32 {
            hint(
                &mut out,
                "optimization.priority".into(),
                "it orders GPU work, and there is no GPU work here",
            );
        }
        if o.eager_batching {
            hint(
                &mut out,
                "optimization.eager_batching".into(),
                "the dynamic batcher forms a batch whenever an instance is free",
            );
        }
        if let Some(accel) = &o.execution_accelerators {
            let on_gpu = config
                .instance_group
                .iter()
                .any(|g| g.kind == Kind::Gpu as i32);
            for (j, a) in accel.gpu_execution_accelerator.iter().enumerate() {
                let field =
                    format!("optimization.execution_accelerators.gpu_execution_accelerator[{j}]");
                if !spec.is_some_and(|s| s.gpu) {
                    refuse(
                        &mut out,
                        field,
                        &format!(
                            "GPU execution accelerator '{}': the '{}' backend does not run on a GPU",
                            a.name, config.backend
                        ),
                    );
                } else if !on_gpu {
                    // (Its name and parameters are checked with the
                    // backend's parameters: backend::onnx::settings.)
                    hint(
                        &mut out,
                        field,
                        &format!(
                            "GPU execution accelerator '{}' acts on KIND_GPU instances, and this model's run on the CPU",
                            a.name
                        ),
                    );
                }
            }
            for (j, a) in accel.cpu_execution_accelerator.iter().enumerate() {
                let field =
                    format!("optimization.execution_accelerators.cpu_execution_accelerator[{j}]");
                // Triton's ONNX Runtime backend offers OpenVINO as a CPU
                // accelerator; the PyPI library has no such provider, so the
                // model runs on trtis's OpenVINO backend instead
                // (backend::openvino::load_for_onnx).
                let on_openvino = a.name == "openvino"
                    && spec.is_some_and(|s| s.cpu_accelerators.contains(&"openvino"));
                if !on_openvino {
                    refuse(
                        &mut out,
                        field,
                        &format!(
                            "CPU execution accelerator '{}': the ONNX Runtime library from PyPI has no such execution provider{}",
                            a.name,
                            if a.name == "openvino" { ", and only an ONNX Runtime model is run on OpenVINO instead" } else { "" }
                        ),
                    );
                    continue;
                }
                for (k, v) in &a.parameters {
                    let cpu = k == "device_type" && (v == "CPU" || v == "CPU_FP32");
                    if !cpu {
                        refuse(
                            &mut out,
                            format!("{field}.parameters[\"{k}\"]"),
                            &format!(
                                "the OpenVINO accelerator runs the model on trtis's OpenVINO backend, on the CPU in FP32 (as ONNX Runtime's OpenVINO provider does); \
                                 '{k}: {v}' is not applied (device_type CPU or CPU_FP32 only)"
                            ),
                        );
                    }
                }
                for key in config.parameters.keys() {
                    hint(
                        &mut out,
                        format!("parameters[\"{key}\"]"),
                        "the model runs on trtis's OpenVINO backend (cpu_execution_accelerator 'openvino'), which does not read ONNX Runtime's parameters",
                    );
                }
            }
        }
    }

    if let Some(SchedulingChoice::EnsembleScheduling(e)) = &config.scheduling_choice {
        for (j, step) in e.step.iter().enumerate() {
            if !step.model_namespace.is_empty() {
                refuse(
                    &mut out,
                    format!("ensemble_scheduling.step[{j}].model_namespace"),
                    "model namespacing is not supported: model names are global",
                );
            }
        }
        if e.max_inflight_requests > 0 {
            hint(
                &mut out,
                "ensemble_scheduling.max_inflight_requests".into(),
                "an ensemble's steps are not limited in flight; each composing model's queue bounds them",
            );
        }
    }

    for (i, group) in config.instance_group.iter().enumerate() {
        let field = format!("instance_group[{i}]");
        if !group.secondary_devices.is_empty() {
            refuse(
                &mut out,
                format!("{field}.secondary_devices"),
                "secondary devices (NVDLA) are a TensorRT feature",
            );
        }
        if !group.profile.is_empty() {
            refuse(
                &mut out,
                format!("{field}.profile"),
                "optimization profiles are a TensorRT feature",
            );
        }
        if group.passive {
            refuse(
                &mut out,
                format!("{field}.passive"),
                "passive instances are not built yet",
            );
        }
        if !group.host_policy.is_empty() {
            refuse(
                &mut out,
                format!("{field}.host_policy"),
                "host policies (--host-policy) are not supported",
            );
        }
    }

    if !config.metric_tags.is_empty() {
        hint(
            &mut out,
            "metric_tags".into(),
            "Triton does not use them either; metrics carry the model and version labels",
        );
    }
    // A Python model reads any parameter from its config JSON, a custom
    // library from the serialized config it is initialized with.
    let listed = match spec.map(|s| s.parameters) {
        _ if ensemble => None,
        Some(Parameters::Any) => None,
        Some(Parameters::Listed { names, prefixes }) => Some((names, prefixes)),
        None => Some((&[][..], &[][..])),
    };
    if let Some((names, prefixes)) = listed {
        for key in config.parameters.keys() {
            let read = names.contains(&key.as_str()) || prefixes.iter().any(|p| key.starts_with(p));
            // The server's own (core::openai), for any backend.
            let server_key = key.starts_with("openai_");
            if !read && !server_key {
                hint(
                    &mut out,
                    format!("parameters[\"{key}\"]"),
                    &format!("the '{}' backend does not read it", config.backend),
                );
            }
        }
    }
    if config
        .model_operations
        .as_ref()
        .is_some_and(|o| !o.op_library_filename.is_empty())
    {
        refuse(
            &mut out,
            "model_operations.op_library_filename".into(),
            "custom operation libraries (TensorFlow's TF_LoadLibrary) are not loaded by this server",
        );
    }
    let decoupled = config
        .model_transaction_policy
        .as_ref()
        .is_some_and(|p| p.decoupled);
    if decoupled && !spec.is_some_and(|s| s.decoupled) {
        refuse(
            &mut out,
            "model_transaction_policy.decoupled".into(),
            "only Python models answer a request more than once here",
        );
    }
    // A backend that takes each batch as a list of requests (the sequence
    // batcher's control inputs, correlation id and flags come with each
    // request) has no implicit state: it works on concatenated batches.
    if let Some(why) = spec.and_then(|s| s.no_implicit_state) {
        if let Some(SchedulingChoice::SequenceBatching(s)) = &config.scheduling_choice {
            if !s.state.is_empty() {
                refuse(&mut out, "sequence_batching.state".into(), why);
            }
        }
    }
    if config
        .model_repository_agents
        .as_ref()
        .is_some_and(|a| !a.agents.is_empty())
    {
        refuse(
            &mut out,
            "model_repository_agents".into(),
            "repository agents are not supported",
        );
    }
    // The first-response histogram's buckets are applied (see
    // latency_metrics); Triton only warns about any other family.
    for (i, control) in config
        .model_metrics
        .iter()
        .flat_map(|m| &m.metric_control)
        .enumerate()
    {
        let family = control
            .metric_identifier
            .as_ref()
            .map(|m| m.family.as_str())
            .unwrap_or("");
        if !family.is_empty() && family != "nv_inference_first_response_histogram_ms" {
            hint(
                &mut out,
                format!("model_metrics.metric_control[{i}].metric_identifier.family"),
                &format!(
                    "Metric family '{family}' in 'metric_identifier' is not a customizable metric in Triton core."
                ),
            );
        }
    }
    out
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
