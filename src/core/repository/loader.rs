//! Loading one model version: the config completed from the model file,
//! its labels read, its instances started (each loads its backend and runs
//! its warmup on its own thread) and its scheduler put in front of them.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::types::{ManagerOptions, ModelId};
use super::CheckedModel;
use crate::core::backend::{load_instance, LoadContext};
use crate::core::batch_io::BatchIo;
use crate::core::config::normalize::ENSEMBLE_PLATFORM;
use crate::core::config::pb::ModelRateLimiter;
use crate::core::config::validate::{validate, ValidateContext};
use crate::core::config::{ModelConfig, Severity};
use crate::core::device::{Device, Placement};
use crate::core::error::{Error, Result};
use crate::core::instance::{InstancePool, Loader};
use crate::core::metrics::stats::ModelStats;
use crate::core::scheduler::{EnsembleScheduler, Scheduler, SeqSettings};

/// A new load's number.
fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A model version that is loaded and serving.
pub struct LoadedModel {
    pub name: String,
    /// Its repository's path with `--model-namespacing` ("" without): the
    /// `namespace` metric label, and where an ensemble's steps are looked
    /// up first.
    pub namespace: String,
    pub version: i64,
    /// The normalized config.
    pub config: ModelConfig,
    /// How requests reach the instances (it owns them; an ensemble has
    /// none and runs its steps on the composing models).
    pub scheduler: Scheduler,
    /// Shared with the scheduler, which counts executions.
    pub stats: Arc<ModelStats>,
    /// Output name → labels from its `label_filename`.
    pub labels: BTreeMap<String, Vec<String>>,
    /// This load's number, unique in the process (a reloaded version is a
    /// new generation: the response cache keys on it).
    pub generation: u64,
    /// Batch inputs, scattered outputs and ragged inputs (the engine
    /// checks requests against them).
    pub batch_io: BatchIo,
    /// What it serves of the OpenAI API (its `openai_*` parameters).
    pub openai: Option<Arc<crate::core::openai::OpenAiModel>>,
    /// Its instances (None for an ensemble), for a reload that keeps them.
    pub pool: Option<std::sync::Weak<InstancePool>>,
    /// The fingerprint of its model directory without `config.pbtxt`: a
    /// reload keeps the instances only while the model's files are these.
    pub files: u64,
}

impl LoadedModel {
    /// `model_transaction_policy { decoupled: true }`: any number of
    /// responses per request, served by streaming calls only.
    pub fn decoupled(&self) -> bool {
        self.config
            .model_transaction_policy
            .as_ref()
            .is_some_and(|p| p.decoupled)
    }

    /// Closes the version's schedulers: new requests are refused as
    /// unloading, queued ones run at once.
    pub fn close(&self) {
        self.scheduler.close();
    }
}

/// The config completed by its backend from the model's files (when
/// auto-complete is on and the backend has something to complete), then
/// validated.
pub(super) fn auto_complete(
    opts: &ManagerOptions,
    config: ModelConfig,
    model: &CheckedModel,
) -> Result<ModelConfig> {
    let Some(backend) = crate::core::backend::lookup(&config.backend) else {
        return Ok(config);
    };
    let Some(version_dir) = model
        .versions
        .last()
        .map(|v| model.dir.path.join(v.to_string()))
    else {
        return Ok(config);
    };
    if !opts.auto_complete {
        return Ok(config);
    }
    let name = config.name.clone();
    let normalize = |c: &mut ModelConfig| {
        let ctx = crate::core::config::normalize::NormalizeContext {
            model_name: name.clone(),
            first_version_entries: Vec::new(),
            gpus: opts.gpus,
            gpu_backends: opts.gpu_backends,
        };
        crate::core::config::normalize::normalize(c, &ctx)
    };
    let ctx = crate::core::backend::CompleteContext {
        model_dir: &model.dir.path,
        version_dir: &version_dir,
        options: &opts.backend,
        normalize: &normalize,
    };
    let Some(completed) = backend.auto_complete(&config, &ctx) else {
        return Ok(config);
    };
    let config = completed?;
    let vctx = ValidateContext {
        gpus: opts.gpus,
        missing_gpu: Severity::Error,
        min_compute_capability: crate::core::device::capability_value(opts.min_compute_capability),
    };
    if let Some(issue) = validate(&config, &vctx)
        .into_iter()
        .find(|i| i.severity == Severity::Error)
    {
        return Err(crate::core::backend::load_failed(&config, issue.message));
    }
    Ok(config)
}

