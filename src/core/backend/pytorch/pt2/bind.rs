//! How a config's inputs and outputs bind to a package's leaves (by
//! ordinal `INPUT__<i>` or by forward-based name), and the check of each
//! request's inputs against what the package's code checks (its data
//! types, fixed dimensions and bounds).

use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::types::DataType;

use super::super::binding::{extras, named_index, tensor_type, type_name, OutputSlot};
use super::*;

/// How a config's tensors meet the package's leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pt2Binding {
    /// Each tensor the engine hands the instance, with its leaf (position
    /// in the flattened inputs).
    pub inputs: Vec<(String, usize)>,
    pub outputs: Vec<OutputSlot>,
    /// The number of flattened inputs.
    pub leaves: usize,
}

/// The leaf `name` refers to: a forward-based name, else `<name>__<i>`.
fn leaf_of(name: &str, names: &[String]) -> Option<usize> {
    names
        .iter()
        .position(|n| n == name)
        .or_else(|| named_index(name).filter(|i| *i < names.len()))
}

/// Binds `config` to the package's leaves (Triton's rules and messages),
/// and checks each input's type and shape against what the compiled code
/// expects, where the package says.
pub fn bind(
    config: &ModelConfig,
    leaves: &Leaves,
    info: Option<&[LeafInput]>,
    instance: &str,
) -> Result<Pt2Binding> {
    let model = config.name.as_str();
    if config.output.is_empty() {
        return Err(Error::invalid_arg(format!(
            "Configuration for model \"{model}\" must define at least one output, none were specified."
        )));
    }
    let extra = extras(config);
    if let Some(name) = extra.string_controls.first() {
        return Err(Error::invalid_arg(format!(
            "input '{name}' type 'TYPE_STRING' is not supported by an AOTInductor model."
        )));
    }
    // Every tensor handed in: config inputs, sequence controls, state, batch inputs.
    let mut handed: Vec<(String, Option<&crate::core::config::pb::ModelInput>, i32)> = config
        .input
        .iter()
        .map(|i| (i.name.clone(), Some(i), i.data_type))
        .collect();
    for name in &extra.controls {
        handed.push((name.clone(), None, 0));
    }
    for (name, dt) in &extra.state_inputs {
        handed.push((name.clone(), None, *dt));
    }
    for name in &extra.batch_inputs {
        handed.push((name.clone(), None, 0));
    }
    if handed.len() != leaves.inputs.len() {
        return Err(Error::invalid_arg(format!(
            "Failed to load model \"{instance}\" configuration expects {} inputs, but model expects {} inputs.",
            handed.len(),
            leaves.inputs.len()
        )));
    }
    let mut inputs = Vec::new();
    let mut taken: Vec<Option<&str>> = vec![None; leaves.inputs.len()];
    for (name, input, dt) in &handed {
        let leaf = leaf_of(name, &leaves.inputs).ok_or_else(|| {
            Error::invalid_arg(format!(
                "Input \"{name}\" for model instance \"{instance}\" is not found in model input map. \
                 The package's inputs are {}",
                describe_names(&leaves.inputs, "INPUT")
            ))
        })?;
        if let Some(other) = taken[leaf].replace(name) {
            return Err(Error::invalid_arg(format!(
                "inputs \"{other}\" and \"{name}\" of model \"{model}\" both refer to the package's input {} ({})",
                leaf, leaves.inputs[leaf]
            )));
        }
        if *dt != 0 {
            let t = tensor_type(*dt, "input", name, model)?;
            if t.is_none() {
                return Err(Error::invalid_arg(format!(
                    "Unsupported datatype {} for input \"{name}\" for model instance \"{instance}\": \
                     AOTInductor compiles tensor code only",
                    type_name(*dt)
                )));
            }
        }
        if let (Some(input), Some(info)) = (input, info.and_then(|i| i.get(leaf))) {
            check_input(config, input, info, &leaves.inputs[leaf])?;
        }
        inputs.push((name.clone(), leaf));
    }

    let mut outputs = Vec::new();
    let mut wanted: Vec<(&str, i32)> = config
        .output
        .iter()
        .map(|o| (o.name.as_str(), o.data_type))
        .collect();
    for (name, dt) in &extra.state_outputs {
        if !wanted.iter().any(|(n, _)| n == name) {
            wanted.push((name.as_str(), *dt));
        }
    }
    for (name, dt) in wanted {
        let index = leaf_of(name, &leaves.outputs).ok_or_else(|| {
            Error::invalid_arg(format!(
                "Output \"{name}\" for model instance \"{instance}\" is not found in model output map. \
                 The package's outputs are {}",
                describe_names(&leaves.outputs, "OUTPUT")
            ))
        })?;
        let datatype = tensor_type(dt, "output", name, model)?;
        if datatype.is_none() {
            return Err(Error::invalid_arg(format!(
                "Unsupported datatype {} for output \"{name}\" for model instance \"{instance}\": \
                 AOTInductor compiles tensor code only",
                type_name(dt)
            )));
        }
        outputs.push(OutputSlot {
            name: name.to_string(),
            index,
            datatype,
        });
    }
    Ok(Pt2Binding {
        inputs,
        outputs,
        leaves: leaves.inputs.len(),
    })
}

