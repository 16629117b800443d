//! A decision forest as the FIL backend runs it, whatever framework made
//! it: trees of numerical and categorical splits with each split's
//! direction for missing values, leaves of one value (or one per output),
//! the base margin, and the transform from summed margins to predictions.
//! The readers (`xgboost.rs`, `lightgbm.rs`) build a [`Forest`] through
//! [`TreeBuilder`], which checks every index once, so the evaluation
//! loop's lookups cannot fail.
//!
//! Layout, for speed: each tree is one array of 16-byte nodes in
//! depth-first order, a split's two children side by side (`left`,
//! `left + 1`), so a row's walk is one load per level; rows are evaluated
//! in blocks of [`BLOCK`] tree by tree, so a tree stays in cache while a
//! block walks it, and large batches are split over threads.

use crate::core::error::Error;

/// Rows evaluated together, tree by tree.
pub const BLOCK: usize = 64;

/// Rows of a block walked through a tree in lockstep, level by level: their
/// walks are independent, so the CPU overlaps one row's node loads with
/// the others' (one row alone waits on each load in turn).
const LANES: usize = 8;

/// The threshold below which LightGBM takes a value for zero
/// (`kZeroThreshold`), for splits that treat zero as missing.
const ZERO: f32 = 1e-35;

// Node flags.
const LEAF: u16 = 1;
const DEFAULT_LEFT: u16 = 1 << 1;
/// A categorical split: `value` holds the offset of its category bitset in
/// the tree's words, `cat_words` its length.
const CATEGORICAL: u16 = 1 << 2;
/// NaN is taken for 0.0 before the comparison (LightGBM without missing
/// values, or with zero as missing).
const NAN_AS_ZERO: u16 = 1 << 3;
/// A value within [`ZERO`] of zero is missing (LightGBM's zero-as-missing).
const ZERO_MISSING: u16 = 1 << 4;
/// The categories in the set go left (LightGBM); otherwise they go right
/// (XGBoost).
const CATS_LEFT: u16 = 1 << 5;
/// The leaf's value is a vector (one per output) at `left` in the tree's
/// leaf values; a scalar leaf's one value is there.
const VECTOR: u16 = 1 << 6;

#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct Node {
    /// A split's threshold (`x < value` goes left), or a categorical
    /// split's offset in the tree's category words.
    value: f32,
    feature: u32,
    /// The left child's index (the right one is `left + 1`), or a leaf's
    /// offset in the tree's leaf values.
    left: u32,
    flags: u16,
    cat_words: u16,
}

/// One tree, ready to evaluate.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    nodes: Vec<Node>,
    /// The category bitsets of its categorical splits (bit `c` of word
    /// `c / 32` set: category `c` is in the set).
    words: Vec<u32>,
    /// The leaves' values (in f64: LightGBM's are doubles, and sums of
    /// many trees keep their precision).
    leaf_values: Vec<f64>,
    /// The output its scalar leaves add to.
    output: u32,
    /// Splits on the longest path from the root to a leaf.
    depth: u32,
}

/// From summed margins to what the model predicts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Transform {
    Identity,
    /// `1 / (1 + exp(-alpha * x))` per output.
    Sigmoid {
        alpha: f64,
    },
    /// Softmax over the outputs.
    Softmax,
    /// `exp(x)` (Poisson, gamma, Tweedie).
    Exp,
    /// `2^(-x / ratio_c)`: an isolation forest's anomaly score from its
    /// average path length (Treelite's `exponential_standard_ratio`).
    Exp2Ratio {
        ratio_c: f64,
    },
    /// `x * |x|` (LightGBM's `sqrt` label transform undone).
    SignedSquare,
    /// 1 when `x > 0`, else 0 (XGBoost's `binary:hinge`).
    Hinge,
    /// `ln(1 + exp(x))` (LightGBM's `cross_entropy_lambda`).
    Log1pExp,
}

/// A whole model.
#[derive(Debug, Clone)]
pub struct Forest {
    pub num_features: usize,
    /// Margins per row: classes of a multi-class model, else 1.
    pub num_outputs: usize,
    pub trees: Vec<Tree>,
    /// Added to each output's margin (after averaging).
    pub base: Vec<f64>,
    /// The sum is divided by the number of trees per output (random
    /// forests).
    pub average: bool,
    /// Its leaves hold one value per output (scikit-learn's forests).
    pub vector_leaves: bool,
    pub transform: Transform,
    /// Which framework made it, for messages ("XGBoost", "LightGBM").
    pub made_by: &'static str,
}