/// What an instance is kept by across a reload that changes only the
/// instance groups (Triton's instance signature): where it runs and what
/// the rate limiter grants it; its name may change.
fn signature(config: &ModelConfig, p: &Placement) -> (Device, Option<ModelRateLimiter>) {
    let group = &config.instance_group[p.group];
    (p.device, group.rate_limiter.clone())
}

/// Where each new instance comes from: one of `previous`'s of the same
/// signature while it has one left (Triton's instance update: only the
/// difference is created or removed), else loaded fresh.
fn kept_instances(
    opts: &ManagerOptions,
    config: &ModelConfig,
    placements: &[Placement],
    previous: Option<&LoadedModel>,
) -> Vec<Option<std::sync::mpsc::Receiver<crate::core::backend::Instance>>> {
    let mut kept: Vec<_> = placements.iter().map(|_| None).collect();
    let Some(previous) = previous else {
        return kept;
    };
    let (Some(pool), Ok(old)) = (
        previous.pool.as_ref().and_then(std::sync::Weak::upgrade),
        crate::core::device::place(&previous.config, opts.gpus, opts.min_compute_capability),
    ) else {
        return kept;
    };
    let mut taken = vec![false; old.len()];
    for (slot, p) in kept.iter_mut().zip(placements) {
        let want = signature(config, p);
        let found = old
            .iter()
            .enumerate()
            .find(|(i, o)| !taken[*i] && signature(&previous.config, o) == want);
        if let Some((i, _)) = found {
            taken[i] = true;
            *slot = pool.hand_over(i);
        }
    }
    kept
}

