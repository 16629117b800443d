//! Rules 1–5, 8 and 9 (name, platform/backend, max_batch_size, version
//! policy, response cache, model metrics) and the files the config names,
//! which must stay inside the model directory.

use crate::core::config::catalog;
use crate::core::config::normalize::ENSEMBLE_PLATFORM;
use crate::core::config::pb::{
    model_config::SchedulingChoice, model_metrics::metric_control::MetricOptions,
    model_sequence_batching::initial_state::StateData, model_warmup::input::InputDataType,
};

use super::Validator;

impl Validator<'_> {
    /// Rules 1–5, 8, 9: name, platform/backend, max_batch_size, version
    /// policy, response cache, model metrics.
    pub(super) fn top_level(&mut self) {
        let c = self.config;
        let name = self.name;
        if c.name.is_empty() {
            self.error("name", "model configuration must specify 'name'");
        }
        if c.backend.is_empty() {
            if c.platform != ENSEMBLE_PLATFORM {
                self.error(
                    "platform",
                    format!("unexpected platform type '{}' for {name}", c.platform),
                );
            }
        } else if c.platform == ENSEMBLE_PLATFORM {
            self.error(
                "backend",
                format!(
                    "Ensemble model '{name}' must have platform type '{}' and empty backend type",
                    c.platform
                ),
            );
        }
        // The backends Triton pairs with their platforms.
        let pairs = catalog::spec(&c.backend).is_some_and(|s| s.pairs_platform);
        let implied = catalog::backend_of_platform(&c.platform).map(|s| s.name);
        if pairs && implied != Some(c.backend.as_str()) {
            self.error(
                "backend",
                format!(
                    "unexpected 'platform' and 'backend' pair, got:{}, {}",
                    c.platform, c.backend
                ),
            );
        }
        if c.max_batch_size < 0 {
            self.error(
                "max_batch_size",
                format!("'max_batch_size' must be non-negative value for {name}"),
            );
        }
        if c.version_policy.is_none() {
            self.error(
                "version_policy",
                format!("must specify 'version policy' for {name}"),
            );
        }
        let cache = c.response_cache.as_ref().is_some_and(|r| r.enable);
        if cache
            && matches!(
                c.scheduling_choice,
                Some(SchedulingChoice::SequenceBatching(_))
            )
        {
            self.error(
                "response_cache.enable",
                format!(
                    "Response Cache does not currently support model {name} with sequence \
                     batching scheduler. Please disable the response cache."
                ),
            );
        }
        if cache
            && c.model_transaction_policy
                .as_ref()
                .is_some_and(|t| t.decoupled)
        {
            self.error(
                "response_cache.enable",
                format!(
                    "Response Cache does not currently support model {name} with 'decoupled' \
                     transaction policy. Please disable the response cache."
                ),
            );
        }
        if let Some(metrics) = &c.model_metrics {
            for (i, mc) in metrics.metric_control.iter().enumerate() {
                let field = format!("model_metrics.metric_control[{i}]");
                match &mc.metric_identifier {
                    None => self.error(&field, "metric control must specify 'metric_identifier'"),
                    Some(id) if id.family.is_empty() => self.error(
                        format!("{field}.metric_identifier"),
                        "metric identifier must specify non-empty 'family'",
                    ),
                    Some(_) => {}
                }
                match &mc.metric_options {
                    None => self.error(&field, "metric control must specify 'histogram_options'"),
                    Some(MetricOptions::HistogramOptions(h)) if h.buckets.is_empty() => self.error(
                        format!("{field}.histogram_options"),
                        "histogram options must specify non-empty 'buckets'",
                    ),
                    Some(_) => {}
                }
            }
        }
    }

    /// Files named by the config must stay inside the model directory
    /// (trtis rule: a name with `..` or an absolute path is refused).
    pub(super) fn file_references(&mut self) {
        let c = self.config;
        let mut refs: Vec<(String, &str)> =
            vec![("default_model_filename".into(), &c.default_model_filename)];
        for (k, f) in &c.cc_model_filenames {
            refs.push((format!("cc_model_filenames[{k:?}]"), f));
        }
        for (i, o) in c.output.iter().enumerate() {
            refs.push((format!("output[{i}].label_filename"), &o.label_filename));
        }
        for (i, w) in c.model_warmup.iter().enumerate() {
            for (k, input) in &w.inputs {
                if let Some(InputDataType::InputDataFile(f)) = &input.input_data_type {
                    refs.push((format!("model_warmup[{i}].inputs[{k:?}]"), f));
                }
            }
        }
        if let Some(SchedulingChoice::SequenceBatching(sb)) = &c.scheduling_choice {
            for (i, s) in sb.state.iter().enumerate() {
                for (j, init) in s.initial_state.iter().enumerate() {
                    if let Some(StateData::DataFile(f)) = &init.state_data {
                        refs.push((
                            format!("sequence_batching.state[{i}].initial_state[{j}].data_file"),
                            f,
                        ));
                    }
                }
            }
        }
        for (field, file) in refs {
            if !is_contained_path(file) {
                self.error(
                    field,
                    format!(
                        "file name '{file}' must name a file inside the model directory of {}",
                        self.name
                    ),
                );
            }
        }
    }
}

/// A relative path with no `..`, absolute or empty component.
pub fn is_contained_path(file: &str) -> bool {
    file.is_empty()
        || (!file.starts_with('/')
            && !file.starts_with('\\')
            && !file.contains('\0')
            && file.split(['/', '\\']).all(|part| part != ".."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contained_paths() {
        assert!(is_contained_path("labels.txt"));
        assert!(is_contained_path("sub/dir/file"));
        assert!(!is_contained_path("../x"));
        assert!(!is_contained_path("a/../../x"));
        assert!(!is_contained_path("/etc/passwd"));
    }
}
