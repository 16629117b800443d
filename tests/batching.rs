//! The dynamic batcher through a real server: concurrent requests within the
//! queue delay execute as one batch, each caller gets its own rows back, and
//! the statistics count one execution of the combined size.

use std::sync::Arc;

use serde_json::{json, Value};
use trtis::core::repository::ControlMode;

use crate::http::TestServer;

fn repo(delay_us: u64, preferred: &str, execute_delay_ms: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("batched");
    std::fs::create_dir_all(m.join("1")).unwrap();
    std::fs::write(m.join("1/.keep"), "").unwrap();
    std::fs::write(
        m.join("config.pbtxt"),
        format!(
            r#"backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{ max_queue_delay_microseconds: {delay_us} {preferred} }}
parameters {{ key: "execute_delay_ms" value: {{ string_value: "{execute_delay_ms}" }} }}
"#
        ),
    )
    .unwrap();
    dir
}

fn body(i: i32, rows: usize) -> Value {
    let data: Vec<i32> = (0..rows as i32 * 2).map(|k| i * 100 + k).collect();
    json!({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [rows, 2], "data": data}]})
}

fn run_concurrently(s: &Arc<TestServer>, requests: Vec<(i32, usize)>) {
    let handles: Vec<_> = requests
        .into_iter()
        .map(|(i, rows)| {
            let s = Arc::clone(s);
            std::thread::spawn(move || {
                let (status, out) = s.json("POST", "/v2/models/batched/infer", body(i, rows));
                assert_eq!(status, 200, "{out}");
                let expected: Vec<i32> = (0..rows as i32 * 2).map(|k| i * 100 + k).collect();
                assert_eq!(
                    out["outputs"][0]["data"],
                    json!(expected),
                    "request {i} got another's rows"
                );
                assert_eq!(out["outputs"][0]["shape"], json!([rows, 2]));
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

fn stats(s: &TestServer) -> Value {
    let (_, v) = s.json("GET", "/v2/models/batched/stats", Value::Null);
    v["model_stats"][0].clone()
}

#[test]
fn requests_within_the_delay_run_as_one_batch() {
    let repo = repo(300_000, "", 0);
    let s = Arc::new(TestServer::start(
        repo.path(),
        ControlMode::None,
        &[],
        1 << 20,
    ));
    run_concurrently(&s, vec![(1, 1), (2, 2), (3, 1)]);
    let st = stats(&s);
    assert_eq!(st["inference_count"], 4);
    assert_eq!(st["execution_count"], 1, "{st}");
    assert_eq!(st["batch_stats"][0]["batch_size"], 4);
    assert_eq!(st["inference_stats"]["success"]["count"], 3);
}

#[test]
fn a_preferred_size_is_sent_without_waiting_and_the_rest_later() {
    // The delay is long: only the preferred size (2) lets batches go early.
    let repo = repo(2_000_000, "preferred_batch_size: [ 2 ]", 0);
    let s = Arc::new(TestServer::start(
        repo.path(),
        ControlMode::None,
        &[],
        1 << 20,
    ));
    let started = std::time::Instant::now();
    run_concurrently(&s, vec![(1, 1), (2, 1), (3, 1), (4, 1)]);
    assert!(
        started.elapsed() < std::time::Duration::from_millis(1900),
        "batches waited for the delay"
    );
    let st = stats(&s);
    assert_eq!(st["inference_count"], 4);
    assert_eq!(st["execution_count"], 2, "{st}");
}

#[test]
fn batches_grow_while_the_instance_is_busy() {
    // No delay: the first request runs alone; the ones that arrive while it
    // runs (50 ms) are batched together behind it.
    let repo = repo(0, "", 50);
    let s = Arc::new(TestServer::start(
        repo.path(),
        ControlMode::None,
        &[],
        1 << 20,
    ));
    let first = {
        let s = Arc::clone(&s);
        std::thread::spawn(move || run_concurrently(&s, vec![(9, 1)]))
    };
    std::thread::sleep(std::time::Duration::from_millis(15));
    run_concurrently(&s, vec![(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]);
    first.join().unwrap();
    let st = stats(&s);
    assert_eq!(st["inference_count"], 6);
    assert!(st["execution_count"].as_u64().unwrap() <= 3, "{st}");
}
