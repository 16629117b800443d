//! The manager's table of models: each model's versions and states, kept by
//! name and, with `--model-namespacing`, by namespace (the repository the
//! model came from), and how a request's model name finds its entry.
//!
//! Without namespacing every model is in namespace "" and a name is one
//! model. With it, the same name may be in several repositories: a name
//! that one live model has resolves to it, one that several have is
//! ambiguous (Triton's error), and an ensemble's step prefers the model of
//! the ensemble's own repository.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::loader::LoadedModel;
use super::types::{ModelId, ModelState};
use crate::core::error::{Error, Result};

pub(super) struct VersionSlot {
    pub(super) state: ModelState,
    pub(super) reason: String,
    pub(super) model: Option<Arc<LoadedModel>>,
    /// An unloaded version whose requests in flight still hold it: shown as
    /// UNLOADING until the last one finishes.
    retiring: Option<std::sync::Weak<LoadedModel>>,
}

impl VersionSlot {
    pub(super) fn new(state: ModelState, model: Option<Arc<LoadedModel>>) -> Self {
        VersionSlot {
            state,
            reason: String::new(),
            model,
            retiring: None,
        }
    }

    /// Takes the model out of service; returns it for dropping.
    pub(super) fn retire(&mut self) -> Option<Arc<LoadedModel>> {
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
    pub(super) fn visible_state(&self) -> ModelState {
        let in_flight = self.retiring.as_ref().is_some_and(|w| w.strong_count() > 0);
        if self.state == ModelState::Unavailable && in_flight {
            ModelState::Unloading
        } else {
            self.state
        }
    }

    fn ready(&self) -> Option<&Arc<LoadedModel>> {
        self.model
            .as_ref()
            .filter(|_| self.state == ModelState::Ready)
    }
}

#[derive(Default)]
pub(super) struct ModelEntry {
    pub(super) versions: BTreeMap<i64, VersionSlot>,
    /// Why the model as a whole is not available (config errors).
    pub(super) reason: Option<String>,
    /// The model directory's files when last loaded, to see changes (poll).
    pub(super) fingerprint: Option<u64>,
    /// The directory a load's `file:` parameters were written to, while
    /// the model is loaded from it.
    pub(super) scratch: Option<tempfile::TempDir>,
    /// Loaded only as an ensemble's composing model, not asked for by
    /// name (`unload_dependents` unloads such models with the ensemble).
    pub(super) implicit: bool,
}

impl ModelEntry {
    /// Every version was unloaded (Triton forgets such a model's name
    /// until it loads again).
    pub(super) fn unloaded(&self) -> bool {
        !self.versions.is_empty() && self.versions.values().all(|s| s.reason == "unloaded")
    }

    pub(super) fn ready_versions(&self) -> Vec<i64> {
        self.versions
            .iter()
            .filter(|(_, s)| s.state == ModelState::Ready)
            .map(|(v, _)| *v)
            .collect()
    }

    /// The latest ready version.
    pub(super) fn latest(&self) -> Option<&Arc<LoadedModel>> {
        self.versions.values().rev().find_map(VersionSlot::ready)
    }

    /// The version to run: the given one, or the latest ready one.
    pub(super) fn version(&self, name: &str, version: Option<i64>) -> Result<Arc<LoadedModel>> {
        match version {
            Some(v) => match self.versions.get(&v) {
                Some(slot) => slot.ready().cloned().ok_or_else(|| {
                    let mut message = format!(
                        "Request for unknown model: '{name}' version {v} is not at ready state"
                    );
                    if !slot.reason.is_empty() {
                        message.push_str(&format!(": {}", slot.reason));
                    }
                    Error::unavailable(message)
                }),
                None => Err(Error::not_found(format!(
                    "Request for unknown model: '{name}' version {v} is not found"
                ))),
            },
            None => self.latest().cloned().ok_or_else(|| {
                Error::not_found(format!(
                    "Request for unknown model: '{name}' has no available versions"
                ))
            }),
        }
    }
}

/// Every model the manager knows: name → namespace → entry.
#[derive(Default)]
pub(super) struct Table {
    by_name: BTreeMap<String, BTreeMap<String, ModelEntry>>,
}

impl Table {
    pub(super) fn get(&self, id: &ModelId) -> Option<&ModelEntry> {
        self.by_name.get(&id.name)?.get(&id.namespace)
    }

    pub(super) fn get_mut(&mut self, id: &ModelId) -> Option<&mut ModelEntry> {
        self.by_name.get_mut(&id.name)?.get_mut(&id.namespace)
    }

    /// The entry of `id`, created empty when new.
    pub(super) fn entry(&mut self, id: &ModelId) -> &mut ModelEntry {
        self.by_name
            .entry(id.name.clone())
            .or_default()
            .entry(id.namespace.clone())
            .or_default()
    }

