//! Static validation of a normalized [`ModelConfig`]: every rule of Triton's
//! `ValidateModelConfig`, `ValidateModelIOConfig`, `ValidateInstanceGroup`,
//! `ValidateEnsembleSchedulingConfig` and the sequence-batcher state checks
//! that need no loaded backend (facts file §2.5). Messages follow Triton's
//! text; each [`Issue`] names the field path it is about.
//!
//! Checks that need the file system (version directories, model and label
//! files, initial-state file sizes) or other models (ensemble steps) live in
//! `core::repository::check`.

use std::collections::{BTreeMap, BTreeSet};

use super::diagnostic::{Issue, Severity};
use super::normalize::ENSEMBLE_PLATFORM;
use super::pb::{
    batch_input, batch_output, model_config::SchedulingChoice, model_input::Format,
    model_instance_group::Kind as GroupKind, model_metrics::metric_control::MetricOptions,
    model_queue_policy::TimeoutAction, model_sequence_batching::control::Kind as ControlKind,
    model_sequence_batching::initial_state::StateData, model_sequence_batching::StrategyChoice,
    DataType, ModelConfig, ModelDynamicBatching, ModelEnsembling, ModelSequenceBatching,
};

/// What validation needs to know about the machine.
#[derive(Debug, Clone, Copy)]
pub struct ValidateContext {
    /// GPUs on this machine.
    pub gpu_count: usize,
    /// How to report a KIND_GPU group that this machine cannot run: an error
    /// for `serve` (as Triton refuses it), a warning for `validate-config`
    /// (the config may be meant for another machine).
    pub missing_gpu: Severity,
}

/// Every problem found in `config`, which must already be normalized.
pub fn validate(config: &ModelConfig, ctx: &ValidateContext) -> Vec<Issue> {
    let mut v = Validator {
        config,
        name: &config.name,
        issues: Vec::new(),
    };
    v.top_level();
    v.file_references();
    match &config.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(db)) => v.dynamic_batching(db),
        Some(SchedulingChoice::SequenceBatching(sb)) => v.sequence_batching(sb),
        _ => {}
    }
    v.ensemble();
    v.io();
    if config.platform != ENSEMBLE_PLATFORM {
        v.instance_groups(ctx);
    }
    v.issues
}

/// The protobuf name of a data type (`TYPE_FP32`).
pub fn data_type_name(dt: i32) -> &'static str {
    DataType::try_from(dt)
        .map(|d| d.as_str_name())
        .unwrap_or("TYPE_INVALID")
}

/// Platform → the backend it implies, for the backends Triton knows by name.
fn backend_of_platform(platform: &str) -> Option<&'static str> {
    Some(match platform {
        "tensorflow_graphdef" | "tensorflow_savedmodel" => "tensorflow",
        "tensorrt_plan" => "tensorrt",
        "onnxruntime_onnx" => "onnxruntime",
        "pytorch_libtorch" | "torch_aoti" => "pytorch",
        _ => return None,
    })
}

struct Validator<'c> {
    config: &'c ModelConfig,
    name: &'c str,
    issues: Vec<Issue>,
}

