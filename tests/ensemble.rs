//! The ensemble scheduler through the HTTP frontend: a DAG with a fan-out
//! (one step's output read by two steps, one of which also reads the
//! ensemble input) carries every tensor to the right place; a step's error
//! fails the request with that step's message; statistics count the
//! ensemble and each composing model; unloading a composing model makes
//! the ensemble fail with the reason, and reloading it during requests
//! loses none.

use std::sync::Arc;

use serde_json::{json, Value};
use trtis::core::repository::ControlMode;

use crate::util::TestServer;

fn write(dir: &std::path::Path, name: &str, config: &str) {
    let m = dir.join(name);
    std::fs::create_dir_all(m.join("1")).unwrap();
    std::fs::write(m.join("1/.keep"), "").unwrap();
    std::fs::write(m.join("config.pbtxt"), config).unwrap();
}

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let one = |dims: &str| {
        format!(
            r#"backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ {dims} ] }} ]
dynamic_batching {{ }}
"#
        )
    };
    write(dir.path(), "a", &one("-1"));
    write(dir.path(), "b", &one("4"));
    write(
        dir.path(),
        "pair",
        r#"backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ -1 ] } ]
"#,
    );
    write(
        dir.path(),
        "ens",
        r#"platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT_B" data_type: TYPE_INT32 dims: [ -1 ] },
         { name: "OUT_C0" data_type: TYPE_INT32 dims: [ -1 ] },
         { name: "OUT_C1" data_type: TYPE_INT32 dims: [ -1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "a" model_version: -1
      input_map { key: "INPUT0" value: "IN" }
      output_map { key: "OUTPUT0" value: "t1" } },
    { model_name: "b" model_version: -1
      input_map { key: "INPUT0" value: "t1" }
      output_map { key: "OUTPUT0" value: "OUT_B" } },
    { model_name: "pair" model_version: 1
      input_map { key: "INPUT0" value: "t1" }
      input_map { key: "INPUT1" value: "IN" }
      output_map { key: "OUTPUT0" value: "OUT_C0" }
      output_map { key: "OUTPUT1" value: "OUT_C1" } }
  ]
}
"#,
    );
    dir
}

fn body(values: &[i32]) -> Value {
    json!({"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1, values.len()], "data": values}]})
}

fn output<'a>(out: &'a Value, name: &str) -> &'a Value {
    out["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("no output {name} in {out}"))
}

fn stats(s: &TestServer, model: &str) -> Value {
    let (_, v) = s.json("GET", &format!("/v2/models/{model}/stats"), Value::Null);
    v["model_stats"][0].clone()
}

#[test]
fn a_dag_with_a_fan_out_carries_every_tensor() {
    let repo = repo();
    let s = TestServer::start(repo.path(), ControlMode::None, &[], 1 << 20);
    let (status, meta) = s.json("GET", "/v2/models/ens", Value::Null);
    assert_eq!(status, 200, "{meta}");
    assert_eq!(meta["platform"], "ensemble");
    for i in 0..3 {
        let values = [i, 10 + i, 20 + i, 30 + i];
        let (status, out) = s.json("POST", "/v2/models/ens/infer", body(&values));
        assert_eq!(status, 200, "{out}");
        for name in ["OUT_B", "OUT_C0", "OUT_C1"] {
            assert_eq!(output(&out, name)["data"], json!(values), "{name}: {out}");
            assert_eq!(output(&out, name)["shape"], json!([1, 4]));
        }
    }
    // Only the outputs asked for.
    let mut req = body(&[1, 2, 3, 4]);
    req["outputs"] = json!([{"name": "OUT_C1"}]);
    let (status, out) = s.json("POST", "/v2/models/ens/infer", req);
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["outputs"].as_array().unwrap().len(), 1);
    assert_eq!(out["outputs"][0]["name"], "OUT_C1");
    // Statistics: the ensemble and each composing model count the requests
    // they ran; the last asked only for OUT_C1, so `b` (which makes only
    // OUT_B) did not run for it, as Triton prunes such a step.
    assert_eq!(stats(&s, "ens")["inference_stats"]["success"]["count"], 4);
    for (m, n) in [("a", 4), ("b", 3), ("pair", 4)] {
        assert_eq!(
            stats(&s, m)["inference_stats"]["success"]["count"],
            n,
            "{m}"
        );
    }
}

