//! The readers on small hand-written models (the frameworks' own models
//! and predictions are in tests/fixtures/fil, checked through a real
//! server by tests/python/test_fil.py).

use super::forest::Transform;
use super::*;

/// A binary:logistic XGBoost model of one stump on feature 1 (`x < 0.5`
/// left, NaN right) and one categorical split on feature 0 ({1, 3} right).
const XGB: &str = r#"{"learner": {
  "learner_model_param": {"base_score": "[5E-1]", "num_class": "0", "num_feature": "2", "num_target": "1"},
  "objective": {"name": "binary:logistic"},
  "gradient_booster": {"name": "gbtree", "model": {"tree_info": [0, 0], "trees": [
    {"left_children": [1, -1, -1], "right_children": [2, -1, -1], "split_indices": [1, 0, 0],
     "split_conditions": [0.5, -1.0, 2.0], "default_left": [0, 0, 0], "split_type": [0, 0, 0]},
    {"left_children": [1, -1, -1], "right_children": [2, -1, -1], "split_indices": [0, 0, 0],
     "split_conditions": [0.0, 0.25, -0.25], "default_left": [1, 0, 0], "split_type": [1, 0, 0],
     "categories": [1, 3], "categories_nodes": [0], "categories_segments": [0], "categories_sizes": [2]}
  ]}}}, "version": [3, 2, 0]}"#;

fn margins(f: &Forest, rows: &[f32]) -> Vec<f64> {
    let mut out = vec![0.0; rows.len() / f.num_features * f.num_outputs];
    f.margins(rows, &mut out, 1);
    out
}

#[test]
fn xgboost_json_splits_categories_and_base_score() {
    let f = xgboost::read_json(XGB.as_bytes()).unwrap();
    assert_eq!((f.num_features, f.num_outputs), (2, 1));
    assert_eq!(f.transform, Transform::Sigmoid { alpha: 1.0 });
    // base 0.5 as a margin is 0.
    let m = margins(&f, &[1.0, 0.0, 2.0, 1.0, f32::NAN, f32::NAN, -1.0, 0.4]);
    assert_eq!(m, [-1.0 - 0.25, 2.0 + 0.25, 2.0 + 0.25, -1.0 + 0.25]);
}

#[test]
fn ubjson_reads_as_json_does() {
    // The same document, typed arrays and all, as XGBoost writes it.
    fn ub(v: &serde_json::Value, out: &mut Vec<u8>) {
        match v {
            serde_json::Value::Object(m) => {
                out.push(b'{');
                for (k, v) in m {
                    out.extend([b'U', k.len() as u8]);
                    out.extend(k.as_bytes());
                    ub(v, out);
                }
                out.push(b'}');
            }
            serde_json::Value::Array(a) if a.iter().any(|x| x.is_f64()) => {
                out.extend(b"[$d#U");
                out.push(a.len() as u8);
                for x in a {
                    out.extend((x.as_f64().unwrap() as f32).to_be_bytes());
                }
            }
            serde_json::Value::Array(a) if !a.iter().all(|x| x.is_i64()) => {
                out.push(b'[');
                for x in a {
                    ub(x, out);
                }
                out.push(b']');
            }
            serde_json::Value::Array(a) => {
                out.extend(b"[$l#U");
                out.push(a.len() as u8);
                for x in a {
                    out.extend((x.as_i64().unwrap() as i32).to_be_bytes());
                }
            }
            serde_json::Value::String(s) => {
                out.extend([b'S', b'U', s.len() as u8]);
                out.extend(s.as_bytes());
            }
            v => panic!("{v}"),
        }
    }
    let doc: serde_json::Value = serde_json::from_str(XGB).unwrap();
    let mut bytes = Vec::new();
    ub(&doc, &mut bytes);
    let (a, b) = (
        xgboost::read_json(XGB.as_bytes()).unwrap(),
        xgboost::read_ubjson(&bytes).unwrap(),
    );
    let rows = [1.0, 0.0, 3.0, 1.0, f32::NAN, 0.7];
    assert_eq!(margins(&a, &rows), margins(&b, &rows));
}

/// A LightGBM binary model: a split on feature 0 (`x <= 1.5`) with zero as
/// missing (default left), then a categorical split on feature 1.
const LGB: &str = "tree\nversion=v4\nnum_class=1\nnum_tree_per_iteration=1\nlabel_index=0\nmax_feature_idx=1\nobjective=binary sigmoid:2\n\n\
Tree=0\nnum_leaves=3\nnum_cat=1\nsplit_feature=0 1\nthreshold=1.5 0\ndecision_type=6 1\nleft_child=-1 -2\nright_child=1 -3\nleaf_value=0.5 -0.25 0.125\ncat_boundaries=0 1\ncat_threshold=5\nis_linear=0\nshrinkage=1\n\n\nend of trees\n";

