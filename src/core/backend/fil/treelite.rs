//! Treelite checkpoints (`checkpoint.tl`, `treelite.Model.serialize`), how
//! scikit-learn forests reach Triton's FIL backend
//! (`treelite.sklearn.import_model(m).serialize("checkpoint.tl")`), read
//! into a [`Forest`]. Treelite 4's layout, little-endian, no padding: a
//! header (version, the threshold and leaf types, f32 or f64, tree count,
//! features, task, averaging, classes, each tree's target and class, the
//! postprocessor and its constants, base scores, optional fields), then per
//! tree its node arrays, each an u64 count and the elements: node type,
//! children, split feature, default direction, leaf value, threshold,
//! comparison (`<`, `<=`, `>`, `>=`), category lists and which child they
//! go to, leaf vectors (a random forest classifier's class
//! distributions), node statistics (skipped), optional fields (skipped).
//! Another major version is refused, as Treelite refuses it.

use super::forest::{build_tree, floor_f32, next_up, Forest, RawNode, Transform};

/// Arrays longer than the file are refused before anything is allocated.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| format!("the file ends at byte {} inside a field", self.bytes.len()))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn i32(&mut self) -> Result<i32, String> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    fn f32(&mut self) -> Result<f32, String> {
        Ok(f32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    /// An array's elements of `size` bytes each.
    fn array(&mut self, size: usize) -> Result<Vec<&'a [u8]>, String> {
        let n = usize::try_from(self.u64()?).map_err(|_| "an array too long")?;
        let bytes = self.take(n.checked_mul(size).ok_or("an array too long")?)?;
        Ok(bytes.chunks_exact(size).collect())
    }

    fn i32s(&mut self) -> Result<Vec<i32>, String> {
        Ok(self
            .array(4)?
            .iter()
            .map(|b| i32::from_le_bytes((*b).try_into().unwrap()))
            .collect())
    }

    fn u64s(&mut self) -> Result<Vec<u64>, String> {
        Ok(self
            .array(8)?
            .iter()
            .map(|b| u64::from_le_bytes((*b).try_into().unwrap()))
            .collect())
    }

    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        Ok(self.array(1)?.iter().map(|b| b[0]).collect())
    }

    /// Thresholds and leaf values: f32 or f64 by the header.
    fn reals(&mut self, f64s: bool) -> Result<Vec<f64>, String> {
        Ok(if f64s {
            self.array(8)?
                .iter()
                .map(|b| f64::from_le_bytes((*b).try_into().unwrap()))
                .collect()
        } else {
            self.array(4)?
                .iter()
                .map(|b| f64::from(f32::from_le_bytes((*b).try_into().unwrap())))
                .collect()
        })
    }

    fn string(&mut self) -> Result<String, String> {
        let bytes = self.bytes()?;
        String::from_utf8(bytes).map_err(|_| "a name is not UTF-8".into())
    }

    /// `count` optional fields: a name, the element size, the count, the
    /// elements; skipped.
    fn skip_optional(&mut self) -> Result<(), String> {
        let count = self.i32()?;
        for _ in 0..count.max(0) {
            self.string()?;
            let size = usize::try_from(self.u64()?).map_err(|_| "a field too long")?;
            let n = usize::try_from(self.u64()?).map_err(|_| "a field too long")?;
            self.take(size.checked_mul(n).ok_or("a field too long")?)?;
        }
        Ok(())
    }
}

/// Reads a Treelite 4 checkpoint.
pub fn read(bytes: &[u8]) -> Result<Forest, String> {
    let mut r = Reader { bytes, at: 0 };
    let (major, minor, patch) = (r.i32()?, r.i32()?, r.i32()?);
    if major != 4 {
        return Err(format!(
            "a checkpoint of Treelite {major}.{minor}.{patch}; trtis reads Treelite 4's"
        ));
    }
    let (threshold_type, leaf_type) = (r.u8()?, r.u8()?);
    if threshold_type != leaf_type || !(threshold_type == 2 || threshold_type == 3) {
        return Err("its thresholds and leaves must both be float32 or both float64".into());
    }
    let f64s = threshold_type == 3;
    let num_tree = usize::try_from(r.u64()?).map_err(|_| "too many trees")?;
    let num_features = usize::try_from(r.i32()?).map_err(|_| "a negative feature count")?;
    let _task = r.u8()?;
    let average = r.u8()? != 0;
    let num_target = r.i32()?;
    if num_target != 1 {
        return Err("multi-target models are not supported".into());
    }
    let num_class = r.i32s()?;
    let num_outputs = num_class.first().copied().unwrap_or(1).max(1) as usize;
    let _leaf_vector_shape = r.i32s()?;
    let _target_id = r.i32s()?;
    let class_id = r.i32s()?;
    let postprocessor = r.string()?;
    let (alpha, ratio_c) = (r.f32()?, r.f32()?);
    let base = r.reals(true)?;
    let _attributes = r.string()?;
    r.skip_optional()?;
    let transform = match postprocessor.as_str() {
        "identity" | "identity_multiclass" => Transform::Identity,
        "sigmoid" | "multiclass_ova" => Transform::Sigmoid {
            alpha: f64::from(alpha),
        },
        "softmax" => Transform::Softmax,
        "exponential" => Transform::Exp,
        "exponential_standard_ratio" => Transform::Exp2Ratio {
            ratio_c: f64::from(ratio_c),
        },
        "signed_square" => Transform::SignedSquare,
        "hinge" => Transform::Hinge,
        "logarithm_one_plus_exp" => Transform::Log1pExp,
        other => return Err(format!("postprocessor '{other}' is not supported")),
    };
    let mut trees = Vec::with_capacity(num_tree.min(1 << 16));
    let mut vector_leaves = false;
    for t in 0..num_tree {
        let (raw, vectors) =
            tree(&mut r, f64s, num_outputs).map_err(|e| format!("tree {t}: {e}"))?;
        vector_leaves |= vectors;
        let output = match class_id.get(t) {
            Some(&c) if c >= 0 => c as u32,
            _ => 0,
        };
        trees.push(
            build_tree(&raw, output, num_features, num_outputs)
                .map_err(|e| format!("tree {t}: {e}"))?,
        );
    }
    let forest = Forest {
        num_features,
        num_outputs,
        trees,
        base: if base.len() == num_outputs {
            base
        } else {
            vec![base.first().copied().unwrap_or(0.0); num_outputs]
        },
        average,
        vector_leaves,
        transform,
        made_by: "Treelite",
    };
    forest.check()?;
    Ok(forest)
}

