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
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::loader::{auto_complete, load_version, read_labels, LoadedModel};
use crate::core::config::{ModelConfig, Severity};
use crate::core::error::{Error, Result};

use super::check::{check_completed, check_given, check_in, CheckOptions, Roots};
use super::layout::{files_fingerprint, fingerprint, scan_model_dir};
use super::overrides::{self, LoadOverride};
use super::table::{Table, VersionSlot};
pub use super::types::{ManagerOptions, ModelId, ModelState};
use crate::core::config::pb::model_config::SchedulingChoice;

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

/// One line of the repository index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub name: String,
    /// The repository path with `--model-namespacing` ("" without).
    pub namespace: String,
    /// Empty when the model failed before any version was known.
    pub version: String,
    pub state: ModelState,
    pub reason: String,
}

/// All models of the repository and their versions.
pub struct ModelManager {
    opts: ManagerOptions,
    models: RwLock<Table>,
    /// One lock per model: loads of the same model (parallel loads of two
    /// ensembles that share a step) run one after the other.
    load_locks: std::sync::Mutex<BTreeMap<ModelId, Arc<std::sync::Mutex<()>>>>,
}

impl ModelManager {
    pub fn new(opts: ManagerOptions) -> Self {
        ModelManager {
            opts,
            models: RwLock::new(Table::default()),
            load_locks: Default::default(),
        }
    }

    /// Model directory names in the repositories.
    pub fn repository_models(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .repository_ids()?
            .into_iter()
            .map(|id| id.name)
            .collect();
        names.dedup();
        Ok(names)
    }

    /// The models of the repositories: one per directory name, or with
    /// namespacing one per repository and directory name; sorted.
    fn repository_ids(&self) -> Result<Vec<ModelId>> {
        let mut ids = std::collections::BTreeSet::new();
        for root in &self.opts.repositories {
            let dirs = super::layout::list_model_dirs(root).map_err(|e| {
                Error::internal(format!("failed to open directory {}: {e}", root.display()))
            })?;
            for dir in dirs {
                if let Some(name) = dir.file_name() {
                    ids.insert(self.id_in(root, &name.to_string_lossy()));
                }
            }
        }
        Ok(ids.into_iter().collect())
    }

    fn id_in(&self, root: &Path, name: &str) -> ModelId {
        ModelId {
            name: name.to_string(),
            namespace: if self.opts.namespacing {
                root.display().to_string()
            } else {
                String::new()
            },
        }
    }

    /// The models a load of `name` loads: the one model of that name, or
    /// with namespacing the one of each repository that has it (Triton
    /// loads them all).
    fn ids_named(&self, name: &str) -> Vec<ModelId> {
        let roots: Vec<&PathBuf> = if self.opts.namespacing {
            self.opts
                .repositories
                .iter()
                .filter(|r| super::layout::is_contained_name(name) && r.join(name).is_dir())
                .collect()
        } else {
            Vec::new()
        };
        if roots.is_empty() {
            return vec![ModelId {
                name: name.to_string(),
                namespace: String::new(),
            }];
        }
        roots.into_iter().map(|r| self.id_in(r, name)).collect()
    }

    /// Where model `id` is: its namespace's directory, or the one
    /// repository that has it (the first repository's path when none has).
    fn model_path(&self, id: &ModelId) -> PathBuf {
        if !id.namespace.is_empty() {
            return Path::new(&id.namespace).join(&id.name);
        }
        super::check::model_dirs(&self.opts.repositories, &id.name)
            .into_iter()
            .next()
            .unwrap_or_else(|| self.opts.repositories[0].join(&id.name))
    }

    /// Where the check of model `id` finds models by name.
    fn roots_for<'a>(&'a self, id: &'a ModelId) -> Roots<'a> {
        Roots {
            all: &self.opts.repositories,
            home: (!id.namespace.is_empty()).then(|| Path::new(&id.namespace)),
        }
    }

    /// Loads (or reloads) a model: every version its policy selects.
    /// Blocking: call it off the async runtime.
    pub fn load(&self, name: &str) -> Result<()> {
        self.load_with(name, None)
    }

