//! The libtorch settings a PyTorch model's config asks for in `parameters`,
//! read as Triton's pytorch backend reads them (pure: no libtorch here, so it
//! is unit-tested, and `validate-config` reports a bad value as `serve` does,
//! with or without the `torch` feature).
//!
//! Booleans take `true`/`on`/`1` or `false`/`off`/`0` (any case), as
//! Triton's `ParseBoolValue`; numbers are whole numbers.
//!
//! | key | default | what it does here |
//! | --- | --- | --- |
//! | `DISABLE_OPTIMIZED_EXECUTION` | false | the graph executor's optimizer off, on the instance's thread (libtorch's flag is thread-local) |
//! | `INFERENCE_MODE` | true | `c10::InferenceMode` around the forward call (else `NoGradGuard` only; no-grad is always on) |
//! | `DISABLE_CUDNN` | false | `setUserEnabledCuDNN(false)` before each run (process-wide, as in Triton; nothing uses cuDNN on a CPU instance) |
//! | `ENABLE_WEIGHT_SHARING` | false | the model's instances share one loaded module |
//! | `ENABLE_CACHE_CLEANING` | false | empties the CUDA caching allocator after each run: GPU instances only, so nothing to do on a CPU instance |
//! | `ENABLE_JIT_EXECUTOR` | libtorch's | the profiling executor on or off before each run (process-wide, as in Triton) |
//! | `ENABLE_JIT_PROFILING` | libtorch's | profiling mode on or off before each run (process-wide, as in Triton) |
//! | `ENABLE_TENSOR_FUSER` | libtorch's | the tensor-expression fuser on or off before each run (process-wide, as in Triton) |
//! | `INTRA_OP_THREAD_COUNT` | 1 | intra-op threads of each instance's thread (see below) |
//! | `INTER_OP_THREAD_COUNT` | libtorch's | the process's inter-op pool (libtorch allows setting it once: the first model to ask wins, as in Triton) |
//!
//! Threads: Triton calls `at::set_num_threads` once for the process (the
//! first model wins). trtis sets it on each instance's own thread instead
//! (libtorch's OpenMP count is per calling thread), so every model gets what
//! it asks for. The default is one thread per instance, not libtorch's one
//! per core: on a small CPU machine OpenMP with 2 threads on 2 cores ran a
//! TorchScript MLP 6x slower than one thread (rust-deps-notes §5); more
//! instances, not more threads, use more cores. 0 or less means the default
//! (as Triton ignores such values).

use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};

/// What a PyTorch instance runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorchSettings {
    pub optimized_execution: bool,
    pub inference_mode: bool,
    pub disable_cudnn: bool,
    pub weight_sharing: bool,
    pub cache_cleaning: bool,
    pub jit_executor: Option<bool>,
    pub jit_profiling: Option<bool>,
    pub tensor_fuser: Option<bool>,
    pub intra_threads: usize,
    pub inter_threads: Option<usize>,
}

impl Default for TorchSettings {
    fn default() -> Self {
        TorchSettings {
            optimized_execution: true,
            inference_mode: true,
            disable_cudnn: false,
            weight_sharing: false,
            cache_cleaning: false,
            jit_executor: None,
            jit_profiling: None,
            tensor_fuser: None,
            intra_threads: 1,
            inter_threads: None,
        }
    }
}

/// Triton's `ParseBoolValue`.
fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "1" => Some(true),
        "false" | "off" | "0" => Some(false),
        _ => None,
    }
}

