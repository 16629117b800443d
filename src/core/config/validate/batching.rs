//! Rules 10–16: dynamic batching (preferred sizes, priority levels, queue
//! policies) and sequence batching (strategy, control tensors, implicit
//! state).

use std::collections::BTreeSet;

use crate::core::config::pb::{
    model_queue_policy::TimeoutAction, model_sequence_batching::control::Kind as ControlKind,
    model_sequence_batching::ControlInput, model_sequence_batching::StrategyChoice, DataType,
    ModelDynamicBatching, ModelQueuePolicy, ModelSequenceBatching,
};

use super::Validator;

impl Validator<'_> {
    /// Rules 10–12.
    pub(super) fn dynamic_batching(&mut self, db: &ModelDynamicBatching) {
        let name = self.name;
        let max = self.config.max_batch_size;
        for (i, &size) in db.preferred_batch_size.iter().enumerate() {
            let field = format!("dynamic_batching.preferred_batch_size[{i}]");
            if size <= 0 {
                self.error(
                    field,
                    format!("dynamic batching preferred size must be positive for {name}"),
                );
            } else if size > max {
                self.error(
                    field,
                    format!("dynamic batching preferred size must be <= max batch size for {name}"),
                );
            }
        }
        let levels = db.priority_levels;
        if levels != 0 {
            if db.default_priority_level == 0 || db.default_priority_level > levels {
                self.error(
                    "dynamic_batching.default_priority_level",
                    format!("default priority level must be in range [1, {levels}] for {name}"),
                );
            }
            for &level in db.priority_queue_policy.keys() {
                if level == 0 || level > levels {
                    self.error(
                        format!("dynamic_batching.priority_queue_policy[{level}]"),
                        format!("priority queue policy must have priority level in range [1, {levels}] for {name}"),
                    );
                }
            }
        }
        if db.preserve_ordering {
            if levels > 1 {
                self.error(
                    "dynamic_batching.priority_levels",
                    format!("Only one priority level is allowed when 'preserve_ordering' is true for {name}"),
                );
            }
            let delays = |p: &ModelQueuePolicy| {
                p.timeout_action == TimeoutAction::Delay as i32
                    && p.default_timeout_microseconds != 0
            };
            let mut fields = Vec::new();
            if db.default_queue_policy.as_ref().is_some_and(delays) {
                fields.push("dynamic_batching.default_queue_policy".to_string());
            }
            for (level, p) in &db.priority_queue_policy {
                if delays(p) {
                    fields.push(format!("dynamic_batching.priority_queue_policy[{level}]"));
                }
            }
            for field in fields {
                self.error(
                    field,
                    format!(
                        "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for {name}"
                    ),
                );
            }
        }
    }

    /// Rules 8 (done above), 13–16.
    pub(super) fn sequence_batching(&mut self, sb: &ModelSequenceBatching) {
        let name = self.name;
        self.control_inputs(sb);
        match &sb.strategy_choice {
            Some(StrategyChoice::Oldest(oldest)) => {
                for (i, &size) in oldest.preferred_batch_size.iter().enumerate() {
                    let field = format!("sequence_batching.oldest.preferred_batch_size[{i}]");
                    if size <= 0 {
                        self.error(field, format!("sequence batching preferred batch size must be positive for {name}"));
                    } else if size > self.config.max_batch_size {
                        self.error(
                            field,
                            format!("sequence batching preferred batch size must be <= max batch size for {name}"),
                        );
                    }
                }
            }
            Some(StrategyChoice::Direct(direct)) => {
                let u = direct.minimum_slot_utilization;
                if !(0.0..=1.0).contains(&u) {
                    self.error(
                        "sequence_batching.direct.minimum_slot_utilization",
                        format!("sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}"),
                    );
                }
            }
            None => {}
        }
        self.states(sb);
    }

    /// Rule 13: START/END/READY/CORRID control tensors.
    fn control_inputs(&mut self, sb: &ModelSequenceBatching) {
        let name = self.name;
        let mut seen_names: BTreeSet<&str> = BTreeSet::new();
        for (i, ci) in sb.control_input.iter().enumerate() {
            let field = format!("sequence_batching.control_input[{i}]");
            if ci.name.is_empty() {
                self.error(
                    format!("{field}.name"),
                    format!("sequence batching control tensor must have a name for {name}"),
                );
            } else if !seen_names.insert(&ci.name) || distinct_kinds(ci) > 1 {
                self.error(
                    field,
                    format!(
                        "sequence batching control tensor '{}' is specified for multiple control kinds for {name}",
                        ci.name
                    ),
                );
            }
        }
        for kind in [
            ControlKind::ControlSequenceStart,
            ControlKind::ControlSequenceEnd,
            ControlKind::ControlSequenceReady,
            ControlKind::ControlSequenceCorrid,
        ] {
            let kind_name = kind.as_str_name();
            let mut found = 0;
            for (i, ci) in sb.control_input.iter().enumerate() {
                for (j, control) in ci.control.iter().enumerate() {
                    if control.kind != kind as i32 {
                        continue;
                    }
                    let field = format!("sequence_batching.control_input[{i}].control[{j}]");
                    found += 1;
                    if found == 2 {
                        self.error(
                            &field,
                            format!("sequence batching specifies multiple {kind_name} tensors for {name}"),
                        );
                    }
                    let lists = [
                        ("int32_false_true", control.int32_false_true.len()),
                        ("fp32_false_true", control.fp32_false_true.len()),
                        ("bool_false_true", control.bool_false_true.len()),
                    ];
                    let set: Vec<_> = lists.iter().filter(|(_, n)| *n > 0).collect();
                    if kind == ControlKind::ControlSequenceCorrid {
                        if !set.is_empty() {
                            self.error(
                                format!("{field}.{}", set[0].0),
                                format!(
                                    "sequence batching must not specify either 'int32_false_true', \
                                     'fp32_false_true' or 'bool_false_true' for {kind_name} for {name}"
                                ),
                            );
                        }
                        let allowed = [
                            DataType::TypeUint64,
                            DataType::TypeInt64,
                            DataType::TypeUint32,
                            DataType::TypeInt32,
                            DataType::TypeString,
                        ];
                        if !allowed.iter().any(|d| *d as i32 == control.data_type) {
                            self.error(
                                format!("{field}.data_type"),
                                format!(
                                    "unexpected data type for control CONTROL_SEQUENCE_CORRID for {name}. Allowed \
                                     data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
                                ),
                            );
                        }
                        continue;
                    }
                    match set.as_slice() {
                        [] => self.error(
                            &field,
                            format!(
                                "sequence batching must specify either 'int32_false_true', 'fp32_false_true' \
                                 or 'bool_false_true' for {kind_name} for {name}"
                            ),
                        ),
                        [(list, n)] => {
                            if *n != 2 {
                                self.error(
                                    format!("{field}.{list}"),
                                    format!(
                                        "sequence batching control '{list}' must have exactly 2 entries for {kind_name} for {name}"
                                    ),
                                );
                            }
                        }
                        _ => self.error(
                            &field,
                            format!(
                                "sequence batching specifies more than one from 'int32_false_true', \
                                 'fp32_false_true' and 'bool_false_true' for {kind_name} for {name}"
                            ),
                        ),
                    }
                }
            }
        }
    }

    /// Rule 16: implicit state and its initial state (the file size is
    /// checked by the repository layer).
    fn states(&mut self, sb: &ModelSequenceBatching) {
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for (i, state) in sb.state.iter().enumerate() {
            let field = format!("sequence_batching.state[{i}]");
            let input = &state.input_name;
            if !seen.insert(input) {
                self.error(
                    format!("{field}.input_name"),
                    format!("State input name '{input}' specified more than once."),
                );
            }
            if state.initial_state.len() > 1 {
                self.error(
                    format!("{field}.initial_state[1]"),
                    format!(
                        "initial_state field for state input '{input}' must contain exactly one or zero element. Found '{}' elements.",
                        state.initial_state.len()
                    ),
                );
                continue;
            }
            let Some(init) = state.initial_state.first() else {
                continue;
            };
            let ifield = format!("{field}.initial_state[0]");
            if init.data_type != state.data_type {
                self.error(
                    format!("{ifield}.data_type"),
                    format!("The data type used for 'initial_state' field of state '{input}' does not match the state data type."),
                );
            }
            if init.name.is_empty() {
                self.error(
                    &ifield,
                    format!("Field 'name' must be set when using initial_state for state input '{input}'."),
                );
            }
            if init.dims.len() != state.dims.len() {
                self.error(
                    format!("{ifield}.dims"),
                    format!(
                        "Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state input '{input}'. {} != {}",
                        init.dims.len(),
                        state.dims.len()
                    ),
                );
            } else {
                for (j, (&idim, &sdim)) in init.dims.iter().zip(&state.dims).enumerate() {
                    if idim == -1 {
                        self.error(
                            format!("{ifield}.dims[{j}]"),
                            format!("'initial_state' field for state input name '{input}' contains variable dimensions."),
                        );
                    } else if sdim != -1 && idim != sdim {
                        self.error(
                            format!("{ifield}.dims[{j}]"),
                            format!(
                                "'initial_state' dim for input name '{input}' doesn't match 'state' dim description. {idim} != {sdim}"
                            ),
                        );
                    }
                }
            }
            if init.state_data.is_none() {
                self.error(
                    &ifield,
                    format!("initial_state setting expects state'{input}' to have state_data set"),
                );
            }
        }
    }
}

/// How many different control kinds one control tensor carries.
fn distinct_kinds(ci: &ControlInput) -> usize {
    ci.control
        .iter()
        .map(|c| c.kind)
        .collect::<BTreeSet<_>>()
        .len()
}
