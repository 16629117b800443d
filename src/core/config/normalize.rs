//! Triton's normalization, done once before validation and before loading:
//! what a config means when it leaves fields out.
//!
//! This follows Triton's `AutoCompleteBackendFields`, `NormalizeModelConfig`
//! and `NormalizeInstanceGroup` (facts file §2.4). It is the single place
//! where defaults are applied; validation and the server see its output.

use super::catalog::{self, CpuCount};
use super::diagnostic::Issue;
use super::pb::{
    model_config::SchedulingChoice, model_instance_group::Kind, model_optimization_policy,
    model_sequence_batching::StrategyChoice, model_version_policy, ModelConfig, ModelInstanceGroup,
    ModelOptimizationPolicy, ModelVersionPolicy,
};

/// The platform Triton names for the ensemble scheduler.
pub const ENSEMBLE_PLATFORM: &str = "ensemble";

/// What normalization needs to know about the model on disk and the machine.
#[derive(Debug, Clone, Default)]
pub struct NormalizeContext {
    /// The model's directory name (its name in the repository).
    pub model_name: String,
    /// File and directory names inside the first version directory, if any.
    pub first_version_entries: Vec<String>,
    /// The GPU ids this server may use.
    pub gpus: &'static [i32],
    /// The backends that run KIND_GPU instances in this installation (set
    /// only when there is a GPU): KIND_AUTO resolves to KIND_GPU for them.
    pub gpu_backends: &'static [&'static str],
}

/// Applies Triton's defaults in place. Fails only when the backend cannot be
/// determined at all.
pub fn normalize(config: &mut ModelConfig, ctx: &NormalizeContext) -> Result<(), Issue> {
    if config.name.is_empty() {
        config.name = ctx.model_name.clone();
    }
    complete_backend_fields(config, ctx)?;
    normalize_model_config(config);
    if config.platform != ENSEMBLE_PLATFORM {
        normalize_instance_groups(config, ctx.gpus, ctx.gpu_backends);
    }
    Ok(())
}

fn has_entry(ctx: &NormalizeContext, name: &str) -> bool {
    ctx.first_version_entries.iter().any(|e| e == name)
}

