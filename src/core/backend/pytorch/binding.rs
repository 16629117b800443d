//! How a PyTorch model's tensors meet its TorchScript `forward()`, by
//! Triton's pytorch backend conventions (pure: no libtorch, so
//! `validate-config` applies the same rules `serve` does, and they are
//! unit-tested):
//!
//! Inputs, one convention for the whole `input` section:
//! 1. every config input is named like an argument of `forward()`: each binds
//!    to its argument;
//! 2. else every name is `<name>__<index>`: it binds to argument `index`;
//! 3. else the i-th config input is the i-th argument.
//!
//! A `forward()` taking one `Dict[str, Tensor]` gets every input in the dict
//! under its config name. Sequence control inputs and implicit-state inputs
//! must be `<name>__<index>` (with state, every input and output must);
//! batch inputs bind like the config inputs (after them, in order 3). The
//! model gets as many values as `forward()` has arguments: exactly one per
//! argument, or the load fails with Triton's count message.
//!
//! Outputs: all `<name>__<index>` → that element of what `forward()`
//! returns; else the i-th config output is the i-th element. A state output
//! is always `<name>__<index>`. `forward()` may return a tensor, a
//! `List[str]`, or a tuple or list of those.
//!
//! `TYPE_STRING` tensors are `List[str]` values, one-dimensional (with the
//! batch dimension; Triton's rule), so a batching model declares them
//! `dims: [ 1 ]` with `reshape: { shape: [ ] }`.

use std::collections::BTreeMap;

use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::pb::DataType as ConfigType;
use crate::core::config::ModelConfig;
use crate::core::error::{Error, ErrorKind, Result};
use crate::core::types::DataType;

use super::torchscript::Argument;

/// One tensor handed to `forward()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSlot {
    pub name: String,
    /// The argument's position (without `self`).
    pub position: usize,
    /// A `List[str]` (TYPE_STRING), not a tensor.
    pub strings: bool,
}

/// How the inputs reach `forward()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inputs {
    /// One value per argument, `arguments` of them.
    Positional {
        slots: Vec<InputSlot>,
        arguments: usize,
    },
    /// One `Dict[str, Tensor]` argument holding these inputs by name.
    Dict { keys: Vec<String> },
}

/// One output taken from what `forward()` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputSlot {
    pub name: String,
    /// Its index in the returned tuple or list (0 for a single value).
    pub index: usize,
    /// The config's type: the model must return exactly this (Triton does
    /// not cast); `None` for TYPE_STRING (a `List[str]`).
    pub datatype: Option<DataType>,
}

/// The whole binding of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub inputs: Inputs,
    pub outputs: Vec<OutputSlot>,
}

/// `<name>__<index>` → index (Triton: the digits after the first `__`).
pub fn named_index(name: &str) -> Option<usize> {
    let (_, suffix) = name.split_once("__")?;
    if suffix.is_empty() {
        return Some(0);
    }
    if suffix.bytes().all(|b| b.is_ascii_digit()) {
        suffix.parse().ok()
    } else {
        None
    }
}

/// The tensors the engine hands to a PyTorch instance besides `input`:
/// sequence control inputs, implicit-state inputs, batch inputs; and the
/// state outputs it asks back.
pub(super) struct Extras {
    pub(super) controls: Vec<String>,
    /// Controls whose value is a string (a TYPE_STRING correlation ID).
    pub(super) string_controls: Vec<String>,
    pub(super) state_inputs: Vec<(String, i32)>,
    pub(super) state_outputs: Vec<(String, i32)>,
    pub(super) batch_inputs: Vec<String>,
}

pub(super) fn extras(config: &ModelConfig) -> Extras {
    let mut e = Extras {
        controls: Vec::new(),
        string_controls: Vec::new(),
        state_inputs: Vec::new(),
        state_outputs: Vec::new(),
        batch_inputs: config
            .batch_input
            .iter()
            .flat_map(|b| b.target_name.iter().cloned())
            .collect(),
    };
    if let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice {
        e.controls = sb.control_input.iter().map(|c| c.name.clone()).collect();
        e.string_controls = sb
            .control_input
            .iter()
            .filter(|c| {
                c.control
                    .iter()
                    .any(|k| k.data_type == ConfigType::TypeString as i32)
            })
            .map(|c| c.name.clone())
            .collect();
        for s in &sb.state {
            e.state_inputs.push((s.input_name.clone(), s.data_type));
            e.state_outputs.push((s.output_name.clone(), s.data_type));
        }
    }
    e
}