/// A split or leaf as a reader gives it, children by the reader's own
/// indices.
#[derive(Debug, Clone, PartialEq)]
pub enum RawNode {
    Leaf(f64),
    /// One value per output.
    LeafVector(Vec<f64>),
    Split {
        feature: u32,
        /// `x < threshold` goes left (readers whose splits are `<=` give
        /// the next float up).
        threshold: f32,
        left: usize,
        right: usize,
        default_left: bool,
        /// NaN is taken for 0.0 (LightGBM's missing types None and Zero).
        nan_as_zero: bool,
        /// |x| <= 1e-35 is missing (LightGBM's missing type Zero).
        zero_missing: bool,
    },
    Categorical {
        feature: u32,
        /// The categories of the set.
        categories: Vec<u32>,
        /// The set's categories go left (LightGBM) or right (XGBoost).
        in_set_left: bool,
        left: usize,
        right: usize,
        default_left: bool,
        /// NaN is category 0 (LightGBM unless its missing type is NaN).
        nan_as_zero: bool,
    },
}

/// Turns a reader's nodes (node 0 the root) into a [`Tree`], depth first,
/// each split's children side by side; refuses a child index out of range,
/// a node reached twice (a cycle or shared child) and a feature index past
/// `num_features`.
pub fn build_tree(
    raw: &[RawNode],
    output: u32,
    num_features: usize,
    num_outputs: usize,
) -> std::result::Result<Tree, String> {
    if raw.is_empty() {
        return Err("a tree has no nodes".into());
    }
    let mut tree = Tree {
        output,
        ..Default::default()
    };
    let mut seen = vec![false; raw.len()];
    // (raw index, index in `tree.nodes`, depth) still to fill.
    let mut todo = vec![(0usize, 0usize, 0u32)];
    tree.nodes.push(Node::default());
    seen[0] = true;
    let take = |i: usize, seen: &mut Vec<bool>| -> std::result::Result<usize, String> {
        match seen.get_mut(i) {
            None => Err(format!(
                "a child index {i} is past the tree's {} nodes",
                raw.len()
            )),
            Some(true) => Err(format!("node {i} is reached twice")),
            Some(s) => {
                *s = true;
                Ok(i)
            }
        }
    };
    let check_feature = |f: u32| {
        if (f as usize) < num_features {
            Ok(f)
        } else {
            Err(format!(
                "a split on feature {f}, past the model's {num_features} features"
            ))
        }
    };
    while let Some((r, at, depth)) = todo.pop() {
        tree.depth = tree.depth.max(depth);
        let node = match &raw[r] {
            RawNode::Leaf(v) => {
                tree.leaf_values.push(*v);
                Node {
                    left: (tree.leaf_values.len() - 1) as u32,
                    flags: LEAF,
                    ..Default::default()
                }
            }
            RawNode::LeafVector(values) => {
                if values.len() != num_outputs {
                    return Err(format!(
                        "a leaf has {} values for a model of {num_outputs} outputs",
                        values.len()
                    ));
                }
                let offset = tree.leaf_values.len() as u32;
                tree.leaf_values.extend_from_slice(values);
                Node {
                    left: offset,
                    flags: LEAF | VECTOR,
                    ..Default::default()
                }
            }
            RawNode::Split {
                feature,
                threshold,
                left,
                right,
                default_left,
                nan_as_zero,
                zero_missing,
            } => {
                let (l, rr) = (take(*left, &mut seen)?, take(*right, &mut seen)?);
                let first = tree.nodes.len();
                tree.nodes.push(Node::default());
                tree.nodes.push(Node::default());
                todo.push((rr, first + 1, depth + 1));
                todo.push((l, first, depth + 1));
                let mut flags = 0;
                if *default_left {
                    flags |= DEFAULT_LEFT;
                }
                if *nan_as_zero {
                    flags |= NAN_AS_ZERO;
                }
                if *zero_missing {
                    flags |= ZERO_MISSING;
                }
                Node {
                    value: *threshold,
                    feature: check_feature(*feature)?,
                    left: first as u32,
                    flags,
                    cat_words: 0,
                }
            }
            RawNode::Categorical {
                feature,
                categories,
                in_set_left,
                left,
                right,
                default_left,
                nan_as_zero,
            } => {
                let (l, rr) = (take(*left, &mut seen)?, take(*right, &mut seen)?);
                let first = tree.nodes.len();
                tree.nodes.push(Node::default());
                tree.nodes.push(Node::default());
                todo.push((rr, first + 1, depth + 1));
                todo.push((l, first, depth + 1));
                let top = categories.iter().copied().max().unwrap_or(0);
                if top >= 1 << 20 {
                    return Err(format!("a categorical split on category {top}"));
                }
                let words = top as usize / 32 + 1;
                let offset = tree.words.len();
                tree.words.resize(offset + words, 0);
                for &c in categories {
                    tree.words[offset + c as usize / 32] |= 1 << (c % 32);
                }
                let mut flags = CATEGORICAL;
                if *default_left {
                    flags |= DEFAULT_LEFT;
                }
                if *nan_as_zero {
                    flags |= NAN_AS_ZERO;
                }
                if *in_set_left {
                    flags |= CATS_LEFT;
                }
                Node {
                    value: f32::from_bits(offset as u32),
                    feature: check_feature(*feature)?,
                    left: first as u32,
                    flags,
                    cat_words: u16::try_from(words).map_err(|_| "a category set too large")?,
                }
            }
        };
        tree.nodes[at] = node;
    }
    Ok(tree)
}