impl TorchSettings {
    pub fn from_config(config: &ModelConfig) -> Result<TorchSettings> {
        let param = |key: &str| config.parameters.get(key).map(|p| p.string_value.as_str());
        let bad = |key: &str, want: &str, got: &str| {
            Error::invalid_arg(format!(
                "parameter '{key}' of model '{}': failed to convert '{got}' to {want}",
                config.name
            ))
        };
        let flag = |key: &str| -> Result<Option<bool>> {
            match param(key) {
                None => Ok(None),
                Some(v) => parse_bool(v)
                    .map(Some)
                    .ok_or_else(|| bad(key, "boolean", v)),
            }
        };
        // libtorch takes an int; 0 or less means the default (Triton
        // ignores such values too).
        let count = |key: &str| -> Result<Option<usize>> {
            match param(key) {
                None => Ok(None),
                Some(v) => match v.trim().parse::<i32>() {
                    Ok(n) if n <= 0 => Ok(None),
                    Ok(n) => Ok(Some(n as usize)),
                    Err(_) => Err(bad(key, "integral number", v)),
                },
            }
        };
        let d = TorchSettings::default();
        Ok(TorchSettings {
            optimized_execution: !flag("DISABLE_OPTIMIZED_EXECUTION")?.unwrap_or(false),
            inference_mode: flag("INFERENCE_MODE")?.unwrap_or(d.inference_mode),
            disable_cudnn: flag("DISABLE_CUDNN")?.unwrap_or(d.disable_cudnn),
            weight_sharing: flag("ENABLE_WEIGHT_SHARING")?.unwrap_or(d.weight_sharing),
            cache_cleaning: flag("ENABLE_CACHE_CLEANING")?.unwrap_or(d.cache_cleaning),
            jit_executor: flag("ENABLE_JIT_EXECUTOR")?,
            jit_profiling: flag("ENABLE_JIT_PROFILING")?,
            tensor_fuser: flag("ENABLE_TENSOR_FUSER")?,
            intra_threads: count("INTRA_OP_THREAD_COUNT")?.unwrap_or(d.intra_threads),
            inter_threads: count("INTER_OP_THREAD_COUNT")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::pb;

    fn with(params: &[(&str, &str)]) -> ModelConfig {
        let mut c = ModelConfig {
            name: "m".into(),
            backend: "pytorch".into(),
            ..Default::default()
        };
        for (k, v) in params {
            c.parameters.insert(
                k.to_string(),
                pb::ModelParameter {
                    string_value: v.to_string(),
                },
            );
        }
        c
    }

    #[test]
    fn defaults_suit_a_small_cpu_machine() {
        let s = TorchSettings::from_config(&with(&[])).unwrap();
        assert_eq!(s, TorchSettings::default());
        assert!(s.inference_mode && s.optimized_execution);
        assert_eq!(s.intra_threads, 1);
        assert_eq!(s.inter_threads, None);
    }

    #[test]
    fn every_key_is_read() {
        let s = TorchSettings::from_config(&with(&[
            ("DISABLE_OPTIMIZED_EXECUTION", "true"),
            ("INFERENCE_MODE", "Off"),
            ("DISABLE_CUDNN", "1"),
            ("ENABLE_WEIGHT_SHARING", "ON"),
            ("ENABLE_CACHE_CLEANING", "true"),
            ("ENABLE_JIT_EXECUTOR", "false"),
            ("ENABLE_JIT_PROFILING", "0"),
            ("ENABLE_TENSOR_FUSER", "FALSE"),
            ("INTRA_OP_THREAD_COUNT", "2"),
            ("INTER_OP_THREAD_COUNT", "3"),
        ]))
        .unwrap();
        assert_eq!(
            s,
            TorchSettings {
                optimized_execution: false,
                inference_mode: false,
                disable_cudnn: true,
                weight_sharing: true,
                cache_cleaning: true,
                jit_executor: Some(false),
                jit_profiling: Some(false),
                tensor_fuser: Some(false),
                intra_threads: 2,
                inter_threads: Some(3),
            }
        );
        // config::support lists exactly the keys read here: each one set
        // alone changes the settings.
        let listed = crate::core::config::catalog::parameter_names("pytorch");
        assert_eq!(listed.len(), 10);
        for key in listed {
            let value = if key.ends_with("_COUNT") {
                "3"
            } else {
                "false"
            };
            let one = TorchSettings::from_config(&with(&[(key, value)])).unwrap();
            let other = if key.ends_with("_COUNT") { "5" } else { "true" };
            let two = TorchSettings::from_config(&with(&[(key, other)])).unwrap();
            assert_ne!(one, two, "{key} is not read");
        }
    }

    #[test]
    fn zero_threads_is_the_default_and_bad_values_are_refused() {
        let s = TorchSettings::from_config(&with(&[("INTRA_OP_THREAD_COUNT", "0")])).unwrap();
        assert_eq!(s.intra_threads, 1);
        let e = TorchSettings::from_config(&with(&[("INFERENCE_MODE", "yes")])).unwrap_err();
        assert!(
            e.message.contains("failed to convert 'yes' to boolean"),
            "{}",
            e.message
        );
        let s = TorchSettings::from_config(&with(&[("INTRA_OP_THREAD_COUNT", "-1")])).unwrap();
        assert_eq!(s.intra_threads, 1);
        assert!(TorchSettings::from_config(&with(&[("INTER_OP_THREAD_COUNT", "4x")])).is_err());
        assert!(
            TorchSettings::from_config(&with(&[("INTRA_OP_THREAD_COUNT", "2147483648")])).is_err()
        );
    }
}
