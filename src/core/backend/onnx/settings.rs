//! The ONNX Runtime settings a model's config asks for, read as Triton's
//! onnxruntime backend reads them (pure: no ONNX Runtime here, so it is
//! unit-tested and shared by the backend with and without the `onnx`
//! feature):
//!
//! - `optimization { graph { level } }`: -1 basic, 1 basic and extended,
//!   2 none, anything else (the default 0) all optimizations;
//! - `parameters`: `intra_op_thread_count` and `inter_op_thread_count` (0:
//!   ONNX Runtime's default), `execution_mode` (0 sequential, 1 parallel),
//!   `enable_mem_arena`, `enable_mem_pattern` (0/1, default 1),
//!   `memory.enable_memory_arena_shrinkage` (a run option, e.g. `cpu:0`),
//!   `session.*` (session config entries, e.g.
//!   `session.use_device_allocator_for_initializers`), and trtis's
//!   `allow_spinning` (see [`Spinning`]: by default the intra-op threads
//!   spin while a run is on, when the model's threads fit the cores);
//! - for a KIND_GPU instance ([`GpuSettings`]): the CUDA execution
//!   provider's `parameters` (`cudnn_conv_algo_search`, `gpu_mem_limit`,
//!   `arena_extend_strategy`, `do_copy_in_default_stream`) and
//!   `optimization { execution_accelerators { gpu_execution_accelerator } }`
//!   named `cuda` (its parameters are CUDA provider options) or `tensorrt`
//!   (Triton's keys mapped to the TensorRT provider's, CUDA after it for
//!   what TensorRT does not run).

use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};

/// `optimization.graph.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphLevel {
    Disabled,
    Basic,
    Extended,
    All,
}

/// What an ONNX Runtime session of the model is opened with.
#[derive(Debug, Clone, PartialEq)]
pub struct OrtSettings {
    pub intra_threads: usize,
    pub inter_threads: usize,
    pub spinning: Spinning,
    pub parallel: bool,
    pub mem_arena: bool,
    pub mem_pattern: bool,
    pub level: GraphLevel,
    /// `session.*` parameters, given to the session as config entries.
    pub session_entries: Vec<(String, String)>,
    /// `memory.enable_memory_arena_shrinkage`, set on every run.
    pub arena_shrinkage: Option<String>,
    /// What a KIND_GPU instance's session gets besides.
    pub gpu: GpuSettings,
}

/// When an instance's idle intra-op threads spin rather than sleep.
///
/// The default (`allow_spinning` unset) is [`Spinning::DuringRuns`] when the
/// model's instances times their intra-op threads fit the cores this process
/// may use, else [`Spinning::Off`]. Measured on 2 cores, one instance with
/// every core's threads, same run, against threads that always sleep
/// (`scripts/bench.sh compute`, two runs, and the classifier by hand): the
/// MLP with dynamic batching +11-25% throughput at concurrency 1, 2 and 4
/// with 9-26% less server CPU per inference (a sleeping thread is woken for
/// every operator), 0.93-1.08x at 8, 6-12% less at 16 and 32 with p99
/// 1.4-1.5x (the spinning threads keep the network threads off the cores
/// while a batch runs, so the next batch is smaller); the classifier
/// +13-15% at concurrency 1. Against Triton's figures (scaled by each machine's
/// direct ONNX Runtime rate) spinning keeps concurrency 1 and 4 at or above
/// them, where sleeping threads fell below.
/// Spinning between runs too (ONNX Runtime's own default, Triton's) cost
/// 7-11% at 32 and raised p99 1.6-1.8x at 4 and 8: the spinning threads hold the
/// cores the network threads need. Threads that do not fit the cores (two
/// instances of every core's threads) spin against each other, which cut
/// throughput at concurrency 1 to under 40%.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spinning {
    /// Idle threads sleep (`allow_spinning: "0"`).
    Off,
    /// Threads spin between the operators of a run, and stop when it ends
    /// (ONNX Runtime's `session.force_spinning_stop`).
    DuringRuns,
    /// ONNX Runtime's spinning, between runs too (`allow_spinning: "1"`).
    Always,
}

/// The execution providers of a KIND_GPU instance's session, with their
/// options under ONNX Runtime's own names (the device id is the
/// instance's, added when the session opens).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSettings {
    /// CUDA provider options: the backend's CUDA `parameters`, then a
    /// `cuda` accelerator's parameters as given.
    pub cuda: Vec<(String, String)>,
    /// TensorRT provider options, when a `tensorrt` accelerator is asked
    /// for (it runs first; CUDA takes what it does not).
    pub tensorrt: Option<Vec<(String, String)>>,
}

