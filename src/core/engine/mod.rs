//! `Engine`: the one API the frontends, the CLI and tests call. A cheap
//! `Clone` handle over the model manager.
//!
//! Here: starting the engine, readiness and shutdown, the models (lookup,
//! metadata, the index, load and unload), shared memory and trace settings.
//! The request path (`infer`) is in `infer`.

mod host;
mod infer;

use std::path::PathBuf;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use crate::core::cache::{CacheSettings, ResponseCache};
pub use crate::core::device::{Discovery, Gpu};
use crate::core::error::{Error, Result};
use crate::core::rate_limit::{RateLimitSettings, RateLimiter};
use crate::core::repository::{
    ControlMode, IndexEntry, LoadOverride, LoadedModel, ManagerOptions, ModelId, ModelManager,
};
use crate::core::shm::{CudaRegionStatus, Kind as ShmKind, RegionStatus, SharedMemoryManager};
use crate::core::trace::{TraceSettings, Tracer};
use crate::core::types::{DataType, InferRequest};

/// Server settings the engine needs (the frontends have their own).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub model_repository: PathBuf,
    /// More repositories served with the first (a repeated
    /// `--model-store`); a model name may be in only one, unless
    /// `namespacing`.
    pub extra_repositories: Vec<PathBuf>,
    /// `--model-namespacing`: the same model name in several repositories.
    pub namespacing: bool,
    /// The repositories among them that mirror object storage: synced
    /// before each poll and before each explicit load.
    pub remotes: Option<Arc<crate::core::remote::Remotes>>,
    pub control_mode: ControlMode,
    /// `--load-model` (explicit mode); `*` loads all.
    pub load_models: Vec<String>,
    /// Ready only when every model is ready.
    pub strict_readiness: bool,
    /// `--id`, reported as the server name.
    pub id: String,
    /// The GPU ids models may be placed on (`--gpus`; every usable GPU
    /// by default).
    pub gpus: &'static [i32],
    /// The backends that run KIND_GPU instances in this installation (set
    /// only when there is a GPU): KIND_AUTO resolves to KIND_GPU for them.
    pub gpu_backends: &'static [&'static str],
    /// The least compute capability of a GPU models may use
    /// (`--min-supported-compute-capability`; Triton's 6.0 by default).
    pub min_compute_capability: (i32, i32),
    /// `--model-config-name`: each model loads `configs/<NAME>.pbtxt`
    /// where it has one.
    pub model_config_name: Option<String>,
    /// The max_batch_size auto-complete gives a model that batches
    /// (`--backend-config=default-max-batch-size=N`; Triton's 4).
    pub default_max_batch_size: i32,
    /// Capacity of each model version's request queue.
    pub queue_capacity: usize,
    /// Complete configs from model files (off: `--disable-auto-complete-config`).
    pub auto_complete: bool,
    /// Whether clients may register system shared memory regions
    /// (`--allow-client-shm`).
    pub allow_client_shm: bool,
    /// The trace settings at start (`--trace-config`), the trace file
    /// among them: the API cannot change it.
    pub trace: TraceSettings,
    /// The response cache (`--cache-config local,size=BYTES`), if any.
    pub cache: Option<CacheSettings>,
    /// The rate limiter (`--rate-limit=execution_count`), if on.
    pub rate_limit: Option<RateLimitSettings>,
    /// The interpreter for Python models (`--python`, `TRTIS_PYTHON`).
    pub python: Option<PathBuf>,
    /// How long a Python worker may take to start
    /// (`--backend-config=python,stub-timeout-seconds=N`).
    pub stub_timeout: Option<std::time::Duration>,
    /// How many models load at once (`--model-load-thread-count`).
    pub load_threads: usize,
    /// How many times a failed model version load is tried again
    /// (`--model-load-retry-count`).
    pub load_retries: u32,
    /// The metrics settings (`--metrics-config`, `--allow-cpu-metrics`,
    /// `--allow-gpu-metrics`, `--metrics-interval-ms`).
    pub metrics: crate::core::metrics::settings::MetricsSettings,
}

impl ServerConfig {
    /// Every repository, the first one first.
    pub fn repositories(&self) -> Vec<PathBuf> {
        std::iter::once(self.model_repository.clone())
            .chain(self.extra_repositories.iter().cloned())
            .collect()
    }

