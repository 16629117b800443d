//! The checks of an ensemble that need its composing models: each step's
//! model exists, is valid and has the version asked for, batch sizes fit,
//! every mapped tensor agrees in type and shape wherever it is used, and no
//! ensemble reaches itself.

use std::collections::{BTreeMap, BTreeSet};

use super::{load_into, CheckOptions, CheckedModel, Roots};
use crate::core::config::pb::{model_config::SchedulingChoice, ModelConfig, ModelEnsembling};
use crate::core::config::validate::data_type_name;
use crate::core::config::Issue;

/// Rule 22 and the repository-level ensemble checks: the steps' models
/// exist, are valid, have the versions asked for, agree with the mapping,
/// and no ensemble reaches itself.
pub(super) fn check_ensemble(
    roots: Roots,
    name: &str,
    opts: &CheckOptions,
    cache: &mut BTreeMap<String, Option<CheckedModel>>,
) -> std::io::Result<()> {
    let Some(Some(model)) = cache.get(name) else {
        return Ok(());
    };
    let Some(config) = model.config.clone() else {
        return Ok(());
    };
    let Some(SchedulingChoice::EnsembleScheduling(ens)) = config.scheduling_choice.clone() else {
        return Ok(());
    };
    if model.has_errors() {
        return Ok(());
    }
    for step in &ens.step {
        load_into(roots, &step.model_name, opts, cache)?;
    }
    let mut issues = Vec::new();
    if let Some(cycle) = find_cycle(name, cache, roots, opts)? {
        issues.push(Issue::error(
            "ensemble_scheduling",
            format!(
                "circular dependency between ensembles: {}",
                cycle.join(" -> ")
            ),
        ));
    }
    let missing: Vec<&str> = ens
        .step
        .iter()
        .map(|s| s.model_name.as_str())
        .filter(|n| !matches!(cache.get(*n), Some(Some(_))))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if !missing.is_empty() {
        issues.push(Issue::error(
            "ensemble_scheduling",
            format!(
                "ensemble {name} contains models that are not available or ambiguous: {}",
                missing.join(", ")
            ),
        ));
    }
    if issues.is_empty() {
        issues = step_issues(name, &config, &ens, cache);
    }
    if let Some(Some(model)) = cache.get_mut(name) {
        for issue in issues {
            model.push(issue);
        }
    }
    Ok(())
}