/// Loads one version of a model. With `previous` (the same version loaded
/// now, whose config differs from this one only in its instance groups and
/// whose files are the same), the instances it has that this one still
/// needs move over instead of loading again, and its statistics carry on.
pub(super) fn load_version(
    opts: &ManagerOptions,
    id: &ModelId,
    version: i64,
    model_dir: &Path,
    config: &ModelConfig,
    labels: &BTreeMap<String, Vec<String>>,
    previous: Option<&LoadedModel>,
) -> Result<LoadedModel> {
    let latency = crate::core::metrics::latency::LatencyMetrics::for_model(&opts.metrics, config);
    let stats = match previous {
        Some(p) => Arc::clone(&p.stats),
        None => Arc::new(ModelStats::with_latency(latency)),
    };
    let name = id.name.as_str();
    let openai = crate::core::openai::OpenAiModel::from_config(config, model_dir)
        .map_err(|e| Error::invalid_arg(format!("model '{name}': {}", e.message)))?
        .map(Arc::new);
    if config.platform == ENSEMBLE_PLATFORM {
        return Ok(LoadedModel {
            generation: next_generation(),
            name: name.to_string(),
            namespace: id.namespace.clone(),
            version,
            config: config.clone(),
            scheduler: Scheduler::Ensemble(EnsembleScheduler::new(
                config.clone(),
                id.namespace.clone(),
                Arc::clone(&stats),
            )),
            stats,
            labels: labels.clone(),
            batch_io: Default::default(),
            openai,
            pool: None,
            files: 0,
        });
    }
    // nv_model_load_duration_secs: the backend model and its instances
    // (Triton times TritonModel::Create; warmup is part of it here).
    let load_start = std::time::Instant::now();
    // memory_usage: the server's growth across the load (an estimate: a
    // model loading beside this one adds to it too), and what each
    // instance holds outside the server (a Python worker).
    let rss_before = crate::core::metrics::memory::process_rss(std::process::id());
    let version_dir = model_dir.join(version.to_string());
    let samples = Arc::new(crate::core::warmup::samples(config, model_dir)?);
    // Each group's instances, on the devices its kind and `gpus` name.
    let placements = crate::core::device::place(config, opts.gpus, opts.min_compute_capability)
        .map_err(|why| Error::invalid_arg(format!("model '{name}': {why}")))?;
    let sequencing = SeqSettings::from_config(config, placements.len(), model_dir)?;
    let io = BatchIo::from_config(config);
    let mut loaders: Vec<Loader> = Vec::new();
    let mut claims = Vec::new();
    let kept = kept_instances(opts, config, &placements, previous);
    for (instance_index, (placement, kept)) in placements.into_iter().zip(kept).enumerate() {
        let group = &config.instance_group[placement.group];
        // What the rate limiter grants this instance before each run
        // (with --rate-limit=execution_count; Triton ignores the
        // group's rate_limiter otherwise).
        claims.push(match (&opts.rate_limiter, &group.rate_limiter) {
            (Some(limiter), Some(limits)) => Some(
                limiter
                    .claim(
                        limits
                            .resources
                            .iter()
                            .map(|r| (r.name.clone(), r.count))
                            .collect(),
                        limits.priority,
                    )
                    .map_err(|e| Error::invalid_arg(format!("model '{name}': {}", e.message)))?,
            ),
            _ => None,
        });
        if let Some(from_before) = kept {
            loaders.push(Loader::Handed(from_before));
            continue;
        }
        let ctx_config = config.clone();
        let model_dir = model_dir.to_path_buf();
        let version_dir = version_dir.clone();
        let instance_name = placement.name;
        let device = placement.device;
        let samples = Arc::clone(&samples);
        let sequence = sequencing.clone();
        let io = io.clone();
        let options = opts.backend.clone();
        let stats = Arc::clone(&stats);
        loaders.push(Loader::fresh(move || {
            let mut instance = load_instance(&LoadContext {
                config: &ctx_config,
                model_dir: &model_dir,
                version_dir,
                instance_name: instance_name.clone(),
                instance_index,
                device,
                options: &options,
            })?;
            crate::core::warmup::run(
                &ctx_config,
                &mut instance,
                &instance_name,
                &samples,
                sequence.as_ref(),
                &io,
            )?;
            stats
                .memory_usage
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(instance.memory_usage());
            Ok(instance)
        }));
    }
    if loaders.is_empty() {
        return Err(Error::invalid_arg(format!(
            "model '{name}' has no instances"
        )));
    }
    let instances = loaders.len();
    let pool_handle = std::cell::RefCell::new(None);
    let start_pool = |source| {
        let pool = InstancePool::start(name, loaders, claims, opts.queue_capacity, source);
        release_freed_memory();
        let mut pool = pool?;
        // Without the rate limiter (whose permits the instance threads take),
        // an identity model's requests run on the caller's thread.
        if opts.rate_limiter.is_none() {
            if let Some(instance) =
                crate::core::backend::inline_instance(config, &version.to_string())
            {
                pool.run_inline(instance);
            }
        }
        let pool = Arc::new(pool);
        *pool_handle.borrow_mut() = Some(Arc::downgrade(&pool));
        Ok(pool)
    };
    let scheduler = Scheduler::start(
        config,
        instances,
        start_pool,
        sequencing,
        io.clone(),
        opts.queue_capacity,
        Arc::clone(&stats),
    )?;
    stats.load_duration_ns.store(
        load_start.elapsed().as_nanos() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    {
        let grown = match (
            rss_before,
            crate::core::metrics::memory::process_rss(std::process::id()),
        ) {
            (Some(before), Some(after)) => after.saturating_sub(before),
            _ => 0,
        };
        let mut usage = stats.memory_usage.lock().unwrap_or_else(|e| e.into_inner());
        let instances = std::mem::take(&mut *usage);
        *usage = crate::core::metrics::memory::MemoryUsage::summed(
            std::iter::once(crate::core::metrics::memory::MemoryUsage {
                kind: "CPU",
                id: 0,
                byte_size: grown,
            })
            .chain(instances),
        );
    }
    Ok(LoadedModel {
        generation: next_generation(),
        name: name.to_string(),
        namespace: id.namespace.clone(),
        version,
        config: config.clone(),
        scheduler,
        stats,
        labels: labels.clone(),
        batch_io: io,
        openai,
        pool: pool_handle.into_inner(),
        files: 0,
    })
}

/// Gives the heap memory that loading freed back to the system.
///
/// A backend reads and parses the whole model file to load it (ONNX
/// Runtime copies the weights out of the parsed file, then frees it), and
/// warmup allocates its samples. glibc's malloc keeps freed heap pages and,
/// once a large block has been freed, serves blocks up to 32 MiB from the
/// heap rather than from their own mappings, so those buffers stayed in the
/// idle server's RSS: five instances of the bench's 32 MiB MLP held 366 MiB
/// before this trim and 208 MiB after it (one ORT session of the MLP: 95 →
/// 76 MiB). Once per model load, so requests allocate as before.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer; it walks glibc's own arenas
    // under their locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Labels of every output with a `label_filename`, one per line.
pub(super) fn read_labels(
    model_dir: &Path,
    config: &ModelConfig,
) -> Result<BTreeMap<String, Vec<String>>> {
    let mut labels = BTreeMap::new();
    for output in &config.output {
        if output.label_filename.is_empty() {
            continue;
        }
        let path = model_dir.join(&output.label_filename);
        let text = crate::core::fsutil::read_regular_to_string(&path).map_err(|e| {
            Error::internal(format!(
                "failed to open text file for read {}: {e}",
                path.display()
            ))
        })?;
        labels.insert(
            output.name.clone(),
            text.lines().map(str::to_string).collect(),
        );
    }
    Ok(labels)
}
