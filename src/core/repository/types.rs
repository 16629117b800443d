//! The repository's plain types, below the lifecycle, the loader and the
//! table that share them: a model's id, Triton's model states, and the
//! manager's settings.

use std::path::PathBuf;
use std::sync::Arc;

use crate::core::rate_limit::RateLimiter;

/// A model as the manager keys it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModelId {
    pub name: String,
    /// The repository path with `--model-namespacing`, "" without.
    pub namespace: String,
}

/// Triton's model states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelState {
    Loading,
    Ready,
    Unloading,
    Unavailable,
}

impl ModelState {
    pub fn name(self) -> &'static str {
        match self {
            ModelState::Loading => "LOADING",
            ModelState::Ready => "READY",
            ModelState::Unloading => "UNLOADING",
            ModelState::Unavailable => "UNAVAILABLE",
        }
    }
}

/// Settings of the manager.
#[derive(Clone)]
pub struct ManagerOptions {
    /// The model repositories (Triton's repeated --model-repository); a
    /// model name may be in only one of them unless `namespacing`.
    pub repositories: Vec<PathBuf>,
    /// `--model-namespacing`: each repository is a namespace of its own,
    /// so the same model name may be in several.
    pub namespacing: bool,
    /// The GPU ids this server may use.
    pub gpus: &'static [i32],
    /// The backends that run KIND_GPU instances in this installation (set
    /// only when there is a GPU): KIND_AUTO resolves to KIND_GPU for them.
    pub gpu_backends: &'static [&'static str],
    /// The least compute capability of a GPU models may use
    /// (`--min-supported-compute-capability`).
    pub min_compute_capability: (i32, i32),
    /// `--model-config-name`: each model loads `configs/<NAME>.pbtxt`
    /// where it has one.
    pub config_name: Option<String>,
    /// Capacity of each model's request queue.
    pub queue_capacity: usize,
    /// Complete configs from the model file (Triton's default; off with
    /// `--disable-auto-complete-config`).
    pub auto_complete: bool,
    /// How many times a version whose load fails is loaded again
    /// (`--model-load-retry-count`).
    pub load_retries: u32,
    /// How many models a poll loads at once (`--model-load-thread-count`).
    pub load_threads: usize,
    /// The server's rate limiter (`--rate-limit=execution_count`).
    pub rate_limiter: Option<Arc<RateLimiter>>,
    /// What the backends get from the server (the Python interpreter, the
    /// engine for BLS).
    pub backend: crate::core::backend::BackendOptions,
    /// What the versions keep for `/metrics` (`--metrics-config`).
    pub metrics: crate::core::metrics::settings::MetricsSettings,
}
