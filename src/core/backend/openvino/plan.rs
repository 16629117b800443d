//! What a config asks of an OpenVINO model's ports, known before loading
//! it: `check` (what `validate-config` and `serve` report) and `plan` (the
//! reshapes and batch handling a load applies), both reading the config
//! against the ports.

use std::path::PathBuf;

use super::settings::OvSettings;
use super::*;

pub(super) fn dims_text(dims: &[Dim]) -> String {
    let parts: Vec<String> = dims
        .iter()
        .map(|d| {
            if !d.dynamic {
                d.min.to_string()
            } else if d.unbounded() {
                "-1".to_string()
            } else {
                format!("{}..{}", d.min, d.max)
            }
        })
        .collect();
    format!("[{}]", parts.join(","))
}

/// Whether a config dimension `c` (-1: any) fits the model's `d`.
pub(super) fn fits(c: i64, d: &Dim) -> bool {
    if !d.dynamic {
        return c == d.min;
    }
    c == -1 || (c >= d.min && (d.unbounded() || c <= d.max))
}

/// The tensors the config feeds the model (inputs, sequence controls and
/// state) and the ones it fetches (outputs, state).
pub(super) fn fed_and_fetched(config: &ModelConfig) -> (Vec<String>, Vec<String>) {
    let mut fed: Vec<String> = config.input.iter().map(|i| i.name.clone()).collect();
    let mut fetched: Vec<String> = config.output.iter().map(|o| o.name.clone()).collect();
    if let Some(SchedulingChoice::SequenceBatching(s)) = &config.scheduling_choice {
        fed.extend(s.control_input.iter().map(|c| c.name.clone()));
        fed.extend(s.state.iter().map(|st| st.input_name.clone()));
        fetched.extend(s.state.iter().map(|st| st.output_name.clone()));
    }
    fed.extend(
        config
            .batch_input
            .iter()
            .flat_map(|b| b.target_name.iter().cloned()),
    );
    (fed, fetched)
}

/// What `validate-config` and `serve` find of an OpenVINO config before
/// loading it: the parameters, the model file and an IR's weights file,
/// and the config (as auto-complete leaves it) against the model's ports:
/// an IR's read from its XML, another format's read by OpenVINO (a
/// warning when the library is missing: then only the load checks it).
pub fn check(config: &ModelConfig, version_dirs: &[PathBuf]) -> Vec<crate::core::config::Issue> {
    use crate::core::config::Issue;
    let mut out = Vec::new();
    let settings = OvSettings::from_config(config).unwrap_or_else(|e| {
        out.push(Issue::error("parameters", e.message));
        OvSettings::default()
    });
    let file = model_file(config);
    let ir = file.ends_with(".xml");
    // Another format is read by OpenVINO itself: without the library, only
    // the load checks it.
    let library = if ir { Ok(()) } else { ensure_loaded() };
    let mut push_once = |issue: Issue| {
        if !out.contains(&issue) {
            out.push(issue);
        }
    };
    for dir in version_dirs {
        let path = dir.join(file);
        if !path.exists() {
            continue;
        }
        // The config against the model's ports, as the load checks it
        // (after auto-complete, which Triton runs unless disabled).
        match &library {
            Err(e) => push_once(Issue::warning(
                "default_model_filename",
                format!(
                    "{file} not checked against the config before loading: {}",
                    e.message
                ),
            )),
            Ok(()) => {
                let checked = model_ports(&path).and_then(|(i, o)| {
                    let mut completed = config.clone();
                    // Checked as served with Triton's default max_batch_size (this
                    // check does not know `--backend-config`).
                    complete::complete(&mut completed, &i, &o, DEFAULT_MAX_BATCH_SIZE)?;
                    let ports =
                        |v: Vec<ir::IrPort>| v.iter().map(ir::IrPort::port).collect::<Vec<_>>();
                    plan(&completed, &settings, &ports(i), &ports(o))
                });
                if let Err(e) = checked {
                    let field = if e.message.contains("output") {
                        "output"
                    } else {
                        "input"
                    };
                    push_once(Issue::error(field, e.message));
                }
            }
        }
        if ir && path.is_file() && !path.with_extension("bin").is_file() {
            push_once(Issue::error(
                "default_model_filename",
                format!(
                    "{}/{} has no weights file {} beside it",
                    dir.file_name().unwrap_or_default().to_string_lossy(),
                    file,
                    Path::new(file).with_extension("bin").display()
                ),
            ));
        }
    }
    out
}

