//! XGBoost's JSON model format (`Booster.save_model("xgboost.json")`) and
//! its UBJSON twin (`.ubj`, the same document in Universal Binary JSON)
//! read into a [`Forest`].
//!
//! The document's `learner`: `learner_model_param` (`num_feature`,
//! `num_class`, `base_score`, stored as strings), `objective.name`, and
//! `gradient_booster.model` with `trees` and `tree_info` (the class each
//! tree adds to). A tree is arrays indexed by node: `left_children` (-1 for
//! a leaf), `right_children`, `split_indices`, `split_conditions` (a
//! split's threshold, `x < t` goes left, or a leaf's value),
//! `default_left`, `split_type` (1: categorical) with the categories of
//! each categorical node (`categories_nodes`, `categories_segments`,
//! `categories_sizes`, `categories`): categories in the set go right, a
//! negative value left. The base score is stored as the objective's
//! prediction (a probability for `binary:logistic`), so it is turned back
//! into a margin as XGBoost's `ProbToMargin` does.

use serde_json::Value;

use super::forest::{build_tree, Forest, RawNode, Transform};

/// Reads an XGBoost JSON model.
pub fn read_json(bytes: &[u8]) -> Result<Forest, String> {
    let doc: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not an XGBoost JSON model: {e}"))?;
    read(&doc)
}

/// Reads an XGBoost UBJSON model.
pub fn read_ubjson(bytes: &[u8]) -> Result<Forest, String> {
    let doc =
        super::ubjson::parse(bytes).map_err(|e| format!("not an XGBoost UBJSON model: {e}"))?;
    read(&doc)
}

fn field<'a>(v: &'a Value, path: &[&str]) -> Result<&'a Value, String> {
    let mut at = v;
    for key in path {
        at = at
            .get(key)
            .ok_or_else(|| format!("the model has no {}", path.join(".")))?;
    }
    Ok(at)
}

/// A number XGBoost writes as a string ("5E-1"), or as a number.
fn number(v: &Value, what: &str) -> Result<f64, String> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .ok_or_else(|| format!("its {what} is not a number"))
}

/// The base score, one per output: XGBoost 3 writes a list as a string
/// ("[5E-1]", or one value per class of a multi-class model), before it
/// one number for every output.
fn base_scores(v: &Value, outputs: usize) -> Result<Vec<f64>, String> {
    let bad = || "its base_score is not a number or a list of them".to_string();
    let text = match v {
        Value::String(s) => s.trim(),
        v => return Ok(vec![number(v, "base_score")?; outputs]),
    };
    let Some(list) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) else {
        return Ok(vec![text.parse().map_err(|_| bad())?; outputs]);
    };
    let values: Vec<f64> = list
        .split(',')
        .map(|s| s.trim().parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    match values.len() {
        1 => Ok(vec![values[0]; outputs]),
        n if n == outputs => Ok(values),
        n => Err(format!("{n} base scores for {outputs} outputs")),
    }
}

fn numbers(tree: &Value, key: &str) -> Result<Vec<f64>, String> {
    let Some(Value::Array(items)) = tree.get(key) else {
        return Err(format!("a tree has no {key}"));
    };
    items
        .iter()
        .map(|v| match v {
            Value::Bool(b) => Some(f64::from(u8::from(*b))),
            v => v.as_f64(),
        })
        .collect::<Option<Vec<f64>>>()
        .ok_or_else(|| format!("a tree's {key} holds something other than numbers"))
}

fn read(doc: &Value) -> Result<Forest, String> {
    let learner = field(doc, &["learner"])?;
    let params = field(learner, &["learner_model_param"])?;
    let num_features = number(field(params, &["num_feature"])?, "num_feature")? as usize;
    let num_class = number(field(params, &["num_class"])?, "num_class")? as usize;
    if params
        .get("num_target")
        .is_some_and(|t| number(t, "num_target").is_ok_and(|n| n > 1.0))
    {
        return Err("multi-target models are not supported".into());
    }
    let objective = field(learner, &["objective", "name"])?
        .as_str()
        .ok_or("its objective name is not a string")?;
    let (transform, to_margin) = objective_of(objective)?;
    let booster = field(learner, &["gradient_booster"])?;
    let name = booster
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("gbtree");
    let model = match name {
        "gbtree" => field(booster, &["model"])?,
        // DART predicts with its trees' weights.
        "dart" => return Err("DART boosters are not supported".into()),
        other => {
            return Err(format!(
                "booster '{other}' is not supported (only trees are)"
            ))
        }
    };
    let Some(Value::Array(trees)) = model.get("trees") else {
        return Err("the model has no trees".into());
    };
    let num_outputs = num_class.max(1);
    let tree_info: Vec<f64> = numbers(model, "tree_info").unwrap_or_default();
    let mut built = Vec::with_capacity(trees.len());
    for (i, tree) in trees.iter().enumerate() {
        let output = tree_info.get(i).copied().unwrap_or(0.0) as u32;
        let raw = tree_nodes(tree).map_err(|e| format!("tree {i}: {e}"))?;
        built.push(
            build_tree(&raw, output, num_features, num_outputs)
                .map_err(|e| format!("tree {i}: {e}"))?,
        );
    }
    let base = base_scores(field(params, &["base_score"])?, num_outputs)?;
    let forest = Forest {
        num_features,
        num_outputs,
        trees: built,
        base: base.into_iter().map(to_margin).collect(),
        average: false,
        vector_leaves: false,
        transform,
        made_by: "XGBoost",
    };
    forest.check()?;
    Ok(forest)
}

