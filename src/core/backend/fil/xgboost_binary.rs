//! XGBoost's legacy binary model format (`model_type: "xgboost"`, the
//! file `xgboost.model`; XGBoost 2.x writes it for a `.deprecated` name,
//! 3.1 and later no longer do) read into a [`Forest`]. Little-endian, no
//! padding beyond the reserved fields: an optional `binf` magic; the
//! learner's parameters (136 bytes: base score, features, classes, the
//! writer's major version); the objective and booster names (u64 length,
//! bytes); the booster's parameters (160 bytes: tree count, output
//! groups); then per tree its parameters (148 bytes: node count), its
//! nodes (20 bytes: parent, left and right child, the split feature with
//! the default-left flag in bit 31, the threshold or leaf value) and their
//! statistics (16 bytes each, skipped); then the class of each tree.
//! Splits go left on `x < threshold`, as in XGBoost's JSON.

use super::forest::{build_tree, Forest, RawNode};

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

    fn i32(&mut self) -> Result<i32, String> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn f32(&mut self) -> Result<f32, String> {
        Ok(f32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn string(&mut self) -> Result<String, String> {
        let n = u64::from_le_bytes(self.take(8)?.try_into().unwrap());
        let n = usize::try_from(n).map_err(|_| "a name too long")?;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "a name is not UTF-8".into())
    }

    fn count(&mut self, what: &str) -> Result<usize, String> {
        usize::try_from(self.i32()?).map_err(|_| format!("a negative {what}"))
    }
}

/// Reads an XGBoost legacy binary model.
pub fn read(bytes: &[u8]) -> Result<Forest, String> {
    let mut r = Reader { bytes, at: 0 };
    match bytes.get(..4) {
        Some(b"binf") => r.at = 4,
        Some(b"bs64") => return Err("a base64 XGBoost model is not supported".into()),
        Some([b'{', ..]) => {
            return Err("a JSON model: set model_type to xgboost_json".into());
        }
        _ => {}
    }
    // The learner's parameters, 136 bytes.
    let base_score = f64::from(r.f32()?);
    let num_features = r.count("feature count")?;
    let num_class = r.count("class count")?;
    r.take(8)?; // contain_extra_attrs, contain_eval_metrics
    let major = r.i32()?;
    r.take(4)?; // minor version
    let num_target = r.i32()?;
    if num_target > 1 {
        return Err("multi-target models are not supported".into());
    }
    r.take(26 * 4)?;
    let objective = r.string()?;
    let booster = r.string()?;
    if booster != "gbtree" {
        return Err(format!(
            "booster '{booster}' is not supported (gbtree only; DART's weights are not applied)"
        ));
    }
    // The booster's parameters, 160 bytes.
    let num_trees = r.count("tree count")?;
    r.take(4 + 4 + 4 + 8)?; // num_roots (or parallel trees), num_feature, pads
    r.take(4)?; // num_output_group
    let size_leaf_vector = r.i32()?;
    r.take(32 * 4)?;
    let (transform, to_margin) = super::xgboost::objective_of(&objective)?;
    let num_outputs = num_class.max(1);
    let mut trees = Vec::with_capacity(num_trees.min(1 << 16));
    for t in 0..num_trees {
        let raw = tree(&mut r, major, size_leaf_vector).map_err(|e| format!("tree {t}: {e}"))?;
        trees.push(raw);
    }
    let mut built = Vec::with_capacity(trees.len());
    for (t, raw) in trees.iter().enumerate() {
        let output = if num_outputs > 1 {
            u32::try_from(r.i32()?).map_err(|_| "a negative tree class")?
        } else {
            r.i32()?;
            0
        };
        built.push(
            build_tree(raw, output, num_features, num_outputs)
                .map_err(|e| format!("tree {t}: {e}"))?,
        );
    }
    // XGBoost 1.0 and later keep the base score as a probability.
    let base = if major >= 1 {
        to_margin(base_score)
    } else {
        base_score
    };
    let forest = Forest {
        num_features,
        num_outputs,
        trees: built,
        base: vec![base; num_outputs],
        average: false,
        vector_leaves: false,
        transform,
        made_by: "XGBoost",
    };
    forest.check()?;
    Ok(forest)
}

/// One tree's nodes by XGBoost's ids (0 is the root).
fn tree(r: &mut Reader, major: i32, size_leaf_vector: i32) -> Result<Vec<RawNode>, String> {
    // The tree's parameters, 37 i32s.
    r.take(4)?; // num_roots
    let num_nodes = r.count("node count")?;
    r.take(35 * 4)?;
    // Each node is 20 bytes: check the count against the file first.
    if num_nodes
        .checked_mul(36)
        .is_none_or(|n| n > r.bytes.len() - r.at)
    {
        return Err(format!("{num_nodes} nodes past the end of the file"));
    }
    let mut nodes = Vec::with_capacity(num_nodes);
    for _ in 0..num_nodes {
        let _parent = r.i32()?;
        let (left, right) = (r.i32()?, r.i32()?);
        let sindex = u32::from_le_bytes(r.take(4)?.try_into().unwrap());
        let info = r.f32()?;
        nodes.push((left, right, sindex, info));
    }
    r.take(num_nodes * 16)?; // statistics
    if size_leaf_vector != 0 && major < 2 {
        let n = u64::from_le_bytes(r.take(8)?.try_into().unwrap());
        let n = usize::try_from(n).map_err(|_| "a leaf vector too long")?;
        r.take(n.checked_mul(4).ok_or("a leaf vector too long")?)?;
    }
    let child = |c: i32| -> Result<usize, String> {
        usize::try_from(c)
            .ok()
            .filter(|&c| c < num_nodes)
            .ok_or_else(|| format!("child {c} is out of range"))
    };
    nodes
        .iter()
        .map(|&(left, right, sindex, info)| {
            if left == -1 {
                return Ok(RawNode::Leaf(f64::from(info)));
            }
            Ok(RawNode::Split {
                feature: sindex & 0x7fff_ffff,
                threshold: info,
                left: child(left)?,
                right: child(right)?,
                default_left: sindex >> 31 != 0,
                nan_as_zero: false,
                zero_missing: false,
            })
        })
        .collect()
}
