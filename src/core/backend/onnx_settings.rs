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
//!   `allow_spinning` (default false: idle intra-op threads sleep).

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
    pub spinning: bool,
    pub parallel: bool,
    pub mem_arena: bool,
    pub mem_pattern: bool,
    pub level: GraphLevel,
    /// `session.*` parameters, given to the session as config entries.
    pub session_entries: Vec<(String, String)>,
    /// `memory.enable_memory_arena_shrinkage`, set on every run.
    pub arena_shrinkage: Option<String>,
}

/// The default intra-op thread count of each instance: every core this
/// process may use, as Triton leaves ONNX Runtime's default of one thread
/// per core (less its spinning: idle threads sleep). Measured with two
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
        Ok(OrtSettings {
            intra_threads: number("intra_op_thread_count", default_intra_threads())?,
            inter_threads: number("inter_op_thread_count", 1)?,
            spinning: flag("allow_spinning", false)?,
            parallel,
            mem_arena: flag("enable_mem_arena", true)?,
            mem_pattern: flag("enable_mem_pattern", true)?,
            level,
            session_entries,
            arena_shrinkage: param("memory.enable_memory_arena_shrinkage").map(str::to_string),
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
        assert!(!s.spinning && !s.parallel && s.mem_arena && s.mem_pattern);
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

    /// Every key the support table says this backend reads is read: a bad
    /// value for it fails the load.
    #[test]
    fn the_support_table_lists_what_is_read() {
        for key in crate::core::config::support::backend_parameters("onnxruntime") {
            let e = OrtSettings::from_config(&config(&[(key, "?")], None));
            let read = e.is_err() || *key == "memory.enable_memory_arena_shrinkage";
            assert!(read, "{key} is listed but not read");
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