pub(super) fn type_name(dt: i32) -> &'static str {
    ConfigType::try_from(dt)
        .map(|t| t.as_str_name())
        .unwrap_or("TYPE_INVALID")
}

/// The tensor type of a config datatype; `Ok(None)` for TYPE_STRING.
pub(super) fn tensor_type(
    dt: i32,
    what: &str,
    name: &str,
    model: &str,
) -> Result<Option<DataType>> {
    match DataType::from_config(dt) {
        Some(DataType::Bytes) => Ok(None),
        Some(t) => Ok(Some(t)),
        None => Err(Error::internal(format!(
            "unsupported datatype {} for {what} '{name}' for model '{model}'",
            type_name(dt)
        ))),
    }
}

/// Triton's rule for `List[str]` values: one dimension, counting the batch.
fn check_string_dims(
    dims: &[i64],
    reshape: Option<&[i64]>,
    what: &str,
    name: &str,
    config: &ModelConfig,
) -> Result<()> {
    let dims = reshape.unwrap_or(dims);
    let rank = dims.len() + usize::from(config.max_batch_size > 0);
    if rank > 1 {
        return Err(Error::internal(format!(
            "Triton only supports 1 dimensional List of String as {what} for '{name}' for model '{}'",
            config.name
        )));
    }
    Ok(())
}

/// Binds `config` to a `forward()` with these arguments (`None`: the
/// signature could not be read, so inputs bind by `<name>__<index>` or by
/// config order, and their count is not checked).
pub fn bind(config: &ModelConfig, args: Option<&[Argument]>) -> Result<Binding> {
    let model = config.name.as_str();
    if config.input.is_empty() {
        return Err(Error::internal(
            "model configuration must contain at least one input, none were specified.",
        ));
    }
    if config.output.is_empty() {
        return Err(Error::internal(
            "model configuration must contain at least one output, none were specified.",
        ));
    }
    let extra = extras(config);
    // Types and the string rule.
    let mut strings: BTreeMap<String, bool> = BTreeMap::new();
    for input in &config.input {
        let t = tensor_type(input.data_type, "input", &input.name, model)?;
        if t.is_none() {
            let reshape = input.reshape.as_ref().map(|r| r.shape.as_slice());
            check_string_dims(&input.dims, reshape, "input", &input.name, config)?;
        }
        strings.insert(input.name.clone(), t.is_none());
    }
    for (name, dt) in &extra.state_inputs {
        let t = tensor_type(*dt, "input state", name, model)?;
        strings.insert(name.clone(), t.is_none());
    }
    for name in extra.controls.iter().chain(&extra.batch_inputs) {
        strings.insert(name.clone(), false);
    }

    // Argument kinds, as Triton checks them.
    let dict = match args {
        Some([only]) if only.ty.starts_with("Dict[") => true,
        Some(args) => {
            for (i, a) in args.iter().enumerate() {
                if a.ty.starts_with("Dict[") && i > 0 {
                    return Err(Error::internal(
                        "Multiple inputs of kind DictType were detected. Only a single input of type Dict(str, Tensor) is supported.",
                    ));
                }
                if a.ty != "Tensor" && !a.ty.starts_with("List[") {
                    return Err(Error::internal(format!(
                        "An input of type '{}' was detected in the model. Only a single input of type Dict(str, Tensor) or input(s) of type Tensor are supported.",
                        a.ty
                    )));
                }
            }
            false
        }
        None => false,
    };

    let has_state = !extra.state_inputs.is_empty();
    let all_indexed = config.input.iter().all(|i| named_index(&i.name).is_some())
        && config.output.iter().all(|o| named_index(&o.name).is_some());
    if has_state && !all_indexed {
        return Err(Error::invalid_arg(format!(
            "PyTorch model '{model}' is using sequence batching with state but not all inputs and outputs follow the <name>__<index> naming convention."
        )));
    }
    for (name, _) in extra.state_inputs.iter().chain(&extra.state_outputs) {
        if named_index(name).is_none() {
            return Err(Error::invalid_arg(format!(
                "PyTorch model '{model}' is using sequence batching with state but state '{name}' does not follow the <name>__<index> naming convention."
            )));
        }
    }
    if let Some(name) = extra.string_controls.first() {
        return Err(Error::internal(format!(
            "input '{name}' type 'TYPE_STRING' is not supported by PyTorch."
        )));
    }
    for name in &extra.controls {
        if named_index(name).is_none() && !dict {
            return Err(Error::internal(format!(
                "input '{name}' does not follow <name>__<index> naming convention."
            )));
        }
    }

    let inputs = if dict {
        let mut keys: Vec<String> = config.input.iter().map(|i| i.name.clone()).collect();
        keys.extend(extra.controls.iter().cloned());
        keys.extend(extra.batch_inputs.iter().cloned());
        if let Some(name) = keys.iter().find(|k| strings.get(*k) == Some(&true)) {
            return Err(Error::unsupported(format!(
                "input '{name}' of model '{model}' is TYPE_STRING, but forward() takes a Dict[str, Tensor]: strings cannot be dict values"
            )));
        }
        Inputs::Dict { keys }
    } else {
        positional(config, args, &extra, &strings)?
    };

    let outputs = bind_outputs(config, &extra)?;
    Ok(Binding { inputs, outputs })
}

