//! `trtis infer -m MODEL IMAGE...` (image_client) against a real server
//! serving the example repository's classifier: coffee.jpg is an espresso,
//! rocket.jpg a missile, over HTTP and gRPC, one by one and as a batch of
//! two, directly and through the preprocessing + classifier ensemble, with
//! scores close to the reference logits shipped with the model;
//! the TorchScript copy of the classifier (PyTorch backend) against the ONNX
//! one; and the errors: not an image, a missing file, a model that is not an
//! image classifier.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::util::{onnx_available, Serve};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn infer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trtis"))
        .current_dir(root())
        .arg("infer")
        .args(args)
        .output()
        .unwrap()
}

/// `trtis infer` that must succeed.
fn infer_ok(args: &[&str]) -> Output {
    let out = infer(args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The top classes of an image have the reference's indexes and logits
/// (within 0.2).
fn assert_like_reference(classes: &[Value], image: &str, doc: &Value) {
    for (c, (index, logit)) in classes.iter().zip(reference(image)) {
        assert_eq!(c["index"].as_i64().unwrap(), index, "{image}: {doc}");
        let score = c["score"].as_f64().unwrap();
        assert!(
            (score - logit).abs() < 0.2,
            "{image}: {score} vs reference {logit}"
        );
    }
}

/// The reference (INCEPTION scaling) top-3 logits of an image.
fn reference(image: &str) -> Vec<(i64, f64)> {
    let text = std::fs::read_to_string(
        root().join("tests/fixtures/images/efficientnet_lite0_results.json"),
    )
    .unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc["top3"]["inception"][image]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["index"].as_i64().unwrap(), c["logit"].as_f64().unwrap()))
        .collect()
}