    /// Loads (or reloads) a model, with a load request's `config` and
    /// `file:` parameters in place of the repository's files when given.
    /// With namespacing, the model of that name in each repository.
    pub fn load_with(&self, name: &str, over: Option<&LoadOverride>) -> Result<()> {
        let mut first_error = None;
        for id in self.ids_named(name) {
            if let Err(e) = self.load_id(&id, over) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The models named `name` in the repositories that have no ready
    /// version (an ensemble's load brings them).
    pub fn unready_named(&self, name: &str) -> Vec<ModelId> {
        let models = self.models.read().unwrap();
        self.ids_named(name)
            .into_iter()
            .filter(|id| models.get(id).is_none_or(|e| e.latest().is_none()))
            .collect()
    }

    /// Loads one model (see `load_with`).
    pub fn load_id(&self, id: &ModelId, over: Option<&LoadOverride>) -> Result<()> {
        let lock = Arc::clone(
            self.load_locks
                .lock()
                .unwrap()
                .entry(id.clone())
                .or_default(),
        );
        let _one_at_a_time = lock.lock().unwrap_or_else(|e| e.into_inner());
        self.load_one(id, over)
    }

    fn load_one(&self, id: &ModelId, over: Option<&LoadOverride>) -> Result<()> {
        let name = id.name.as_str();
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
            min_compute_capability: self.opts.min_compute_capability,
            config_name: self.opts.config_name.as_deref(),
            missing_gpu: Severity::Error,
            server_support: true,
            model_files: false,
        };
        let (mut model, fingerprint, scratch) = match over {
            None => {
                let fingerprint = fingerprint(&self.model_path(id));
                let checked = check_in(self.roots_for(id), Some(&[name.to_string()]), &opts)
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
                    None => self.model_path(id),
                };
                if !path.is_dir() {
                    return Err(Error::not_found(not_there()));
                }
                let dir = scan_model_dir(&path, self.opts.config_name.as_deref())
                    .map_err(|e| Error::internal(format!("failed to load '{name}': {e}")))?;
                let fingerprint = fingerprint(&path);
                let checked = check_given(self.roots_for(id), dir, config, &opts)
                    .map_err(|e| Error::internal(format!("failed to load '{name}': {e}")))?;
                (checked, fingerprint, scratch)
            }
        };
        self.models.write().unwrap().entry(id).fingerprint = Some(fingerprint);
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
                    self.entry_failed(id, e.message.strip_prefix(&prefix).unwrap_or(&e.message));
                    return Err(e);
                }
            },
            (error, _) => {
                let reason = error.unwrap_or_else(|| {
                    format!("model configuration is not provided for model '{name}'")
                });
                self.entry_failed(id, &reason);
                return Err(Error::invalid_arg(format!(
                    "load failed for model '{name}': {reason}"
                )));
            }
        };
        let labels = read_labels(&model.dir.path, &config).inspect_err(|e| {
            self.entry_failed(id, &e.message);
        })?;

        // A version loaded now whose config differs only in its instance
        // groups, from the same files, keeps its instances (Triton's
        // instance update: only the difference is created or removed).
        let files = files_fingerprint(&model.dir.path);
        let previous: BTreeMap<i64, Arc<LoadedModel>> = model
            .versions
            .iter()
            .filter_map(|&v| self.get_id(id, Some(v)).ok().map(|m| (v, m)))
            .filter(|(_, m)| m.files == files && only_instances_differ(&m.config, &config))
            .collect();
        let mut failures = Vec::new();
        let mut loaded = BTreeMap::new();
        let mut loaded_versions = Vec::new();
        for &version in &model.versions {
            self.set_state(id, version, ModelState::Loading, "");
            let before = previous.get(&version).map(Arc::as_ref);
            match self.load_version_retrying(id, version, &model.dir.path, &config, &labels, before)
            {
                Ok(mut m) => {
                    m.files = files;
                    loaded_versions.push(version);
                    loaded.insert(version, Arc::new(m));
                }
                Err(e) => {
                    self.set_state(id, version, ModelState::Unavailable, &e.message);
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
            let entry = models.entry(id);
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
        // An instance update that removes instances ends as Triton's does:
        // they are finalized before the load returns. The old version's
        // requests in flight finish first (new ones reach the new version),
        // then its pool goes, handing over the instances that stay. One
        // that only adds instances returns at once; the old pool hands its
        // instances over whenever its requests in flight are done.
        for (_, old) in previous {
            let removes = old
                .pool
                .as_ref()
                .and_then(std::sync::Weak::upgrade)
                .is_some_and(|pool| !pool.hands_over_all());
            if removes && loaded_versions.contains(&old.version) {
                let deadline = std::time::Instant::now() + INSTANCE_UPDATE_DRAIN;
                while Arc::strong_count(&old) > 1 && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            drop(old);
        }
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
        id: &ModelId,
        version: i64,
        dir: &Path,
        config: &crate::core::config::ModelConfig,
        labels: &BTreeMap<String, Vec<String>>,
        previous: Option<&LoadedModel>,
    ) -> Result<LoadedModel> {
        let name = &id.name;
        let mut attempt = 0;
        loop {
            match load_version(&self.opts, id, version, dir, config, labels, previous) {
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

    /// Unloads every version of a model (with namespacing, of each model
    /// of that name). Requests in flight finish first.
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
                    let models = self.models.read().unwrap();
                    models
                        .named(m)
                        .iter()
                        .any(|id| models.get(id).is_some_and(|e| e.implicit))
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

    /// Marks the models of these ids as loaded only as composing models
    /// (see `unload_with`).
    pub fn mark_implicit(&self, ids: &[ModelId]) {
        let mut models = self.models.write().unwrap();
        for id in ids {
            if let Some(e) = models.get_mut(id) {
                e.implicit = true;
            }
        }
    }

    /// Names of the models with a ready version.
    fn loaded_names(&self) -> Vec<String> {
        let models = self.models.read().unwrap();
        let mut names: Vec<String> = models
            .iter()
            .filter(|(_, e)| e.latest().is_some())
            .map(|(id, _)| id.name)
            .collect();
        names.dedup();
        names
    }

    /// The latest ready version of each model named `name` (one, or with
    /// namespacing one per repository that has it loaded).
    pub fn loaded_named(&self, name: &str) -> Vec<Arc<LoadedModel>> {
        let models = self.models.read().unwrap();
        models
            .named(name)
            .iter()
            .filter_map(|id| models.get(id)?.latest().cloned())
            .collect()
    }

    /// The composing models of a loaded ensemble, at any depth.
    fn composing_models(&self, name: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut todo = vec![name.to_string()];
        while let Some(next) = todo.pop() {
            for model in self.loaded_named(&next) {
                if let Some(SchedulingChoice::EnsembleScheduling(e)) =
                    &model.config.scheduling_choice
                {
                    for step in &e.step {
                        if step.model_name != name && !out.contains(&step.model_name) {
                            out.push(step.model_name.clone());
                            todo.push(step.model_name.clone());
                        }
                    }
                }
            }
        }
        out
    }

    fn unload_one(&self, name: &str) -> Result<()> {
        let ids = self.models.read().unwrap().named(name);
        if ids.is_empty() {
            return Err(Error::invalid_arg(format!(
                "failed to unload '{name}', model is not loaded"
            )));
        }
        for id in ids {
            self.unload_id(&id);
        }
        Ok(())
    }

    fn unload_id(&self, id: &ModelId) {
        let (retired, scratch) = {
            let mut models = self.models.write().unwrap();
            let Some(entry) = models.get_mut(id) else {
                return;
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
    }

    /// One poll of the repository (`--model-control-mode=poll`): loads new
    /// models, reloads changed ones (the old versions serve until the new
    /// ones are ready) and unloads removed ones. Returns the load errors.
    /// Blocking.
    pub fn poll(&self) -> Vec<Error> {
        let ids = match self.repository_ids() {
            Ok(ids) => ids,
            Err(e) => return vec![e],
        };
        let changed: Vec<&ModelId> = ids
            .iter()
            .filter(|id| {
                let known = self
                    .models
                    .read()
                    .unwrap()
                    .get(id)
                    .and_then(|e| e.fingerprint);
                known != Some(fingerprint(&self.model_path(id)))
            })
            .collect();
        let errors: Vec<Error> = in_parallel(&changed, self.opts.load_threads, |id| {
            self.load_id(id, None)
        })
        .into_iter()
        .filter_map(Result::err)
        .collect();
        let removed: Vec<ModelId> = self
            .models
            .read()
            .unwrap()
            .iter()
            .map(|(id, _)| id)
            .filter(|id| ids.binary_search(id).is_err())
            .collect();
        for id in removed {
            self.unload_id(&id);
            self.models.write().unwrap().remove(&id);
        }
        errors
    }

    /// Drops every model (shutdown).
    pub fn unload_all(&self) {
        let ids: Vec<ModelId> = self
            .models
            .read()
            .unwrap()
            .iter()
            .map(|(id, _)| id)
            .collect();
        for id in ids {
            self.unload_id(&id);
        }
    }

    /// The model version to run: the given one, or the highest ready one.
    pub fn get(&self, name: &str, version: Option<i64>) -> Result<Arc<LoadedModel>> {
        self.get_from(None, name, version)
    }

    /// As `get`, for a step of an ensemble of namespace `home`: with
    /// namespacing, the model of the ensemble's own repository when it has
    /// one of that name (Triton's preferred identifier), else the one model
    /// of that name.
    pub fn get_from(
        &self,
        home: Option<&str>,
        name: &str,
        version: Option<i64>,
    ) -> Result<Arc<LoadedModel>> {
        let models = self.models.read().unwrap();
        models
            .resolve(name, home, self.opts.namespacing)?
            .version(name, version)
    }

    /// A version of the model `id` (the repository index's entries).
    pub fn get_id(&self, id: &ModelId, version: Option<i64>) -> Result<Arc<LoadedModel>> {
        let models = self.models.read().unwrap();
        let entry = models.get(id).ok_or_else(|| {
            Error::not_found(format!(
                "Request for unknown model: '{}' is not found",
                id.name
            ))
        })?;
        entry.version(&id.name, version)
    }

    /// Versions of a model that are ready.
    pub fn ready_versions(&self, name: &str) -> Vec<i64> {
        let models = self.models.read().unwrap();
        models
            .resolve(name, None, self.opts.namespacing)
            .map(|e| e.ready_versions())
            .unwrap_or_default()
    }

    /// Whether every model known to the manager is ready (`--strict-readiness`):
    /// each has a ready version and none failed; a model that is unavailable
    /// only because it was unloaded does not count (as in Triton).
    pub fn all_ready(&self) -> bool {
        let models = self.models.read().unwrap();
        let ready = models.values().all(|e| {
            e.unloaded()
                || (e.reason.is_none()
                    && e.versions.values().any(|s| s.state == ModelState::Ready)
                    && !e.versions.values().any(|s| s.state == ModelState::Loading))
        });
        ready
    }

    /// The repository index: every model directory, with the state of each
    /// version the manager knows; by name, then namespace.
    pub fn index(&self, ready_only: bool) -> Result<Vec<IndexEntry>> {
        let models = self.models.read().unwrap();
        let mut ids: std::collections::BTreeSet<ModelId> =
            self.repository_ids()?.into_iter().collect();
        ids.extend(models.iter().map(|(id, _)| id));
        let mut out = Vec::new();
        for id in ids {
            let line = |version: String, state, reason: String| IndexEntry {
                name: id.name.clone(),
                namespace: id.namespace.clone(),
                version,
                state,
                reason,
            };
            match models.get(&id) {
                Some(entry) if !entry.versions.is_empty() => {
                    for (v, slot) in &entry.versions {
                        out.push(line(
                            v.to_string(),
                            slot.visible_state(),
                            slot.reason.clone(),
                        ));
                    }
                }
                Some(entry) => out.push(line(
                    String::new(),
                    ModelState::Unavailable,
                    entry.reason.clone().unwrap_or_default(),
                )),
                None => out.push(line(String::new(), ModelState::Unavailable, String::new())),
            }
        }
        if ready_only {
            out.retain(|e| e.state == ModelState::Ready);
        }
        Ok(out)
    }

    fn set_state(&self, id: &ModelId, version: i64, state: ModelState, reason: &str) {
        let mut models = self.models.write().unwrap();
        let slot = models
            .entry(id)
            .versions
            .entry(version)
            .or_insert_with(|| VersionSlot::new(state, None));
        // A version that is serving keeps serving while its reload loads.
        if !(state == ModelState::Loading && slot.model.is_some()) {
            slot.state = state;
        }
        slot.reason = reason.to_string();
    }

    fn entry_failed(&self, id: &ModelId, reason: &str) {
        let mut models = self.models.write().unwrap();
        let entry = models.entry(id);
        if entry.versions.values().all(|s| s.model.is_none()) {
            entry.reason = Some(reason.to_string());
        }
    }
}

/// A hash of every path, size and modification time under `dir`.
/// How long an instance update waits for the old version's requests in
/// flight before it lets the old instances go whenever those finish.
const INSTANCE_UPDATE_DRAIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether two configs of a model differ in nothing but their instance
/// groups (a reload that then keeps the instances).
fn only_instances_differ(
    old: &crate::core::config::ModelConfig,
    new: &crate::core::config::ModelConfig,
) -> bool {
    let strip = |c: &crate::core::config::ModelConfig| crate::core::config::ModelConfig {
        instance_group: Vec::new(),
        ..c.clone()
    };
    strip(old) == strip(new)
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