    pub(super) fn remove(&mut self, id: &ModelId) {
        if let Some(spaces) = self.by_name.get_mut(&id.name) {
            spaces.remove(&id.namespace);
            if spaces.is_empty() {
                self.by_name.remove(&id.name);
            }
        }
    }

    /// Every model, by name then namespace.
    pub(super) fn iter(&self) -> impl Iterator<Item = (ModelId, &ModelEntry)> {
        self.by_name.iter().flat_map(|(name, spaces)| {
            spaces.iter().map(move |(namespace, e)| {
                let id = ModelId {
                    name: name.clone(),
                    namespace: namespace.clone(),
                };
                (id, e)
            })
        })
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &ModelEntry> {
        self.by_name.values().flat_map(|spaces| spaces.values())
    }

    /// The models named `name`, in every namespace.
    pub(super) fn named(&self, name: &str) -> Vec<ModelId> {
        self.by_name
            .get(name)
            .map(|spaces| {
                spaces
                    .keys()
                    .map(|namespace| ModelId {
                        name: name.to_string(),
                        namespace: namespace.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The entry a request for model `name` means. `home` is the namespace
    /// an ensemble's step prefers (its own repository's model); without a
    /// match there, a name that one live model has is that model, and a
    /// name that several have is ambiguous (Triton's INVALID_ARG).
    /// `namespacing` off: the one entry of namespace "".
    pub(super) fn resolve(
        &self,
        name: &str,
        home: Option<&str>,
        namespacing: bool,
    ) -> Result<&ModelEntry> {
        let unknown = || format!("Request for unknown model: '{name}' is not found");
        let spaces = self.by_name.get(name);
        if !namespacing {
            return spaces
                .and_then(|s| s.get(""))
                .ok_or_else(|| Error::not_found(unknown()));
        }
        // With namespacing Triton answers an unknown name with INVALID_ARG.
        let Some(spaces) = spaces else {
            return Err(Error::invalid_arg(unknown()));
        };
        if let Some(own) = home.and_then(|h| spaces.get(h)).filter(|e| !e.unloaded()) {
            return Ok(own);
        }
        let mut live = spaces.values().filter(|e| !e.unloaded());
        match (live.next(), live.count()) {
            (Some(one), 0) => Ok(one),
            (Some(_), others) => Err(Error::invalid_arg(format!(
                "There are {} identifiers of model '{name}' in global map, model namespace must be provided to resolve ambiguity.",
                others + 1
            ))),
            (None, _) if spaces.len() == 1 => Ok(spaces.values().next().expect("one entry")),
            (None, _) => Err(Error::invalid_arg(unknown())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str, namespace: &str) -> ModelId {
        ModelId {
            name: name.to_string(),
            namespace: namespace.to_string(),
        }
    }

    fn unloaded() -> ModelEntry {
        let mut e = ModelEntry::default();
        let mut slot = VersionSlot::new(ModelState::Unavailable, None);
        slot.reason = "unloaded".to_string();
        e.versions.insert(1, slot);
        e
    }

    #[test]
    fn a_name_resolves_to_its_one_live_model_or_is_ambiguous() {
        let mut t = Table::default();
        t.entry(&id("m", "/a"));
        t.entry(&id("m", "/b"));
        t.entry(&id("solo", "/b"));
        let err = |r: Result<&ModelEntry>| r.err().expect("an error").message;
        assert!(err(t.resolve("m", None, true)).starts_with("There are 2 identifiers of model 'm'"));
        assert!(t.resolve("solo", None, true).is_ok());
        // A step prefers its ensemble's namespace, else the one model.
        assert!(t.resolve("m", Some("/a"), true).is_ok());
        assert!(t.resolve("solo", Some("/a"), true).is_ok());
        assert_eq!(
            err(t.resolve("none", None, true)),
            "Request for unknown model: 'none' is not found"
        );
        assert_eq!(
            t.resolve("none", None, true).err().unwrap().kind,
            crate::core::error::ErrorKind::InvalidArg
        );
        // An unloaded model no longer counts.
        *t.entry(&id("m", "/b")) = unloaded();
        assert!(std::ptr::eq(
            t.resolve("m", None, true).unwrap(),
            t.get(&id("m", "/a")).unwrap()
        ));
        // Without namespacing, only namespace "" is looked at.
        assert!(t.resolve("m", None, false).is_err());
        t.entry(&id("g", ""));
        assert!(t.resolve("g", None, false).is_ok());
        t.remove(&id("m", "/a"));
        t.remove(&id("m", "/b"));
        assert!(t.named("m").is_empty());
    }
}