impl Validator<'_> {
    fn error(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.issues.push(Issue::error(field, message));
    }

    /// Rules 1–5, 8, 9: name, platform/backend, max_batch_size, version
    /// policy, response cache, model metrics.
    fn top_level(&mut self) {
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
        let known_backend =
            ["tensorflow", "tensorrt", "onnxruntime", "pytorch"].contains(&c.backend.as_str());
        if known_backend && backend_of_platform(&c.platform) != Some(c.backend.as_str()) {
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
    fn file_references(&mut self) {
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
                if let Some(super::pb::model_warmup::input::InputDataType::InputDataFile(f)) =
                    &input.input_data_type
                {
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

    /// Rules 10–12.
    fn dynamic_batching(&mut self, db: &ModelDynamicBatching) {
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
            let delays = |p: &super::pb::ModelQueuePolicy| {
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
    fn sequence_batching(&mut self, sb: &ModelSequenceBatching) {
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

    /// Rules 18–21.
    fn ensemble(&mut self) {
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

    /// Rules 23–27 for every input and output, and the batch inputs/outputs.
    fn io(&mut self) {
        let c = self.config;
        let name = self.name;
        let trt = c.platform == "tensorrt_plan";
        for (i, input) in c.input.iter().enumerate() {
            let field = format!("input[{i}]");
            let before = self.issues.len();
            self.io_shape(
                &field,
                "model input",
                &input.name,
                input.data_type,
                &input.dims,
                input.reshape.as_ref().map(|r| &r.shape[..]),
            );
            if self.issues.len() > before {
                continue;
            }
            let format = input.format;
            if (format == Format::Nhwc as i32 || format == Format::Nchw as i32)
                && input.dims.len() != 3
            {
                self.error(
                    format!("{field}.format"),
                    format!("model input NHWC/NCHW require 3 dims for {name}"),
                );
            }
            if input.is_shape_tensor && !trt {
                self.error(
                    format!("{field}.is_shape_tensor"),
                    format!("shape tensors are only supported for TensorRT platform for {name}"),
                );
            }
            if input.is_non_linear_format_io {
                self.non_linear(&field, "input", input.dims.len(), trt);
            }
        }
        for (i, output) in c.output.iter().enumerate() {
            let field = format!("output[{i}]");
            let before = self.issues.len();
            self.io_shape(
                &field,
                "model output",
                &output.name,
                output.data_type,
                &output.dims,
                output.reshape.as_ref().map(|r| &r.shape[..]),
            );
            if self.issues.len() > before {
                continue;
            }
            if output.is_shape_tensor && !trt {
                self.error(
                    format!("{field}.is_shape_tensor"),
                    format!("shape tensors are only supported for TensorRT platform for {name}"),
                );
            }
            if output.is_non_linear_format_io {
                self.non_linear(&field, "output", output.dims.len(), trt);
            }
        }
        self.batch_io();
    }

    fn non_linear(&mut self, field: &str, what: &str, dims: usize, trt: bool) {
        let name = self.name;
        if !trt {
            self.error(
                format!("{field}.is_non_linear_format_io"),
                format!(
                    "Non-linear IO format is only supported for the TensorRT platform for {name}"
                ),
            );
        } else if dims != 3 {
            self.error(
                format!("{field}.is_non_linear_format_io"),
                format!("Non-linear IO format {what} requires 3 dims for {name}"),
            );
        }
    }

    /// Rules 23–25 (`ValidateIOShape`): name, type, dims, reshape.
    fn io_shape(
        &mut self,
        field: &str,
        prefix: &str,
        io_name: &str,
        data_type: i32,
        dims: &[i64],
        reshape: Option<&[i64]>,
    ) {
        let name = self.name;
        if io_name.is_empty() {
            self.error(field, format!("{prefix} must specify 'name' for {name}"));
            return;
        }
        let who = format!("{prefix} '{io_name}'");
        if data_type == DataType::TypeInvalid as i32 {
            self.error(
                format!("{field}.data_type"),
                format!("{who} must specify 'data_type' for {name}"),
            );
            return;
        }
        if dims.is_empty() {
            self.error(
                format!("{field}.dims"),
                format!("{who} must specify 'dims' for {name}"),
            );
            return;
        }
        if let Some([]) = reshape {
            if self.config.max_batch_size == 0 {
                self.error(
                    format!("{field}.reshape"),
                    format!("{who} cannot have empty reshape for non-batching model as scalar tensors are not supported for {name}"),
                );
                return;
            }
        }
        for (j, &d) in dims.iter().enumerate() {
            if d < 1 && d != -1 {
                self.error(
                    format!("{field}.dims[{j}]"),
                    format!("{who} dimension must be integer >= 1, or -1 to indicate a variable-size dimension for {name}"),
                );
                return;
            }
        }
        let Some(reshape) = reshape else { return };
        for (j, &d) in reshape.iter().enumerate() {
            if d < 1 && d != -1 {
                self.error(
                    format!("{field}.reshape.shape[{j}]"),
                    format!("{who} reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension for {name}"),
                );
                return;
            }
        }
        let field = format!("{field}.reshape");
        let variable = dims.contains(&-1) || reshape.contains(&-1);
        if !variable {
            let count = |s: &[i64]| s.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d));
            let (Some(dc), Some(rc)) = (count(dims), count(reshape)) else {
                self.error(field, format!("element count for tensor '{io_name} dims' exceeds maximum size of {} for {name}", i64::MAX));
                return;
            };
            let rc = if reshape.is_empty() { 0 } else { rc };
            if dc != rc && !(reshape.is_empty() && dc == 1) {
                self.error(
                    field,
                    format!("{who} has different size for dims and reshape for {name}"),
                );
            }
            return;
        }
        // Variable dims: the fixed-size chunks between -1s must match
        // pairwise (a chunk whose element count overflows is refused).
        let chunks = |s: &[i64]| -> Option<Vec<i64>> {
            s.split(|&d| d == -1)
                .map(|c| c.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d)))
                .collect()
        };
        let (Some(dc), Some(rc)) = (chunks(dims), chunks(reshape)) else {
            self.error(field, format!("element count for tensor '{io_name} dims' exceeds maximum size of {} for {name}", i64::MAX));
            return;
        };
        if dc.len() != rc.len() {
            self.error(field, format!("{who} has different number of variable-size dimensions for dims and reshape for {name}"));
        } else if dc != rc {
            self.error(
                field,
                format!("{who} has different size for dims and reshape for {name}"),
            );
        }
    }

    /// Rule 27.
    fn batch_io(&mut self) {
        let c = self.config;
        let name = self.name;
        let inputs: BTreeSet<&str> = c.input.iter().map(|i| i.name.as_str()).collect();
        let outputs: BTreeSet<&str> = c.output.iter().map(|o| o.name.as_str()).collect();
        for (i, bi) in c.batch_input.iter().enumerate() {
            let field = format!("batch_input[{i}]");
            let kind = batch_input::Kind::try_from(bi.kind)
                .map(|k| k.as_str_name())
                .unwrap_or("UNKNOWN");
            if bi.source_input.len() != 1 {
                self.error(
                    format!("{field}.source_input"),
                    format!(
                        "batch input kind '{kind}' expects 1 source input, got {} for {name}",
                        bi.source_input.len()
                    ),
                );
            }
            if bi.data_type != DataType::TypeInt32 as i32
                && bi.data_type != DataType::TypeFp32 as i32
            {
                self.error(
                    format!("{field}.data_type"),
                    format!("batch input data type must be TYPE_INT32 or TYPE_FP32 for {name}"),
                );
            }
            for (j, source) in bi.source_input.iter().enumerate() {
                if !inputs.contains(source.as_str()) {
                    self.error(
                        format!("{field}.source_input[{j}]"),
                        format!("unknown source input name '{source}' for {name}"),
                    );
                }
            }
        }
        let mut targets: BTreeSet<&str> = BTreeSet::new();
        for (i, bo) in c.batch_output.iter().enumerate() {
            let field = format!("batch_output[{i}]");
            let kind = batch_output::Kind::try_from(bo.kind)
                .map(|k| k.as_str_name())
                .unwrap_or("UNKNOWN");
            if bo.source_input.len() != 1 {
                self.error(
                    format!("{field}.source_input"),
                    format!(
                        "batch output kind '{kind}' expects 1 source input, got {} for {name}",
                        bo.source_input.len()
                    ),
                );
            }
            for (j, source) in bo.source_input.iter().enumerate() {
                if !inputs.contains(source.as_str()) {
                    self.error(
                        format!("{field}.source_input[{j}]"),
                        format!("unknown source input name '{source}' for {name}"),
                    );
                }
            }
            for (j, target) in bo.target_name.iter().enumerate() {
                if !outputs.contains(target.as_str()) {
                    self.error(
                        format!("{field}.target_name[{j}]"),
                        format!("unknown target output name '{target}' for {name}"),
                    );
                } else if !targets.insert(target) {
                    self.error(
                        format!("{field}.target_name[{j}]"),
                        format!(
                            "target output name '{target}' can only be specified once for {name}"
                        ),
                    );
                }
            }
        }
    }

    /// Rules 28–29 (after normalization resolved KIND_AUTO and counts).
    fn instance_groups(&mut self, ctx: &ValidateContext) {
        let c = self.config;
        let name = self.name;
        if c.instance_group.is_empty() {
            self.error(
                "instance_group",
                format!("must specify one or more 'instance group's for {name}"),
            );
        }
        for (i, g) in c.instance_group.iter().enumerate() {
            let field = format!("instance_group[{i}]");
            let group = &g.name;
            match GroupKind::try_from(g.kind) {
                Ok(GroupKind::Model) if !g.gpus.is_empty() => self.error(
                    format!("{field}.gpus"),
                    format!("instance group {group} of model {name} has kind KIND_MODEL but specifies one or more GPUs"),
                ),
                Ok(GroupKind::Cpu) if !g.gpus.is_empty() => self.error(
                    format!("{field}.gpus"),
                    format!("instance group {group} of model {name} has kind KIND_CPU but specifies one or more GPUs"),
                ),
                Ok(GroupKind::Gpu) => {
                    if ctx.gpu_count == 0 {
                        self.issues.push(Issue {
                            severity: ctx.missing_gpu,
                            field: format!("{field}.kind"),
                            message: format!(
                                "instance group {group} of model {name} has kind KIND_GPU but no GPUs are available"
                            ),
                        });
                    } else {
                        for (j, &gpu) in g.gpus.iter().enumerate() {
                            if gpu < 0 || gpu as usize >= ctx.gpu_count {
                                let ids: Vec<String> = (0..ctx.gpu_count).map(|d| d.to_string()).collect();
                                self.issues.push(Issue {
                                    severity: ctx.missing_gpu,
                                    field: format!("{field}.gpus[{j}]"),
                                    message: format!(
                                        "instance group {group} of model {name} specifies invalid or unsupported gpu id {gpu}. \
                                         GPUs with at least the minimum required CUDA compute compatibility of 6.000000 are: {}",
                                        ids.join(", ")
                                    ),
                                });
                            }
                        }
                    }
                }
                Ok(GroupKind::Auto) => self.error(
                    format!("{field}.kind"),
                    format!("instance group {group} of model {name} has unexpected kind KIND_AUTO"),
                ),
                _ => {}
            }
            if !g.profile.is_empty() && c.platform != "tensorrt_plan" {
                self.error(
                    format!("{field}.profile"),
                    format!(
                        "instance group {group} of model {name} and platform {}specifies profile field which is only supported for TensorRT models",
                        c.platform
                    ),
                );
            } else {
                for (j, profile) in g.profile.iter().enumerate() {
                    let pfield = format!("{field}.profile[{j}]");
                    if profile.is_empty() {
                        self.error(pfield, "profile name must not be empty");
                    } else {
                        match leading_integer(profile) {
                            None => self.error(pfield, format!("unable to parse '{profile}': stoi")),
                            Some(n) if n < 0 => self.error(
                                pfield,
                                format!(
                                    "instance group {group} of model {name} and platform {} specifies invalid profile {profile}. \
                                     The field should contain the string representation of a non-negative integer.",
                                    c.platform
                                ),
                            ),
                            Some(_) => {}
                        }
                    }
                }
            }
        }
    }
}

/// The integer at the start of `s`, as C++ `std::stoi` reads it (leading
/// white space, an optional sign, then digits; the rest is ignored).
fn leading_integer(s: &str) -> Option<i64> {
    let t = s.trim_start();
    let (sign, digits) = match t.as_bytes().first() {
        Some(b'-') => (-1, &t[1..]),
        Some(b'+') => (1, &t[1..]),
        _ => (1, t),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse::<i64>().ok().map(|n| sign * n)
}

/// How many different control kinds one control tensor carries.
fn distinct_kinds(ci: &super::pb::model_sequence_batching::ControlInput) -> usize {
    ci.control
        .iter()
        .map(|c| c.kind)
        .collect::<BTreeSet<_>>()
        .len()
}

/// A relative path with no `..`, absolute or empty component.
pub fn is_contained_path(file: &str) -> bool {
    file.is_empty()
        || (!file.starts_with('/')
            && !file.starts_with('\\')
            && !file.contains('\0')
            && file.split(['/', '\\']).all(|part| part != ".."))
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

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: ValidateContext = ValidateContext {
        gpu_count: 0,
        missing_gpu: Severity::Error,
    };

    fn messages(config: &ModelConfig) -> Vec<String> {
        validate(config, &CTX)
            .into_iter()
            .map(|i| i.message)
            .collect()
    }

    /// Rules 1, 5 and the empty-group half of 28 cannot fail from a file,
    /// because normalization fills those fields in (as in Triton); the
    /// validator still checks them for configs built in code.
    #[test]
    fn rules_that_normalization_makes_unreachable() {
        let config = ModelConfig {
            backend: "identity".into(),
            ..Default::default()
        };
        let m = messages(&config);
        assert!(
            m.contains(&"model configuration must specify 'name'".to_string()),
            "{m:?}"
        );
        assert!(
            m.contains(&"must specify 'version policy' for ".to_string()),
            "{m:?}"
        );
        assert!(
            m.contains(&"must specify one or more 'instance group's for ".to_string()),
            "{m:?}"
        );
    }

    #[test]
    fn missing_gpu_severity_is_the_callers_choice() {
        let config = ModelConfig {
            name: "m".into(),
            backend: "identity".into(),
            instance_group: vec![super::super::pb::ModelInstanceGroup {
                name: "g".into(),
                kind: GroupKind::Gpu as i32,
                count: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        let issues = validate(&config, &CTX);
        let gpu = issues
            .iter()
            .find(|i| i.message.contains("KIND_GPU"))
            .unwrap();
        assert_eq!(gpu.severity, Severity::Error);
        let warn = ValidateContext {
            missing_gpu: Severity::Warning,
            ..CTX
        };
        let issues = validate(&config, &warn);
        assert_eq!(
            issues
                .iter()
                .find(|i| i.message.contains("KIND_GPU"))
                .unwrap()
                .severity,
            Severity::Warning
        );
        // With GPUs present, an id past the last one is reported instead.
        let two = ValidateContext {
            gpu_count: 2,
            ..CTX
        };
        let mut config = config;
        config.instance_group[0].gpus = vec![0, 2];
        let m: Vec<String> = validate(&config, &two)
            .into_iter()
            .map(|i| i.message)
            .collect();
        assert!(
            m.iter()
                .any(|s| s.contains("specifies invalid or unsupported gpu id 2")
                    && s.ends_with("are: 0, 1")),
            "{m:?}"
        );
    }

    #[test]
    fn stoi_reads_a_leading_integer() {
        assert_eq!(leading_integer("12abc"), Some(12));
        assert_eq!(leading_integer(" -3"), Some(-3));
        assert_eq!(leading_integer("x1"), None);
        assert_eq!(leading_integer(""), None);
    }

    #[test]
    fn contained_paths() {
        assert!(is_contained_path("labels.txt"));
        assert!(is_contained_path("sub/dir/file"));
        assert!(!is_contained_path("../x"));
        assert!(!is_contained_path("a/../../x"));
        assert!(!is_contained_path("/etc/passwd"));
    }
}
