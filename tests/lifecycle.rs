//! The repository lifecycle under a running server: models added, changed
//! and removed under polling; unloading and reloading while requests are in
//! flight, with none lost and no gap in service.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use trtis::core::repository::ControlMode;

use crate::util::TestServer;

fn identity_model(repo: &Path, name: &str, max_batch: i32, delay_ms: u64) {
    let dir = repo.join(name);
    std::fs::create_dir_all(dir.join("1")).unwrap();
    std::fs::write(dir.join("1/.keep"), "").unwrap();
    std::fs::write(
        dir.join("config.pbtxt"),
        format!(
            r#"backend: "identity"
max_batch_size: {max_batch}
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
parameters {{ key: "execute_delay_ms" value: {{ string_value: "{delay_ms}" }} }}
"#
        ),
    )
    .unwrap();
}

fn infer_body(x: i32) -> Value {
    json!({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [x]}]})
}

fn poll(s: &TestServer) -> Vec<String> {
    let engine = s.engine();
    s.runtime()
        .block_on(engine.poll())
        .into_iter()
        .map(|e| e.message)
        .collect()
}

#[test]
fn polling_sees_models_added_changed_and_removed() {
    let repo = tempfile::tempdir().unwrap();
    identity_model(repo.path(), "first", 4, 0);
    let s = TestServer::start(repo.path(), ControlMode::Poll, &[], 1 << 20);
    assert_eq!(s.request("GET", "/v2/models/first/ready", &[], b"").0, 200);

    identity_model(repo.path(), "second", 4, 0);
    assert_eq!(poll(&s), Vec::<String>::new());
    assert_eq!(s.request("GET", "/v2/models/second/ready", &[], b"").0, 200);

    // Change: a new max batch size shows in the served config.
    std::thread::sleep(Duration::from_millis(20));
    identity_model(repo.path(), "second", 2, 0);
    assert_eq!(poll(&s), Vec::<String>::new());
    let (_, config) = s.json("GET", "/v2/models/second/config", Value::Null);
    assert_eq!(config["max_batch_size"], 2);

    // A broken change: the model goes unavailable with the reason.
    std::fs::write(
        repo.path().join("first/config.pbtxt"),
        "max_batch_size: -1\nbackend: \"identity\"",
    )
    .unwrap();
    let errors = poll(&s);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("'max_batch_size' must be non-negative value for first"),
        "{errors:?}"
    );

    std::fs::remove_dir_all(repo.path().join("second")).unwrap();
    assert_eq!(poll(&s), Vec::<String>::new());
    let (status, _) = s.json("GET", "/v2/models/second", Value::Null);
    assert_eq!(status, 404);
    let (_, index) = s.json("POST", "/v2/repository/index", Value::Null);
    let names: Vec<&str> = index
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["first"]);
}

#[test]
fn unloading_lets_requests_in_flight_finish() {
    let repo = tempfile::tempdir().unwrap();
    identity_model(repo.path(), "slow", 4, 300);
    let s = Arc::new(TestServer::start(
        repo.path(),
        ControlMode::Explicit,
        &["slow"],
        1 << 20,
    ));
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || s.json("POST", "/v2/models/slow/infer", infer_body(i)))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        s.json("POST", "/v2/repository/models/slow/unload", Value::Null)
            .0,
        200
    );
    // Requests are still running on it: UNLOADING until they finish.
    let (_, index) = s.json("POST", "/v2/repository/index", Value::Null);
    assert_eq!(index[0]["state"], "UNLOADING", "{index}");
    for (i, h) in handles.into_iter().enumerate() {
        let (status, out) = h.join().unwrap();
        assert_eq!(status, 200, "request {i} was lost: {out}");
        assert_eq!(out["outputs"][0]["data"], json!([i]));
    }
    let (_, index) = s.json("POST", "/v2/repository/index", Value::Null);
    assert_eq!(index[0]["state"], "UNAVAILABLE", "{index}");
    assert_eq!(index[0]["reason"], "unloaded");
    // After the unload, new requests are refused cleanly.
    let (status, err) = s.json("POST", "/v2/models/slow/infer", infer_body(9));
    assert_eq!(status, 404, "{err}");
    assert_eq!(
        err["error"],
        "Request for unknown model: 'slow' has no available versions"
    );
}

#[test]
fn a_reload_serves_the_old_version_until_the_new_one_is_ready() {
    let repo = tempfile::tempdir().unwrap();
    identity_model(repo.path(), "steady", 4, 5);
    let s = Arc::new(TestServer::start(
        repo.path(),
        ControlMode::Poll,
        &[],
        1 << 20,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let client = {
        let (s, stop, served) = (Arc::clone(&s), Arc::clone(&stop), Arc::clone(&served));
        std::thread::spawn(move || {
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let (status, out) = s.json("POST", "/v2/models/steady/infer", infer_body(1));
                if status == 200 {
                    served.fetch_add(1, Ordering::Relaxed);
                } else {
                    failures.push(out);
                }
            }
            failures
        })
    };
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(30));
        identity_model(repo.path(), "steady", 4 + round, 5);
        assert_eq!(poll(&s), Vec::<String>::new());
    }
    std::thread::sleep(Duration::from_millis(30));
    stop.store(true, Ordering::Relaxed);
    let failures = client.join().unwrap();
    assert!(
        failures.is_empty(),
        "requests failed during reloads: {failures:?}"
    );
    assert!(served.load(Ordering::Relaxed) > 5);
    let (_, config) = s.json("GET", "/v2/models/steady/config", Value::Null);
    assert_eq!(config["max_batch_size"], 6);
}

#[test]
fn a_gpu_instance_group_fails_the_load_without_a_gpu() {
    let repo = tempfile::tempdir().unwrap();
    identity_model(repo.path(), "gpu_model", 4, 0);
    let config = repo.path().join("gpu_model/config.pbtxt");
    let text =
        std::fs::read_to_string(&config).unwrap() + "instance_group [ { kind: KIND_GPU } ]\n";
    std::fs::write(&config, text).unwrap();
    let mut server_config = trtis::core::ServerConfig::new(repo.path());
    server_config.gpus = &[];
    let (engine, errors) = trtis::core::Engine::start(server_config).unwrap();
    assert_eq!(errors.len(), 1);
    assert_eq!(
        errors[0].message,
        "load failed for model 'gpu_model': instance group gpu_model_0 of model gpu_model has kind KIND_GPU but no GPUs are available"
    );
    let index = engine.index(false).unwrap();
    assert_eq!(index[0].state.name(), "UNAVAILABLE");
    assert!(index[0].reason.contains("KIND_GPU"));
    assert!(
        !engine.ready(),
        "strict readiness: a failed model makes the server not ready"
    );
}