/// The top classes of `image` by `model`, as JSON, INCEPTION scaling (the
/// ensembles scale in their preprocessing model: no client scaling).
pub(crate) fn top3(model: &str, url: &str, protocol: &str, image: &str) -> Vec<Value> {
    let scaling = if model.ends_with("ensemble") {
        "NONE"
    } else {
        "INCEPTION"
    };
    let out = infer_ok(&[
        "-m", model, "-u", url, "-i", protocol, "-s", scaling, "-c", "3", "--json", image,
    ]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc[0]["images"][0]["classes"].as_array().unwrap().clone()
}

/// The TorchScript classifier (PyTorch backend, `efficientnet_lite0_pt`)
/// and its AOTInductor package (`efficientnet_lite0_pt2`) answer as the
/// ONNX one does: coffee.jpg is an espresso, the top logits
/// within 1e-3, over HTTP and gRPC, directly and through the ensemble that
/// mixes the ONNX preprocessing model with it. So does the ensemble whose
/// preprocessing step is a Python model (`preprocess_py`, run by the
/// project's .venv python).
#[test]
fn the_torchscript_classifier_agrees_with_the_onnx_one() {
    if !onnx_available() {
        return;
    }
    let server = Serve::start(&root().join("examples/model_repository"), &[], &[]);
    for (protocol, port) in [("http", server.port), ("grpc", server.grpc_port)] {
        let url = format!("127.0.0.1:{port}");
        for (torch, onnx) in [
            ("efficientnet_lite0_pt", "efficientnet_lite0"),
            ("efficientnet_lite0_pt2", "efficientnet_lite0"),
            ("efficientnet_pt_ensemble", "efficientnet_ensemble"),
            ("efficientnet_py_ensemble", "efficientnet_ensemble"),
        ] {
            for image in ["examples/images/coffee.jpg", "examples/images/rocket.jpg"] {
                let t = top3(torch, &url, protocol, image);
                let o = top3(onnx, &url, protocol, image);
                assert_eq!(t.len(), 3);
                if image.ends_with("coffee.jpg") {
                    assert_eq!(t[0]["label"], "espresso", "{t:?}");
                }
                for (a, b) in t.iter().zip(&o) {
                    assert_eq!(a["index"], b["index"], "{torch} {image}: {t:?} vs {o:?}");
                    let d = (a["score"].as_f64().unwrap() - b["score"].as_f64().unwrap()).abs();
                    assert!(d < 1e-3, "{torch} {image}: {t:?} vs {o:?}");
                }
            }
        }
    }
}

#[test]
fn classifies_the_example_images_like_image_client() {
    if !onnx_available() {
        return;
    }
    let server = Serve::start(&root().join("examples/model_repository"), &[], &[]);
    for (protocol, port) in [("http", server.port), ("grpc", server.grpc_port)] {
        let url = format!("127.0.0.1:{port}");
        let out = infer_ok(&[
            "-m",
            "efficientnet_lite0",
            "-u",
            &url,
            "-i",
            protocol,
            "-s",
            "INCEPTION",
            "examples/images/coffee.jpg",
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Request 0, batch size 1");
        assert_eq!(lines[1], "Image 'examples/images/coffee.jpg':");
        assert!(lines[2].starts_with("  967 (espresso) = "), "{text}");
        assert_eq!(lines.len(), 3);

        // Top 3 of both images in one batch of 2, as JSON, against the
        // reference logits.
        let out = infer_ok(&[
            "-m",
            "efficientnet_lite0",
            "-u",
            &url,
            "-i",
            protocol,
            "-s",
            "INCEPTION",
            "-c",
            "3",
            "-b",
            "2",
            "--json",
            "examples/images/coffee.jpg",
            "examples/images/rocket.jpg",
        ]);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc.as_array().unwrap().len(), 1, "{doc}");
        assert_eq!(doc[0]["batch_size"], 2);
        for (k, (image, label)) in [("coffee", "espresso"), ("rocket", "missile")]
            .iter()
            .enumerate()
        {
            let classes = doc[0]["images"][k]["classes"].as_array().unwrap();
            assert_eq!(classes[0]["label"], *label, "{doc}");
            assert_like_reference(classes, image, &doc);
        }
    }
    // The same through the ensemble (preprocessing model, then the
    // classifier): UINT8 pixels in, the same classes out.
    let url = format!("127.0.0.1:{}", server.port);
    let out = infer_ok(&[
        "-m",
        "efficientnet_ensemble",
        "-u",
        &url,
        "-c",
        "3",
        "--json",
        "examples/images/coffee.jpg",
        "examples/images/rocket.jpg",
    ]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (r, image) in ["coffee", "rocket"].iter().enumerate() {
        let classes = doc[r]["images"][0]["classes"].as_array().unwrap();
        assert_like_reference(classes, image, &doc);
    }
    // A directory, streamed over gRPC: every image, in name order.
    let url = format!("127.0.0.1:{}", server.grpc_port);
    let out = infer_ok(&[
        "-m",
        "efficientnet_lite0",
        "-u",
        &url,
        "-i",
        "grpc",
        "-s",
        "INCEPTION",
        "--streaming",
        "examples/images",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let images: Vec<&str> = text.lines().filter(|l| l.starts_with("Image ")).collect();
    assert_eq!(
        images,
        [
            "Image 'examples/images/astronaut.jpg':",
            "Image 'examples/images/chelsea.jpg':",
            "Image 'examples/images/coffee.jpg':",
            "Image 'examples/images/rocket.jpg':",
        ]
    );
    assert!(text.contains("Request 3, batch size 1"));
}

#[test]
fn bad_images_and_models_fail_clearly_and_the_rest_still_run() {
    if !onnx_available() {
        return;
    }
    let server = Serve::start(&root().join("examples/model_repository"), &[], &[]);
    let url = format!("127.0.0.1:{}", server.port);
    let out = infer(&[
        "-m",
        "efficientnet_lite0",
        "-u",
        &url,
        "-s",
        "INCEPTION",
        "README.md",
        "missing.jpg",
        "examples/images/rocket.jpg",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: README.md: not an image trtis can read (JPEG or PNG)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("error: missing.jpg: cannot read the file"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("657 (missile)"),
        "the good image still ran: {stdout}"
    );

    let out = infer(&["-m", "simple", "-u", &url, "examples/images/rocket.jpg"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "error: model 'simple' is not an image model: it has 2 inputs, image classification needs one"
    );
    let out = infer(&[
        "-m",
        "efficientnet_lite0",
        "-u",
        &url,
        "-b",
        "2",
        "--streaming",
        "examples/images/rocket.jpg",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--streaming needs the gRPC protocol"));
}
