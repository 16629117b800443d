//! What the server does with a config's backend: whether this build has
//! it, its runtime, the parameters it reads, whether it answers decoupled,
//! and what its request style rules out.

use crate::core::config::catalog::{Availability, BackendSpec, Parameters};
use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::{Issue, ModelConfig};

use super::Findings;

/// The backend is built into this binary (not asked of an ensemble), and
/// its runtime is its default.
pub(super) fn found(
    config: &ModelConfig,
    spec: Option<&BackendSpec>,
    ensemble: bool,
    out: &mut Findings,
) {
    let built = spec.filter(|s| s.availability == Availability::Built);
    if !ensemble && built.is_none() {
        // Triton's message for a backend it cannot find.
        let why = spec
            .map_or(Availability::NotBuilt, |s| s.availability)
            .refusal();
        out.push(Issue::error(
            "backend",
            format!(
                "unable to find backend library for backend '{}'{why}",
                config.backend
            ),
        ));
    }
    let default_runtime = format!("libtriton_{}.so", config.backend);
    if !config.runtime.is_empty() && config.runtime != default_runtime {
        out.refuse(
            "runtime",
            "backends are built into the server; a backend's runtime can only be its default",
        );
    }
}

/// What the backend reads and answers: its parameters, custom operation
/// libraries, decoupled transactions, implicit state.
pub(super) fn reads(
    config: &ModelConfig,
    spec: Option<&BackendSpec>,
    ensemble: bool,
    out: &mut Findings,
) {
    // A Python model reads any parameter from its config JSON, a custom
    // library from the serialized config it is initialized with.
    let listed = match spec.map(|s| s.parameters) {
        _ if ensemble => None,
        Some(Parameters::Any) => None,
        Some(Parameters::Listed { names, prefixes }) => Some((names, prefixes)),
        None => Some((&[][..], &[][..])),
    };
    if let Some((names, prefixes)) = listed {
        for key in config.parameters.keys() {
            let read = names.contains(&key.as_str()) || prefixes.iter().any(|p| key.starts_with(p));
            // The server's own (core::openai), for any backend.
            let server_key = key.starts_with("openai_");
            if !read && !server_key {
                out.hint(
                    format!("parameters[\"{key}\"]"),
                    &format!("the '{}' backend does not read it", config.backend),
                );
            }
        }
    }
    if config
        .model_operations
        .as_ref()
        .is_some_and(|o| !o.op_library_filename.is_empty())
    {
        out.refuse("model_operations.op_library_filename",
            "custom operation libraries (TensorFlow's TF_LoadLibrary) are not loaded by this server",
        );
    }
    let decoupled = config
        .model_transaction_policy
        .as_ref()
        .is_some_and(|p| p.decoupled);
    if decoupled && !spec.is_some_and(|s| s.decoupled) {
        out.refuse(
            "model_transaction_policy.decoupled",
            "only Python models answer a request more than once here",
        );
    }
    // A backend that takes each batch as a list of requests (the sequence
    // batcher's control inputs, correlation id and flags come with each
    // request) has no implicit state: it works on concatenated batches.
    if let Some(why) = spec.and_then(|s| s.no_implicit_state) {
        if let Some(SchedulingChoice::SequenceBatching(s)) = &config.scheduling_choice {
            if !s.state.is_empty() {
                out.refuse("sequence_batching.state", why);
            }
        }
    }
}
