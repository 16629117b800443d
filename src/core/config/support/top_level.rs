//! The rest of the config: an ensemble's scheduling, metric tags,
//! repository agents and the metric controls.

use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::ModelConfig;

use super::Findings;

/// `ensemble_scheduling`: namespaces and the in-flight limit.
pub(super) fn ensemble(config: &ModelConfig, out: &mut Findings) {
    if let Some(SchedulingChoice::EnsembleScheduling(e)) = &config.scheduling_choice {
        for (j, step) in e.step.iter().enumerate() {
            if !step.model_namespace.is_empty() {
                out.refuse(
                    format!("ensemble_scheduling.step[{j}].model_namespace"),
                    "model namespacing is not supported: model names are global",
                );
            }
        }
        if e.max_inflight_requests > 0 {
            out.hint("ensemble_scheduling.max_inflight_requests",
                "an ensemble's steps are not limited in flight; each composing model's queue bounds them",
            );
        }
    }
}

pub(super) fn check(config: &ModelConfig, out: &mut Findings) {
    if !config.metric_tags.is_empty() {
        out.hint(
            "metric_tags",
            "Triton does not use them either; metrics carry the model and version labels",
        );
    }
    if config
        .model_repository_agents
        .as_ref()
        .is_some_and(|a| !a.agents.is_empty())
    {
        out.refuse(
            "model_repository_agents",
            "repository agents are not supported",
        );
    }
    // The first-response histogram's buckets are applied (see
    // metrics::latency); Triton only warns about any other family.
    for (i, control) in config
        .model_metrics
        .iter()
        .flat_map(|m| &m.metric_control)
        .enumerate()
    {
        let family = control
            .metric_identifier
            .as_ref()
            .map(|m| m.family.as_str())
            .unwrap_or("");
        if !family.is_empty() && family != "nv_inference_first_response_histogram_ms" {
            out.hint(format!("model_metrics.metric_control[{i}].metric_identifier.family"),
                &format!(
                    "Metric family '{family}' in 'metric_identifier' is not a customizable metric in Triton core."
                ),
            );
        }
    }
}
