//! The model lifecycle: loading models from the repository into instance
//! pools, version by version, unloading them, and their states (READY,
//! LOADING, UNLOADING, UNAVAILABLE with a reason).
//!
//! Configs are loaded through `check::check_repository`, the same path as
//! `validate-config`, with a missing GPU as an error. A reloaded model keeps
//! serving its old versions until the new ones are ready; requests hold an
//! `Arc<LoadedModel>`, so a version that goes away finishes its in-flight
//! requests before its instances stop.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use super::loader::{auto_complete, load_version, read_labels, LoadedModel};
use crate::core::config::{ModelConfig, Severity};
use crate::core::error::{Error, Result};

use super::check::{check_completed, check_given, check_repositories, CheckOptions};
use super::layout::scan_model_dir;
use super::overrides::{self, LoadOverride};
use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::rate_limit::RateLimiter;

/// `--model-control-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlMode {
    /// Load everything at start; no load/unload API.
    None,
    /// Load everything at start and rescan every `--repository-poll-secs`.
    Poll,
    /// Load only `--load-model` at start; the API loads and unloads.
    Explicit,
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

/// One line of the repository index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub name: String,
    /// Empty when the model failed before any version was known.
    pub version: String,
    pub state: ModelState,
    pub reason: String,
}

struct VersionSlot {
    state: ModelState,
    reason: String,
    model: Option<Arc<LoadedModel>>,
    /// An unloaded version whose requests in flight still hold it: shown as
    /// UNLOADING until the last one finishes.
    retiring: Option<std::sync::Weak<LoadedModel>>,
}

impl VersionSlot {
    fn new(state: ModelState, model: Option<Arc<LoadedModel>>) -> Self {
        VersionSlot {
            state,
            reason: String::new(),
            model,
            retiring: None,
        }
    }

    /// Takes the model out of service; returns it for dropping.
    fn retire(&mut self) -> Option<Arc<LoadedModel>> {
        let model = self.model.take();
        // Its schedulers stop taking requests and send what they hold
        // without waiting for fuller batches (requests in flight keep the
        // version alive until they are answered).
        if let Some(m) = &model {
            m.close();
        }
        self.retiring = model.as_ref().map(Arc::downgrade);
        self.state = ModelState::Unavailable;
        self.reason = "unloaded".to_string();
        model
    }

    /// The state as clients see it.
    fn visible_state(&self) -> ModelState {
        let in_flight = self.retiring.as_ref().is_some_and(|w| w.strong_count() > 0);
        if self.state == ModelState::Unavailable && in_flight {
            ModelState::Unloading
        } else {
            self.state
        }
    }
}

#[derive(Default)]
struct ModelEntry {
    versions: BTreeMap<i64, VersionSlot>,
    /// Why the model as a whole is not available (config errors).
    reason: Option<String>,
    /// The model directory's files when last loaded, to see changes (poll).
    fingerprint: Option<u64>,
    /// The directory a load's `file:` parameters were written to, while
    /// the model is loaded from it.
    scratch: Option<tempfile::TempDir>,
    /// Loaded only as an ensemble's composing model, not asked for by
    /// name (`unload_dependents` unloads such models with the ensemble).
    implicit: bool,
}

/// Settings of the manager.
#[derive(Clone)]
pub struct ManagerOptions {
    /// The model repositories (Triton's repeated --model-repository); a
    /// model name may be in only one of them.
    pub repositories: Vec<PathBuf>,
    /// The GPU ids this server may use.
    pub gpus: &'static [i32],
    /// The backends that run KIND_GPU instances in this installation (set
    /// only when there is a GPU): KIND_AUTO resolves to KIND_GPU for them.
    pub gpu_backends: &'static [&'static str],
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
    pub metrics: crate::core::metrics_settings::MetricsSettings,
}

/// All models of the repository and their versions.
pub struct ModelManager {
    opts: ManagerOptions,
    models: RwLock<BTreeMap<String, ModelEntry>>,
    /// One lock per model name: loads of the same model (parallel loads of
    /// two ensembles that share a step) run one after the other.
    load_locks: std::sync::Mutex<BTreeMap<String, Arc<std::sync::Mutex<()>>>>,
}

impl ModelManager {
    pub fn new(opts: ManagerOptions) -> Self {
        ModelManager {
            opts,
            models: RwLock::new(BTreeMap::new()),
            load_locks: Default::default(),
        }
    }

