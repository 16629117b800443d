//! Auto-complete of an OpenVINO model's config, Triton's OpenVINO backend's
//! rules (`AutoCompleteConfig`): the model batches only when **every**
//! input and output has a layout with an `N` dimension (an IR keeps layouts
//! in its ports' `rt_info`; most IRs and every ONNX model have none, so
//! they do not batch); inputs and outputs are filled only when the config
//! lists none of that kind. Pure: the caller reads the ports (`ir::read`,
//! or OpenVINO for other formats) and logs the notes this returns.
//!
//! One deliberate difference: Triton writes every dimension of a shape
//! that is not fully static as -1, and without batching its own load then
//! refuses that config (a config -1 does not match a static model
//! dimension), so a `[-1, 4]` model does not load without a config. Here
//! each dimension is the model's (-1 only where the model's is dynamic).

use super::ir::IrPort;
use crate::core::config::pb::{
    model_config::SchedulingChoice, ModelConfig, ModelDynamicBatching, ModelInput, ModelOutput,
};
use crate::core::error::{Error, Result};

/// Whether a layout (`[N,C,H,W]`, `NCHW`, `N...`, `[N,...]`) names a batch
/// dimension `N` (or `batch`, OpenVINO's other name for it), as
/// `ov::layout::has_batch`.
pub fn has_batch(layout: &str) -> bool {
    let inner = layout.trim();
    if let Some(list) = inner.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
        return list
            .split(',')
            .any(|d| d.trim().eq_ignore_ascii_case("N") || d.trim().eq_ignore_ascii_case("batch"));
    }
    inner
        .replace("...", "")
        .chars()
        .any(|c| c.eq_ignore_ascii_case(&'N'))
}