impl Tree {
    /// The leaf `row` reaches.
    #[cfg(test)]
    fn leaf(&self, row: &[f32]) -> &Node {
        let mut node = &self.nodes[0];
        while node.flags & LEAF == 0 {
            node = &self.nodes[self.next(node, row[node.feature as usize])];
        }
        node
    }

    /// Adds `leaf`'s value(s) to a row's `sum` (one per output).
    #[inline(always)]
    fn add(&self, leaf: &Node, sum: &mut [f64]) {
        let at = leaf.left as usize;
        if leaf.flags & VECTOR == 0 {
            sum[self.output as usize] += self.leaf_values[at];
        } else {
            for (s, v) in sum.iter_mut().zip(&self.leaf_values[at..]) {
                *s += v;
            }
        }
    }

    /// The child a split sends `x` to.
    #[inline(always)]
    fn next(&self, node: &Node, x: f32) -> usize {
        let left = if node.flags & (CATEGORICAL | NAN_AS_ZERO | ZERO_MISSING) == 0 {
            // The common split, without branches: NaN fails `<` and goes
            // its default way.
            (x < node.value) | (x.is_nan() & (node.flags & DEFAULT_LEFT != 0))
        } else {
            self.goes_left(node, x)
        };
        node.left as usize + usize::from(!left)
    }

    #[inline]
    fn goes_left(&self, node: &Node, mut x: f32) -> bool {
        if x.is_nan() {
            if node.flags & NAN_AS_ZERO == 0 {
                return node.flags & DEFAULT_LEFT != 0;
            }
            x = 0.0;
        }
        if node.flags & CATEGORICAL != 0 {
            let lightgbm = node.flags & CATS_LEFT != 0;
            // A category is the value truncated (LightGBM's `(int)x`, so
            // (-1, 0) is 0); XGBoost takes any negative value for none.
            let valid = if lightgbm { x > -1.0 } else { x >= 0.0 };
            let c = x as u32; // saturates: past every set
            let in_set = valid
                && c < u32::from(node.cat_words) * 32
                && self.words[node.value.to_bits() as usize + c as usize / 32] & (1 << (c % 32))
                    != 0;
            return in_set == lightgbm;
        }
        if node.flags & ZERO_MISSING != 0 && x.abs() <= ZERO {
            return node.flags & DEFAULT_LEFT != 0;
        }
        x < node.value
    }
}

