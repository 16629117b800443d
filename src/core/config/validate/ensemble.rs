//! Rules 18–21: ensemble scheduling, its steps and the data flow between
//! them (the steps' models are checked by `core::repository::check`).

use std::collections::{BTreeMap, BTreeSet};

use crate::core::config::normalize::ENSEMBLE_PLATFORM;
use crate::core::config::pb::{model_config::SchedulingChoice, ModelEnsembling};

use super::Validator;

impl Validator<'_> {
    /// Rules 18–21.
    pub(super) fn ensemble(&mut self) {
        let c = self.config;
        let name = self.name;
        let scheduling = match &c.scheduling_choice {
            Some(SchedulingChoice::EnsembleScheduling(e)) => Some(e),
            _ => None,
        };
        let is_ensemble = c.platform == ENSEMBLE_PLATFORM;
        match (is_ensemble, scheduling) {
            (false, Some(_)) => self.error(
                "ensemble_scheduling",
                format!("ensemble scheduling cannot be set for model '{name}' whose platform is not ensemble"),
            ),
            (true, None) => self.error(
                "platform",
                format!("ensemble scheduling must be set for ensemble {name} whose platform is ensemble"),
            ),
            (true, Some(e)) => {
                if !c.instance_group.is_empty() {
                    self.error("instance_group", format!("instance group should not be specified for ensemble '{name}'"));
                }
                if c.optimization.is_some() {
                    self.error("optimization", format!("optimization should not be specified for ensemble '{name}'"));
                }
                if !c.model_warmup.is_empty() {
                    self.error("model_warmup", format!("model_warmup can not be specified for ensemble '{name}'"));
                }
                if e.step.is_empty() {
                    self.error("ensemble_scheduling", format!("must specify 'step' for ensemble '{name}'"));
                } else {
                    self.ensemble_graph(e);
                }
            }
            (false, None) => {}
        }
    }

    /// Rules 20–21: step fields and the data flow between them.
    fn ensemble_graph(&mut self, e: &ModelEnsembling) {
        let name = self.name;
        let c = self.config;
        // tensor -> index of the step that writes it
        let mut producer: BTreeMap<&str, usize> = BTreeMap::new();
        let mut consumers: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, step) in e.step.iter().enumerate() {
            let field = format!("ensemble_scheduling.step[{i}]");
            if step.model_name.is_empty() {
                self.error(
                    &field,
                    format!("must specify 'model_name' in step {i} of ensemble '{name}'"),
                );
            }
            if step.input_map.is_empty() {
                self.error(
                    &field,
                    format!("must specify 'input_map' in step {i} of ensemble '{name}'"),
                );
            }
            if step.output_map.is_empty() {
                self.error(
                    &field,
                    format!("must specify 'output_map' in step {i} of ensemble '{name}'"),
                );
            }
            for tensor in step.output_map.values() {
                if producer.insert(tensor, i).is_some() {
                    self.error(
                        format!("{field}.output_map"),
                        format!("ensemble tensor '{tensor}' can appear in an output map only once for ensemble '{name}' step {i}"),
                    );
                }
            }
            for tensor in step.input_map.values() {
                consumers.entry(tensor).or_default().push(i);
            }
        }
        if self
            .issues
            .iter()
            .any(|i| i.field.starts_with("ensemble_scheduling"))
        {
            return;
        }
        for (i, input) in c.input.iter().enumerate() {
            if !consumers.contains_key(input.name.as_str()) {
                self.error(
                    format!("input[{i}]"),
                    format!(
                        "ensemble input '{}' for ensemble {name}' is not used",
                        input.name
                    ),
                );
            }
        }
        for (i, output) in c.output.iter().enumerate() {
            let o = output.name.as_str();
            if !producer.contains_key(o) && !consumers.contains_key(o) {
                self.error(
                    format!("output[{i}]"),
                    format!("ensemble output '{o}' for ensemble {name}' is not used"),
                );
            }
        }
        // Which tensors become ready, starting from the ensemble inputs.
        let mut ready: BTreeSet<&str> = c.input.iter().map(|i| i.name.as_str()).collect();
        let mut ran = vec![false; e.step.len()];
        loop {
            let mut progress = false;
            for (i, step) in e.step.iter().enumerate() {
                if !ran[i] && step.input_map.values().all(|t| ready.contains(t.as_str())) {
                    ran[i] = true;
                    progress = true;
                    ready.extend(step.output_map.values().map(String::as_str));
                }
            }
            if !progress {
                break;
            }
        }
        for (i, output) in c.output.iter().enumerate() {
            let o = output.name.as_str();
            if ready.contains(o) || (!producer.contains_key(o) && !consumers.contains_key(o)) {
                continue;
            }
            let mut message = format!("output '{o}' for ensemble '{name}' is not written");
            if let Some(t) = first_unconnected(o, e, &producer, &ready) {
                message.push_str(&format!(
                    ": at least one of its depending tensors, '{t}', is not connected"
                ));
            }
            self.error(format!("output[{i}]"), message);
        }
        let outputs: BTreeSet<&str> = c.output.iter().map(|o| o.name.as_str()).collect();
        for (&tensor, &step) in &producer {
            if outputs.contains(tensor) {
                continue;
            }
            if !ready.contains(tensor) || !consumers.contains_key(tensor) {
                self.error(
                    format!("ensemble_scheduling.step[{step}].output_map"),
                    format!("ensemble tensor '{tensor}' is unused in ensemble '{name}'"),
                );
            }
        }
    }
}

/// Walks back from an unwritten output to the first upstream tensor that is
/// never made ready.
fn first_unconnected<'a>(
    output: &'a str,
    e: &'a ModelEnsembling,
    producer: &BTreeMap<&'a str, usize>,
    ready: &BTreeSet<&'a str>,
) -> Option<&'a str> {
    let mut stack = vec![output];
    let mut visited = BTreeSet::new();
    while let Some(t) = stack.pop() {
        if !visited.insert(t) {
            continue;
        }
        if t != output && !ready.contains(t) && !producer.contains_key(t) {
            return Some(t);
        }
        if let Some(&step) = producer.get(t) {
            for input in e.step[step].input_map.values() {
                if !ready.contains(input.as_str()) {
                    stack.push(input);
                }
            }
        }
    }
    None
}