/// A config against the model's ports, with Triton's checks and messages
/// (count, names, types the protocol has, dims); the shape each config
/// input is reshaped to (the batch dimension dynamic up to
/// `max_batch_size`). Pure: the load runs it on the model OpenVINO read,
/// `validate-config` on the ports of the IR's XML.
pub(super) fn plan(
    config: &ModelConfig,
    settings: &OvSettings,
    inputs: &[Port],
    outputs: &[Port],
) -> Result<Vec<(String, Vec<Dim>)>> {
    let model_name = &config.name;
    let (fed, fetched) = fed_and_fetched(config);
    if fed.len() != inputs.len() {
        return Err(Error::invalid_arg(format!(
            "unable to load model '{model_name}', configuration expects {} inputs, model provides {}",
            fed.len(),
            inputs.len()
        )));
    }
    let allowed = |ps: &[Port]| {
        ps.iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let find = |ps: &'_ [Port], name: &str, what: &str| -> Result<usize> {
        ps.iter().position(|p| p.name == name).ok_or_else(|| {
            Error::invalid_arg(format!(
                "unexpected inference {what} '{name}', allowed {what}s are: {}",
                allowed(ps)
            ))
        })
    };
    for name in &fed {
        find(inputs, name, "input")?;
    }
    for name in &fetched {
        find(outputs, name, "output")?;
    }
    let batching = config.max_batch_size > 0;
    let mut reshapes: Vec<(String, Vec<Dim>)> = Vec::new();
    for input in &config.input {
        let port = &inputs[find(inputs, &input.name, "input")?];
        // The config's type may differ from the model's: converted both
        // ways, as Triton's pre/post-processing step does.
        match DataType::from_config(input.data_type) {
            Some(d) if d != DataType::Bytes => {}
            _ => {
                return Err(Error::invalid_arg(format!(
                    "unsupported datatype {} for input '{}' for model '{model_name}'",
                    crate::core::config::pb::DataType::try_from(input.data_type)
                        .map(|t| t.as_str_name())
                        .unwrap_or("TYPE_INVALID"),
                    input.name
                )))
            }
        }
        if data_type_of(port.element).is_none() {
            return Err(Error::invalid_arg(format!(
                "unable to load model '{model_name}': input '{}' has OpenVINO type {:?}, which the protocol has no type for",
                input.name, port.element
            )));
        }
        let dims = input
            .reshape
            .as_ref()
            .map(|r| r.shape.as_slice())
            .unwrap_or(&input.dims);
        let rank = dims.len() + usize::from(batching);
        let mut new: Vec<Dim> = Vec::with_capacity(rank);
        if batching {
            let max = i64::from(config.max_batch_size);
            // Static at max_batch_size with batch padding (Triton's way),
            // else dynamic up to it.
            new.push(Dim {
                dynamic: !settings.batch_padding,
                min: if settings.batch_padding { max } else { 1 },
                max,
            });
        }
        if settings.reshape_io_layers {
            for &d in dims {
                if d != -1 && d <= 0 {
                    return Err(Error::invalid_arg(
                        "openvino backend does not support dimensions values other than `-1` or positive integers",
                    ));
                }
                new.push(Dim::from_config(d));
            }
        } else {
            let ok = port.dims.len() == rank
                && dims
                    .iter()
                    .zip(&port.dims[usize::from(batching)..])
                    // With batching, Triton skips an input's -1 dims.
                    .all(|(c, d)| (batching && *c == -1) || fits(*c, d));
            let batch_ok = !batching
                || port.dims.first().is_some_and(|d| {
                    d.dynamic || d.min == 1 || d.min == i64::from(config.max_batch_size)
                });
            if !ok || !batch_ok {
                let shown: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
                return Err(Error::invalid_arg(format!(
                    "unable to load model '{model_name}', input '{}': the model expects {} dimensions (shape {}) but the model configuration specifies {} dimensions ({}[{}])",
                    input.name,
                    port.dims.len(),
                    dims_text(&port.dims),
                    rank,
                    if batching { "an initial batch dimension because max_batch_size > 0 followed by the explicit tensor shape, making complete shape " } else { "shape " },
                    if batching { format!("-1,{}", shown.join(",")) } else { shown.join(",") }
                )));
            }
            new.extend(port.dims.iter().skip(usize::from(batching)).copied());
        }
        reshapes.push((input.name.clone(), new));
    }
    Ok(reshapes)
}