/// An objective's transform and its `ProbToMargin` for the base score.
#[allow(clippy::type_complexity)]
pub(super) fn objective_of(name: &str) -> Result<(Transform, fn(f64) -> f64), String> {
    let identity: fn(f64) -> f64 = |b| b;
    let logit: fn(f64) -> f64 = |b| -(1.0 / b - 1.0).ln();
    let log: fn(f64) -> f64 = f64::ln;
    Ok(match name {
        "reg:squarederror"
        | "reg:linear"
        | "reg:squaredlogerror"
        | "reg:pseudohubererror"
        | "reg:absoluteerror"
        | "reg:quantileerror"
        | "rank:pairwise"
        | "rank:ndcg"
        | "rank:map" => (Transform::Identity, identity),
        "binary:logistic" | "reg:logistic" => (Transform::Sigmoid { alpha: 1.0 }, logit),
        "binary:logitraw" => (Transform::Identity, logit),
        "binary:hinge" => (Transform::Hinge, identity),
        "count:poisson" | "reg:gamma" | "reg:tweedie" | "survival:cox" | "survival:aft" => {
            (Transform::Exp, log)
        }
        "multi:softprob" | "multi:softmax" => (Transform::Softmax, identity),
        other => return Err(format!("objective '{other}' is not supported")),
    })
}

/// One tree's nodes, by XGBoost's own node ids (0 is the root).
fn tree_nodes(tree: &Value) -> Result<Vec<RawNode>, String> {
    let left = numbers(tree, "left_children")?;
    let right = numbers(tree, "right_children")?;
    let feature = numbers(tree, "split_indices")?;
    let condition = numbers(tree, "split_conditions")?;
    let default_left = numbers(tree, "default_left")?;
    let n = left.len();
    for (key, len) in [
        ("right_children", right.len()),
        ("split_indices", feature.len()),
        ("split_conditions", condition.len()),
        ("default_left", default_left.len()),
    ] {
        if len != n {
            return Err(format!("{len} values of {key} for {n} nodes"));
        }
    }
    let split_type = numbers(tree, "split_type").unwrap_or_default();
    // Categorical nodes' sets.
    let mut sets: std::collections::HashMap<usize, Vec<u32>> = Default::default();
    if split_type.contains(&1.0) {
        let nodes = numbers(tree, "categories_nodes")?;
        let segments = numbers(tree, "categories_segments")?;
        let sizes = numbers(tree, "categories_sizes")?;
        let categories = numbers(tree, "categories")?;
        for ((node, from), size) in nodes.iter().zip(&segments).zip(&sizes) {
            let (from, size) = (*from as usize, *size as usize);
            let set = categories
                .get(from..from + size)
                .ok_or("a category set is out of range")?;
            sets.insert(*node as usize, set.iter().map(|&c| c as u32).collect());
        }
    }
    let index = |c: f64| -> Result<usize, String> {
        if c >= 0.0 && (c as usize) < n {
            Ok(c as usize)
        } else {
            Err(format!("child {c} is out of range"))
        }
    };
    (0..n)
        .map(|i| {
            if left[i] == -1.0 {
                return Ok(RawNode::Leaf(condition[i]));
            }
            let (l, r) = (index(left[i])?, index(right[i])?);
            if split_type.get(i) == Some(&1.0) {
                return Ok(RawNode::Categorical {
                    feature: feature[i] as u32,
                    categories: sets
                        .remove(&i)
                        .ok_or_else(|| format!("categorical node {i} has no categories"))?,
                    in_set_left: false,
                    left: l,
                    right: r,
                    default_left: default_left[i] != 0.0,
                    nan_as_zero: false,
                });
            }
            Ok(RawNode::Split {
                feature: feature[i] as u32,
                threshold: condition[i] as f32,
                left: l,
                right: r,
                default_left: default_left[i] != 0.0,
                nan_as_zero: false,
                zero_missing: false,
            })
        })
        .collect()
}