fn positional(
    config: &ModelConfig,
    args: Option<&[Argument]>,
    extra: &Extras,
    strings: &BTreeMap<String, bool>,
) -> Result<Inputs> {
    let model = config.name.as_str();
    let names: Vec<&String> = config.input.iter().map(|i| &i.name).collect();
    let by_argument = args.filter(|args| names.iter().all(|n| args.iter().any(|a| &a.name == *n)));
    let by_index = names.iter().all(|n| named_index(n).is_some());
    let mut slots: Vec<InputSlot> = Vec::new();
    let mut push = |name: &String, position: usize| {
        slots.push(InputSlot {
            name: name.clone(),
            position,
            strings: strings.get(name).copied().unwrap_or(false),
        })
    };
    for (i, name) in names.iter().enumerate() {
        let position = match by_argument {
            Some(args) => args.iter().position(|a| &a.name == *name).unwrap_or(i),
            None if by_index => named_index(name).unwrap_or(i),
            None => i,
        };
        push(name, position);
    }
    for (k, name) in extra.batch_inputs.iter().enumerate() {
        let position = match by_argument {
            Some(args) => args.iter().position(|a| &a.name == name),
            None => None,
        }
        .or_else(|| if by_index { named_index(name) } else { None })
        .unwrap_or(names.len() + k);
        push(name, position);
    }
    for name in extra
        .controls
        .iter()
        .chain(extra.state_inputs.iter().map(|(n, _)| n))
    {
        push(name, named_index(name).unwrap_or(0));
    }

    let arguments = match args {
        Some(args) => {
            if slots.len() != args.len() {
                return Err(Error::invalid_arg(format!(
                    "unable to load model '{model}', configuration expects {} inputs, model provides {}",
                    slots.len(),
                    args.len()
                )));
            }
            args.len()
        }
        None => slots.len(),
    };
    let mut taken: Vec<Option<&str>> = vec![None; arguments];
    for slot in &slots {
        let Some(place) = taken.get_mut(slot.position) else {
            return Err(Error::invalid_arg(format!(
                "input '{}' of model '{model}' refers to argument {} of forward(), which takes {arguments}",
                slot.name, slot.position
            )));
        };
        if let Some(other) = place.replace(&slot.name) {
            return Err(Error::invalid_arg(format!(
                "inputs '{other}' and '{}' of model '{model}' both bind to argument {} of forward()",
                slot.name, slot.position
            )));
        }
        if let Some(args) = args {
            let arg = &args[slot.position];
            let list = arg.ty.starts_with("List[");
            if slot.strings != list {
                let want = if slot.strings { "List[str]" } else { "Tensor" };
                return Err(Error::invalid_arg(format!(
                    "input '{}' of model '{model}' binds to forward() argument '{}' of type {}, but its datatype needs {want}",
                    slot.name, arg.name, arg.ty
                )));
            }
        }
    }
    Ok(Inputs::Positional { slots, arguments })
}

fn bind_outputs(config: &ModelConfig, extra: &Extras) -> Result<Vec<OutputSlot>> {
    let model = config.name.as_str();
    let by_index = config.output.iter().all(|o| named_index(&o.name).is_some());
    let mut out = Vec::new();
    for (i, o) in config.output.iter().enumerate() {
        let datatype = tensor_type(o.data_type, "output", &o.name, model)?;
        if datatype.is_none() {
            let reshape = o.reshape.as_ref().map(|r| r.shape.as_slice());
            check_string_dims(&o.dims, reshape, "output", &o.name, config)?;
        }
        let index = if by_index {
            named_index(&o.name).unwrap_or(i)
        } else {
            i
        };
        out.push(OutputSlot {
            name: o.name.clone(),
            index,
            datatype,
        });
    }
    for (name, dt) in &extra.state_outputs {
        if out.iter().any(|o| &o.name == name) {
            continue;
        }
        let datatype = tensor_type(*dt, "state", name, model)?;
        out.push(OutputSlot {
            name: name.clone(),
            index: named_index(name).unwrap_or(0),
            datatype,
        });
    }
    Ok(out)
}

