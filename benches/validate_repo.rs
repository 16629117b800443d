//! How long `validate-config` takes on a repository of 100 models.
//!
//! Generates a repository of 100 varied models (ONNX with dynamic batching,
//! sequence batchers with controls and state, ensembles over them), then
//! times, in the same run:
//! - the reference: reading every `config.pbtxt` (bare file I/O);
//! - `check_repository`: parse, normalize, validate, file and ensemble checks.
//!
//! Run: `cargo bench --bench validate_repo` (or `scripts/bench.sh validate`,
//! which also times the release binary end to end).

use std::path::Path;
use std::time::{Duration, Instant};

use trtis::core::config::Severity;
use trtis::core::repository::{check_repository, layout, CheckOptions};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn onnx_model(root: &Path, name: &str, i: usize) {
    write(
        &root.join(name).join("config.pbtxt"),
        &format!(
            r#"name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 16
input [
  {{
    name: "INPUT0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
  }}
]
output [
  {{
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [ 1000 ]
    label_filename: "labels.txt"
  }}
]
instance_group [ {{ count: 2, kind: KIND_CPU }} ]
dynamic_batching {{
  preferred_batch_size: [ 4, 8, 16 ]
  max_queue_delay_microseconds: {}
  priority_levels: 2
  default_priority_level: 1
  priority_queue_policy {{ key: 2 value: {{ max_queue_size: 64 timeout_action: REJECT default_timeout_microseconds: 5000 }} }}
}}
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "1" }} }}
version_policy: {{ latest: {{ num_versions: 2 }} }}
"#,
            100 * i
        ),
    );
    write(&root.join(name).join("labels.txt"), "a\nb\n");
    write(&root.join(name).join("1/model.onnx"), "");
    write(&root.join(name).join("2/model.onnx"), "");
}

fn sequence_model(root: &Path, name: &str) {
    write(
        &root.join(name).join("config.pbtxt"),
        r#"platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  direct { max_queue_delay_microseconds: 100 minimum_slot_utilization: 0.5 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [
    {
      input_name: "INPUT_STATE"
      output_name: "OUTPUT_STATE"
      data_type: TYPE_INT32
      dims: [ 4 ]
      initial_state: { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true name: "zeros" }
    }
  ]
}
"#,
    );
    write(&root.join(name).join("1/model.onnx"), "");
}

fn ensemble_model(root: &Path, name: &str, step: &str) {
    write(
        &root.join(name).join("config.pbtxt"),
        &format!(
            r#"platform: "ensemble"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
ensemble_scheduling {{
  step [
    {{
      model_name: "{step}"
      model_version: -1
      input_map {{ key: "INPUT0" value: "IN" }}
      output_map {{ key: "OUTPUT0" value: "OUT" }}
    }}
  ]
}}
"#
        ),
    );
    write(&root.join(name).join("1/.keep"), "");
}

fn generate(root: &Path) {
    for i in 0..100 {
        match i % 4 {
            0 | 1 => onnx_model(root, &format!("onnx_{i:03}"), i),
            2 => sequence_model(root, &format!("seq_{i:03}")),
            _ => ensemble_model(root, &format!("ens_{i:03}"), &format!("onnx_{:03}", i - 3)),
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let dir = std::env::var_os("TRTIS_BENCH_REPO")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("trtis-bench-repo"));
    let _ = std::fs::remove_dir_all(&dir);
    generate(&dir);
    let opts = CheckOptions {
        gpus: &[],
        gpu_backends: &[],
        min_compute_capability: trtis::core::device::MIN_COMPUTE_CAPABILITY,
        config_name: None,
        missing_gpu: Severity::Warning,
        server_support: true,
        model_files: true,
    };
    let rounds = 30;
    let mut read = Vec::new();
    let mut check = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let mut bytes = 0;
        for model in layout::list_model_dirs(&dir).unwrap() {
            bytes += std::fs::read(model.join("config.pbtxt")).unwrap().len();
        }
        assert!(bytes > 0);
        read.push(t.elapsed());

        let t = Instant::now();
        let models = check_repository(&dir, None, &opts).unwrap();
        check.push(t.elapsed());
        assert_eq!(models.len(), 100);
        let findings: usize = models.iter().map(|m| m.findings.len()).sum();
        assert_eq!(findings, 0, "the generated repository should be clean");
    }
    let (read, check) = (median(read), median(check));
    println!("repository: {} (100 models)", dir.display());
    println!(
        "read all config.pbtxt (reference): {:>9.3} ms",
        read.as_secs_f64() * 1e3
    );
    println!(
        "check_repository (validate-config): {:>9.3} ms",
        check.as_secs_f64() * 1e3
    );
    println!(
        "ratio check / read:                 {:>9.1}x",
        check.as_secs_f64() / read.as_secs_f64()
    );
    println!(
        "per model:                          {:>9.1} us",
        check.as_secs_f64() * 1e6 / 100.0
    );
}