/// Fills in `platform`, `backend` and `default_model_filename` from each
/// other, from the files in the first version directory, or from a model
/// name of the form `model.<backend>`.
fn complete_backend_fields(config: &mut ModelConfig, ctx: &NormalizeContext) -> Result<(), Issue> {
    if config.platform == ENSEMBLE_PLATFORM {
        return Ok(());
    }
    // Which known format does the config (or the directory) point at?
    let named_or_present = |file: &str| {
        config.default_model_filename == file
            || (config.default_model_filename.is_empty() && has_entry(ctx, file))
    };
    // The formats of the catalog: (platform, backend, default file).
    let format = if !config.platform.is_empty() {
        catalog::formats().find(|(platform, _, _)| *platform == config.platform)
    } else if !config.backend.is_empty() {
        let mut of_backend =
            catalog::formats().filter(|(_, backend, _)| *backend == config.backend);
        // A backend whose file alone decides its format (TensorFlow's two)
        // has no default.
        let has_default = catalog::spec(&config.backend).is_none_or(|s| !s.format_from_file_only);
        of_backend
            .clone()
            .find(|(_, _, file)| named_or_present(file))
            .or_else(|| of_backend.next().filter(|_| has_default))
    } else {
        catalog::formats().find(|(_, _, file)| named_or_present(file))
    };
    if let Some((platform, backend, file)) = format {
        if config.platform.is_empty() && !platform.is_empty() {
            config.platform = platform.to_string();
        }
        if config.backend.is_empty() {
            config.backend = backend.to_string();
        }
        if config.default_model_filename.is_empty() {
            config.default_model_filename = file.to_string();
        }
        return Ok(());
    }
    if config.backend.is_empty()
        && config.platform.is_empty()
        && config.default_model_filename.is_empty()
    {
        match ctx.model_name.split_once('.') {
            Some((_, backend)) if !backend.is_empty() => {
                config.backend = backend.to_string();
                config.default_model_filename = format!("model.{backend}");
            }
            _ => {
                return Err(Issue::error(
                    "backend",
                    format!(
                        "Invalid model name: Could not determine backend for model '{}' with no \
                         backend in model configuration. Expected model name of the form \
                         'model.<backend_name>'.",
                        ctx.model_name
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// Version policy, preferred batch sizes, sequence idle time, pinned memory.
fn normalize_model_config(config: &mut ModelConfig) {
    if config.version_policy.is_none() {
        config.version_policy = Some(ModelVersionPolicy {
            policy_choice: Some(model_version_policy::PolicyChoice::Latest(
                model_version_policy::Latest { num_versions: 1 },
            )),
        });
    }
    let max_batch_size = config.max_batch_size;
    match &mut config.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(db))
            if db.preferred_batch_size.is_empty() && max_batch_size > 0 =>
        {
            db.preferred_batch_size.push(max_batch_size);
        }
        Some(SchedulingChoice::SequenceBatching(sb)) => {
            if sb.max_sequence_idle_microseconds == 0 {
                sb.max_sequence_idle_microseconds = 1_000_000;
            }
            if let Some(StrategyChoice::Oldest(oldest)) = &mut sb.strategy_choice {
                if oldest.preferred_batch_size.is_empty() && max_batch_size > 0 {
                    oldest.preferred_batch_size.push(max_batch_size);
                }
            }
        }
        _ => {}
    }
    if config.platform != ENSEMBLE_PLATFORM {
        let opt = config
            .optimization
            .get_or_insert_with(ModelOptimizationPolicy::default);
        let enabled = || Some(model_optimization_policy::PinnedMemoryBuffer { enable: true });
        if opt.input_pinned_memory.is_none() {
            opt.input_pinned_memory = enabled();
        }
        if opt.output_pinned_memory.is_none() {
            opt.output_pinned_memory = enabled();
        }
    }
}

/// One group when none is given, KIND_AUTO resolved, counts and names
/// defaulted, KIND_GPU without ids given every GPU.
fn normalize_instance_groups(config: &mut ModelConfig, all_gpus: &[i32], gpu_backends: &[&str]) {
    if config.instance_group.is_empty() {
        config.instance_group.push(ModelInstanceGroup {
            name: config.name.clone(),
            ..Default::default()
        });
    }
    for (i, group) in config.instance_group.iter_mut().enumerate() {
        if group.name.is_empty() {
            group.name = format!("{}_{}", config.name, i);
        }
        if group.kind == Kind::Auto as i32 {
            // Triton resolves KIND_AUTO to KIND_GPU whenever there is a GPU
            // and leaves the rest to the backend. Here a backend of this
            // build gets KIND_GPU only if it can run there in this
            // installation (the ONNX Runtime library with its CUDA
            // provider, libtorch with CUDA): a model without an instance
            // group still loads on a GPU machine with the CPU builds. A
            // backend this build lacks resolves as in Triton.
            let gpus_exist = group.gpus.iter().all(|g| all_gpus.contains(g));
            let backend = config.backend.as_str();
            let can = gpu_backends.contains(&backend) || !catalog::is_built(backend);
            if !all_gpus.is_empty() && gpus_exist && can {
                group.kind = Kind::Gpu as i32;
            } else {
                group.kind = Kind::Cpu as i32;
            }
        }
        if group.kind == Kind::Gpu as i32 && group.gpus.is_empty() {
            group.gpus = all_gpus.to_vec();
        }
        if group.count < 1 {
            // Triton gives a CPU group of tensorflow and onnxruntime models
            // two instances. An onnxruntime instance here uses every core
            // by default (intra_op_thread_count unset), so two of them
            // contend for the cores and each holds its own copy of the
            // weights in the caches: one instance measured 1.06-1.37x the
            // throughput of two on a compute-bound model at concurrency 1
            // to 32, with p99 0.44-0.84x (scripts/bench.sh compute, 2
            // cores). With the thread count set, or with the sequence
            // batcher (whose instances are its slots), Triton's two.
            let threads_set = config.parameters.contains_key("intra_op_thread_count");
            let sequences = matches!(
                config.scheduling_choice,
                Some(SchedulingChoice::SequenceBatching(_))
            );
            let two = match catalog::spec(&config.backend).map(|s| s.cpu_count) {
                Some(CpuCount::Two) => true,
                Some(CpuCount::TwoWhenThreadsOrSequences) => threads_set || sequences,
                _ => false,
            };
            let two_on_cpu = group.kind == Kind::Cpu as i32 && two;
            group.count = if two_on_cpu { 2 } else { 1 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::pb::{ModelDynamicBatching, ModelSequenceBatching};

    fn ctx(name: &str, entries: &[&str], gpus: usize) -> NormalizeContext {
        NormalizeContext {
            model_name: name.into(),
            first_version_entries: entries.iter().map(|s| s.to_string()).collect(),
            gpus: &[0, 1, 2, 3][..gpus],
            gpu_backends: &["onnxruntime", "pytorch", "python"],
        }
    }

    #[test]
    fn name_and_backend_from_directory_and_file() {
        let mut c = ModelConfig::default();
        normalize(&mut c, &ctx("resnet", &["model.onnx"], 0)).unwrap();
        assert_eq!(c.name, "resnet");
        assert_eq!(c.platform, "onnxruntime_onnx");
        assert_eq!(c.backend, "onnxruntime");
        assert_eq!(c.default_model_filename, "model.onnx");
    }

    #[test]
    fn platform_gives_backend_and_backend_gives_platform() {
        let mut c = ModelConfig {
            platform: "tensorrt_plan".into(),
            ..Default::default()
        };
        normalize(&mut c, &ctx("m", &[], 0)).unwrap();
        assert_eq!(
            (c.backend.as_str(), c.default_model_filename.as_str()),
            ("tensorrt", "model.plan")
        );

        let mut c = ModelConfig {
            backend: "onnxruntime".into(),
            ..Default::default()
        };
        normalize(&mut c, &ctx("m", &[], 0)).unwrap();
        assert_eq!(c.platform, "onnxruntime_onnx");

        let mut c = ModelConfig {
            backend: "python".into(),
            ..Default::default()
        };
        normalize(&mut c, &ctx("m", &[], 0)).unwrap();
        assert_eq!(
            (c.platform.as_str(), c.default_model_filename.as_str()),
            ("", "model.py")
        );
    }

    #[test]
    fn tensorflow_platform_comes_from_the_file() {
        let mut c = ModelConfig {
            backend: "tensorflow".into(),
            ..Default::default()
        };
        normalize(&mut c, &ctx("m", &["model.savedmodel"], 0)).unwrap();
        assert_eq!(c.platform, "tensorflow_savedmodel");
    }

    #[test]
    fn backend_from_model_name_or_an_error() {
        let mut c = ModelConfig::default();
        normalize(&mut c, &ctx("add.identity", &[], 0)).unwrap();
        assert_eq!(
            (c.backend.as_str(), c.default_model_filename.as_str()),
            ("identity", "model.identity")
        );

        let mut c = ModelConfig::default();
        let err = normalize(&mut c, &ctx("mystery", &["weights.bin"], 0)).unwrap_err();
        assert!(
            err.message
                .contains("Could not determine backend for model 'mystery'"),
            "{}",
            err.message
        );
    }

    #[test]
    fn defaults_for_policy_batching_and_sequences() {
        let mut c = ModelConfig {
            backend: "identity".into(),
            max_batch_size: 8,
            scheduling_choice: Some(SchedulingChoice::DynamicBatching(
                ModelDynamicBatching::default(),
            )),
            ..Default::default()
        };
        normalize(&mut c, &ctx("m", &[], 0)).unwrap();
        assert!(matches!(
            c.version_policy.as_ref().unwrap().policy_choice,
            Some(model_version_policy::PolicyChoice::Latest(
                model_version_policy::Latest { num_versions: 1 }
            ))
        ));
        let Some(SchedulingChoice::DynamicBatching(db)) = &c.scheduling_choice else {
            panic!()
        };
        assert_eq!(db.preferred_batch_size, vec![8]);
        let opt = c.optimization.unwrap();
        assert!(
            opt.input_pinned_memory.unwrap().enable && opt.output_pinned_memory.unwrap().enable
        );

        let mut c = ModelConfig {
            backend: "identity".into(),
            scheduling_choice: Some(SchedulingChoice::SequenceBatching(
                ModelSequenceBatching::default(),
            )),
            ..Default::default()
        };
        normalize(&mut c, &ctx("m", &[], 0)).unwrap();
        let Some(SchedulingChoice::SequenceBatching(sb)) = &c.scheduling_choice else {
            panic!()
        };
        assert_eq!(sb.max_sequence_idle_microseconds, 1_000_000);
    }

    #[test]
    fn instance_groups_default_and_resolve() {
        let mut c = ModelConfig {
            platform: "onnxruntime_onnx".into(),
            ..Default::default()
        };
        normalize(&mut c, &ctx("m", &[], 0)).unwrap();
        assert_eq!(c.instance_group.len(), 1);
        let g = &c.instance_group[0];
        // One instance using every core (Triton: two, see the rule).
        assert_eq!(
            (g.name.as_str(), g.kind, g.count),
            ("m", Kind::Cpu as i32, 1)
        );
        // With the thread count set, Triton's two.
        let mut c = ModelConfig {
            platform: "onnxruntime_onnx".into(),
            parameters: [(
                "intra_op_thread_count".to_string(),
                crate::core::config::pb::ModelParameter {
                    string_value: "1".into(),
                },
            )]
            .into(),
            ..Default::default()
        };
        normalize(&mut c, &ctx("m", &[], 0)).unwrap();
        assert_eq!(c.instance_group[0].count, 2);
        // With the sequence batcher (its instances are its slots), two.
        let mut c = ModelConfig {
            platform: "onnxruntime_onnx".into(),
            scheduling_choice: Some(SchedulingChoice::SequenceBatching(Default::default())),
            ..Default::default()
        };
        normalize(&mut c, &ctx("m", &[], 0)).unwrap();
        assert_eq!(c.instance_group[0].count, 2);

        let mut c = ModelConfig {
            platform: "tensorrt_plan".into(),
            instance_group: vec![
                ModelInstanceGroup::default(),
                ModelInstanceGroup {
                    kind: Kind::Gpu as i32,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        normalize(&mut c, &ctx("m", &[], 2)).unwrap();
        assert_eq!(c.instance_group[0].name, "m_0");
        assert_eq!(c.instance_group[0].kind, Kind::Gpu as i32);
        assert_eq!(c.instance_group[1].gpus, vec![0, 1]);
        assert_eq!(c.instance_group[1].count, 1);

        // With a GPU, KIND_AUTO is KIND_GPU for a backend that runs on one
        // (and for one this build lacks), KIND_CPU for a CPU-only one.
        for (backend, kind) in [
            ("onnxruntime", Kind::Gpu),
            ("python", Kind::Gpu),
            ("pytorch", Kind::Gpu),
            ("identity", Kind::Cpu),
            ("custom", Kind::Cpu),
        ] {
            let mut c = ModelConfig {
                backend: backend.into(),
                ..Default::default()
            };
            normalize(&mut c, &ctx("m", &[], 1)).unwrap();
            assert_eq!(c.instance_group[0].kind, kind as i32, "{backend}");
        }
        // An installation whose ONNX Runtime has no CUDA provider: KIND_CPU.
        let mut c = ModelConfig {
            backend: "onnxruntime".into(),
            ..Default::default()
        };
        let mut cpu_ort = ctx("m", &[], 1);
        cpu_ort.gpu_backends = &["python"];
        normalize(&mut c, &cpu_ort).unwrap();
        assert_eq!(c.instance_group[0].kind, Kind::Cpu as i32);
    }

    #[test]
    fn ensembles_get_no_instance_group_or_pinned_memory() {
        let mut c = ModelConfig {
            platform: ENSEMBLE_PLATFORM.into(),
            ..Default::default()
        };
        normalize(&mut c, &ctx("e", &[], 0)).unwrap();
        assert!(c.instance_group.is_empty());
        assert!(c.optimization.is_none());
        assert!(c.backend.is_empty());
    }
}