impl Forest {
    /// Checks what the trees alone cannot: outputs in range, the base's
    /// length.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.num_outputs == 0 {
            return Err("a model of no outputs".into());
        }
        if self.num_features == 0 {
            return Err("a model of no features".into());
        }
        if self.base.len() != self.num_outputs {
            return Err(format!(
                "{} base scores for {} outputs",
                self.base.len(),
                self.num_outputs
            ));
        }
        if let Some(t) = self
            .trees
            .iter()
            .find(|t| t.output as usize >= self.num_outputs)
        {
            return Err(format!(
                "a tree adds to output {}, past the model's {}",
                t.output, self.num_outputs
            ));
        }
        Ok(())
    }

    /// The margins (before the transform) of `rows` (row-major, each
    /// `num_features` long) into `out` (`num_outputs` per row), using up
    /// to `threads` threads.
    pub fn margins(&self, rows: &[f32], out: &mut [f64], threads: usize) {
        let n = rows.len() / self.num_features.max(1);
        debug_assert_eq!(out.len(), n * self.num_outputs);
        // Below a few blocks' work a thread costs more than it saves.
        let work = n * self.trees.len();
        let threads = threads.clamp(1, n.div_ceil(BLOCK).max(1));
        if threads == 1 || work < 16 * 1024 {
            self.margins_serial(rows, out);
            return;
        }
        let rows_per = n.div_ceil(threads).div_ceil(BLOCK) * BLOCK;
        std::thread::scope(|s| {
            let chunks = rows
                .chunks(rows_per * self.num_features)
                .zip(out.chunks_mut(rows_per * self.num_outputs));
            for (r, o) in chunks {
                s.spawn(move || self.margins_serial(r, o));
            }
        });
    }

    fn margins_serial(&self, rows: &[f32], out: &mut [f64]) {
        let (f, k) = (self.num_features.max(1), self.num_outputs);
        out.fill(0.0);
        for (block, sums) in rows.chunks(BLOCK * f).zip(out.chunks_mut(BLOCK * k)) {
            for tree in &self.trees {
                let lanes = block
                    .chunks_exact(LANES * f)
                    .zip(sums.chunks_exact_mut(LANES * k));
                for (rows, sums) in lanes {
                    let mut at = [0usize; LANES];
                    for _ in 0..tree.depth {
                        for (j, i) in at.iter_mut().enumerate() {
                            let node = &tree.nodes[*i];
                            if node.flags & LEAF == 0 {
                                *i = tree.next(node, rows[j * f + node.feature as usize]);
                            }
                        }
                    }
                    for (i, sum) in at.iter().zip(sums.chunks_exact_mut(k)) {
                        tree.add(&tree.nodes[*i], sum);
                    }
                }
            }
            // The rows short of a lane group: one row through LANES trees
            // in lockstep instead (a batch of one is all rest).
            let done = block.len() / (LANES * f) * LANES;
            let rest = block[done * f..].chunks_exact(f);
            for (row, sum) in rest.zip(sums[done * k..].chunks_exact_mut(k)) {
                self.row_margins(row, sum);
            }
        }
        // Averaged over the trees each output sums: all of them with
        // vector leaves, else one tree in k per output.
        let per_output = match (self.average, self.vector_leaves) {
            (false, _) => 1.0,
            (true, true) => self.trees.len() as f64,
            (true, false) => (self.trees.len() / k).max(1) as f64,
        };
        for sum in out.chunks_exact_mut(k) {
            for (s, b) in sum.iter_mut().zip(&self.base) {
                *s = *s / per_output + b;
            }
        }
    }

    /// Adds one row's leaves to `sum`, walking LANES trees at a time.
    fn row_margins(&self, row: &[f32], sum: &mut [f64]) {
        for trees in self.trees.chunks(LANES) {
            let mut at = [0usize; LANES];
            let depth = trees.iter().map(|t| t.depth).max().unwrap_or(0);
            for _ in 0..depth {
                for (tree, i) in trees.iter().zip(at.iter_mut()) {
                    let node = &tree.nodes[*i];
                    if node.flags & LEAF == 0 {
                        *i = tree.next(node, row[node.feature as usize]);
                    }
                }
            }
            for (tree, i) in trees.iter().zip(at) {
                tree.add(&tree.nodes[i], sum);
            }
        }
    }

    /// Applies the transform to one row's margins, in place.
    pub fn transform(&self, margins: &mut [f64]) {
        match self.transform {
            Transform::Identity => {}
            Transform::Sigmoid { alpha } => {
                for m in margins.iter_mut() {
                    *m = 1.0 / (1.0 + (-alpha * *m).exp());
                }
            }
            Transform::Exp => {
                for m in margins.iter_mut() {
                    *m = m.exp();
                }
            }
            Transform::Exp2Ratio { ratio_c } => {
                for m in margins.iter_mut() {
                    *m = (-*m / ratio_c).exp2();
                }
            }
            Transform::SignedSquare => {
                for m in margins.iter_mut() {
                    *m *= m.abs();
                }
            }
            Transform::Hinge => {
                for m in margins.iter_mut() {
                    *m = f64::from(u8::from(*m > 0.0));
                }
            }
            Transform::Log1pExp => {
                for m in margins.iter_mut() {
                    *m = m.exp().ln_1p();
                }
            }
            Transform::Softmax => {
                let top = margins.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let mut total = 0.0;
                for m in margins.iter_mut() {
                    *m = (*m - top).exp();
                    total += *m;
                }
                for m in margins.iter_mut() {
                    *m /= total;
                }
            }
        }
    }
}

/// A reader's error: the model file cannot be served.
pub fn unreadable(file: &std::path::Path, why: impl std::fmt::Display) -> Error {
    Error::invalid_arg(format!(
        "unable to load model file {}: {why}",
        file.display()
    ))
}