    pub fn new(model_repository: impl Into<PathBuf>) -> Self {
        ServerConfig {
            model_repository: model_repository.into(),
            extra_repositories: Vec::new(),
            namespacing: false,
            remotes: None,
            control_mode: ControlMode::None,
            load_models: Vec::new(),
            strict_readiness: true,
            id: "triton".to_string(),
            gpus: crate::core::device::visible_gpus(),
            gpu_backends: crate::core::backend::gpu_backends(crate::core::device::visible_gpus()),
            min_compute_capability: crate::core::device::MIN_COMPUTE_CAPABILITY,
            model_config_name: None,
            default_max_batch_size: crate::core::config::autocomplete::DEFAULT_MAX_BATCH_SIZE,
            queue_capacity: 1024,
            auto_complete: true,
            allow_client_shm: false,
            trace: TraceSettings::default(),
            cache: None,
            rate_limit: None,
            python: None,
            stub_timeout: None,
            load_threads: 4,
            load_retries: 0,
            metrics: Default::default(),
        }
    }
}

/// The extensions the server really implements, for server metadata (with
/// `cuda_shared_memory` on a machine with a GPU: `Engine::extensions`).
pub const EXTENSIONS: &[&str] = &[
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "model_configuration",
    "binary_tensor_data",
    "statistics",
    "system_shared_memory",
    "logging",
    "trace",
    "schedule_policy",
];

pub use crate::core::types::{ModelMetadata, TensorMetadata};

#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    config: ServerConfig,
    /// When the engine started (the v1 status's uptime).
    started: std::time::Instant,
    manager: ModelManager,
    shm: SharedMemoryManager,
    /// Inference requests being handled (shutdown waits for 0).
    inflight: AtomicUsize,
    /// Shutdown has begun: the server reports not ready.
    draining: AtomicBool,
    /// Shutdown refuses new client requests.
    refusing: AtomicBool,
    tracer: Tracer,
    /// Shared by the models whose config enables `response_cache`.
    cache: Option<ResponseCache>,
    /// The async runtime serving the engine, where the backends' own
    /// inference calls (BLS) run (`attach_runtime`).
    runtime: std::sync::OnceLock<tokio::runtime::Handle>,
}

