//! LightGBM's text model format (`model.txt`, what `Booster.save_model`
//! writes) read into a [`Forest`]: the header's class count, objective and
//! `average_output` (random forests), then each `Tree=` block's splits.
//!
//! A split goes left when `x <= threshold` (a double); as an f32 input
//! meets it, that is `x < next_up(floor_f32(threshold))`. `decision_type`
//! bit 0 marks a categorical split, bit 1 the default-left direction, bits
//! 2-3 the missing type (none: NaN is 0; zero: NaN is 0, and 0 is missing;
//! NaN: NaN is missing). A categorical split's categories are bits of
//! `cat_threshold` words between `cat_boundaries`; NaN and values of -1 or
//! less go right. Children below zero are leaves (`~child`).

use std::collections::HashMap;

use super::forest::{build_tree, floor_f32, next_up, Forest, RawNode, Transform};

/// Reads a LightGBM text model; `Err` says what is wrong with it.
pub fn read(text: &str) -> Result<Forest, String> {
    let mut header: HashMap<&str, &str> = HashMap::new();
    let mut flags: Vec<&str> = Vec::new();
    let mut blocks: Vec<HashMap<&str, &str>> = Vec::new();
    let mut in_trees = false;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line == "end of trees" {
            break;
        }
        if line.starts_with("Tree=") {
            in_trees = true;
            blocks.push(HashMap::new());
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            if !in_trees && !line.is_empty() {
                flags.push(line);
            }
            continue;
        };
        match blocks.last_mut() {
            Some(block) if in_trees => {
                block.insert(key, value);
            }
            _ => {
                header.insert(key, value);
            }
        }
    }
    if flags.first() != Some(&"tree") {
        return Err("not a LightGBM text model (its first line is not 'tree')".into());
    }
    let number = |key: &str| -> Result<usize, String> {
        header
            .get(key)
            .ok_or_else(|| format!("the header has no {key}"))?
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("its {key} is not a count"))
    };
    let num_class = number("num_class")?.max(1);
    let per_iteration = number("num_tree_per_iteration")?.max(1);
    let num_features = number("max_feature_idx")? + 1;
    if per_iteration != num_class && per_iteration != 1 {
        return Err(format!(
            "{per_iteration} trees per iteration for {num_class} classes"
        ));
    }
    let objective = header.get("objective").copied().unwrap_or("regression");
    let transform = transform(objective)?;
    let num_outputs = per_iteration;
    let mut trees = Vec::with_capacity(blocks.len());
    for (i, block) in blocks.iter().enumerate() {
        let raw = tree_nodes(block).map_err(|e| format!("Tree={i}: {e}"))?;
        let tree = build_tree(&raw, (i % per_iteration) as u32, num_features, num_outputs)
            .map_err(|e| format!("Tree={i}: {e}"))?;
        trees.push(tree);
    }
    if trees.is_empty() {
        return Err("the model has no trees".into());
    }
    let forest = Forest {
        num_features,
        num_outputs,
        trees,
        base: vec![0.0; num_outputs],
        average: flags.contains(&"average_output"),
        vector_leaves: false,
        transform,
        made_by: "LightGBM",
    };
    forest.check()?;
    Ok(forest)
}

/// The transform of a LightGBM objective line ("binary sigmoid:1").
fn transform(objective: &str) -> Result<Transform, String> {
    let mut words = objective.split_whitespace();
    let name = words.next().unwrap_or("regression");
    let options: HashMap<&str, &str> = words.filter_map(|w| w.split_once(':')).collect();
    let alpha = || -> Result<f64, String> {
        options.get("sigmoid").map_or(Ok(1.0), |s| {
            s.parse()
                .map_err(|_| format!("objective '{objective}': bad sigmoid"))
        })
    };
    let sqrt = objective.split_whitespace().any(|w| w == "sqrt");
    Ok(match name {
        "regression" | "regression_l2" | "l2" | "mse" | "l2_root" | "rmse" | "regression_l1"
        | "l1" | "mae" | "huber" | "fair" | "quantile" | "mape"
            if sqrt =>
        {
            Transform::SignedSquare
        }
        "regression" | "regression_l2" | "l2" | "mse" | "l2_root" | "rmse" | "regression_l1"
        | "l1" | "mae" | "huber" | "fair" | "quantile" | "mape" | "lambdarank" | "rank_xendcg"
        | "custom" => Transform::Identity,
        "cross_entropy_lambda" | "xentlambda" => Transform::Log1pExp,
        "binary" => Transform::Sigmoid { alpha: alpha()? },
        "cross_entropy" | "xentropy" => Transform::Sigmoid { alpha: 1.0 },
        "multiclass" | "softmax" => Transform::Softmax,
        "multiclassova" | "multiclass_ova" | "ova" | "ovr" => {
            Transform::Sigmoid { alpha: alpha()? }
        }
        "poisson" | "gamma" | "tweedie" => Transform::Exp,
        _ => return Err(format!("objective '{name}' is not supported")),
    })
}