/// The onnxruntime backend's CUDA `parameters`, in order: each key with
/// Triton's values and the CUDA provider's value for each (None: a number
/// of bytes, passed as it is), and what a bad value is told it must be.
type CudaParameter = (
    &'static str,
    Option<&'static [(&'static str, &'static str)]>,
    &'static str,
);
const CUDA_PARAMETERS: &[CudaParameter] = &[
    (
        "cudnn_conv_algo_search",
        Some(&[("0", "EXHAUSTIVE"), ("1", "HEURISTIC"), ("2", "DEFAULT")]),
        "0 (exhaustive), 1 (heuristic) or 2 (default)",
    ),
    ("gpu_mem_limit", None, "a number of bytes"),
    (
        "arena_extend_strategy",
        Some(&[("0", "kNextPowerOfTwo"), ("1", "kSameAsRequested")]),
        "0 (next power of two) or 1 (same as requested)",
    ),
    (
        "do_copy_in_default_stream",
        Some(&[("1", "1"), ("true", "1"), ("0", "0"), ("false", "0")]),
        "0 or 1",
    ),
];

/// Triton's TensorRT accelerator keys that are ONNX Runtime's TensorRT
/// provider options under another name (the `trt_*` keys keep theirs).
const TRT_RENAMED: &[(&str, &str)] = &[
    ("max_workspace_size_bytes", "trt_max_workspace_size"),
    (
        "int8_calibration_table_name",
        "trt_int8_calibration_table_name",
    ),
    (
        "int8_use_native_calibration_table",
        "trt_int8_use_native_calibration_table",
    ),
];

/// The `trt_*` keys Triton's onnxruntime backend passes on unchanged.
const TRT_KEYS: &[&str] = &[
    "trt_max_partition_iterations",
    "trt_min_subgraph_size",
    "trt_dla_enable",
    "trt_dla_core",
    "trt_engine_cache_enable",
    "trt_engine_cache_path",
    "trt_engine_cache_prefix",
    "trt_dump_subgraphs",
    "trt_force_sequential_engine_build",
    "trt_context_memory_sharing_enable",
    "trt_layer_norm_fp32_fallback",
    "trt_timing_cache_enable",
    "trt_timing_cache_path",
    "trt_force_timing_cache",
    "trt_detailed_build_log",
    "trt_build_heuristics_enable",
    "trt_sparsity_enable",
    "trt_builder_optimization_level",
    "trt_auxiliary_streams",
    "trt_tactic_sources",
    "trt_extra_plugin_lib_paths",
    "trt_profile_min_shapes",
    "trt_profile_max_shapes",
    "trt_profile_opt_shapes",
    "trt_cuda_graph_enable",
    "trt_dump_ep_context_model",
    "trt_ep_context_file_path",
    "trt_ep_context_embed_mode",
];

impl GpuSettings {
    fn from_config(
        config: &ModelConfig,
        bad: &dyn Fn(&str, &str, &str) -> Error,
    ) -> Result<GpuSettings> {
        let param = |key: &str| config.parameters.get(key).map(|p| p.string_value.trim());
        let no_nul = |key: &str, value: &str| -> Result<()> {
            if key.contains('\0') || value.contains('\0') {
                return Err(Error::invalid_arg(format!(
                    "an execution accelerator parameter of model '{}' contains a NUL character",
                    config.name
                )));
            }
            Ok(())
        };
        let mut cuda = Vec::new();
        for (key, choices, want) in CUDA_PARAMETERS {
            if let Some(v) = param(key) {
                let value = match choices {
                    Some(choices) => choices
                        .iter()
                        .find(|(triton, _)| *triton == v)
                        .map(|(_, ort)| ort.to_string()),
                    None => v.parse::<u64>().ok().map(|bytes| bytes.to_string()),
                };
                cuda.push((key.to_string(), value.ok_or_else(|| bad(key, want, v))?));
            }
        }
        let mut tensorrt = None;
        let accelerators = config
            .optimization
            .as_ref()
            .and_then(|o| o.execution_accelerators.as_ref())
            .map(|a| a.gpu_execution_accelerator.as_slice())
            .unwrap_or_default();
        for a in accelerators {
            let mut params: Vec<(&String, &String)> = a.parameters.iter().collect();
            params.sort();
            match a.name.as_str() {
                "cuda" => {
                    for (k, v) in params {
                        no_nul(k, v)?;
                        cuda.push((k.clone(), v.clone()));
                    }
                }
                "tensorrt" => {
                    let mut options = Vec::new();
                    for (k, v) in params {
                        no_nul(k, v)?;
                        if k == "precision_mode" {
                            match v.as_str() {
                                "FP32" => {}
                                "FP16" => options.push(("trt_fp16_enable".into(), "1".into())),
                                "INT8" => options.push(("trt_int8_enable".into(), "1".into())),
                                _ => {
                                    return Err(Error::invalid_arg(format!(
                                        "unsupported precision mode '{v}' is requested for the TensorRT execution accelerator of model '{}': FP32, FP16 or INT8",
                                        config.name
                                    )))
                                }
                            }
                        } else if let Some((_, ort)) = TRT_RENAMED.iter().find(|(t, _)| t == k) {
                            options.push((ort.to_string(), v.clone()));
                        } else if TRT_KEYS.contains(&k.as_str()) {
                            options.push((k.clone(), v.clone()));
                        } else {
                            return Err(Error::invalid_arg(format!(
                                "unknown parameter '{k}' is provided for TensorRT Execution Accelerator of model '{}'",
                                config.name
                            )));
                        }
                    }
                    tensorrt = Some(options);
                }
                other => {
                    return Err(Error::invalid_arg(format!(
                        "unknown Execution Accelerator '{other}' is requested for model '{}': the onnxruntime backend knows 'tensorrt' and 'cuda'",
                        config.name
                    )))
                }
            }
        }
        Ok(GpuSettings { cuda, tensorrt })
    }
}