/// Rule 22 for each step whose model exists.
fn step_issues(
    name: &str,
    config: &ModelConfig,
    ens: &ModelEnsembling,
    cache: &BTreeMap<String, Option<CheckedModel>>,
) -> Vec<Issue> {
    let mut issues = Vec::new();
    // Every use of each ensemble tensor, to check they agree.
    let mut tensors: BTreeMap<String, Vec<TensorUse>> = BTreeMap::new();
    let full = |mbs: i32, dims: &[i64]| -> Vec<i64> {
        if mbs > 0 {
            std::iter::once(-1).chain(dims.iter().copied()).collect()
        } else {
            dims.to_vec()
        }
    };
    for io in config
        .input
        .iter()
        .map(|i| (&i.name, i.data_type, &i.dims, &i.reshape))
        .chain(
            config
                .output
                .iter()
                .map(|o| (&o.name, o.data_type, &o.dims, &o.reshape)),
        )
    {
        let (tname, dt, dims, reshape) = io;
        let dims = reshape
            .as_ref()
            .map(|r| r.shape.clone())
            .unwrap_or_else(|| dims.clone());
        let full_dims = full(config.max_batch_size, &dims);
        tensors.entry(tname.clone()).or_default().push(TensorUse {
            data_type: dt,
            dims,
            full_dims,
            model: name.to_string(),
        });
    }
    for (i, step) in ens.step.iter().enumerate() {
        let field = format!("ensemble_scheduling.step[{i}]");
        let sname = &step.model_name;
        let Some(Some(sm)) = cache.get(sname) else {
            continue;
        };
        if sm.config.is_none() && !sm.has_errors() {
            // No config.pbtxt: its config is completed when it loads (a
            // Python model's auto_complete_config), and the ensemble waits
            // for that load.
            continue;
        }
        let Some(sc) = sm.config.as_ref().filter(|_| !sm.has_errors()) else {
            let why = sm
                .first_error()
                .map(|f| f.message.clone())
                .unwrap_or_default();
            issues.push(Issue::error(
                format!("{field}.model_name"),
                format!("ensemble '{name}' depends on '{sname}' which is not valid. Model '{sname}' failed with error: {why}"),
            ));
            continue;
        };
        if step.model_version >= 0 && !sm.versions.contains(&step.model_version) {
            let mut message = format!(
                "ensemble '{name}' depends on '{sname}' whose required version {} is not loaded.",
                step.model_version
            );
            if step.model_version == 0 {
                message.push_str(" (model_version is 0 when not set; -1 means the latest version)");
            }
            issues.push(Issue::error(format!("{field}.model_version"), message));
        }
        if sc.max_batch_size != 0 && sc.max_batch_size < config.max_batch_size {
            issues.push(Issue::error(
                format!("{field}.model_name"),
                format!(
                    "ensemble {name} allows maximum batch size {}, but it contains model {sname} which only allows maximum batch size to be {}",
                    config.max_batch_size, sc.max_batch_size
                ),
            ));
        }
        for (key, tensor) in &step.input_map {
            match sc.input.iter().find(|inp| &inp.name == key) {
                None => issues.push(Issue::error(
                    format!("{field}.input_map[{key:?}]"),
                    format!("in ensemble {name}, ensemble tensor {tensor} is mapping to non-existing input {key} in model {sname}"),
                )),
                Some(inp) => tensors.entry(tensor.clone()).or_default().push(TensorUse {
                    data_type: inp.data_type,
                    dims: inp.dims.clone(),
                    full_dims: full(sc.max_batch_size, &inp.dims),
                    model: sname.clone(),
                }),
            }
        }
        for inp in &sc.input {
            if !inp.optional && !step.input_map.contains_key(&inp.name) {
                issues.push(Issue::error(
                    format!("{field}.input_map"),
                    format!("in ensemble {name}, input {} in model {sname} is not mapped to any ensemble tensors", inp.name),
                ));
            }
        }
        let mut targets = BTreeSet::new();
        for (key, tensor) in &step.output_map {
            match sc.output.iter().find(|o| &o.name == key) {
                None => issues.push(Issue::error(
                    format!("{field}.output_map[{key:?}]"),
                    format!("in ensemble {name}, ensemble tensor {tensor} is mapped from non-existing output {key} in model {sname}"),
                )),
                Some(out) => {
                    if !targets.insert(tensor) {
                        issues.push(Issue::error(
                            format!("{field}.output_map[{key:?}]"),
                            format!("in ensemble {name}, multiple outputs in model {sname} are mapped to the same ensemble tensor {tensor}"),
                        ));
                    }
                    tensors.entry(tensor.clone()).or_default().push(TensorUse {
                        data_type: out.data_type,
                        dims: out.dims.clone(),
                        full_dims: full(sc.max_batch_size, &out.dims),
                        model: sname.clone(),
                    })
                }
            }
        }
    }
    for (tensor, seen) in &tensors {
        let Some((first, rest)) = seen.split_first() else {
            continue;
        };
        let prefix = format!("in ensemble {name}, ensemble tensor {tensor}: ");
        for other in rest {
            let from = (&first.model, &other.model);
            if other.data_type != first.data_type {
                issues.push(Issue::error(
                    "ensemble_scheduling",
                    format!(
                        "{prefix}inconsistent data type: {} is inferred from model {} while {} is inferred from model {}",
                        data_type_name(first.data_type),
                        from.0,
                        data_type_name(other.data_type),
                        from.1
                    ),
                ));
                break;
            }
            if !dims_compatible(&first.dims, &other.dims)
                && !dims_compatible(&first.full_dims, &other.full_dims)
            {
                issues.push(Issue::error(
                    "ensemble_scheduling",
                    format!(
                        "{prefix}inconsistent shape: {} is inferred from model {} while {} is inferred from model {}",
                        dims_string(&first.full_dims),
                        from.0,
                        dims_string(&other.full_dims),
                        from.1
                    ),
                ));
                break;
            }
        }
    }
    issues
}

/// One place an ensemble tensor is used: as an ensemble input/output or as a
/// step model's input/output.
struct TensorUse {
    data_type: i32,
    dims: Vec<i64>,
    /// With the batch dimension (-1) when the model batches.
    full_dims: Vec<i64>,
    /// The model it is inferred from.
    model: String,
}

fn dims_compatible(a: &[i64], b: &[i64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| x == y || x == -1 || y == -1)
}

fn dims_string(dims: &[i64]) -> String {
    let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(","))
}

/// The chain `name -> ... -> name` if `name` reaches itself through ensemble
/// steps.
fn find_cycle(
    name: &str,
    cache: &mut BTreeMap<String, Option<CheckedModel>>,
    roots: Roots,
    opts: &CheckOptions,
) -> std::io::Result<Option<Vec<String>>> {
    // Depth-first over ensemble → step models, loading models on demand.
    let mut stack: Vec<(String, Vec<String>)> = vec![(name.to_string(), vec![name.to_string()])];
    let mut visited = BTreeSet::new();
    while let Some((current, chain)) = stack.pop() {
        if !visited.insert(current.clone()) {
            continue;
        }
        load_into(roots, &current, opts, cache)?;
        let steps: Vec<String> = match cache.get(&current) {
            Some(Some(m)) => match m.config.as_ref().and_then(|c| c.scheduling_choice.as_ref()) {
                Some(SchedulingChoice::EnsembleScheduling(e)) => {
                    e.step.iter().map(|s| s.model_name.clone()).collect()
                }
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        for step in steps {
            let mut next = chain.clone();
            next.push(step.clone());
            if step == name {
                return Ok(Some(next));
            }
            stack.push((step, next));
        }
    }
    Ok(None)
}