fn list<T: std::str::FromStr>(block: &HashMap<&str, &str>, key: &str) -> Result<Vec<T>, String> {
    let Some(text) = block.get(key) else {
        return Err(format!("no {key}"));
    };
    text.split_whitespace()
        .map(|v| v.parse::<T>().map_err(|_| format!("{key} has '{v}'")))
        .collect()
}

/// One `Tree=` block's nodes: splits 0..n-1, then leaves n..
fn tree_nodes(block: &HashMap<&str, &str>) -> Result<Vec<RawNode>, String> {
    let num_leaves: usize = block
        .get("num_leaves")
        .and_then(|v| v.trim().parse().ok())
        .ok_or("no num_leaves")?;
    if block.get("is_linear").is_some_and(|v| v.trim() != "0") {
        return Err("linear trees are not supported".into());
    }
    let leaf_values: Vec<f64> = list(block, "leaf_value")?;
    if leaf_values.len() != num_leaves {
        return Err(format!(
            "{} leaf values for {num_leaves} leaves",
            leaf_values.len()
        ));
    }
    if num_leaves == 1 {
        return Ok(vec![RawNode::Leaf(leaf_values[0])]);
    }
    let splits = num_leaves - 1;
    let feature: Vec<u32> = list(block, "split_feature")?;
    let threshold: Vec<f64> = list(block, "threshold")?;
    let decision: Vec<u8> = list(block, "decision_type")?;
    let left: Vec<i64> = list(block, "left_child")?;
    let right: Vec<i64> = list(block, "right_child")?;
    for (key, n) in [
        ("split_feature", feature.len()),
        ("threshold", threshold.len()),
        ("decision_type", decision.len()),
        ("left_child", left.len()),
        ("right_child", right.len()),
    ] {
        if n != splits {
            return Err(format!("{n} values of {key} for {splits} splits"));
        }
    }
    let (boundaries, words): (Vec<usize>, Vec<u32>) = if block.contains_key("cat_boundaries") {
        (
            list(block, "cat_boundaries")?,
            list(block, "cat_threshold")?,
        )
    } else {
        (Vec::new(), Vec::new())
    };
    // Leaf l is node splits + l.
    let child = |c: i64| -> Result<usize, String> {
        let index = if c < 0 {
            splits + (!c) as usize
        } else {
            c as usize
        };
        if index < splits + num_leaves {
            Ok(index)
        } else {
            Err(format!("child {c} is out of range"))
        }
    };
    let mut nodes = Vec::with_capacity(splits + num_leaves);
    for i in 0..splits {
        let dt = decision[i];
        let (l, r) = (child(left[i])?, child(right[i])?);
        let default_left = dt & 2 != 0;
        if dt & 1 != 0 {
            let index = threshold[i] as usize;
            let (Some(&from), Some(&to)) = (boundaries.get(index), boundaries.get(index + 1))
            else {
                return Err(format!(
                    "categorical split {i} names set {index}, which is not there"
                ));
            };
            let set = words
                .get(from..to)
                .ok_or_else(|| format!("categorical split {i}'s set is out of range"))?;
            let categories = set
                .iter()
                .enumerate()
                .flat_map(|(w, bits)| {
                    (0..32)
                        .filter(move |b| bits & (1 << b) != 0)
                        .map(move |b| (w * 32 + b) as u32)
                })
                .collect();
            nodes.push(RawNode::Categorical {
                feature: feature[i],
                categories,
                in_set_left: true,
                left: l,
                right: r,
                // NaN goes right: LightGBM's `(int)NaN` is negative on
                // x86 (its source would take NaN for category 0 otherwise).
                default_left: false,
                nan_as_zero: false,
            });
        } else {
            let missing = (dt >> 2) & 3;
            nodes.push(RawNode::Split {
                feature: feature[i],
                threshold: next_up(floor_f32(threshold[i])),
                left: l,
                right: r,
                default_left,
                nan_as_zero: missing != 2,
                zero_missing: missing == 1,
            });
        }
    }
    nodes.extend(leaf_values.iter().map(|&v| RawNode::Leaf(v)));
    Ok(nodes)
}