/// The default intra-op thread count of each instance: every core this
/// process may use, as Triton leaves ONNX Runtime's default of one thread
/// per core (its spinning: see [`Spinning`]). Measured with two
/// instances on two cores (`scripts/bench.sh compute`, the 8 x MatMul 1024
/// model, dynamic batching), against one thread per instance (the default
/// before), three runs: +20-30% throughput at concurrency 1 and 2, +9-15%
/// at 4, -6% to +4% at 8, 0-10% less at 16 and 32 (where
/// `intra_op_thread_count: 1` is the better setting). A pool of every core that the instances share (ONNX
/// Runtime's global thread pool) did no better than a pool each. Counted with
/// `available_parallelism`, which honours the CPU affinity and cgroup quota
/// a container gives, where ONNX Runtime's own default counts the host's
/// cores.
pub fn default_intra_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// [`Spinning`]'s default: during runs when every instance's threads
/// (`threads`, 0 for ONNX Runtime's default of one per core) fit the cores.
fn default_spinning(config: &ModelConfig, threads: usize) -> Spinning {
    let cores = default_intra_threads();
    let threads = if threads == 0 { cores } else { threads };
    let instances: usize = config
        .instance_group
        .iter()
        .map(|g| g.count.max(1) as usize)
        .sum::<usize>()
        .max(1);
    if instances.saturating_mul(threads) <= cores {
        Spinning::DuringRuns
    } else {
        Spinning::Off
    }
}