/// Completes `config` from the model's ports; returns the lines to log
/// (`'W'` warnings and `'I'` notes, with Triton's words).
pub fn complete(
    config: &mut ModelConfig,
    inputs: &[IrPort],
    outputs: &[IrPort],
    max_batch_size: i32,
) -> Result<Vec<(char, String)>> {
    let name = config.name.clone();
    let mut notes = Vec::new();
    let batching = !inputs.is_empty()
        && inputs
            .iter()
            .chain(outputs)
            .all(|p| p.layout.as_deref().is_some_and(has_batch));
    if batching {
        if config.max_batch_size == 0 {
            config.max_batch_size = max_batch_size.max(1);
            notes.push((
                'W',
                format!(
                    "autofilled max_batch_size to {} for model '{name}' since batching is supported but no \
                     max_batch_size is specified in model configuration. Must specify max_batch_size to \
                     utilize autofill with a larger max batch size",
                    config.max_batch_size
                ),
            ));
        }
        if config.max_batch_size > 1 && config.scheduling_choice.is_none() {
            config.scheduling_choice = Some(SchedulingChoice::DynamicBatching(
                ModelDynamicBatching::default(),
            ));
        }
    } else if config.max_batch_size != 0 {
        notes.push((
            'W',
            format!(
                "model layout for model {name} does not support batching while non-zero max_batch_size is specified"
            ),
        ));
    }
    let strip = config.max_batch_size > 0;
    let dims = |p: &IrPort| -> Vec<i64> {
        if strip && !p.dims.is_empty() {
            p.dims[1..].to_vec()
        } else {
            p.dims.clone()
        }
    };
    let data_type = |p: &IrPort, what: &str| -> Result<i32> {
        p.element
            .and_then(super::data_type_of)
            .map(|d| d.to_config() as i32)
            .ok_or_else(|| {
                Error::invalid_arg(format!(
                    "unable to auto-complete model configuration for '{name}': {what} '{}' has OpenVINO type {:?}, which the protocol has no type for",
                    p.name, p.element
                ))
            })
    };
    // Each port as (name, data type, dims), for the kind the config leaves empty.
    let fill = |ports: &[IrPort], what: &str| -> Result<Vec<(String, i32, Vec<i64>)>> {
        ports
            .iter()
            .map(|p| Ok((p.name.clone(), data_type(p, what)?, dims(p))))
            .collect()
    };
    let skipped = |what: &str| {
        (
            'I',
            format!("skipping {what} model configuration auto-complete for '{name}': {what} already specified"),
        )
    };
    if config.input.is_empty() {
        config.input = fill(inputs, "input")?
            .into_iter()
            .map(|(name, data_type, dims)| ModelInput {
                name,
                data_type,
                dims,
                ..Default::default()
            })
            .collect();
    } else {
        notes.push(skipped("input"));
    }
    if config.output.is_empty() {
        config.output = fill(outputs, "output")?
            .into_iter()
            .map(|(name, data_type, dims)| ModelOutput {
                name,
                data_type,
                dims,
                ..Default::default()
            })
            .collect();
    } else {
        notes.push(skipped("output"));
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::autocomplete::DEFAULT_MAX_BATCH_SIZE;
    use openvino::ElementType;

    fn port(name: &str, dims: &[i64], layout: Option<&str>) -> IrPort {
        IrPort {
            name: name.into(),
            element: Some(ElementType::F32),
            dims: dims.to_vec(),
            layout: layout.map(str::to_string),
        }
    }

    #[test]
    fn layouts_name_a_batch_dimension_or_not() {
        for yes in [
            "[N,C,H,W]",
            "NCHW",
            "nchw",
            "N...",
            "[N,...]",
            "[?,n]",
            "NC",
            "[batch,C]",
        ] {
            assert!(has_batch(yes), "{yes}");
        }
        for no in ["[C,H,W]", "CHW", "...", "[H,W,C]", ""] {
            assert!(!has_batch(no), "{no}");
        }
    }

    #[test]
    fn every_port_with_a_batch_layout_batches() {
        let mut c = ModelConfig {
            name: "m".into(),
            ..Default::default()
        };
        let notes = complete(
            &mut c,
            &[port("x", &[-1, 3, 4], Some("[N,C,W]"))],
            &[port("y", &[-1, 3, 4], Some("[N,...]"))],
            DEFAULT_MAX_BATCH_SIZE,
        )
        .unwrap();
        assert_eq!(c.max_batch_size, DEFAULT_MAX_BATCH_SIZE);
        assert!(matches!(
            c.scheduling_choice,
            Some(SchedulingChoice::DynamicBatching(_))
        ));
        // The model's dimensions, the batch one dropped.
        assert_eq!(c.input[0].dims, [3, 4]);
        assert_eq!(c.output[0].dims, [3, 4]);
        assert!(notes[0].1.starts_with("autofilled max_batch_size to"));
    }

    #[test]
    fn a_port_without_a_layout_means_no_batching() {
        let mut c = ModelConfig::default();
        complete(
            &mut c,
            &[port("x", &[2, 4], Some("[N,C]"))],
            &[port("y", &[2, 4], None)],
            DEFAULT_MAX_BATCH_SIZE,
        )
        .unwrap();
        assert_eq!(c.max_batch_size, 0);
        assert!(c.scheduling_choice.is_none());
        assert_eq!(c.input[0].dims, [2, 4]);
        // A max_batch_size the layout does not support: kept, with a warning.
        let mut c = ModelConfig {
            name: "m".into(),
            max_batch_size: 8,
            ..Default::default()
        };
        let notes = complete(
            &mut c,
            &[port("x", &[-1, 4], None)],
            &[port("y", &[-1, 4], None)],
            DEFAULT_MAX_BATCH_SIZE,
        )
        .unwrap();
        assert_eq!(c.max_batch_size, 8);
        assert_eq!(c.input[0].dims, [4]);
        assert_eq!(
            notes[0].1,
            "model layout for model m does not support batching while non-zero max_batch_size is specified"
        );
    }

    #[test]
    fn given_inputs_and_outputs_stay_as_they_are() {
        let mut c = ModelConfig {
            name: "m".into(),
            input: vec![ModelInput {
                name: "x".into(),
                dims: vec![4],
                ..Default::default()
            }],
            ..Default::default()
        };
        let notes = complete(
            &mut c,
            &[port("x", &[-1, 4], None)],
            &[port("y", &[-1, 4], None)],
            DEFAULT_MAX_BATCH_SIZE,
        )
        .unwrap();
        assert_eq!(c.input.len(), 1);
        assert_eq!(c.input[0].data_type, 0);
        assert_eq!(c.output[0].name, "y");
        assert!(notes
            .iter()
            .any(|(_, n)| n.contains("input already specified")));
    }
}
