//! The dynamic batcher through a real server: concurrent requests within the
//! queue delay execute as one batch, each caller gets its own rows back, and
//! the statistics count one execution of the combined size.

use std::sync::Arc;

use serde_json::{json, Value};
use trtis::core::repository::ControlMode;

use crate::util::{recorded, slept, thread_sleeps, write_model, Serve, TestServer};

fn repo(delay_us: u64, preferred: &str, execute_delay_ms: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_model(
        dir.path(),
        "batched",
        &format!(
            r#"backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{ max_queue_delay_microseconds: {delay_us} {preferred} }}
parameters {{ key: "execute_delay_ms" value: {{ string_value: "{execute_delay_ms}" }} }}
"#
        ),
    );
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

// ---------------------------------------------------------------------------
// Priorities, queue policies, preserve_ordering: an identity model whose
// execution sleeps the value of its input in milliseconds.

/// A repository with one identity model `m` (INT32 [1], sleeping INPUT0 ms
/// per execution) and this `dynamic_batching` body.
fn policy_repo(batching: &str, instances: usize, max_batch: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_model(
        dir.path(),
        "m",
        &format!(
            r#"backend: "identity"
max_batch_size: {max_batch}
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
dynamic_batching {{ {batching} }}
parameters {{ key: "delay_input" value: {{ string_value: "INPUT0" }} }}
"#
        ),
    );
    dir
}

/// An inference request sleeping `ms`, with these request parameters.
fn sleeping(ms: i32, params: Value) -> Value {
    json!({"parameters": params,
           "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [ms]}]})
}

/// Sends the requests in order, `gap` apart, each on its own thread;
/// returns (label, status, body) in the order the answers arrived.
fn in_order(
    s: &Arc<TestServer>,
    requests: Vec<(&'static str, Value)>,
    gap: std::time::Duration,
) -> Vec<(&'static str, u16, Value)> {
    let arrived = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for (label, body) in requests {
        let s = Arc::clone(s);
        let arrived = Arc::clone(&arrived);
        handles.push(std::thread::spawn(move || {
            let (status, out) = s.json("POST", "/v2/models/m/infer", body);
            arrived.lock().unwrap().push((label, status, out));
        }));
        std::thread::sleep(gap);
    }
    for h in handles {
        h.join().unwrap();
    }
    Arc::try_unwrap(arrived).unwrap().into_inner().unwrap()
}

fn labels(answers: &[(&'static str, u16, Value)]) -> Vec<&'static str> {
    answers.iter().map(|(l, _, _)| *l).collect()
}

fn start(repo: &tempfile::TempDir) -> Arc<TestServer> {
    Arc::new(TestServer::start(
        repo.path(),
        ControlMode::None,
        &[],
        1 << 20,
    ))
}

const GAP: std::time::Duration = std::time::Duration::from_millis(40);

#[test]
fn preserve_ordering_answers_in_arrival_order_under_shuffled_completion() {
    // Two instances: A (400 ms) and B (0 ms) run at the same time, so B
    // finishes first; with preserve_ordering its answer waits for A's and
    // both leave together (so only "B did not arrive well before A" is
    // checked: two answers sent back to back may reach two client threads
    // in either order).
    for preserve in [false, true] {
        let repo = policy_repo(&format!("preserve_ordering: {preserve}"), 2, 1);
        let s = start(&repo);
        let send = |ms: i32| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                let (status, _) = s.json("POST", "/v2/models/m/infer", sleeping(ms, json!({})));
                (status, std::time::Instant::now())
            })
        };
        let a = send(400);
        std::thread::sleep(GAP);
        let b = send(0);
        let (a_status, a_at) = a.join().unwrap();
        let (b_status, b_at) = b.join().unwrap();
        assert_eq!((a_status, b_status), (200, 200));
        let b_early = a_at.saturating_duration_since(b_at);
        if preserve {
            assert!(
                b_early < std::time::Duration::from_millis(100),
                "B arrived {b_early:?} before A despite preserve_ordering"
            );
        } else {
            assert!(
                b_early > std::time::Duration::from_millis(200),
                "control: without preserve_ordering B should arrive first ({b_early:?})"
            );
        }
    }
}

#[test]
fn higher_priority_requests_overtake_queued_ones() {
    let repo = policy_repo("priority_levels: 2 default_priority_level: 2", 1, 1);
    let s = start(&repo);
    // The blocker occupies the one instance; L1 and L2 queue at the default
    // level, H at level 1, and H runs first. Priority 0 and 7 (no such
    // level) are the default level.
    let answers = in_order(
        &s,
        vec![
            ("blocker", sleeping(400, json!({}))),
            ("L1", sleeping(30, json!({"priority": 0}))),
            ("L2", sleeping(30, json!({"priority": 7}))),
            ("H", sleeping(30, json!({"priority": 1}))),
        ],
        GAP,
    );
    assert!(answers.iter().all(|(_, st, _)| *st == 200), "{answers:?}");
    assert_eq!(labels(&answers), ["blocker", "H", "L1", "L2"]);
}

#[test]
fn a_full_queue_refuses_at_once_with_tritons_message() {
    let repo = policy_repo(
        "priority_levels: 2 default_priority_level: 2 \
         priority_queue_policy { key: 2 value { max_queue_size: 1 } }",
        1,
        1,
    );
    let s = start(&repo);
    let mut body = sleeping(0, json!({}));
    body["id"] = json!("q3");
    let answers = in_order(
        &s,
        vec![
            ("blocker", sleeping(500, json!({}))),
            ("queued", sleeping(0, json!({}))),
            ("refused", sleeping(0, json!({}))),
            ("refused-id", body),
            ("other-level", sleeping(0, json!({"priority": 1}))),
        ],
        GAP,
    );
    let by = |l: &str| answers.iter().find(|a| a.0 == l).unwrap().clone();
    assert_eq!(by("blocker").1, 200);
    assert_eq!(by("queued").1, 200);
    assert_eq!(by("other-level").1, 200, "level 1 has no limit");
    assert_eq!(by("refused").1, 503);
    assert_eq!(
        by("refused").2["error"],
        "[request id: <id_unknown>] Exceeds maximum queue size"
    );
    assert_eq!(
        by("refused-id").2["error"],
        "[request id: q3] Exceeds maximum queue size"
    );
    // Refused at once: before the blocker finished.
    assert_eq!(&labels(&answers)[..2], ["refused", "refused-id"]);
    let text = trtis::server::prometheus::render(&s.engine().loaded_models());
    assert!(
        text.contains(
            "nv_inference_request_failure{model=\"m\",reason=\"REJECTED\",version=\"1\"} 2"
        ),
        "{text}"
    );
}

#[test]
fn queue_timeouts_reject_or_delay_and_lose_nothing() {
    let repo = policy_repo(
        "priority_levels: 2 default_priority_level: 2 \
         priority_queue_policy { key: 1 value { timeout_action: REJECT default_timeout_microseconds: 100000 } } \
         priority_queue_policy { key: 2 value { timeout_action: DELAY default_timeout_microseconds: 100000 } }",
        1,
        1,
    );
    let s = start(&repo);
    let answers = in_order(
        &s,
        vec![
            ("blocker", sleeping(500, json!({}))),
            ("delayed", sleeping(0, json!({}))),
            ("rejected", sleeping(0, json!({"priority": 1}))),
        ],
        GAP,
    );
    let by = |l: &str| answers.iter().find(|a| a.0 == l).unwrap().clone();
    assert_eq!(by("rejected").1, 503, "{answers:?}");
    assert_eq!(by("rejected").2["error"], "Request timeout expired");
    assert_eq!(by("delayed").1, 200, "DELAY keeps the request: {answers:?}");
    assert_eq!(by("delayed").2["outputs"][0]["data"], json!([0]));
    // The rejection does not wait for the instance.
    assert_eq!(labels(&answers)[0], "rejected");
    let (_, st) = s.json("GET", "/v2/models/m/stats", Value::Null);
    let inference = &st["model_stats"][0]["inference_stats"];
    assert_eq!(inference["fail"]["count"], 1, "{st}");
    assert_eq!(inference["success"]["count"], 2, "{st}");
}

#[test]
fn the_timeout_parameter_only_lowers_an_overridable_default() {
    for (policy, timeout, expect) in [
        // Allowed and shorter: rejected.
        (
            "allow_timeout_override: true default_timeout_microseconds: 10000000",
            50_000,
            503,
        ),
        // Not allowed: the default (10 s) stands.
        (
            "allow_timeout_override: false default_timeout_microseconds: 10000000",
            50_000,
            200,
        ),
        // No default timeout: nothing to lower (Triton ignores it).
        ("allow_timeout_override: true", 50_000, 200),
    ] {
        let repo = policy_repo(&format!("default_queue_policy {{ {policy} }}"), 1, 1);
        let s = start(&repo);
        let answers = in_order(
            &s,
            vec![
                ("blocker", sleeping(300, json!({}))),
                ("timed", sleeping(0, json!({"timeout": timeout}))),
            ],
            GAP,
        );
        let timed = answers.iter().find(|a| a.0 == "timed").unwrap();
        assert_eq!(timed.1, expect, "{policy}: {answers:?}");
        if expect == 503 {
            assert_eq!(timed.2["error"], "Request timeout expired");
        }
    }
}

#[test]
fn schedule_parameters_of_the_wrong_type_are_refused() {
    let repo = policy_repo("", 1, 1);
    let s = start(&repo);
    for params in [
        json!({"priority": -1}),
        json!({"timeout": "soon"}),
        json!({"priority": 1.5}),
    ] {
        let key = params.as_object().unwrap().keys().next().unwrap().clone();
        let (status, out) = s.json("POST", "/v2/models/m/infer", sleeping(0, params));
        assert_eq!(status, 400);
        assert_eq!(
            out["error"],
            format!(
                "Unable to parse '{key}': attempt to access JSON non-unsigned-integer as unsigned-integer"
            )
        );
    }
    let (_, meta) = s.json("GET", "/v2", Value::Null);
    assert!(
        meta["extensions"]
            .as_array()
            .unwrap()
            .contains(&json!("schedule_policy")),
        "{meta}"
    );
}

#[test]
fn a_request_whose_caller_left_does_not_hold_a_queue_place() {
    let repo = policy_repo("default_queue_policy { max_queue_size: 1 }", 1, 1);
    let s = start(&repo);
    let blocker = {
        let s = Arc::clone(&s);
        std::thread::spawn(move || {
            s.json("POST", "/v2/models/m/infer", sleeping(600, json!({})))
                .0
        })
    };
    std::thread::sleep(GAP);
    // A caller queues a request behind the blocker, then hangs up.
    {
        use std::io::Write;
        let body = serde_json::to_vec(&sleeping(0, json!({}))).unwrap();
        let mut c = std::net::TcpStream::connect(s.addr).unwrap();
        write!(
            c,
            "POST /v2/models/m/infer HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        c.write_all(&body).unwrap();
        std::thread::sleep(GAP);
    }
    std::thread::sleep(GAP);
    // The one place in the queue is free again for a live request.
    let (status, out) = s.json("POST", "/v2/models/m/infer", sleeping(0, json!({})));
    assert_eq!(status, 200, "{out}");
    assert_eq!(blocker.join().unwrap(), 200);
}

#[test]
fn a_batch_is_counted_once_even_when_its_first_caller_left() {
    // The batch forms within the 200 ms delay and runs for 300 ms; the
    // caller of its first request hangs up while it runs.
    let repo = repo(200_000, "", 300);
    let s = Arc::new(TestServer::start(
        repo.path(),
        ControlMode::None,
        &[],
        1 << 20,
    ));
    let first = {
        use std::io::Write;
        let body = serde_json::to_vec(&body(1, 1)).unwrap();
        let mut c = std::net::TcpStream::connect(s.addr).unwrap();
        write!(
            c,
            "POST /v2/models/batched/infer HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        c.write_all(&body).unwrap();
        c
    };
    std::thread::sleep(std::time::Duration::from_millis(30));
    let others = {
        let s = Arc::clone(&s);
        std::thread::spawn(move || run_concurrently(&s, vec![(2, 1), (3, 1)]))
    };
    std::thread::sleep(std::time::Duration::from_millis(320));
    drop(first);
    others.join().unwrap();
    let st = stats(&s);
    assert_eq!(st["execution_count"], 1, "{st}");
    assert_eq!(st["batch_stats"][0]["batch_size"], 3, "{st}");
    assert_eq!(st["batch_stats"][0]["compute_infer"]["count"], 1, "{st}");
}

#[test]
fn unloading_sends_queued_requests_without_waiting_out_the_delay() {
    // A 60 s queue delay and a preferred size that never forms.
    let repo = repo(60_000_000, "preferred_batch_size: [ 8 ]", 0);
    let s = Arc::new(TestServer::start(
        repo.path(),
        ControlMode::Explicit,
        &["batched"],
        1 << 20,
    ));
    let waiting = {
        let s = Arc::clone(&s);
        std::thread::spawn(move || s.json("POST", "/v2/models/batched/infer", body(3, 1)))
    };
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(!waiting.is_finished());
    let started = std::time::Instant::now();
    let (status, out) = s.json("POST", "/v2/repository/models/batched/unload", json!({}));
    assert_eq!(status, 200, "{out}");
    let (status, out) = waiting.join().unwrap();
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["outputs"][0]["data"], json!([300, 301]));
    // Not after the 60 s delay (a wide margin, not a timing check).
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    // The version is gone: new requests are refused.
    let (status, _) = s.json("POST", "/v2/models/batched/infer", body(4, 1));
    assert_ne!(status, 200);
}

fn ragged_repo(batching: &str, record: &std::path::Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_model(
        dir.path(),
        "ragged",
        &format!(
            r#"backend: "identity"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
batch_input [
  {{ kind: BATCH_ELEMENT_COUNT target_name: "COUNT" data_type: TYPE_INT32 source_input: "IN" }},
  {{ kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "OFFSETS" data_type: TYPE_FP32 source_input: "IN" }}
]
batch_output [ {{ kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUT" source_input: "IN" }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{batching}
parameters {{ key: "record_inputs" value: {{ string_value: "{}" }} }}
"#,
            record.display()
        ),
    );
    dir
}

fn ragged_call(s: &TestServer, len: usize) -> Value {
    let data: Vec<f32> = (0..len).map(|k| (len * 10 + k) as f32).collect();
    let (status, out) = s.json(
        "POST",
        "/v2/models/ragged/infer",
        json!({"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, len], "data": data}]}),
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["outputs"][0]["shape"], json!([1, len]), "{out}");
    assert_eq!(
        out["outputs"][0]["data"],
        json!(data),
        "request of {len} got another's elements"
    );
    out
}

#[test]
fn ragged_requests_batch_with_batch_inputs_and_scattered_outputs() {
    let record_dir = tempfile::tempdir().unwrap();
    let record = record_dir.path().join("inputs.jsonl");
    // The batch goes when all four are there, however slow the machine.
    let repo = ragged_repo(
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 30000000 }",
        &record,
    );
    let s = Arc::new(TestServer::start(
        repo.path(),
        ControlMode::None,
        &[],
        1 << 20,
    ));
    // Triton's QA lengths, sent together.
    let handles: Vec<_> = [2usize, 4, 1, 3]
        .into_iter()
        .map(|len| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || ragged_call(&s, len))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let st = {
        let (_, v) = s.json("GET", "/v2/models/ragged/stats", Value::Null);
        v["model_stats"][0].clone()
    };
    assert_eq!(st["execution_count"], 1, "{st}");
    let lines = recorded(&record);
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    // The ragged input reaches the model flattened: 2 + 4 + 1 + 3.
    assert_eq!(line["IN"]["shape"], json!([10]), "{line}");
    assert_eq!(line["COUNT"]["shape"], json!([4]));
    assert_eq!(line["COUNT"]["datatype"], "INT32");
    assert_eq!(line["OFFSETS"]["datatype"], "FP32");
    // COUNT follows the requests in the batch's order, which IN shows (a
    // request of length n sends n*10, n*10 + 1, ...); OFFSETS are its
    // running sums from zero.
    let counts: Vec<i64> = serde_json::from_value(line["COUNT"]["values"].clone()).unwrap();
    let values: Vec<f64> = serde_json::from_value(line["IN"]["values"].clone()).unwrap();
    let mut at = 0usize;
    let mut offsets = vec![0.0];
    for &n in &counts {
        let expected: Vec<f64> = (0..n).map(|k| (n * 10 + k) as f64).collect();
        assert_eq!(values[at..at + n as usize], expected[..], "{line}");
        at += n as usize;
        offsets.push(at as f64);
    }
    let mut sorted = counts.clone();
    sorted.sort();
    assert_eq!(sorted, vec![1, 2, 3, 4]);
    assert_eq!(line["OFFSETS"]["values"], json!(offsets));
}

#[test]
fn a_ragged_request_alone_is_flattened_and_gets_its_batch_inputs() {
    // Without dynamic batching, and with it for a lone request: the model
    // gets the same tensors either way.
    for batching in ["", "dynamic_batching { }"] {
        let record_dir = tempfile::tempdir().unwrap();
        let record = record_dir.path().join("inputs.jsonl");
        let repo = ragged_repo(batching, &record);
        let s = TestServer::start(repo.path(), ControlMode::None, &[], 1 << 20);
        ragged_call(&s, 5);
        let lines = recorded(&record);
        let line = &lines[0];
        assert_eq!(line["IN"]["shape"], json!([5]), "{batching}: {line}");
        assert_eq!(line["COUNT"]["values"], json!([5]), "{batching}: {line}");
        assert_eq!(
            line["OFFSETS"]["values"],
            json!([0.0, 5.0]),
            "{batching}: {line}"
        );
    }
}

#[test]
fn batch_inputs_with_the_sequence_batcher_fail_the_load_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    write_model(
        dir.path(),
        "seq_ragged",
        r#"backend: "identity"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "COUNT" data_type: TYPE_INT32 source_input: "IN" } ]
sequence_batching { }
"#,
    );
    let config = trtis::core::engine::ServerConfig::new(dir.path());
    let (engine, errors) = trtis::core::engine::Engine::start(config).unwrap();
    let all = format!("{errors:?}");
    assert!(
        all.contains("batch inputs are supported with the default scheduler and the dynamic batcher, not with the sequence batcher"),
        "{all}"
    );
    engine.shutdown();
}

/// Sends `model` (an identity model scattering OUT by its ragged IN) one
/// request of `[1, rows, width]` on another thread; checks it gets its own
/// values back in its own shape.
fn echo_rows(
    s: &Arc<TestServer>,
    model: &'static str,
    rows: usize,
    width: usize,
) -> std::thread::JoinHandle<()> {
    let s = Arc::clone(s);
    std::thread::spawn(move || {
        let data: Vec<f32> = (0..rows * width).map(|k| (rows * 10 + k) as f32).collect();
        let (status, out) = s.json(
            "POST",
            &format!("/v2/models/{model}/infer"),
            json!({"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, rows, width], "data": data}]}),
        );
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["outputs"][0]["shape"], json!([1, rows, width]), "{out}");
        assert_eq!(out["outputs"][0]["data"], json!(data), "{out}");
    })
}

#[test]
fn ragged_batches_through_the_server_edge_cases() {
    // Item shapes, a scattered output with a fixed dimension, an optional
    // input left out, warmup with batch inputs, and request shapes too
    // large to scatter.
    let record_dir = tempfile::tempdir().unwrap();
    let record = record_dir.path().join("inputs.jsonl");
    let dir = tempfile::tempdir().unwrap();
    write_model(
        dir.path(),
        "shapes",
        &format!(
            r#"backend: "identity"
max_batch_size: 8
input [
  {{ name: "IN" data_type: TYPE_FP32 dims: [ -1, 2 ] allow_ragged_batch: true }},
  {{ name: "EXTRA" data_type: TYPE_FP32 dims: [ 1 ] optional: true }}
]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1, 2 ] }} ]
batch_input [ {{ kind: BATCH_ITEM_SHAPE target_name: "SHAPES" data_type: TYPE_INT32 source_input: "IN" }} ]
batch_output [ {{ kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUT" source_input: "IN" }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{ preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 30000000 }}
model_warmup [ {{ name: "w" batch_size: 2 inputs {{ key: "IN" value: {{ data_type: TYPE_FP32 dims: [ 3, 2 ] zero_data: true }} }} }} ]
parameters {{ key: "record_inputs" value: {{ string_value: "{}" }} }}
"#,
            record.display()
        ),
    );
    write_model(
        dir.path(),
        "wide",
        r#"backend: "identity"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1, -1 ] allow_ragged_batch: true } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUT" source_input: "IN" } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 30000000 }
"#,
    );
    let s = Arc::new(TestServer::start(
        dir.path(),
        ControlMode::None,
        &[],
        1 << 20,
    ));
    // Warmup ran first: a request of batch 2 of [3, 2] items.
    let lines = recorded(&record);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["IN"]["shape"], json!([12]));
    assert_eq!(lines[0]["SHAPES"]["shape"], json!([2, 2]));
    assert_eq!(lines[0]["SHAPES"]["values"], json!([3, 2, 3, 2]));
    // Two requests without the optional EXTRA: one of 1 x [1, 2] and one
    // of 1 x [2, 2]; each gets its own rows back, shaped [1, n, 2].
    for h in [echo_rows(&s, "shapes", 1, 2), echo_rows(&s, "shapes", 2, 2)] {
        h.join().unwrap();
    }
    let lines = recorded(&record);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[1]["IN"]["shape"], json!([6]));
    let shapes = &lines[1]["SHAPES"]["values"];
    assert!(
        shapes == &json!([1, 2, 2, 2]) || shapes == &json!([2, 2, 1, 2]),
        "{}",
        lines[1]
    );
    // `wide` scatters OUT [-1, 3] by IN [-1, -1]: an IN of no elements
    // but a huge second dimension is a valid request whose scattered size
    // overflows: a clear error for both in the batch, and the model still
    // serves afterwards.
    let huge = |s: &Arc<TestServer>| {
        let s = Arc::clone(s);
        std::thread::spawn(move || {
            s.json(
                "POST",
                "/v2/models/wide/infer",
                json!({"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 3u64 << 61, 0], "data": []}]}),
            )
        })
    };
    for h in [huge(&s), huge(&s)] {
        let (status, out) = h.join().unwrap();
        assert_ne!(status, 200, "{out}");
        assert!(
            out["error"]
                .as_str()
                .unwrap_or_default()
                .contains("too large"),
            "{out}"
        );
    }
    for h in [echo_rows(&s, "wide", 1, 3), echo_rows(&s, "wide", 2, 3)] {
        h.join().unwrap();
    }
}

#[test]
fn a_request_without_a_batch_inputs_source_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    write_model(
        dir.path(),
        "opt",
        r#"backend: "identity"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true optional: true }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 source_input: "IN" } ]
dynamic_batching { }
"#,
    );
    let s = TestServer::start(dir.path(), ControlMode::None, &[], 1 << 20);
    let (status, out) = s.json(
        "POST",
        "/v2/models/opt/infer",
        json!({"inputs": [{"name": "A", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}),
    );
    assert_eq!(status, 400, "{out}");
    assert_eq!(
        out["error"],
        "[request id: <id_unknown>] input 'IN' is required: batch input 'N' is made from it",
        "{out}"
    );
    // With it, the request runs (OUT echoes A).
    let (status, out) = s.json(
        "POST",
        "/v2/models/opt/infer",
        json!({"inputs": [
            {"name": "A", "datatype": "FP32", "shape": [1, 1], "data": [1.0]},
            {"name": "IN", "datatype": "FP32", "shape": [1, 3], "data": [1.0, 2.0, 3.0]}
        ]}),
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["outputs"][0]["data"], json!([1.0]), "{out}");
    let (_, stats) = s.json("GET", "/v2/models/opt/stats", Value::Null);
    assert_eq!(
        stats["model_stats"][0]["inference_stats"]["fail"]["count"], 1,
        "{stats}"
    );
}

// ---------------------------------------------------------------------------
// Which threads a request wakes (`util::thread_sleeps`).

#[test]
fn a_request_wakes_the_instance_that_runs_it_and_no_batcher_thread() {
    // Two instances, a queue delay, no queue timeouts. The receiving
    // thread wakes the instance that went idle last, which waits out the
    // delay and runs the batch on its own thread: the batcher's thread
    // (it keeps the queue timeouts while every instance is busy) never
    // wakes, and the other instance stays asleep.
    let dir = tempfile::tempdir().unwrap();
    write_model(
        dir.path(),
        "hops",
        r#"backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 200 }
"#,
    );
    let s = Serve::start(dir.path(), &[], &[]);
    let infer = |i: i32| {
        let (status, out) = s.post(
            "/v2/models/hops/infer",
            &json!({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 2], "data": [i, i + 1]}]})
                .to_string(),
        );
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["outputs"][0]["data"], json!([i, i + 1]));
    };
    infer(0);
    let before = thread_sleeps(s.pid());
    let n = 40;
    for i in 1..=n {
        infer(i);
    }
    let after = thread_sleeps(s.pid());
    let batcher = slept(&before, &after, "trtis:batch:hop");
    assert!(
        batcher < 4,
        "the batcher's thread slept {batcher} times for {n} requests"
    );
    let mut instances = [
        slept(&before, &after, "trtis:hops:0"),
        slept(&before, &after, "trtis:hops:1"),
    ];
    instances.sort();
    assert!(
        instances[0] < 4 && instances[1] >= n as u64,
        "the instances slept {instances:?} times for {n} requests one after the other"
    );
}