impl Engine {
    /// Creates the engine and loads the startup models (all of them, or the
    /// `--load-model` ones in explicit mode). Returns the engine and the
    /// models that failed to load. Blocking.
    pub fn start(config: ServerConfig) -> Result<(Engine, Vec<Error>)> {
        for repository in config.repositories() {
            if !repository.is_dir() {
                return Err(Error::invalid_arg(format!(
                    "failed to stat file {}: repository path is not a valid directory",
                    repository.display()
                )));
            }
        }
        let tracer = Tracer::new(config.trace.clone())?;
        let cache = config.cache.map(ResponseCache::new);
        let inner = Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| {
            let backend = crate::core::backend::BackendOptions {
                python: config.python.clone(),
                stub_timeout: config.stub_timeout,
                default_max_batch_size: config.default_max_batch_size,
                host: Some(Arc::new(host::EngineHost::new(weak.clone()))),
            };
            let manager = ModelManager::new(ManagerOptions {
                repositories: config.repositories(),
                namespacing: config.namespacing,
                gpus: config.gpus,
                gpu_backends: config.gpu_backends,
                min_compute_capability: config.min_compute_capability,
                config_name: config.model_config_name.clone(),
                queue_capacity: config.queue_capacity,
                auto_complete: config.auto_complete,
                load_retries: config.load_retries,
                load_threads: config.load_threads,
                rate_limiter: config.rate_limit.as_ref().map(RateLimiter::new),
                backend,
                metrics: config.metrics.clone(),
            });
            Inner {
                started: std::time::Instant::now(),
                config,
                manager,
                shm: SharedMemoryManager::default(),
                inflight: AtomicUsize::new(0),
                draining: Default::default(),
                refusing: Default::default(),
                tracer,
                cache,
                runtime: std::sync::OnceLock::new(),
            }
        });
        let engine = Engine { inner };
        let config = &engine.inner.config;
        let names = match config.control_mode {
            ControlMode::Explicit if !config.load_models.iter().any(|m| m == "*") => {
                config.load_models.clone()
            }
            _ => engine.inner.manager.repository_models()?,
        };
        // In explicit mode an ensemble named by --load-model brings its
        // composing models (in the other modes every model loads anyway).
        let explicit = engine.inner.config.control_mode == ControlMode::Explicit;
        let errors = crate::core::repository::in_parallel(&names, config.load_threads, |n| {
            if explicit {
                engine.load_blocking(n, None)
            } else {
                engine.inner.manager.load(n)
            }
        })
        .into_iter()
        .filter_map(Result::err)
        .collect();
        for name in engine.inner.manager.repository_models().unwrap_or_default() {
            engine.warn_unapplied(&name);
        }
        Ok((engine, errors))
    }

    /// A loaded model that enables `response_cache` on a server started
    /// without a cache is served uncached, and a `rate_limiter` without
    /// `--rate-limit=execution_count` is not applied, as in Triton: say so.
    fn warn_unapplied(&self, name: &str) {
        for model in self.inner.manager.loaded_named(name) {
            self.warn_unapplied_to(name, &model);
        }
    }

    fn warn_unapplied_to(&self, name: &str, model: &LoadedModel) {
        if self.inner.config.rate_limit.is_none()
            && model
                .config
                .instance_group
                .iter()
                .any(|g| g.rate_limiter.is_some())
        {
            crate::core::logging::log(
                'W',
                &format!(
                    "model '{name}' has a rate_limiter, but the server runs with --rate-limit=off (as Triton's default): it is not applied"
                ),
            );
        }
        if self.inner.cache.is_some() {
            return;
        }
        if model
            .config
            .response_cache
            .as_ref()
            .is_some_and(|c| c.enable)
        {
            crate::core::logging::log(
                'W',
                &format!(
                    "model '{name}' enables response_cache, but the server has no cache (start it with --cache-config local,size=BYTES): its responses are not cached"
                ),
            );
        }
    }

    /// Where the backends' own inference calls (BLS) run: the runtime
    /// serving this engine. Without one, each runs on a thread of its own.
    pub fn attach_runtime(&self, runtime: tokio::runtime::Handle) {
        let _ = self.inner.runtime.set(runtime);
    }

    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The extensions this server implements: [`EXTENSIONS`], and
    /// `cuda_shared_memory` when it has a GPU.
    pub fn extensions(&self) -> Vec<&'static str> {
        let mut out = EXTENSIONS.to_vec();
        if !self.inner.config.gpus.is_empty() {
            out.push("cuda_shared_memory");
        }
        out
    }

    /// The GPUs this machine has (and why none, when none), and the ids
    /// this server places instances on.
    pub fn gpus(&self) -> (&'static Discovery, &'static [i32]) {
        (crate::core::device::discovery(), self.inner.config.gpus)
    }

    /// Mirrors the repositories in object storage, if any; a store that
    /// fails keeps its last mirror (logged; the errors are returned).
    async fn sync_remotes(&self) -> Vec<Error> {
        let errors = match &self.inner.config.remotes {
            Some(r) => r.sync().await,
            None => Vec::new(),
        };
        for e in &errors {
            crate::core::logging::log('E', &e.message);
        }
        errors
    }

    /// How long the engine has been up.
    pub fn uptime(&self) -> std::time::Duration {
        self.inner.started.elapsed()
    }

    /// Whether shutdown has begun.
    pub fn draining(&self) -> bool {
        self.inner.draining.load(SeqCst)
    }

    pub fn live(&self) -> bool {
        true
    }

    pub fn ready(&self) -> bool {
        !self.inner.draining.load(SeqCst)
            && (!self.inner.config.strict_readiness || self.inner.manager.all_ready())
    }

    /// Shutdown, first step: the server reports not ready (so health checks
    /// and load balancers turn away) but still serves every request.
    pub fn begin_drain(&self) {
        self.inner.draining.store(true, SeqCst);
    }

    /// Shutdown, second step: new client requests are refused
    /// (UNAVAILABLE); those already in flight run to the end.
    pub fn refuse_new(&self) {
        self.begin_drain();
        self.inner.refusing.store(true, SeqCst);
    }

    /// Whether a client's inference request may start: the frontends ask
    /// (an ensemble's steps are not new requests). While stopping, as in
    /// Triton, only a request that continues a sequence is still taken, so
    /// sequences under way can end.
    pub fn admit(&self, request: &InferRequest) -> Result<()> {
        let continues = !request.sequence.id.is_none() && !request.sequence.start;
        if self.inner.refusing.load(SeqCst) && !continues {
            return Err(Error::unavailable(
                "Server is stopping, scheduler for model has stopped accepting new inference requests",
            ));
        }
        Ok(())
    }

    /// Statistics of a model (every ready version) or one version, with
    /// Triton's errors for an unknown model or version.
    pub fn model_stats(&self, name: &str, version: &str) -> Result<Vec<Arc<LoadedModel>>> {
        let versions = self.ready_versions(name);
        if versions.is_empty() {
            // With --model-namespacing, a name that is ambiguous or unknown
            // answers as Triton's lookup of the name does.
            if let Err(e) = self.model(name, "") {
                if e.kind == crate::core::error::ErrorKind::InvalidArg {
                    return Err(e);
                }
            }
            return Err(Error::invalid_arg(format!(
                "requested model '{name}' is not available"
            )));
        }
        if version.is_empty() {
            return Ok(versions
                .iter()
                .filter_map(|v| self.model(name, &v.to_string()).ok())
                .collect());
        }
        self.model(name, version).map(|m| vec![m]).map_err(|_| {
            Error::invalid_arg(format!(
                "requested model version is not available for model '{name}'"
            ))
        })
    }

    /// A ready model version (the latest when `version` is empty).
    pub fn model(&self, name: &str, version: &str) -> Result<Arc<LoadedModel>> {
        let v = parse_version(version)?;
        self.inner.manager.get(name, v)
    }

    /// The model an ensemble of namespace `home` runs for a step (with
    /// `--model-namespacing`, its own repository's model first).
    pub fn step_model(&self, home: &str, name: &str, version: &str) -> Result<Arc<LoadedModel>> {
        let v = parse_version(version)?;
        self.inner.manager.get_from(Some(home), name, v)
    }

    /// A version of the model of a repository index entry.
    fn indexed_model(&self, entry: &IndexEntry) -> Result<Arc<LoadedModel>> {
        let id = ModelId {
            name: entry.name.clone(),
            namespace: entry.namespace.clone(),
        };
        self.inner
            .manager
            .get_id(&id, parse_version(&entry.version)?)
    }

    pub fn model_ready(&self, name: &str, version: &str) -> bool {
        self.model(name, version)
            .is_ok_and(|m| self.ensemble_unready(&m, 0).is_none())
    }

    /// Why an ensemble cannot serve: a composing model (at any depth) that
    /// is not ready. `None` for a ready ensemble or any other model.
    pub fn ensemble_unready(&self, model: &LoadedModel, depth: usize) -> Option<String> {
        use crate::core::config::pb::model_config::SchedulingChoice;
        let Some(SchedulingChoice::EnsembleScheduling(e)) = &model.config.scheduling_choice else {
            return None;
        };
        if depth > 16 {
            return Some("ensembles nested too deep".to_string());
        }
        for step in &e.step {
            match self.step_model(
                &model.namespace,
                &step.model_name,
                &crate::core::scheduler::ensemble::step_version(step),
            ) {
                Err(err) => {
                    return Some(format!(
                        "composing model '{}' is not available: {}",
                        step.model_name, err.message
                    ))
                }
                Ok(m) => {
                    if let Some(why) = self.ensemble_unready(&m, depth + 1) {
                        return Some(why);
                    }
                }
            }
        }
        None
    }

    /// The metadata of a ready model version.
    pub fn model_metadata(&self, name: &str, version: &str) -> Result<ModelMetadata> {
        let model = self.model(name, version)?;
        let c = &model.config;
        let batching = c.max_batch_size > 0;
        let tensor = |name: &str, data_type: i32, dims: &[i64]| TensorMetadata {
            name: name.to_string(),
            datatype: DataType::from_config(data_type)
                .map(|d| d.name())
                .unwrap_or("INVALID")
                .to_string(),
            shape: if batching {
                std::iter::once(-1).chain(dims.iter().copied()).collect()
            } else {
                dims.to_vec()
            },
        };
        Ok(ModelMetadata {
            name: name.to_string(),
            versions: self
                .ready_versions(name)
                .iter()
                .map(|v| v.to_string())
                .collect(),
            platform: if c.platform.is_empty() {
                c.backend.clone()
            } else {
                c.platform.clone()
            },
            inputs: c
                .input
                .iter()
                .map(|i| tensor(&i.name, i.data_type, &i.dims))
                .collect(),
            outputs: c
                .output
                .iter()
                .map(|o| tensor(&o.name, o.data_type, &o.dims))
                .collect(),
        })
    }

    /// Every ready model version (for metrics).
    pub fn loaded_models(&self) -> Vec<Arc<LoadedModel>> {
        let mut out = Vec::new();
        for entry in self.index(true).unwrap_or_default() {
            if let Ok(m) = self.indexed_model(&entry) {
                out.push(m);
            }
        }
        out
    }

    /// Ready versions of a model, for metadata.
    pub fn ready_versions(&self, name: &str) -> Vec<i64> {
        self.inner.manager.ready_versions(name)
    }

    /// The repository index; an ensemble whose composing models are not
    /// all ready shows UNAVAILABLE with the reason.
    pub fn index(&self, ready_only: bool) -> Result<Vec<IndexEntry>> {
        let mut entries = self.inner.manager.index(ready_only)?;
        for e in &mut entries {
            if e.state != crate::core::repository::ModelState::Ready {
                continue;
            }
            if let Ok(m) = self.indexed_model(e) {
                if let Some(why) = self.ensemble_unready(&m, 0) {
                    e.state = crate::core::repository::ModelState::Unavailable;
                    e.reason = why;
                }
            }
        }
        if ready_only {
            entries.retain(|e| e.state == crate::core::repository::ModelState::Ready);
        }
        Ok(entries)
    }

    fn check_control(&self) -> Result<()> {
        match self.inner.config.control_mode {
            ControlMode::Explicit => Ok(()),
            // Triton answers this (UNAVAILABLE) in both modes.
            ControlMode::Poll | ControlMode::None => Err(Error::unavailable(
                "explicit model load / unload is not allowed if polling is enabled",
            )),
        }
    }

    pub async fn load(&self, name: &str) -> Result<()> {
        self.load_with(name, None).await
    }

    /// Loads a model, with a load request's `config` and `file:`
    /// parameters in place of the repository's files when given.
    pub async fn load_with(&self, name: &str, over: Option<LoadOverride>) -> Result<()> {
        self.check_control()?;
        // A store that cannot be read: the model loads from the last mirror.
        self.sync_remotes().await;
        let engine = self.clone();
        let name = name.to_string();
        tokio::task::spawn_blocking(move || engine.load_blocking(&name, over.as_ref()))
            .await
            .map_err(|e| Error::internal(format!("model load task failed: {e}")))?
    }

    /// Loads a model and, for an ensemble, every composing model not
    /// loaded yet (at any depth), as Triton's explicit mode does; if one of
    /// them fails, the ensemble is unloaded again and the load fails.
    fn load_blocking(&self, name: &str, over: Option<&LoadOverride>) -> Result<()> {
        use crate::core::config::pb::model_config::SchedulingChoice;
        let manager = &self.inner.manager;
        manager.load_with(name, over)?;
        self.warn_unapplied(name);
        // The composing models not loaded yet, a level at a time, each
        // level's models at once (--model-load-thread-count).
        let mut level = vec![name.to_string()];
        let mut seen = vec![name.to_string()];
        while !level.is_empty() {
            let mut next: Vec<String> = Vec::new();
            for parent in &level {
                for model in manager.loaded_named(parent) {
                    let Some(SchedulingChoice::EnsembleScheduling(e)) =
                        &model.config.scheduling_choice
                    else {
                        continue;
                    };
                    for step in &e.step {
                        if !seen.contains(&step.model_name) {
                            seen.push(step.model_name.clone());
                            next.push(step.model_name.clone());
                        }
                    }
                }
            }
            // Each model of those names not loaded yet (with namespacing,
            // the one of each repository that has the name).
            let todo: Vec<ModelId> = next.iter().flat_map(|c| manager.unready_named(c)).collect();
            let results =
                crate::core::repository::in_parallel(&todo, self.inner.config.load_threads, |c| {
                    manager.load_id(c, None)
                });
            // The first failure in step order, as one at a time would give.
            if let Some((composing, err)) = todo
                .iter()
                .zip(results)
                .find_map(|(c, r)| r.err().map(|e| (c, e)))
            {
                let _ = manager.unload_with(name, true);
                return Err(Error::new(
                    err.kind,
                    format!(
                        "failed to load '{name}': composing model '{}': {}",
                        composing.name, err.message
                    ),
                ));
            }
            manager.mark_implicit(&todo);
            level = next;
        }
        Ok(())
    }

    pub async fn unload(&self, name: &str) -> Result<()> {
        self.unload_with(name, false).await
    }

    /// Unloads a model; with `dependents`, an ensemble's composing models
    /// too (`unload_dependents`).
    pub async fn unload_with(&self, name: &str, dependents: bool) -> Result<()> {
        self.check_control()?;
        let engine = self.clone();
        let name = name.to_string();
        tokio::task::spawn_blocking(move || engine.inner.manager.unload_with(&name, dependents))
            .await
            .map_err(|e| Error::internal(format!("model unload task failed: {e}")))?
    }

    /// One repository poll (poll mode): new, changed and removed models.
    pub async fn poll(&self) -> Vec<Error> {
        // Object storage: mirror what changed first; an unreachable store
        // keeps its last mirror.
        let mut errors = self.sync_remotes().await;
        let engine = self.clone();
        errors.extend(
            tokio::task::spawn_blocking(move || engine.inner.manager.poll())
                .await
                .unwrap_or_else(|e| vec![Error::internal(format!("repository poll failed: {e}"))]),
        );
        errors
    }

    /// Unloads every model (shutdown). Blocking.
    pub fn shutdown(&self) {
        self.inner.manager.unload_all();
        self.inner.tracer.shutdown();
    }

    /// Registers a system shared memory region (only with
    /// `--allow-client-shm`).
    pub fn shm_register(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> Result<()> {
        if !self.inner.config.allow_client_shm {
            return Err(Error::invalid_arg(
                "client shared memory is disabled; start the server with --allow-client-shm",
            ));
        }
        self.inner.shm.register(name, key, offset, byte_size)
    }

    /// Unregisters one system region, or all of them.
    pub fn shm_unregister(&self, name: Option<&str>) -> Result<()> {
        self.inner.shm.unregister(name, Some(ShmKind::System))
    }

    /// Unregisters one region of either kind, or all of them (the v1 API).
    pub fn shm_unregister_any(&self, name: Option<&str>) -> Result<()> {
        self.inner.shm.unregister(name, None)
    }

    pub fn shm_status(&self, name: Option<&str>) -> Result<Vec<RegionStatus>> {
        self.inner.shm.status(name)
    }

    /// Registers CUDA device memory a client shares by IPC handle, on one
    /// of this server's GPUs; without a GPU, Triton's CPU-only answer. Not
    /// behind `--allow-client-shm`: a handle opens only memory its owner
    /// exported, nothing of the file system.
    pub fn cuda_shm_register(
        &self,
        name: &str,
        raw_handle: &[u8],
        device_id: i64,
        byte_size: u64,
    ) -> Result<()> {
        self.inner.shm.register_cuda(
            name,
            raw_handle,
            device_id,
            byte_size,
            self.inner.config.gpus,
        )
    }

    /// Unregisters one CUDA region, or all of them.
    pub fn cuda_shm_unregister(&self, name: Option<&str>) -> Result<()> {
        self.inner.shm.unregister(name, Some(ShmKind::Cuda))
    }

    pub fn cuda_shm_status(&self, name: Option<&str>) -> Result<Vec<CudaRegionStatus>> {
        self.inner.shm.cuda_status(name)
    }

    /// The trace settings of a model (or the global ones).
    pub fn trace_settings(&self, model: Option<&str>) -> Result<TraceSettings> {
        if let Some(m) = model {
            self.check_trace_model(m)?;
        }
        Ok(self.inner.tracer.settings(model))
    }

    /// Updates trace settings (`None` values clear a model's override).
    pub fn update_trace_settings(
        &self,
        model: Option<&str>,
        updates: &std::collections::BTreeMap<String, Option<Vec<String>>>,
    ) -> Result<TraceSettings> {
        if let Some(m) = model {
            self.check_trace_model(m)?;
        }
        self.inner.tracer.update(model, updates)
    }

    fn check_trace_model(&self, model: &str) -> Result<()> {
        if self.ready_versions(model).is_empty() {
            return Err(Error::invalid_arg(format!(
                "Request for unknown model : {model}"
            )));
        }
        Ok(())
    }
}

/// A version string as Triton reads it (`GetModelVersionFromString`): empty
/// is the latest; otherwise a positive integer.
pub fn parse_version(version: &str) -> Result<Option<i64>> {
    if version.is_empty() {
        return Ok(None);
    }
    match version.trim().parse::<i64>() {
        Ok(v) if v >= 0 => Ok(Some(v)),
        Ok(_) => Err(Error::invalid_arg(format!(
            "invalid model version specified '{version}' , version should be an integral value > 0"
        ))),
        Err(_) => Err(Error::invalid_arg(format!(
            "failed to get model version from specified version string '{version}' (details: stol), version should be an integral value > 0"
        ))),
    }
}
