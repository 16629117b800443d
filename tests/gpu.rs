//! GPU tests: they need an NVIDIA GPU and driver, and the GPU build of ONNX
//! Runtime, so CI (no GPU) never runs them. Each is `#[ignore]`d; the script
//! `scripts/test-gpu.sh` sets a GPU machine up and runs them with
//! `TRTIS_GPU_TESTS=1 cargo test --release --test integration -- --ignored gpu::`.
//! Run with `--ignored` anywhere else, they fail saying so rather than pass.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::infer_image::top3;
use crate::util::{copy_tree, Serve};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// Fails unless scripts/test-gpu.sh asked for the GPU tests.
fn require_gpu_run() {
    assert_eq!(
        std::env::var("TRTIS_GPU_TESTS").as_deref(),
        Ok("1"),
        "the GPU tests run on a machine with a GPU, through scripts/test-gpu.sh (TRTIS_GPU_TESTS=1)"
    );
}

/// `trtis status --json` of a server: its `devices`.
fn devices(server: &Serve) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_trtis"))
        .args([
            "status",
            "--json",
            "-u",
            &format!("127.0.0.1:{}", server.port),
        ])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["devices"].clone()
}

/// The example classifier, its preprocessing and their ensemble, with the
/// classifier's instances as `instance_group` says.
fn classifier_repo(dir: &Path, instance_group: &str) -> PathBuf {
    example_repo(
        dir,
        &[
            "efficientnet_lite0",
            "preprocess_inception",
            "efficientnet_ensemble",
        ],
        "efficientnet_lite0",
        instance_group,
    )
}

/// `models` of the example repository, with `placed`'s instance group
/// replaced by `instance_group`.
fn example_repo(dir: &Path, models: &[&str], placed: &str, instance_group: &str) -> PathBuf {
    let repo = dir.join("models");
    for m in models {
        copy_tree(
            &root().join("examples/model_repository").join(m),
            &repo.join(m),
        );
    }
    let config = repo.join(placed).join("config.pbtxt");
    let text = std::fs::read_to_string(&config).unwrap();
    let start = text.find("instance_group").unwrap();
    let end = start + text[start..].find("]\n").unwrap() + 2;
    std::fs::write(
        &config,
        format!("{}{instance_group}\n{}", &text[..start], &text[end..]),
    )
    .unwrap();
    repo
}