#[test]
fn a_failing_step_fails_the_request_with_its_error() {
    let repo = repo();
    let s = TestServer::start(repo.path(), ControlMode::None, &[], 1 << 20);
    // Five elements pass the ensemble ([-1]) and step a, but not b ([4]).
    let (status, out) = s.json("POST", "/v2/models/ens/infer", body(&[1, 2, 3, 4, 5]));
    assert_eq!(status, 400, "{out}");
    let message = out["error"].as_str().unwrap();
    assert!(
        message.starts_with(
            "in ensemble 'ens', [request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'b'. Expected [-1,4], got [1,5]."
        ),
        "{message}"
    );
    assert_eq!(stats(&s, "ens")["inference_stats"]["fail"]["count"], 1);
    // The server and the ensemble go on.
    let (status, _) = s.json("POST", "/v2/models/ens/infer", body(&[1, 2, 3, 4]));
    assert_eq!(status, 200);
}

#[test]
fn a_composing_model_unloaded_or_reloaded() {
    let repo = repo();
    let s = Arc::new(TestServer::start(
        repo.path(),
        ControlMode::Explicit,
        &["a", "b", "pair", "ens"],
        1 << 20,
    ));
    let (status, out) = s.json("POST", "/v2/repository/models/b/unload", json!({}));
    assert_eq!(status, 200, "{out}");
    let (status, out) = s.json("POST", "/v2/models/ens/infer", body(&[1, 2, 3, 4]));
    assert_eq!(status, 503, "{out}");
    let message = out["error"].as_str().unwrap();
    assert!(
        message.starts_with("ensemble 'ens' is not ready: composing model 'b' is not available: "),
        "{message}"
    );
    // Not ready, and UNAVAILABLE in the index with the reason.
    let (status, _) = s.json("GET", "/v2/models/ens/ready", Value::Null);
    assert_eq!(status, 400);
    let (_, index) = s.json("POST", "/v2/repository/index", json!({}));
    let entry = index
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "ens")
        .unwrap()
        .clone();
    assert_eq!(entry["state"], "UNAVAILABLE", "{index}");
    assert!(
        entry["reason"]
            .as_str()
            .unwrap()
            .contains("composing model 'b'"),
        "{entry}"
    );
    let (status, out) = s.json("POST", "/v2/repository/models/b/load", json!({}));
    assert_eq!(status, 200, "{out}");
    let (status, _) = s.json("GET", "/v2/models/ens/ready", Value::Null);
    assert_eq!(status, 200);
    // Reload b again while requests run: none is lost.
    let runner = {
        let s = Arc::clone(&s);
        std::thread::spawn(move || {
            (0..60)
                .map(|i| {
                    s.json("POST", "/v2/models/ens/infer", body(&[i, i, i, i]))
                        .0
                })
                .filter(|&st| st != 200)
                .count()
        })
    };
    for _ in 0..3 {
        let (status, out) = s.json("POST", "/v2/repository/models/b/load", json!({}));
        assert_eq!(status, 200, "{out}");
    }
    assert_eq!(
        runner.join().unwrap(),
        0,
        "requests failed during the reload"
    );
}

#[test]
fn a_step_starts_when_its_inputs_exist_not_when_its_wave_ends() {
    // IN feeds a slow step (900 ms) and a fast one; the fast one's output
    // feeds a third step. The third must run while the slow one still runs.
    let dir = tempfile::tempdir().unwrap();
    let delayed = |ms: u32| {
        format!(
            r#"backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }} ]
parameters {{ key: "execute_delay_ms" value: {{ string_value: "{ms}" }} }}
"#
        )
    };
    write(dir.path(), "slow", &delayed(900));
    write(dir.path(), "fast", &delayed(0));
    write(dir.path(), "mid", &delayed(50));
    write(
        dir.path(),
        "dag",
        r#"platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT_S" data_type: TYPE_INT32 dims: [ -1 ] },
         { name: "OUT_M" data_type: TYPE_INT32 dims: [ -1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "slow" model_version: -1
      input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT_S" } },
    { model_name: "fast" model_version: -1
      input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "t" } },
    { model_name: "mid" model_version: -1
      input_map { key: "INPUT0" value: "t" } output_map { key: "OUTPUT0" value: "OUT_M" } }
  ]
}
"#,
    );
    let s = Arc::new(TestServer::start(
        dir.path(),
        ControlMode::None,
        &[],
        1 << 20,
    ));
    let request = {
        let s = Arc::clone(&s);
        std::thread::spawn(move || s.json("POST", "/v2/models/dag/infer", body(&[7, 8])))
    };
    std::thread::sleep(std::time::Duration::from_millis(450));
    let count = |m: &str| {
        stats(&s, m)["inference_stats"]["success"]["count"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(count("slow"), 0, "the slow step is still running");
    assert_eq!(
        count("mid"),
        1,
        "the third step ran without waiting for the slow one"
    );
    let (status, out) = request.join().unwrap();
    assert_eq!(status, 200, "{out}");
    assert_eq!(output(&out, "OUT_M")["data"], json!([7, 8]));
    assert_eq!(output(&out, "OUT_S")["data"], json!([7, 8]));
}