    /// Model directory names in the repositories.
    pub fn repository_models(&self) -> Result<Vec<String>> {
        let mut names = std::collections::BTreeSet::new();
        for root in &self.opts.repositories {
            let dirs = super::layout::list_model_dirs(root).map_err(|e| {
                Error::internal(format!("failed to open directory {}: {e}", root.display()))
            })?;
            names.extend(
                dirs.iter()
                    .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned())),
            );
        }
        Ok(names.into_iter().collect())
    }

    /// Where model `name` is: its directory in the one repository that has
    /// it (the first repository's path when none has it).
    fn model_path(&self, name: &str) -> PathBuf {
        super::check::model_dirs(&self.opts.repositories, name)
            .into_iter()
            .next()
            .unwrap_or_else(|| self.opts.repositories[0].join(name))
    }

    /// Loads (or reloads) a model: every version its policy selects.
    /// Blocking: call it off the async runtime.
    pub fn load(&self, name: &str) -> Result<()> {
        self.load_with(name, None)
    }

    /// Loads (or reloads) a model, with a load request's `config` and
    /// `file:` parameters in place of the repository's files when given.
    pub fn load_with(&self, name: &str, over: Option<&LoadOverride>) -> Result<()> {
        let lock = Arc::clone(
            self.load_locks
                .lock()
                .unwrap()
                .entry(name.to_string())
                .or_default(),
        );
        let _one_at_a_time = lock.lock().unwrap_or_else(|e| e.into_inner());
        self.load_one(name, over)
    }

    fn load_one(&self, name: &str, over: Option<&LoadOverride>) -> Result<()> {
        // A client mistake, not a server fault: a name that is not a plain
        // directory name (it would reach outside the repository) or one
        // that is not there answers 4xx, with Triton's message.
        let not_there = || format!("failed to load '{name}', failed to poll from model repository");
        if !super::layout::is_contained_name(name) {
            return Err(Error::invalid_arg(not_there()));
        }
        let opts = CheckOptions {
            gpus: self.opts.gpus,
            gpu_backends: self.opts.gpu_backends,
            missing_gpu: Severity::Error,
            server_support: true,
        };
        let (mut model, fingerprint, scratch) = match over {
            None => {
                let fingerprint = fingerprint(&self.model_path(name));
                let checked = check_repositories(
                    &self.opts.repositories,
                    Some(&[name.to_string()]),
                    &opts,
                )
                .map_err(|e| Error::internal(format!("failed to poll model '{name}': {e}")))?;
                let Some(model) = checked.into_iter().next() else {
                    return Err(Error::not_found(not_there()));
                };
                (model, fingerprint, None)
            }
            Some(over) => {
                let config = overrides::parse_config(name, &over.config)?;
                let scratch = overrides::write_files(name, over)?;
                let path = match &scratch {
                    Some(dir) => dir.path().join(name),
                    None => self.model_path(name),
                };
                if !path.is_dir() {
                    return Err(Error::not_found(not_there()));
                }
                let dir = scan_model_dir(&path)
                    .map_err(|e| Error::internal(format!("failed to load '{name}': {e}")))?;
                let fingerprint = fingerprint(&path);
                let checked = check_given(&self.opts.repositories, dir, config, &opts)
                    .map_err(|e| Error::internal(format!("failed to load '{name}': {e}")))?;
                (checked, fingerprint, scratch)
            }
        };
        self.models
            .write()
            .unwrap()
            .entry(name.to_string())
            .or_default()
            .fingerprint = Some(fingerprint);
        if model.config.is_none() && !model.has_errors() && self.opts.auto_complete {
            // No config.pbtxt: start from an empty one, as Triton does.
            model = check_completed(model.dir.clone(), ModelConfig::default(), &opts);
        }
        let first_error = model
            .findings
            .iter()
            .find(|f| f.severity == Severity::Error)
            .map(|f| f.message.clone());
        let config = match (first_error, model.config.clone()) {
            (None, Some(config)) => match auto_complete(&self.opts, config, &model) {
                Ok(config) => config,
                Err(e) => {
                    // E.g. a Python model whose worker could not start: the
                    // index shows it UNAVAILABLE with the reason.
                    let prefix = format!("load failed for model '{name}': ");
                    self.entry_failed(name, e.message.strip_prefix(&prefix).unwrap_or(&e.message));
                    return Err(e);
                }
            },
            (error, _) => {
                let reason = error.unwrap_or_else(|| {
                    format!("model configuration is not provided for model '{name}'")
                });
                self.entry_failed(name, &reason);
                return Err(Error::invalid_arg(format!(
                    "load failed for model '{name}': {reason}"
                )));
            }
        };
        let labels = read_labels(&model.dir.path, &config).inspect_err(|e| {
            self.entry_failed(name, &e.message);
        })?;

        let mut failures = Vec::new();
        let mut loaded = BTreeMap::new();
        for &version in &model.versions {
            self.set_state(name, version, ModelState::Loading, "");
            match self.load_version_retrying(name, version, &model.dir.path, &config, &labels) {
                Ok(m) => {
                    loaded.insert(version, Arc::new(m));
                }
                Err(e) => {
                    self.set_state(name, version, ModelState::Unavailable, &e.message);
                    failures.push(format!(
                        "version {version} is at UNAVAILABLE state: {};",
                        e.message
                    ));
                }
            }
        }
        // Swap in the new versions, then retire the ones no longer selected.
        let (retired, old_scratch) = {
            let mut models = self.models.write().unwrap();
            let entry = models.entry(name.to_string()).or_default();
            entry.reason = None;
            entry.implicit = false;
            // The files of an earlier override go once nothing loads from
            // them (versions still serving already hold their backends),
            // removed after the lock is released.
            let old_scratch = std::mem::replace(&mut entry.scratch, scratch);
            for (version, m) in loaded {
                entry
                    .versions
                    .insert(version, VersionSlot::new(ModelState::Ready, Some(m)));
            }
            let mut retired = Vec::new();
            for (version, slot) in entry.versions.iter_mut() {
                if !model.versions.contains(version) {
                    retired.extend(slot.retire());
                }
            }
            (retired, old_scratch)
        };
        drop(retired);
        drop(old_scratch);
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid_arg(format!(
                "load failed for model '{name}': {}",
                failures.join("\n")
            )))
        }
    }

    /// One version's load, tried again up to `load_retries` times while it
    /// fails (each failure logged).
    fn load_version_retrying(
        &self,
        name: &str,
        version: i64,
        dir: &std::path::Path,
        config: &crate::core::config::ModelConfig,
        labels: &BTreeMap<String, Vec<String>>,
    ) -> Result<LoadedModel> {
        let mut attempt = 0;
        loop {
            match load_version(&self.opts, name, version, dir, config, labels) {
                Err(e) if attempt < self.opts.load_retries => {
                    attempt += 1;
                    crate::core::logging::log(
                        'W',
                        &format!(
                            "failed to load '{name}' version {version}: {}; retrying ({attempt} of {})",
                            e.message, self.opts.load_retries
                        ),
                    );
                }
                result => return result,
            }
        }
    }

    /// Unloads every version of a model. Requests in flight finish first.
    pub fn unload(&self, name: &str) -> Result<()> {
        self.unload_with(name, false)
    }

    /// Unloads a model and, with `dependents`, the models that were
    /// loaded along with it (the `unload_dependents` parameter): an
    /// ensemble's composing models, at any depth, that were not loaded by
    /// name and that no other loaded ensemble uses.
    pub fn unload_with(&self, name: &str, dependents: bool) -> Result<()> {
        let dependents: Vec<String> = if dependents {
            let implicit: Vec<String> = self
                .composing_models(name)
                .into_iter()
                .filter(|m| {
                    self.models
                        .read()
                        .unwrap()
                        .get(m)
                        .is_some_and(|e| e.implicit)
                })
                .collect();
            let mut gone = implicit.clone();
            gone.push(name.to_string());
            let in_use: Vec<String> = self
                .loaded_names()
                .into_iter()
                .filter(|m| !gone.contains(m))
                .flat_map(|m| self.composing_models(&m))
                .collect();
            implicit
                .into_iter()
                .filter(|m| !in_use.contains(m))
                .collect()
        } else {
            Vec::new()
        };
        self.unload_one(name)?;
        for m in dependents {
            let _ = self.unload_one(&m);
        }
        Ok(())
    }

    /// Marks a model loaded only as a composing model (see `unload_with`).
    pub fn mark_implicit(&self, name: &str) {
        if let Some(e) = self.models.write().unwrap().get_mut(name) {
            e.implicit = true;
        }
    }

    /// Models with a ready version.
    fn loaded_names(&self) -> Vec<String> {
        let names: Vec<String> = self.models.read().unwrap().keys().cloned().collect();
        names
            .into_iter()
            .filter(|n| !self.ready_versions(n).is_empty())
            .collect()
    }

    /// The composing models of a loaded ensemble, at any depth.
    fn composing_models(&self, name: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut todo = vec![name.to_string()];
        while let Some(next) = todo.pop() {
            let Ok(model) = self.get(&next, None) else {
                continue;
            };
            if let Some(SchedulingChoice::EnsembleScheduling(e)) = &model.config.scheduling_choice {
                for step in &e.step {
                    if step.model_name != name && !out.contains(&step.model_name) {
                        out.push(step.model_name.clone());
                        todo.push(step.model_name.clone());
                    }
                }
            }
        }
        out
    }

    fn unload_one(&self, name: &str) -> Result<()> {
        let (retired, scratch) = {
            let mut models = self.models.write().unwrap();
            let Some(entry) = models.get_mut(name) else {
                return Err(Error::invalid_arg(format!(
                    "failed to unload '{name}', model is not loaded"
                )));
            };
            let mut retired = Vec::new();
            for slot in entry.versions.values_mut() {
                retired.extend(slot.retire());
            }
            (retired, entry.scratch.take())
        };
        // Dropping the last reference joins the instance threads.
        drop(retired);
        drop(scratch);
        Ok(())
    }

    /// One poll of the repository (`--model-control-mode=poll`): loads new
    /// models, reloads changed ones (the old versions serve until the new
    /// ones are ready) and unloads removed ones. Returns the load errors.
    /// Blocking.
    pub fn poll(&self) -> Vec<Error> {
        let names = match self.repository_models() {
            Ok(n) => n,
            Err(e) => return vec![e],
        };
        let changed: Vec<&String> = names
            .iter()
            .filter(|name| {
                let known = self
                    .models
                    .read()
                    .unwrap()
                    .get(name.as_str())
                    .and_then(|e| e.fingerprint);
                known != Some(fingerprint(&self.model_path(name)))
            })
            .collect();
        let errors: Vec<Error> = in_parallel(&changed, self.opts.load_threads, |n| self.load(n))
            .into_iter()
            .filter_map(Result::err)
            .collect();
        let removed: Vec<String> = self
            .models
            .read()
            .unwrap()
            .keys()
            .filter(|k| !names.contains(k))
            .cloned()
            .collect();
        for name in removed {
            let _ = self.unload(&name);
            self.models.write().unwrap().remove(&name);
        }
        errors
    }

    /// Drops every model (shutdown).
    pub fn unload_all(&self) {
        let names: Vec<String> = self.models.read().unwrap().keys().cloned().collect();
        for name in names {
            let _ = self.unload(&name);
        }
    }

    /// The model version to run: the given one, or the highest ready one.
    pub fn get(&self, name: &str, version: Option<i64>) -> Result<Arc<LoadedModel>> {
        let models = self.models.read().unwrap();
        let Some(entry) = models.get(name) else {
            return Err(Error::not_found(format!(
                "Request for unknown model: '{name}' is not found"
            )));
        };
        match version {
            Some(v) => match entry.versions.get(&v) {
                Some(VersionSlot {
                    model: Some(m),
                    state: ModelState::Ready,
                    ..
                }) => Ok(Arc::clone(m)),
                Some(slot) => Err(Error::unavailable(format!(
                    "Request for unknown model: '{name}' version {v} is not at ready state"
                ))
                .with_reason(&slot.reason)),
                None => Err(Error::not_found(format!(
                    "Request for unknown model: '{name}' version {v} is not found"
                ))),
            },
            None => entry
                .versions
                .values()
                .rev()
                .find_map(|s| s.model.as_ref().filter(|_| s.state == ModelState::Ready))
                .cloned()
                .ok_or_else(|| {
                    Error::not_found(format!(
                        "Request for unknown model: '{name}' has no available versions"
                    ))
                }),
        }
    }

    /// Versions of a model that are ready.
    pub fn ready_versions(&self, name: &str) -> Vec<i64> {
        let models = self.models.read().unwrap();
        models
            .get(name)
            .map(|e| {
                e.versions
                    .iter()
                    .filter(|(_, s)| s.state == ModelState::Ready)
                    .map(|(v, _)| *v)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether every model known to the manager is ready (`--strict-readiness`):
    /// each has a ready version and none failed; a model that is unavailable
    /// only because it was unloaded does not count (as in Triton).
    pub fn all_ready(&self) -> bool {
        let models = self.models.read().unwrap();
        models.values().all(|e| {
            let unloaded =
                !e.versions.is_empty() && e.versions.values().all(|s| s.reason == "unloaded");
            unloaded
                || (e.reason.is_none()
                    && e.versions.values().any(|s| s.state == ModelState::Ready)
                    && !e.versions.values().any(|s| s.state == ModelState::Loading))
        })
    }

    /// The repository index: every model directory, with the state of each
    /// version the manager knows.
    pub fn index(&self, ready_only: bool) -> Result<Vec<IndexEntry>> {
        let models = self.models.read().unwrap();
        let mut out = Vec::new();
        let mut names: Vec<String> = self.repository_models()?;
        for known in models.keys() {
            if !names.contains(known) {
                names.push(known.clone());
            }
        }
        names.sort();
        for name in names {
            match models.get(&name) {
                Some(entry) if !entry.versions.is_empty() => {
                    for (v, slot) in &entry.versions {
                        out.push(IndexEntry {
                            name: name.clone(),
                            version: v.to_string(),
                            state: slot.visible_state(),
                            reason: slot.reason.clone(),
                        });
                    }
                }
                Some(entry) => out.push(IndexEntry {
                    name: name.clone(),
                    version: String::new(),
                    state: ModelState::Unavailable,
                    reason: entry.reason.clone().unwrap_or_default(),
                }),
                None => out.push(IndexEntry {
                    name,
                    version: String::new(),
                    state: ModelState::Unavailable,
                    reason: String::new(),
                }),
            }
        }
        if ready_only {
            out.retain(|e| e.state == ModelState::Ready);
        }
        Ok(out)
    }

    fn set_state(&self, name: &str, version: i64, state: ModelState, reason: &str) {
        let mut models = self.models.write().unwrap();
        let entry = models.entry(name.to_string()).or_default();
        let slot = entry
            .versions
            .entry(version)
            .or_insert_with(|| VersionSlot::new(state, None));
        // A version that is serving keeps serving while its reload loads.
        if !(state == ModelState::Loading && slot.model.is_some()) {
            slot.state = state;
        }
        slot.reason = reason.to_string();
    }

    fn entry_failed(&self, name: &str, reason: &str) {
        let mut models = self.models.write().unwrap();
        let entry = models.entry(name.to_string()).or_default();
        if entry.versions.values().all(|s| s.model.is_none()) {
            entry.reason = Some(reason.to_string());
        }
    }
}

impl Error {
    fn with_reason(mut self, reason: &str) -> Self {
        if !reason.is_empty() {
            self.message.push_str(&format!(": {reason}"));
        }
        self
    }
}

/// A hash of every path, size and modification time under `dir`.
fn fingerprint(dir: &std::path::Path) -> u64 {
    use std::hash::{Hash, Hasher};
    fn walk(
        dir: &std::path::Path,
        h: &mut std::collections::hash_map::DefaultHasher,
        depth: usize,
    ) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            e.file_name().hash(h);
            if let Ok(meta) = e.metadata() {
                meta.len().hash(h);
                if let Ok(t) = meta.modified() {
                    t.hash(h);
                }
                if meta.is_dir() && depth < 4 {
                    walk(&e.path(), h, depth + 1);
                }
            }
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    walk(dir, &mut h, 0);
    h.finish()
}

/// `f` over every item, on up to `threads` threads at once (each takes the
/// next item when it is done with one); the results in the items' order.
/// One thread, or one item, runs on the caller's thread.
pub fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<R>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                *results[i].lock().unwrap() = Some(r);
            });
        }
    });
    results
        .into_iter()
        .map(|r| r.into_inner().unwrap().expect("every item ran"))
        .collect()
}

#[cfg(test)]
mod parallel_tests {
    use super::in_parallel;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::time::Duration;

    #[test]
    fn results_keep_the_items_order_and_at_most_threads_run_at_once() {
        let items: Vec<u64> = (0..12).collect();
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let out = in_parallel(&items, 3, |&i| {
            let now = running.fetch_add(1, SeqCst) + 1;
            most.fetch_max(now, SeqCst);
            // Later items finish first.
            std::thread::sleep(Duration::from_millis(30 - 2 * i));
            running.fetch_sub(1, SeqCst);
            i * 10
        });
        assert_eq!(out, items.iter().map(|i| i * 10).collect::<Vec<_>>());
        assert_eq!(most.load(SeqCst), 3);
        // One thread: one at a time, on the caller's thread.
        let caller = std::thread::current().id();
        let out = in_parallel(&items, 1, |&i| (i, std::thread::current().id() == caller));
        assert!(out.iter().all(|&(_, here)| here));
        assert!(in_parallel(&Vec::<u8>::new(), 4, |&b| b).is_empty());
    }
}