#[test]
#[ignore = "needs a GPU: scripts/test-gpu.sh"]
fn discovery_finds_the_gpus_and_status_shows_them() {
    require_gpu_run();
    let found = trtis::core::device::discovery();
    assert!(
        !found.gpus.is_empty(),
        "no GPU found: {:?}",
        found.none_because
    );
    for g in &found.gpus {
        assert!(!g.name.is_empty() && g.memory_total > 0, "{g:?}");
        assert!(g.uuid.starts_with("GPU-") && g.uuid.len() == 40, "{g:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let repo = classifier_repo(dir.path(), "instance_group [ { kind: KIND_GPU count: 1 } ]");
    let server = Serve::start(&repo, &[], &[]);
    let d = devices(&server);
    let ids: Vec<i64> = d["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), found.gpus.len(), "{d}");
    assert!(d["no_gpu_reason"].is_null(), "{d}");
}

/// The classifier on CUDA (two instances on each GPU, as KIND_GPU with
/// count 2 places them) classifies the example images with the CPU's top
/// 3: the same classes in the same order, logits within 0.05.
#[test]
#[ignore = "needs a GPU: scripts/test-gpu.sh"]
fn the_classifier_on_cuda_has_the_cpu_top3() {
    require_gpu_run();
    let dir = tempfile::tempdir().unwrap();
    let gpu_repo = classifier_repo(dir.path(), "instance_group [ { kind: KIND_GPU count: 2 } ]");
    let cpu = Serve::start(&root().join("examples/model_repository"), &[], &[]);
    let gpu = Serve::start(&gpu_repo, &[], &[]);
    for (protocol, cpu_port, gpu_port) in [
        ("http", cpu.port, gpu.port),
        ("grpc", cpu.grpc_port, gpu.grpc_port),
    ] {
        for model in ["efficientnet_lite0", "efficientnet_ensemble"] {
            for image in ["examples/images/coffee.jpg", "examples/images/rocket.jpg"] {
                let c = top3(model, &format!("127.0.0.1:{cpu_port}"), protocol, image);
                let g = top3(model, &format!("127.0.0.1:{gpu_port}"), protocol, image);
                if image.ends_with("coffee.jpg") {
                    assert_eq!(g[0]["label"], "espresso", "{g:?}");
                }
                for (a, b) in c.iter().zip(&g) {
                    assert_eq!(a["index"], b["index"], "{model} {image}: {c:?} vs {g:?}");
                    let d = (a["score"].as_f64().unwrap() - b["score"].as_f64().unwrap()).abs();
                    assert!(d < 0.05, "{model} {image}: {c:?} vs {g:?}");
                }
            }
        }
    }
    // Both instances serve: a short load at concurrency 4 completes.
    let out = Command::new(env!("CARGO_BIN_EXE_trtis"))
        .args([
            "perf",
            "-m",
            "efficientnet_lite0",
            "-u",
            &format!("127.0.0.1:{}", gpu.port),
            "--concurrency-range",
            "4",
            "--measurement-interval",
            "2000",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The classifier on ONNX Runtime's TensorRT provider (the `tensorrt` GPU
/// execution accelerator; TensorRT's libraries come from PyPI, installed
/// by scripts/test-gpu.sh) has the CPU top 3.
#[test]
#[ignore = "needs a GPU: scripts/test-gpu.sh"]
fn the_classifier_on_tensorrt_has_the_cpu_top3() {
    require_gpu_run();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("trt-cache");
    let repo = example_repo(
        dir.path(),
        &["efficientnet_lite0"],
        "efficientnet_lite0",
        &format!(
            "instance_group [ {{ kind: KIND_GPU count: 1 }} ]\n\
             optimization {{ execution_accelerators {{ gpu_execution_accelerator [ {{\n\
               name: \"tensorrt\"\n\
               parameters {{ key: \"precision_mode\" value: \"FP32\" }}\n\
               parameters {{ key: \"trt_engine_cache_enable\" value: \"1\" }}\n\
               parameters {{ key: \"trt_engine_cache_path\" value: \"{}\" }}\n\
             }} ] }} }}",
            cache.display()
        ),
    );
    let cpu = Serve::start(&root().join("examples/model_repository"), &[], &[]);
    // Building the engine takes a while the first time.
    let trt = Serve::start_within(&repo, &[], &[], std::time::Duration::from_secs(600));
    assert_cpu_top3(&cpu, &trt, "efficientnet_lite0");
    let cached = std::fs::read_dir(&cache).map(|d| d.count()).unwrap_or(0);
    assert!(
        cached > 0,
        "TensorRT built no engine into {}",
        cache.display()
    );
}

/// The TorchScript classifier on CUDA (the PyTorch backend library built
/// with libtorch_cuda: scripts/test-gpu.sh does) has the ONNX CPU top 3.
#[test]
#[ignore = "needs a GPU: scripts/test-gpu.sh"]
fn the_torchscript_classifier_on_cuda_has_the_cpu_top3() {
    require_gpu_run();
    let dir = tempfile::tempdir().unwrap();
    let repo = example_repo(
        dir.path(),
        &["efficientnet_lite0_pt"],
        "efficientnet_lite0_pt",
        "instance_group [ { kind: KIND_GPU count: 1 } ]",
    );
    let cpu = Serve::start(&root().join("examples/model_repository"), &[], &[]);
    let gpu = Serve::start(&repo, &[], &[]);
    assert_cpu_top3(&cpu, &gpu, "efficientnet_lite0_pt");
}

/// `model` on `server` classifies the example images over HTTP with the
/// top 3 of the ONNX classifier on `cpu`: the same classes in the same
/// order, scores within 0.05.
fn assert_cpu_top3(cpu: &Serve, server: &Serve, model: &str) {
    for image in ["examples/images/coffee.jpg", "examples/images/rocket.jpg"] {
        let c = top3(
            "efficientnet_lite0",
            &format!("127.0.0.1:{}", cpu.port),
            "http",
            image,
        );
        let g = top3(model, &format!("127.0.0.1:{}", server.port), "http", image);
        for (a, b) in c.iter().zip(&g) {
            assert_eq!(a["index"], b["index"], "{image}: {c:?} vs {g:?}");
            let d = (a["score"].as_f64().unwrap() - b["score"].as_f64().unwrap()).abs();
            assert!(d < 0.05, "{image}: {c:?} vs {g:?}");
        }
    }
}