#[test]
fn lightgbm_missing_types_and_categories() {
    let f = lightgbm::read(LGB).unwrap();
    assert_eq!(f.transform, Transform::Sigmoid { alpha: 2.0 });
    let rows = [
        1.5,
        9.0, // <= 1.5: left leaf
        0.0,
        9.0, // zero is missing: default left
        f32::NAN,
        9.0, // NaN is zero, then missing
        2.0,
        0.0, // right, category 0 in {0, 2}: left
        2.0,
        2.9, // category 2: left
        2.0,
        1.0, // category 1: right
        2.0,
        f32::NAN, // NaN: category 0 (missing type none)
        2.0,
        -0.5, // truncates to 0
    ];
    assert_eq!(
        margins(&f, &rows),
        [0.5, 0.5, 0.5, -0.25, -0.25, 0.125, 0.125, -0.25]
    );
}

#[test]
fn corrupt_models_are_refused_with_the_reason() {
    assert!(xgboost::read_json(&XGB.as_bytes()[..200])
        .unwrap_err()
        .contains("not an XGBoost JSON model"));
    let far = XGB.replace(
        "\"right_children\": [2, -1, -1]",
        "\"right_children\": [7, -1, -1]",
    );
    assert!(xgboost::read_json(far.as_bytes())
        .unwrap_err()
        .contains("out of range"));
    let wide = XGB.replace(
        "\"split_indices\": [1, 0, 0]",
        "\"split_indices\": [5, 0, 0]",
    );
    assert!(xgboost::read_json(wide.as_bytes())
        .unwrap_err()
        .contains("past the model's 2 features"));
    assert!(lightgbm::read("tree\nnum_class=1\n").is_err());
    assert!(lightgbm::read(&LGB.replace("leaf_value=0.5 -0.25 0.125", "leaf_value=0.5")).is_err());
    assert!(lightgbm::read("not a model")
        .unwrap_err()
        .contains("not a LightGBM text model"));
}

#[test]
fn outputs_must_fit_the_model() {
    use crate::core::config::pb::{DataType as Dt, ModelInput, ModelOutput};
    let f = xgboost::read_json(XGB.as_bytes()).unwrap();
    let config = |dims: Vec<i64>, out: Vec<i64>| ModelConfig {
        name: "m".into(),
        input: vec![ModelInput {
            name: INPUT.into(),
            data_type: Dt::TypeFp32 as i32,
            dims,
            ..Default::default()
        }],
        output: vec![ModelOutput {
            name: OUTPUT.into(),
            data_type: Dt::TypeFp32 as i32,
            dims: out,
            ..Default::default()
        }],
        ..Default::default()
    };
    let settings = |proba| FilSettings {
        model_type: ModelType::XgboostJson,
        classifier: true,
        threshold: 0.5,
        predict_proba: proba,
        threads: 1,
        notes: Vec::new(),
    };
    assert_eq!(
        answer(&config(vec![2], vec![1]), &settings(false), &f),
        Ok((Answer::Class, 1))
    );
    assert_eq!(
        answer(&config(vec![2], vec![2]), &settings(true), &f),
        Ok((Answer::BothClasses, 2))
    );
    assert_eq!(
        answer(&config(vec![2], vec![1]), &settings(true), &f),
        Ok((Answer::Values, 1))
    );
    assert!(answer(&config(vec![3], vec![1]), &settings(false), &f)
        .unwrap_err()
        .contains("has 2 features"));
    assert!(answer(&config(vec![2], vec![3]), &settings(true), &f)
        .unwrap_err()
        .contains("dims must hold"));
}

#[test]
fn treelite_checkpoints_of_another_version_or_cut_short_are_refused() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fil/models/skl_rf_classifier/1/checkpoint.tl");
    let bytes = std::fs::read(path).unwrap();
    let f = treelite::read(&bytes).unwrap();
    assert_eq!((f.num_features, f.num_outputs, f.trees.len()), (13, 3, 10));
    assert!(f.average && f.vector_leaves);
    for cut in [3, 40, bytes.len() / 2, bytes.len() - 1] {
        assert!(treelite::read(&bytes[..cut]).is_err(), "{cut}");
    }
    let mut v3 = bytes.clone();
    v3[0] = 3;
    assert!(treelite::read(&v3).unwrap_err().contains("Treelite 3."));
}

#[test]
fn xgboost_legacy_binaries_cut_short_or_of_another_form_are_refused() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fil/models/xgb_legacy/1/xgboost.model");
    let bytes = std::fs::read(path).unwrap();
    let f = xgboost_binary::read(&bytes).unwrap();
    assert_eq!((f.num_features, f.num_outputs, f.trees.len()), (30, 1, 20));
    // (What follows the trees' classes, the model's attributes, is not read.)
    for cut in [3, 100, 300, bytes.len() / 2] {
        assert!(xgboost_binary::read(&bytes[..cut]).is_err(), "{cut}");
    }
    assert!(xgboost_binary::read(XGB.as_bytes())
        .unwrap_err()
        .contains("xgboost_json"));
}