impl OrtSettings {
    pub fn from_config(config: &ModelConfig) -> Result<OrtSettings> {
        let param = |key: &str| config.parameters.get(key).map(|p| p.string_value.trim());
        let bad = |key: &str, want: &str, got: &str| {
            Error::invalid_arg(format!(
                "parameter '{key}' of model '{}' must be {want}, got '{got}'",
                config.name
            ))
        };
        let number = |key: &str, default: usize| -> Result<usize> {
            match param(key) {
                None => Ok(default),
                Some(v) => v.parse().map_err(|_| bad(key, "a whole number", v)),
            }
        };
        let flag = |key: &str, default: bool| -> Result<bool> {
            match param(key) {
                None => Ok(default),
                Some("1" | "true") => Ok(true),
                Some("0" | "false") => Ok(false),
                Some(v) => Err(bad(key, "0 or 1", v)),
            }
        };
        let parallel = match param("execution_mode") {
            None | Some("0") => false,
            Some("1") => true,
            Some(v) => return Err(bad("execution_mode", "0 (sequential) or 1 (parallel)", v)),
        };
        let level = match config
            .optimization
            .as_ref()
            .and_then(|o| o.graph.as_ref())
            .map(|g| g.level)
        {
            Some(-1) => GraphLevel::Basic,
            Some(1) => GraphLevel::Extended,
            Some(2) => GraphLevel::Disabled,
            _ => GraphLevel::All,
        };
        let mut session_entries: Vec<(String, String)> = config
            .parameters
            .iter()
            .filter(|(k, _)| k.starts_with("session."))
            .map(|(k, v)| (k.clone(), v.string_value.clone()))
            .collect();
        session_entries.sort();
        let intra_threads = number("intra_op_thread_count", default_intra_threads())?;
        Ok(OrtSettings {
            intra_threads,
            inter_threads: number("inter_op_thread_count", 1)?,
            spinning: match param("allow_spinning") {
                None => default_spinning(config, intra_threads),
                Some(_) if flag("allow_spinning", false)? => Spinning::Always,
                Some(_) => Spinning::Off,
            },
            parallel,
            mem_arena: flag("enable_mem_arena", true)?,
            mem_pattern: flag("enable_mem_pattern", true)?,
            level,
            session_entries,
            arena_shrinkage: param("memory.enable_memory_arena_shrinkage").map(str::to_string),
            gpu: GpuSettings::from_config(config, &bad)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::pb;

    fn config(params: &[(&str, &str)], level: Option<i32>) -> ModelConfig {
        ModelConfig {
            name: "m".into(),
            parameters: params
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        pb::ModelParameter {
                            string_value: v.to_string(),
                        },
                    )
                })
                .collect(),
            optimization: level.map(|level| pb::ModelOptimizationPolicy {
                graph: Some(pb::model_optimization_policy::Graph { level }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn defaults() {
        let s = OrtSettings::from_config(&config(&[], None)).unwrap();
        assert_eq!(s.inter_threads, 1);
        // Every core for each instance, whatever the instance count.
        let cores = std::thread::available_parallelism().unwrap().get();
        assert_eq!(s.intra_threads, cores);
        assert!(!s.parallel && s.mem_arena && s.mem_pattern);
        // One instance (the count a loaded config has by default) of every
        // core's threads: they spin while a run is on.
        assert_eq!(s.spinning, Spinning::DuringRuns);
        assert_eq!(s.level, GraphLevel::All);
        assert!(s.session_entries.is_empty() && s.arena_shrinkage.is_none());
    }

    #[test]
    fn tritons_parameters_and_levels() {
        let s = OrtSettings::from_config(&config(
            &[
                ("intra_op_thread_count", "0"),
                ("execution_mode", "1"),
                ("enable_mem_arena", "0"),
                ("enable_mem_pattern", "0"),
                ("memory.enable_memory_arena_shrinkage", "cpu:0"),
                ("session.use_device_allocator_for_initializers", "1"),
            ],
            Some(-1),
        ))
        .unwrap();
        assert_eq!(s.intra_threads, 0);
        assert!(s.parallel && !s.mem_arena && !s.mem_pattern);
        assert_eq!(s.level, GraphLevel::Basic);
        assert_eq!(s.arena_shrinkage.as_deref(), Some("cpu:0"));
        assert_eq!(
            s.session_entries,
            [(
                "session.use_device_allocator_for_initializers".to_string(),
                "1".to_string()
            )]
        );
        for (level, want) in [
            (1, GraphLevel::Extended),
            (2, GraphLevel::Disabled),
            (0, GraphLevel::All),
        ] {
            let s = OrtSettings::from_config(&config(&[], Some(level))).unwrap();
            assert_eq!(s.level, want, "level {level}");
        }
    }

    #[test]
    fn threads_spin_during_runs_when_they_fit_the_cores() {
        let cores = default_intra_threads();
        let with = |params: &[(&str, &str)], counts: &[i32]| {
            let mut c = config(params, None);
            c.instance_group = counts
                .iter()
                .map(|&count| pb::ModelInstanceGroup {
                    count,
                    ..Default::default()
                })
                .collect();
            OrtSettings::from_config(&c).unwrap().spinning
        };
        let n = cores as i32;
        let one = [("intra_op_thread_count", "1")];
        assert_eq!(with(&[], &[1]), Spinning::DuringRuns);
        assert_eq!(
            with(&[], &[2]),
            Spinning::Off,
            "two of every core's threads"
        );
        assert_eq!(
            with(&one, &[n]),
            Spinning::DuringRuns,
            "one thread each, one per core"
        );
        assert_eq!(
            with(&one, &[n, 1]),
            Spinning::Off,
            "one thread more than the cores"
        );
        assert_eq!(with(&[("allow_spinning", "1")], &[2]), Spinning::Always);
        assert_eq!(with(&[("allow_spinning", "true")], &[1]), Spinning::Always);
        assert_eq!(with(&[("allow_spinning", "0")], &[1]), Spinning::Off);
    }

    /// Every key the support table says this backend reads is read: a bad
    /// value for it fails the load.
    #[test]
    fn the_support_table_lists_what_is_read() {
        for key in crate::core::config::catalog::parameter_names("onnxruntime") {
            let e = OrtSettings::from_config(&config(&[(key, "?")], None));
            let read = e.is_err() || *key == "memory.enable_memory_arena_shrinkage";
            assert!(read, "{key} is listed but not read");
        }
    }

    fn with_accelerators(
        params: &[(&str, &str)],
        accelerators: &[(&str, &[(&str, &str)])],
    ) -> ModelConfig {
        let mut c = config(params, None);
        c.optimization = Some(pb::ModelOptimizationPolicy {
            execution_accelerators: Some(pb::model_optimization_policy::ExecutionAccelerators {
                gpu_execution_accelerator: accelerators
                    .iter()
                    .map(|(name, ps)| {
                        pb::model_optimization_policy::execution_accelerators::Accelerator {
                            name: name.to_string(),
                            parameters: ps
                                .iter()
                                .map(|(k, v)| (k.to_string(), v.to_string()))
                                .collect(),
                        }
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        });
        c
    }

    fn pairs(p: &[(String, String)]) -> Vec<(&str, &str)> {
        p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    #[test]
    fn gpu_settings_map_tritons_keys_to_onnx_runtimes() {
        // None asked for: the providers' defaults.
        let s = OrtSettings::from_config(&config(&[], None)).unwrap();
        assert_eq!(s.gpu, GpuSettings::default());
        // The CUDA parameters, then a cuda accelerator's options as given.
        let c = with_accelerators(
            &[
                ("cudnn_conv_algo_search", "1"),
                ("gpu_mem_limit", "4294967200"),
                ("arena_extend_strategy", "1"),
                ("do_copy_in_default_stream", "0"),
            ],
            &[(
                "cuda",
                &[
                    ("use_ep_level_unified_stream", "1"),
                    ("cudnn_conv_use_max_workspace", "0"),
                ],
            )],
        );
        let g = OrtSettings::from_config(&c).unwrap().gpu;
        assert_eq!(
            pairs(&g.cuda),
            [
                ("cudnn_conv_algo_search", "HEURISTIC"),
                ("gpu_mem_limit", "4294967200"),
                ("arena_extend_strategy", "kSameAsRequested"),
                ("do_copy_in_default_stream", "0"),
                ("cudnn_conv_use_max_workspace", "0"),
                ("use_ep_level_unified_stream", "1"),
            ]
        );
        assert!(g.tensorrt.is_none());
        // tensorrt: precision and workspace renamed, trt_* kept.
        let c = with_accelerators(
            &[],
            &[(
                "tensorrt",
                &[
                    ("precision_mode", "FP16"),
                    ("max_workspace_size_bytes", "1073741824"),
                    ("trt_engine_cache_enable", "1"),
                ],
            )],
        );
        let g = OrtSettings::from_config(&c).unwrap().gpu;
        assert_eq!(
            pairs(g.tensorrt.as_deref().unwrap()),
            [
                ("trt_max_workspace_size", "1073741824"),
                ("trt_fp16_enable", "1"),
                ("trt_engine_cache_enable", "1"),
            ]
        );
        let fp32 = with_accelerators(&[], &[("tensorrt", &[("precision_mode", "FP32")])]);
        assert_eq!(
            OrtSettings::from_config(&fp32).unwrap().gpu.tensorrt,
            Some(vec![])
        );
    }

    #[test]
    fn what_tritons_onnxruntime_backend_refuses_is_refused() {
        for (c, want) in [
            (
                with_accelerators(&[], &[("openvino", &[])]),
                "unknown Execution Accelerator 'openvino'",
            ),
            (
                with_accelerators(&[], &[("tensorrt", &[("workspace", "1")])]),
                "unknown parameter 'workspace' is provided for TensorRT Execution Accelerator",
            ),
            (
                with_accelerators(&[], &[("tensorrt", &[("precision_mode", "FP8")])]),
                "unsupported precision mode 'FP8'",
            ),
            (
                with_accelerators(&[], &[("cuda", &[("x\0", "1")])]),
                "NUL character",
            ),
            (
                config(&[("cudnn_conv_algo_search", "3")], None),
                "cudnn_conv_algo_search",
            ),
            (config(&[("gpu_mem_limit", "-1")], None), "gpu_mem_limit"),
        ] {
            let e = OrtSettings::from_config(&c).unwrap_err();
            assert!(e.message.contains(want), "{}", e.message);
        }
    }

    #[test]
    fn bad_values_fail_the_load_with_the_reason() {
        for (k, v) in [
            ("execution_mode", "2"),
            ("enable_mem_arena", "yes"),
            ("intra_op_thread_count", "-1"),
        ] {
            let e = OrtSettings::from_config(&config(&[(k, v)], None)).unwrap_err();
            assert!(e.message.contains(k), "{}", e.message);
        }
    }
}