fn describe_names(names: &[String], ordinal: &str) -> String {
    if names.is_empty() {
        return "none".into();
    }
    names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{ordinal}__{i} or {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn show_dims(dims: &[Dim]) -> String {
    let parts: Vec<String> = dims
        .iter()
        .map(|d| match d {
            Dim::Fixed(v) => v.to_string(),
            Dim::Range(0, i64::MAX) => "any".to_string(),
            Dim::Range(lo, hi) => {
                let lo = if *lo == 2 { 1 } else { *lo };
                if *hi == i64::MAX {
                    format!("{lo}..")
                } else {
                    format!("{lo}..{hi}")
                }
            }
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// The config's input against the compiled code's expectations: type,
/// rank, each fixed dimension, the batch dimension's range.
fn check_input(
    config: &ModelConfig,
    input: &crate::core::config::pb::ModelInput,
    info: &LeafInput,
    leaf: &str,
) -> Result<()> {
    let name = &input.name;
    if let (Some(want), Some(t)) = (info.datatype, DataType::from_config(input.data_type)) {
        if want != t {
            return Err(Error::invalid_arg(format!(
                "input \"{name}\" of model \"{}\" is {} in the configuration, but the package's model takes {} ({leaf})",
                config.name,
                type_name(input.data_type),
                type_name(want.to_config() as i32)
            )));
        }
    }
    let batching = config.max_batch_size > 0;
    let dims = input
        .reshape
        .as_ref()
        .map(|r| r.shape.as_slice())
        .unwrap_or(&input.dims);
    let mismatch = |why: String| {
        Error::invalid_arg(format!(
            "input \"{name}\" of model \"{}\": {why}; the package's model takes {leaf} of shape {}",
            config.name,
            show_dims(&info.dims)
        ))
    };
    let full = dims.len() + usize::from(batching);
    if full != info.dims.len() {
        return Err(mismatch(format!(
            "the configuration gives it {} dimensions{}",
            full,
            if batching {
                " (with the batch dimension)"
            } else {
                ""
            }
        )));
    }
    let model_dims = if batching {
        match info.dims[0] {
            Dim::Fixed(v) => {
                return Err(mismatch(format!(
                    "max_batch_size is {}, but dimension 0 is fixed to {v} in the package: export it with a \
                     dynamic batch dimension (torch.export.Dim) or set max_batch_size to 0",
                    config.max_batch_size
                )))
            }
            Dim::Range(_, hi) if hi < i64::from(config.max_batch_size) => {
                return Err(mismatch(format!(
                    "max_batch_size is {}, but the package's batch dimension goes up to {hi}",
                    config.max_batch_size
                )))
            }
            Dim::Range(..) => {}
        }
        &info.dims[1..]
    } else {
        &info.dims[..]
    };
    for (i, (&d, &m)) in dims.iter().zip(model_dims).enumerate() {
        let at = i + usize::from(batching);
        match m {
            Dim::Fixed(v) if d != v => {
                return Err(mismatch(format!(
                    "its dimension {at} is {} in the configuration",
                    if d < 0 {
                        "-1 (any size)".to_string()
                    } else {
                        d.to_string()
                    }
                )))
            }
            Dim::Range(..) if d >= 0 && !m.admits(d) => {
                return Err(mismatch(format!(
                    "its dimension {at} is {d} in the configuration"
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

/// A request's input against the compiled code's expectations (its shape
/// includes the batch dimension); the type was checked against the config.
pub fn check_shape(name: &str, shape: &[i64], info: &LeafInput) -> Result<()> {
    let fits =
        shape.len() == info.dims.len() && shape.iter().zip(&info.dims).all(|(&n, d)| d.admits(n));
    if fits {
        return Ok(());
    }
    Err(Error::invalid_arg(format!(
        "input '{name}' has shape {shape:?}, but the AOTInductor model takes {}",
        show_dims(&info.dims)
    )))
}
