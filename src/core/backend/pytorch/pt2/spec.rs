//! A package's call spec (the pytree TreeSpecs of forward()'s arguments
//! and result, from its wrapper source) flattened into its leaves, named
//! as Triton's pytorch backend names them (`ARGS[0]`, `KWARGS[scale]`,
//! `RESULT[0]`, ...).

use crate::core::error::{Error, Result};

/// The flattened leaves of a call spec, by their forward-based names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaves {
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

fn spec_error(what: &str, why: impl std::fmt::Display) -> Error {
    Error::invalid_arg(format!(
        "Failed to parse {what} call specification of the AOTInductor package: {why}"
    ))
}

/// The root node of a TreeSpec JSON (`[version, node]`).
fn spec_root(spec: &str, what: &str) -> Result<serde_json::Value> {
    let value: serde_json::Value = serde_json::from_str(spec).map_err(|e| spec_error(what, e))?;
    match value {
        serde_json::Value::Array(mut v) if v.len() == 2 => Ok(v.remove(1)),
        _ => Err(spec_error(what, "expected [version, tree]")),
    }
}

/// Appends the leaves under `node` named from `prefix`.
fn flatten(
    node: &serde_json::Value,
    prefix: &str,
    what: &str,
    out: &mut Vec<String>,
) -> Result<()> {
    let ty = node.get("type").and_then(|t| t.as_str());
    let children = node
        .get("children_spec")
        .and_then(|c| c.as_array())
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    match ty {
        None => {
            out.push(prefix.to_string());
            Ok(())
        }
        Some("builtins.tuple" | "builtins.list") => {
            for (i, child) in children.iter().enumerate() {
                flatten(child, &format!("{prefix}[{i}]"), what, out)?;
            }
            Ok(())
        }
        Some("builtins.dict" | "collections.OrderedDict") => {
            let keys = dict_keys(node, what)?;
            if keys.len() != children.len() {
                return Err(spec_error(
                    what,
                    "a dict's keys and values differ in number",
                ));
            }
            for (key, child) in keys.iter().zip(children) {
                flatten(child, &format!("{prefix}[{key}]"), what, out)?;
            }
            Ok(())
        }
        Some(other) => Err(spec_error(
            what,
            format!("a {other} node (only tuples, lists, dicts and tensors are supported)"),
        )),
    }
}

/// A dict node's keys (its `context`, a JSON string of the key list), which
/// must be usable in a name (Triton's rule).
fn dict_keys(node: &serde_json::Value, what: &str) -> Result<Vec<String>> {
    let context = node.get("context").and_then(|c| c.as_str()).unwrap_or("[]");
    let keys: Vec<serde_json::Value> =
        serde_json::from_str(context).map_err(|e| spec_error(what, e))?;
    keys.into_iter()
        .map(|k| {
            let key = match k {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            let bad = key.is_empty()
                || key
                    .chars()
                    .any(|c| c == '"' || c == '[' || c == ']' || c.is_whitespace() || c.is_control());
            if bad {
                return Err(spec_error(
                    what,
                    format!("dict key {key:?} cannot be part of a tensor name (no quotes, brackets or spaces)"),
                ));
            }
            Ok(key)
        })
        .collect()
}

/// The leaves of a call spec: inputs are `(args tuple, kwargs dict)`.
pub fn leaves(in_spec: &str, out_spec: &str) -> Result<Leaves> {
    let root = spec_root(in_spec, "input")?;
    let children = root
        .get("children_spec")
        .and_then(|c| c.as_array())
        .filter(|c| {
            c.len() == 2 && root.get("type").and_then(|t| t.as_str()) == Some("builtins.tuple")
        })
        .ok_or_else(|| spec_error("input", "expected a tuple of (args, kwargs)"))?;
    let mut inputs = Vec::new();
    let args = &children[0];
    if args.get("type").and_then(|t| t.as_str()) != Some("builtins.tuple") {
        return Err(spec_error("input", "the arguments are not a tuple"));
    }
    for (i, child) in args
        .get("children_spec")
        .and_then(|c| c.as_array())
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .enumerate()
    {
        flatten(child, &format!("ARGS[{i}]"), "input", &mut inputs)?;
    }
    let kwargs = &children[1];
    if kwargs.get("type").and_then(|t| t.as_str()) != Some("builtins.dict") {
        return Err(spec_error("input", "the keyword arguments are not a dict"));
    }
    let keys = dict_keys(kwargs, "input")?;
    let values = kwargs
        .get("children_spec")
        .and_then(|c| c.as_array())
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for (key, child) in keys.iter().zip(values) {
        flatten(child, &format!("KWARGS[{key}]"), "input", &mut inputs)?;
    }
    let mut outputs = Vec::new();
    flatten(
        &spec_root(out_spec, "output")?,
        "RESULT",
        "output",
        &mut outputs,
    )?;
    Ok(Leaves { inputs, outputs })
}