/// Why a model file does not bind: the config field the finding is about
/// (`default_model_filename` for the file itself, `input`, `output`) and
/// the error.
pub type BindError = (&'static str, Error);

/// Binds `config` to the TorchScript file at `path` as a load does, for the
/// load and for `validate-config` alike: the file must be a TorchScript
/// archive; its `forward()` binds the config (Triton's conventions and
/// counts). When the archive's `forward()` cannot be read, the config's own
/// rules bind it and the second value says why.
pub fn bind_file(
    config: &ModelConfig,
    path: &std::path::Path,
) -> std::result::Result<(Binding, Option<String>), BindError> {
    let (signature, unread) = match super::torchscript::forward_signature(path) {
        Ok(s) => (Some(s), None),
        Err(e) if e.kind == ErrorKind::Unsupported => (None, Some(e.message)),
        Err(e) => return Err(("default_model_filename", e)),
    };
    let binding =
        bind(config, signature.as_ref().map(|s| s.args.as_slice())).map_err(|e| ("input", e))?;
    if let Some(count) = signature.as_ref().and_then(|s| s.return_count()) {
        check_return_count(&binding, count).map_err(|e| ("output", e))?;
    }
    Ok((binding, unread))
}

/// The load-time check against what `forward()` is annotated to return:
/// Triton's message for an output index past the values returned.
fn check_return_count(binding: &Binding, count: usize) -> Result<()> {
    match binding.outputs.iter().find(|o| o.index >= count) {
        Some(o) => Err(Error::invalid_arg(format!(
            "The output {} in the model configuration refers to an output index which doesn't exist. This model has {count} outputs",
            o.name
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::pb::{self, model_sequence_batching as msb};

    fn arg(name: &str, ty: &str) -> Argument {
        Argument {
            name: name.into(),
            ty: ty.into(),
            default: None,
        }
    }

    fn model(inputs: &[(&str, ConfigType)], outputs: &[&str]) -> ModelConfig {
        ModelConfig {
            name: "m".into(),
            backend: "pytorch".into(),
            input: inputs
                .iter()
                .map(|(n, t)| pb::ModelInput {
                    name: n.to_string(),
                    data_type: *t as i32,
                    dims: vec![4],
                    ..Default::default()
                })
                .collect(),
            output: outputs
                .iter()
                .map(|n| pb::ModelOutput {
                    name: n.to_string(),
                    data_type: ConfigType::TypeFp32 as i32,
                    dims: vec![4],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn positions(b: &Binding) -> Vec<(String, usize)> {
        match &b.inputs {
            Inputs::Positional { slots, .. } => {
                slots.iter().map(|s| (s.name.clone(), s.position)).collect()
            }
            Inputs::Dict { .. } => panic!("dict"),
        }
    }

    const F: ConfigType = ConfigType::TypeFp32;

    #[test]
    fn forward_argument_names_win_then_indices_then_order() {
        let args = [arg("INPUT0", "Tensor"), arg("INPUT1", "Tensor")];
        // By name, whatever the config order.
        let c = model(&[("INPUT1", F), ("INPUT0", F)], &["OUTPUT__0", "OUTPUT__1"]);
        let b = bind(&c, Some(&args)).unwrap();
        assert_eq!(positions(&b), [("INPUT1".into(), 1), ("INPUT0".into(), 0)]);
        // By index.
        let c = model(&[("B__1", F), ("A__0", F)], &["OUTPUT__0"]);
        let b = bind(&c, Some(&args)).unwrap();
        assert_eq!(positions(&b), [("B__1".into(), 1), ("A__0".into(), 0)]);
        // By config order.
        let c = model(&[("b", F), ("a", F)], &["y", "x"]);
        let b = bind(&c, Some(&args)).unwrap();
        assert_eq!(positions(&b), [("b".into(), 0), ("a".into(), 1)]);
        assert_eq!(b.outputs[0].index, 0);
        assert_eq!(b.outputs[1].index, 1);
        // Outputs by index.
        let c = model(&[("INPUT0", F), ("INPUT1", F)], &["OUT__1", "OUT__0"]);
        let b = bind(&c, Some(&args)).unwrap();
        assert_eq!(b.outputs[0].index, 1);
        assert!(check_return_count(&b, 2).is_ok());
        let e = check_return_count(&b, 1).unwrap_err();
        assert!(e.message.contains("The output OUT__1 in the model configuration refers to an output index which doesn't exist. This model has 1 outputs"));
    }

    #[test]
    fn counts_and_kinds_are_checked_with_tritons_words() {
        let args = [arg("x", "Tensor")];
        let c = model(&[("x", F), ("y", F)], &["o"]);
        let e = bind(&c, Some(&args)).unwrap_err();
        assert_eq!(
            e.message,
            "unable to load model 'm', configuration expects 2 inputs, model provides 1"
        );
        let e = bind(&c, Some(&[arg("x", "Tensor"), arg("y", "int")])).unwrap_err();
        assert!(
            e.message.contains("An input of type 'int' was detected"),
            "{}",
            e.message
        );
        let c = model(&[("A__0", F), ("A__0", F)], &["o"]);
        let e = bind(&c, Some(&[arg("x", "Tensor"), arg("y", "Tensor")])).unwrap_err();
        assert!(
            e.message.contains("both bind to argument 0"),
            "{}",
            e.message
        );
        let c = model(&[], &["o"]);
        assert!(bind(&c, None)
            .unwrap_err()
            .message
            .contains("at least one input"));
    }

    #[test]
    fn strings_are_one_dimensional_lists() {
        let s = ConfigType::TypeString;
        let args = [arg("x", "List[str]")];
        let c = model(&[("x", s)], &["o"]);
        let b = bind(&c, Some(&args)).unwrap();
        match b.inputs {
            Inputs::Positional { slots, .. } => assert!(slots[0].strings),
            _ => panic!(),
        }
        // A string input to a Tensor argument.
        let e = bind(&c, Some(&[arg("x", "Tensor")])).unwrap_err();
        assert!(e.message.contains("needs List[str]"), "{}", e.message);
        // Two dimensions with the batch: refused; reshape to [] is the way.
        let mut c = model(&[("x", s)], &["o"]);
        c.max_batch_size = 4;
        c.input[0].dims = vec![1];
        let e = bind(&c, Some(&args)).unwrap_err();
        assert!(e
            .message
            .contains("Triton only supports 1 dimensional List of String as input"));
        c.input[0].reshape = Some(pb::ModelTensorReshape { shape: vec![] });
        assert!(bind(&c, Some(&args)).is_ok());
        // Every numeric type is a tensor type.
        for t in [
            ConfigType::TypeUint16,
            ConfigType::TypeBf16,
            ConfigType::TypeBool,
        ] {
            assert!(bind(&model(&[("x", t)], &["o"]), Some(&[arg("x", "Tensor")])).is_ok());
        }
    }

    #[test]
    fn dict_input_carries_every_input_by_name() {
        let c = model(&[("a", F), ("b", F)], &["o"]);
        let b = bind(&c, Some(&[arg("inputs", "Dict[str, Tensor]")])).unwrap();
        assert_eq!(
            b.inputs,
            Inputs::Dict {
                keys: vec!["a".into(), "b".into()]
            }
        );
    }

    #[test]
    fn state_and_controls_need_indexed_names() {
        let mut c = model(&[("INPUT__0", ConfigType::TypeInt32)], &["OUTPUT__0"]);
        c.scheduling_choice = Some(SchedulingChoice::SequenceBatching(
            pb::ModelSequenceBatching {
                control_input: vec![msb::ControlInput {
                    name: "START__1".into(),
                    ..Default::default()
                }],
                state: vec![msb::State {
                    input_name: "INPUT_STATE__2".into(),
                    output_name: "OUTPUT_STATE__1".into(),
                    data_type: ConfigType::TypeInt32 as i32,
                    dims: vec![1],
                    ..Default::default()
                }],
                ..Default::default()
            },
        ));
        let args = [arg("a", "Tensor"), arg("b", "Tensor"), arg("c", "Tensor")];
        let b = bind(&c, Some(&args)).unwrap();
        assert_eq!(
            positions(&b),
            [
                ("INPUT__0".into(), 0),
                ("START__1".into(), 1),
                ("INPUT_STATE__2".into(), 2)
            ]
        );
        assert_eq!(b.outputs[1].name, "OUTPUT_STATE__1");
        assert_eq!(b.outputs[1].index, 1);
        c.output[0].name = "OUTPUT".into();
        let e = bind(&c, Some(&args)).unwrap_err();
        assert!(
            e.message.contains("not all inputs and outputs follow"),
            "{}",
            e.message
        );
    }

    #[test]
    fn named_index_is_tritons() {
        assert_eq!(named_index("INPUT__3"), Some(3));
        assert_eq!(named_index("X__"), Some(0));
        assert_eq!(named_index("a__b__0"), None);
        assert_eq!(named_index("plain"), None);
        assert_eq!(named_index("X__99999999999999999999999"), None);
    }
}