/// The next float up from `x` (for readers whose splits go left on
/// `x <= t`: in f32, `x <= t` is `x < next_up(t)`).
pub fn next_up(x: f32) -> f32 {
    if x.is_nan() || x == f32::INFINITY {
        return x;
    }
    if x == 0.0 {
        return f32::from_bits(1);
    }
    let bits = x.to_bits();
    f32::from_bits(if x > 0.0 { bits + 1 } else { bits - 1 })
}

/// The largest f32 at most `t` (a double threshold as f32 inputs meet it:
/// for f32 `x`, `x <= t` is `x <= floor_f32(t)`).
pub fn floor_f32(t: f64) -> f32 {
    let f = t as f32;
    if f64::from(f) > t {
        // Rounded up: step down one.
        let bits = f.to_bits();
        if f > 0.0 {
            f32::from_bits(bits - 1)
        } else if f == 0.0 {
            -f32::from_bits(1)
        } else {
            f32::from_bits(bits + 1)
        }
    } else {
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stump(threshold: f32, default_left: bool) -> Vec<RawNode> {
        vec![
            RawNode::Split {
                feature: 0,
                threshold,
                left: 1,
                right: 2,
                default_left,
                nan_as_zero: false,
                zero_missing: false,
            },
            RawNode::Leaf(-1.0),
            RawNode::Leaf(1.0),
        ]
    }

    fn forest(trees: Vec<Tree>) -> Forest {
        Forest {
            num_features: 1,
            num_outputs: 1,
            trees,
            base: vec![0.5],
            average: false,
            vector_leaves: false,
            transform: Transform::Identity,
            made_by: "test",
        }
    }

    #[test]
    fn a_stump_splits_sends_missing_its_way_and_adds_the_base() {
        let f = forest(vec![build_tree(&stump(2.0, true), 0, 1, 1).unwrap()]);
        let mut out = vec![0.0; 4];
        f.margins(&[1.0, 2.0, f32::NAN, 3.0], &mut out, 1);
        assert_eq!(out, [-0.5, 1.5, -0.5, 1.5]);
    }

    #[test]
    fn bad_trees_are_refused() {
        let mut cycle = stump(1.0, false);
        if let RawNode::Split { right, .. } = &mut cycle[0] {
            *right = 0;
        }
        assert!(build_tree(&cycle, 0, 1, 1)
            .unwrap_err()
            .contains("reached twice"));
        let mut far = stump(1.0, false);
        if let RawNode::Split { left, .. } = &mut far[0] {
            *left = 9;
        }
        assert!(build_tree(&far, 0, 1, 1)
            .unwrap_err()
            .contains("past the tree"));
        assert!(build_tree(&stump(1.0, false), 0, 0, 1)
            .unwrap_err()
            .contains("feature 0"));
    }

    #[test]
    fn categorical_sets_go_their_side() {
        let raw = vec![
            RawNode::Categorical {
                feature: 0,
                categories: vec![1, 40],
                in_set_left: true,
                left: 1,
                right: 2,
                default_left: false,
                nan_as_zero: false,
            },
            RawNode::Leaf(1.0),
            RawNode::Leaf(2.0),
        ];
        let t = build_tree(&raw, 0, 1, 1).unwrap();
        let leaf = |x: f32| t.leaf_values[t.leaf(&[x]).left as usize];
        assert_eq!(
            [
                leaf(1.0),
                leaf(40.0),
                leaf(1.9),
                leaf(2.0),
                leaf(-1.0),
                leaf(1e9),
                leaf(f32::NAN)
            ],
            [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
        );
    }

    #[test]
    fn threads_and_blocks_give_the_serial_answer() {
        let trees = (0..64)
            .map(|i| build_tree(&stump(i as f32 / 8.0, i % 2 == 0), 0, 1, 1).unwrap())
            .collect();
        let f = forest(trees);
        let rows: Vec<f32> = (0..5000).map(|i| (i % 97) as f32 / 10.0).collect();
        let (mut one, mut four) = (vec![0.0; 5000], vec![0.0; 5000]);
        f.margins(&rows, &mut one, 1);
        f.margins(&rows, &mut four, 4);
        assert_eq!(one, four);
    }

    #[test]
    fn thresholds_for_le_splits() {
        assert!(1.0f32 < next_up(1.0) && next_up(-1.0) > -1.0);
        for t in [0.1f64, -0.1, 1.0, 0.0, 3.3e-7, -2.5] {
            let f = floor_f32(t);
            assert!(f64::from(f) <= t && f64::from(next_up(f)) > t, "{t}");
        }
    }
}