/// One tree's nodes, and whether its leaves are vectors.
fn tree(r: &mut Reader, f64s: bool, num_outputs: usize) -> Result<(Vec<RawNode>, bool), String> {
    let num_nodes = usize::try_from(r.i32()?).map_err(|_| "a negative node count")?;
    let _has_categorical = r.u8()?;
    let node_type = r.bytes()?;
    let (left, right) = (r.i32s()?, r.i32s()?);
    let feature = r.i32s()?;
    let default_left = r.bytes()?;
    let leaf_value = r.reals(f64s)?;
    let threshold = r.reals(f64s)?;
    let cmp = r.bytes()?;
    let cats_right = r.bytes()?;
    let leaf_vector = r.reals(f64s)?;
    let (vector_begin, vector_end) = (r.u64s()?, r.u64s()?);
    let category_list: Vec<u32> = r.i32s()?.into_iter().map(|c| c as u32).collect();
    let (cat_begin, cat_end) = (r.u64s()?, r.u64s()?);
    // Node statistics: counts, hessians, gains, each with its presence.
    r.u64s()?;
    r.bytes()?;
    r.reals(true)?;
    r.bytes()?;
    r.reals(true)?;
    r.bytes()?;
    r.skip_optional()?;
    r.skip_optional()?;
    for (key, n) in [
        ("node_type", node_type.len()),
        ("cleft", left.len()),
        ("cright", right.len()),
        ("split_index", feature.len()),
        ("default_left", default_left.len()),
        ("leaf_value", leaf_value.len()),
        ("threshold", threshold.len()),
        ("cmp", cmp.len()),
    ] {
        if n != num_nodes {
            return Err(format!("{n} values of {key} for {num_nodes} nodes"));
        }
    }
    let child = |c: i32| -> Result<usize, String> {
        usize::try_from(c)
            .ok()
            .filter(|&c| c < num_nodes)
            .ok_or_else(|| format!("child {c} is out of range"))
    };
    let range = |begin: &[u64],
                 end: &[u64],
                 i: usize,
                 len: usize|
     -> Result<Option<std::ops::Range<usize>>, String> {
        match (begin.get(i), end.get(i)) {
            (Some(&b), Some(&e)) if b < e => {
                let (b, e) = (b as usize, e as usize);
                if e > len {
                    return Err(format!("node {i}'s list is out of range"));
                }
                Ok(Some(b..e))
            }
            _ => Ok(None),
        }
    };
    let mut vectors = false;
    let mut nodes = Vec::with_capacity(num_nodes);
    for i in 0..num_nodes {
        let node = match node_type[i] {
            0 => match range(&vector_begin, &vector_end, i, leaf_vector.len())? {
                Some(span) => {
                    if span.len() != num_outputs {
                        return Err(format!(
                            "a leaf of {} values for {num_outputs} classes",
                            span.len()
                        ));
                    }
                    vectors = true;
                    RawNode::LeafVector(leaf_vector[span].to_vec())
                }
                None => RawNode::Leaf(leaf_value[i]),
            },
            1 => {
                let (mut l, mut rr) = (child(left[i])?, child(right[i])?);
                let t = threshold[i];
                // As `x < threshold` going left: `<=` is `<` the next
                // float up; `>` and `>=` are `<=` and `<` with the children
                // swapped.
                let (threshold, swap) = match cmp[i] {
                    2 => (t as f32, false),
                    3 => (next_up(floor_f32(t)), false),
                    4 => (next_up(floor_f32(t)), true),
                    5 => (t as f32, true),
                    c => {
                        return Err(format!(
                            "node {i} compares with operator {c}, which is not supported"
                        ))
                    }
                };
                let mut default_left = default_left[i] != 0;
                if swap {
                    std::mem::swap(&mut l, &mut rr);
                    default_left = !default_left;
                }
                RawNode::Split {
                    feature: u32::try_from(feature[i]).map_err(|_| "a negative feature")?,
                    threshold,
                    left: l,
                    right: rr,
                    default_left,
                    nan_as_zero: false,
                    zero_missing: false,
                }
            }
            2 => {
                let span = range(&cat_begin, &cat_end, i, category_list.len())?.unwrap_or(0..0);
                RawNode::Categorical {
                    feature: u32::try_from(feature[i]).map_err(|_| "a negative feature")?,
                    categories: category_list[span].to_vec(),
                    in_set_left: cats_right.get(i) == Some(&0),
                    left: child(left[i])?,
                    right: child(right[i])?,
                    default_left: default_left[i] != 0,
                    nan_as_zero: false,
                }
            }
            t => return Err(format!("node {i} has type {t}")),
        };
        nodes.push(node);
    }
    Ok((nodes, vectors))
}
