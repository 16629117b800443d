//! The sequence batcher through a real server (HTTP): the control tensors a
//! model receives per batch slot (recorded by the identity backend) against
//! the seed's START/READY timeline, the backlog, the idle timeout, oldest
//! batches, and Triton's request errors.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use trtis::core::repository::ControlMode;

use crate::util::{slept, thread_sleeps, write_model, Serve, TestServer};

/// An identity model with every control: output i echoes input i (INPUT,
/// then START, END, READY, CORRID); INPUT's value is extra execution
/// milliseconds.
fn repo(
    name: &str,
    sequence_batching: &str,
    max_batch: usize,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let m = dir.path().join(name);
    std::fs::create_dir_all(m.join("1")).unwrap();
    std::fs::write(
        m.join("config.pbtxt"),
        format!(
            r#"backend: "identity"
max_batch_size: {max_batch}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "START_OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "END_OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "READY_OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "CORRID_OUT" data_type: TYPE_UINT64 dims: [ 1 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
sequence_batching {{
  {sequence_batching}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }} ] }}
  ]
}}
parameters {{ key: "delay_input" value: {{ string_value: "INPUT" }} }}
parameters {{ key: "record_inputs" value: {{ string_value: "{}" }} }}
"#,
            record.display()
        ),
    )
    .unwrap();
    (dir, record)
}

fn request(value: i32, id: Value, start: bool, end: bool) -> Value {
    json!({
        "parameters": {"sequence_id": id, "sequence_start": start, "sequence_end": end},
        "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [value]}]
    })
}

fn infer(s: &TestServer, model: &str, body: Value) -> (u16, Value) {
    s.json("POST", &format!("/v2/models/{model}/infer"), body)
}

/// Sends a request on another thread (it may wait for the instance).
fn send(s: &Arc<TestServer>, model: &str, body: Value) -> std::thread::JoinHandle<(u16, Value)> {
    let s = Arc::clone(s);
    let model = model.to_string();
    std::thread::spawn(move || infer(&s, &model, body))
}

fn values(execution: &Value, name: &str) -> Value {
    execution[name]["values"].clone()
}

fn start(repo: &std::path::Path) -> Arc<TestServer> {
    Arc::new(TestServer::start(repo, ControlMode::None, &[], 1 << 20))
}

#[test]
fn direct_slots_get_the_seed_start_ready_timeline() {
    let (dir, record) = repo("seq", "direct { }", 2);
    let s = start(dir.path());
    // Sequence 1 starts alone: slot 0, a batch of one. Its INPUT keeps the
    // instance busy for 300 ms, so the next two requests arrive together.
    let first = send(&s, "seq", request(300, json!(1), true, false));
    std::thread::sleep(Duration::from_millis(100));
    let a2 = send(&s, "seq", request(0, json!(1), false, false));
    std::thread::sleep(Duration::from_millis(20));
    let b1 = send(&s, "seq", request(0, json!(2), true, false));
    let (status, out) = first.join().unwrap();
    assert_eq!(status, 200, "{out}");
    // Each caller gets its own row: INPUT, START, END, READY, CORRID.
    let row = |out: &Value| -> Vec<Value> {
        (0..5)
            .map(|i| out["outputs"][i]["data"][0].clone())
            .collect()
    };
    assert_eq!(
        row(&out),
        vec![json!(300), json!(1), json!(0), json!(1), json!(1)]
    );
    let (status, out) = a2.join().unwrap();
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        row(&out),
        vec![json!(0), json!(0), json!(0), json!(1), json!(1)]
    );
    let (status, out) = b1.join().unwrap();
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        row(&out),
        vec![json!(0), json!(1), json!(0), json!(1), json!(2)]
    );
    // Only slot 1 has a request: slot 0 is an empty row (READY 0).
    let (status, out) = infer(&s, "seq", request(0, json!(2), false, false));
    assert_eq!(status, 200, "{out}");
    // Sequence 1 ends alone in slot 0.
    let (status, out) = infer(&s, "seq", request(0, json!(1), false, true));
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        row(&out),
        vec![json!(0), json!(0), json!(1), json!(1), json!(1)]
    );

    let runs = crate::util::recorded(&record);
    let timeline: Vec<(Value, Value, Value, Value)> = runs
        .iter()
        .map(|e| {
            (
                values(e, "START"),
                values(e, "READY"),
                values(e, "END"),
                values(e, "CORRID"),
            )
        })
        .collect();
    assert_eq!(
        timeline,
        vec![
            (json!([1]), json!([1]), json!([0]), json!([1])),
            (json!([0, 1]), json!([1, 1]), json!([0, 0]), json!([1, 2])),
            (json!([0, 0]), json!([0, 1]), json!([0, 0]), json!([0, 2])),
            (json!([0]), json!([1]), json!([1]), json!([1])),
        ],
        "{runs:?}"
    );
    // Control tensors are [batch, 1].
    assert_eq!(runs[1]["START"]["shape"], json!([2, 1]));
    let (_, st) = s.json("GET", "/v2/models/seq/stats", Value::Null);
    let st = &st["model_stats"][0];
    assert_eq!(st["inference_count"], 5, "{st}");
    assert_eq!(st["execution_count"], 4, "{st}");
}

#[test]
fn backlogged_sequences_take_freed_slots_in_order() {
    // One slot: sequences 2 and 3 wait in the backlog behind sequence 1.
    let (dir, record) = repo("seq", "direct { }", 1);
    let s = start(dir.path());
    assert_eq!(infer(&s, "seq", request(0, json!(1), true, false)).0, 200);
    let b = send(&s, "seq", request(0, json!(2), true, true));
    std::thread::sleep(Duration::from_millis(50));
    let c = send(&s, "seq", request(0, json!(3), true, true));
    std::thread::sleep(Duration::from_millis(50));
    // Both wait while sequence 1 holds the slot...
    assert!(!b.is_finished() && !c.is_finished());
    // ...and run in order once its END is taken.
    assert_eq!(infer(&s, "seq", request(0, json!(1), false, true)).0, 200);
    assert_eq!(b.join().unwrap().0, 200);
    assert_eq!(c.join().unwrap().0, 200);
    let order: Vec<Value> = crate::util::recorded(&record)
        .iter()
        .map(|e| values(e, "CORRID")[0].clone())
        .collect();
    assert_eq!(order, vec![json!(1), json!(1), json!(2), json!(3)]);
}

#[test]
fn an_idle_sequence_loses_its_slot() {
    let (dir, _record) = repo(
        "seq",
        "max_sequence_idle_microseconds: 200000\n direct { }",
        1,
    );
    let s = start(dir.path());
    assert_eq!(infer(&s, "seq", request(0, json!(1), true, false)).0, 200);
    // Sequence 2 waits for the only slot until sequence 1 idles out.
    let waiting = send(&s, "seq", request(0, json!(2), true, false));
    std::thread::sleep(Duration::from_millis(50));
    assert!(!waiting.is_finished());
    let (status, out) = waiting.join().unwrap();
    assert_eq!(status, 200, "{out}");
    let (status, out) = infer(&s, "seq", request(0, json!(1), false, false));
    assert_eq!(status, 400);
    assert_eq!(
        out["error"],
        "inference request for sequence 1 to model 'seq' must specify the START flag on the first request of the sequence"
    );
}

#[test]
fn abandoned_backlogged_sequences_drain_as_fast_as_the_model_runs() {
    // Triton's idle clock runs from each request's arrival, in the backlog
    // too: 30 sequences that START and never END, behind one slot, are all
    // answered soon after the first idles out, not one idle period each
    // (which would be 60 s here).
    let (dir, _record) = repo(
        "seq",
        "max_sequence_idle_microseconds: 2000000\n direct { }",
        1,
    );
    let s = start(dir.path());
    let t0 = std::time::Instant::now();
    let waiting: Vec<_> = (1..=31)
        .map(|id| send(&s, "seq", request(0, json!(id), true, false)))
        .collect();
    for w in waiting {
        let (status, out) = w.join().unwrap();
        assert_eq!(status, 200, "{out}");
    }
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "the backlog drained one idle period at a time: {took:?}"
    );
    // Each gave its slot up: a new sequence runs at once... after the last
    // one's grace.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(infer(&s, "seq", request(0, json!(99), true, true)).0, 200);
}

#[test]
fn oldest_batches_at_most_one_request_per_sequence() {
    let (dir, record) = repo(
        "seq",
        "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 100000 }",
        4,
    );
    let s = start(dir.path());
    // Two requests of sequence 1 and one each of 2 and 3, inside the delay.
    let mut handles = vec![send(&s, "seq", request(0, json!(1), true, false))];
    std::thread::sleep(Duration::from_millis(10));
    handles.push(send(&s, "seq", request(0, json!(2), true, false)));
    std::thread::sleep(Duration::from_millis(10));
    handles.push(send(&s, "seq", request(0, json!(3), true, false)));
    std::thread::sleep(Duration::from_millis(10));
    handles.push(send(&s, "seq", request(0, json!(1), false, true)));
    for h in handles {
        let (status, out) = h.join().unwrap();
        assert_eq!(status, 200, "{out}");
    }
    let runs = crate::util::recorded(&record);
    let corrids: Vec<Value> = runs.iter().map(|e| values(e, "CORRID")).collect();
    assert_eq!(corrids, vec![json!([1, 2, 3]), json!([1])], "{runs:?}");
    assert_eq!(values(&runs[1], "END"), json!([1]));
}

#[test]
fn oldest_preserve_ordering_does_not_hold_answers_behind_the_backlog() {
    // One candidate place: sequence 2 waits in the backlog while sequence 1
    // runs; sequence 1's answers must not wait for it (they once waited
    // until sequence 1 idled out, 3 s, and its END then failed).
    let (dir, _record) = repo(
        "seq",
        "max_sequence_idle_microseconds: 3000000\n oldest { max_candidate_sequences: 1 preserve_ordering: true }",
        2,
    );
    let s = start(dir.path());
    assert_eq!(infer(&s, "seq", request(0, json!(1), true, false)).0, 200);
    let backlogged = send(&s, "seq", request(0, json!(2), true, false));
    std::thread::sleep(Duration::from_millis(50));
    let t0 = std::time::Instant::now();
    let (status, out) = infer(&s, "seq", request(0, json!(1), false, false));
    assert_eq!(status, 200, "{out}");
    // Wide margin: at once, not after the 3 s idle timeout.
    assert!(
        t0.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t0.elapsed()
    );
    let (status, out) = infer(&s, "seq", request(0, json!(1), false, true));
    assert_eq!(status, 200, "{out}");
    assert_eq!(backlogged.join().unwrap().0, 200);
    assert_eq!(infer(&s, "seq", request(0, json!(2), false, true)).0, 200);
}

#[test]
fn oldest_without_max_candidate_sequences_has_max_batch_size_places() {
    // Triton: max_candidate_sequences 0 means max(1, max_batch_size).
    let (dir, record) = repo("seq", "oldest { max_queue_delay_microseconds: 200000 }", 4);
    let s = start(dir.path());
    let a = send(&s, "seq", request(0, json!(1), true, true));
    std::thread::sleep(Duration::from_millis(20));
    let b = send(&s, "seq", request(0, json!(2), true, true));
    assert_eq!(a.join().unwrap().0, 200);
    assert_eq!(b.join().unwrap().0, 200);
    let runs = crate::util::recorded(&record);
    assert_eq!(values(&runs[0], "CORRID"), json!([1, 2]), "{runs:?}");
}

#[test]
fn sequence_request_errors_have_tritons_messages() {
    let (dir, _record) = repo("seq", "", 2);
    let s = start(dir.path());
    let cases = [
        (
            request(0, json!(5), false, false),
            "inference request for sequence 5 to model 'seq' must specify the START flag on the first request of the sequence",
        ),
        (
            request(0, json!(0), true, false),
            "inference request to model 'seq' must specify a non-zero or non-empty correlation ID",
        ),
        (
            json!({"inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [0]}]}),
            "inference request to model 'seq' must specify a non-zero or non-empty correlation ID",
        ),
        (
            json!({"parameters": {"sequence_id": 3, "sequence_start": true},
                   "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [2, 1], "data": [0, 0]}]}),
            "inference request to model 'seq' must specify batch-size 1 due to requirements of sequence batcher",
        ),
        (
            request(0, json!("abc"), true, false),
            "[request id: <id_unknown>] sequence batching control 'CORRID' data-type is 'BYTES', but model 'seq' expects 'UINT64'",
        ),
        (
            request(0, json!(-1), true, false),
            "Unable to parse 'sequence_id': attempt to access JSON non-string as string",
        ),
        (
            json!({"parameters": {"sequence_id": 3, "sequence_start": 1},
                   "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [0]}]}),
            "Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean",
        ),
    ];
    for (body, message) in cases {
        let (status, out) = infer(&s, "seq", body);
        assert_eq!(status, 400, "{out}");
        assert_eq!(out["error"], message);
    }
    // A sequence that ended takes no more requests; others are unaffected.
    assert_eq!(infer(&s, "seq", request(0, json!(7), true, false)).0, 200);
    assert_eq!(infer(&s, "seq", request(0, json!(8), true, false)).0, 200);
    assert_eq!(infer(&s, "seq", request(0, json!(7), false, true)).0, 200);
    let (status, out) = infer(&s, "seq", request(0, json!(7), false, false));
    assert_eq!(status, 400, "{out}");
    assert_eq!(infer(&s, "seq", request(0, json!(8), false, true)).0, 200);
    // The failures count as failed requests.
    let (_, st) = s.json("GET", "/v2/models/seq/stats", Value::Null);
    assert_eq!(st["model_stats"][0]["inference_stats"]["fail"]["count"], 6);
}

/// An identity model with implicit state: OUTPUT_STATE echoes INPUT_STATE,
/// and is listed as an output, so a client sees the state the model got.
fn state_repo(initial_state: &str, dims: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("st");
    std::fs::create_dir_all(m.join("1")).unwrap();
    std::fs::create_dir_all(m.join("initial_state")).unwrap();
    let values: Vec<u8> = [7i32, 8, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(m.join("initial_state/three"), values).unwrap();
    // A longer file: the state takes the bytes it needs from its start.
    let values: Vec<u8> = [7i32, 8, 9, 10]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(m.join("initial_state/four"), values).unwrap();
    std::fs::write(
        m.join("config.pbtxt"),
        format!(
            r#"backend: "identity"
max_batch_size: 4
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ {dims} ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
sequence_batching {{
  state [ {{
    input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ {dims} ]
    {initial_state}
  }} ]
}}
"#
        ),
    )
    .unwrap();
    dir
}

fn state_of(out: &Value) -> (Value, Value) {
    let t = out["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "OUTPUT_STATE")
        .unwrap_or_else(|| panic!("{out}"));
    (t["shape"].clone(), t["data"].clone())
}

#[test]
fn implicit_state_starts_from_zeros_a_zero_initial_state_or_a_file() {
    // No initial_state: zeros, variable dims as 1.
    let dir = state_repo("", "-1");
    let s = start(dir.path());
    let (status, out) = infer(&s, "st", request(5, json!(1), true, false));
    assert_eq!(status, 200, "{out}");
    assert_eq!(state_of(&out), (json!([1, 1]), json!([0])));
    // The state carries to the next request of the sequence.
    let (_, out) = infer(&s, "st", request(5, json!(1), false, true));
    assert_eq!(state_of(&out), (json!([1, 1]), json!([0])));
    drop(s);

    let dir = state_repo(
        r#"initial_state [ { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true name: "zeros" } ]"#,
        "-1",
    );
    let s = start(dir.path());
    let (_, out) = infer(&s, "st", request(5, json!(1), true, true));
    assert_eq!(state_of(&out), (json!([1, 2]), json!([0, 0])));
    drop(s);

    let dir = state_repo(
        r#"initial_state [ { data_type: TYPE_INT32 dims: [ 3 ] data_file: "three" name: "file" } ]"#,
        "3",
    );
    let s = start(dir.path());
    // Two sequences in one batch each start from the file's values.
    let a = send(&s, "st", request(0, json!(1), true, false));
    let b = send(&s, "st", request(0, json!(2), true, false));
    for h in [a, b] {
        let (status, out) = h.join().unwrap();
        assert_eq!(status, 200, "{out}");
        assert_eq!(state_of(&out), (json!([1, 3]), json!([7, 8, 9])));
    }
    for id in [1, 2] {
        let (_, out) = infer(&s, "st", request(0, json!(id), false, true));
        assert_eq!(state_of(&out), (json!([1, 3]), json!([7, 8, 9])));
    }
    drop(s);

    let dir = state_repo(
        r#"initial_state [ { data_type: TYPE_INT32 dims: [ 3 ] data_file: "four" name: "file" } ]"#,
        "3",
    );
    let s = start(dir.path());
    let (_, out) = infer(&s, "st", request(0, json!(1), true, true));
    assert_eq!(state_of(&out), (json!([1, 3]), json!([7, 8, 9])));
}

#[test]
fn unloading_answers_backlogged_sequences_without_waiting_for_the_idle_timeout() {
    let (dir, _record) = repo(
        "seq",
        "max_sequence_idle_microseconds: 60000000\n direct { }",
        1,
    );
    let s = Arc::new(TestServer::start(
        dir.path(),
        ControlMode::Explicit,
        &["seq"],
        1 << 20,
    ));
    assert_eq!(infer(&s, "seq", request(0, json!(1), true, false)).0, 200);
    // Sequence 2 waits in the backlog: sequence 1 holds the only slot.
    let waiting = send(&s, "seq", request(0, json!(2), true, false));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!waiting.is_finished());
    let started = std::time::Instant::now();
    let (status, out) = s.json("POST", "/v2/repository/models/seq/unload", json!({}));
    assert_eq!(status, 200, "{out}");
    let (status, out) = waiting.join().unwrap();
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["outputs"][4]["data"], json!([2]));
    // Not after the 60 s idle timeout (a wide margin, not a timing check).
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn warmup_of_a_sequence_model_runs_each_row_as_a_whole_sequence() {
    let (dir, record) = repo("seq", "direct { }", 2);
    let config = dir.path().join("seq/config.pbtxt");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(
        r#"model_warmup [ { name: "w" batch_size: 2
  inputs { key: "INPUT" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } } ]
"#,
    );
    std::fs::write(&config, text).unwrap();
    let s = start(dir.path());
    let runs = crate::util::recorded(&record);
    assert_eq!(runs.len(), 1, "{runs:?}");
    for name in ["START", "END", "READY"] {
        assert_eq!(values(&runs[0], name), json!([1, 1]), "{name}");
    }
    assert_eq!(values(&runs[0], "CORRID"), json!([0, 0]));
    // The warmup left no sequence behind.
    let (status, _) = infer(&s, "seq", request(0, json!(1), false, false));
    assert_eq!(status, 400);
}

#[test]
fn warmup_samples_may_give_control_inputs_as_tritons_do() {
    // Triton's warmup bypasses the scheduler, so its samples list the
    // control inputs: those given are used, the others filled in.
    let (dir, record) = repo("seq", "direct { }", 2);
    let config = dir.path().join("seq/config.pbtxt");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(
        r#"model_warmup [ { name: "w" batch_size: 1
  inputs { key: "INPUT" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }
  inputs { key: "START" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }
  inputs { key: "CORRID" value: { data_type: TYPE_UINT64 dims: [ 1 ] zero_data: true } } } ]
"#,
    );
    std::fs::write(&config, text).unwrap();
    let _s = start(dir.path());
    let runs = crate::util::recorded(&record);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(values(&runs[0], "START"), json!([0]), "the sample's START");
    assert_eq!(values(&runs[0], "READY"), json!([1]), "filled in");
    assert_eq!(values(&runs[0], "END"), json!([1]), "filled in");
}

#[test]
fn a_backlogged_sequence_gives_up_after_its_requests_timeout() {
    let (dir, _record) = repo("seq", "direct { }", 1);
    let s = start(dir.path());
    assert_eq!(infer(&s, "seq", request(0, json!(1), true, false)).0, 200);
    // Sequence 2 waits for the only slot at most 100 ms.
    let mut body = request(0, json!(2), true, false);
    body["parameters"]["timeout"] = json!(100_000);
    let (status, out) = infer(&s, "seq", body);
    assert_eq!(status, 503, "{out}");
    assert_eq!(
        out["error"],
        "timeout of the corresponding sequence has been expired"
    );
    // Its id is forgotten; sequence 1 is unaffected.
    assert_eq!(infer(&s, "seq", request(0, json!(2), false, false)).0, 400);
    assert_eq!(infer(&s, "seq", request(0, json!(1), false, true)).0, 200);
    // A timeout does not limit a sequence that has a place.
    let mut body = request(0, json!(3), true, true);
    body["parameters"]["timeout"] = json!(1);
    assert_eq!(infer(&s, "seq", body).0, 200);
}

#[test]
fn a_request_wakes_the_instance_that_holds_its_sequence_and_no_batcher_thread() {
    // Two instances with a slot each; sequences one after the other. The
    // receiving thread wakes the instance that holds the request's
    // sequence, which forms the batch and runs it on its own thread: the
    // sequence batcher's thread (it keeps the idle deadlines) does not
    // wake for a request.
    let dir = tempfile::tempdir().unwrap();
    write_model(
        dir.path(),
        "seqhops",
        r#"backend: "identity"
max_batch_size: 1
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  direct { }
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
}
"#,
    );
    let s = Serve::start(dir.path(), &[], &[]);
    let infer = |id: u64, i: i32, start: bool| {
        let (status, out) = s.post(
            "/v2/models/seqhops/infer",
            &json!({
                "parameters": {"sequence_id": id, "sequence_start": start},
                "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [i]}]
            })
            .to_string(),
        );
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["outputs"][0]["data"], json!([i]));
    };
    // Two sequences take the two places (one each) and keep them.
    infer(1, 0, true);
    infer(2, 0, true);
    let before = thread_sleeps(s.pid());
    let n = 20;
    for i in 1..=n {
        infer(1, i, false);
        infer(2, i, false);
    }
    let after = thread_sleeps(s.pid());
    let batcher = slept(&before, &after, "trtis:seq:seqho");
    assert!(
        batcher < 4,
        "the sequence batcher's thread slept {batcher} times for {} requests",
        2 * n
    );
    for instance in ["trtis:seqhops:0", "trtis:seqhops:1"] {
        let times = slept(&before, &after, instance);
        // One sleep per request, give or take: the thread may not yet be
        // back asleep after the last answer when the count is read.
        assert!(
            (n as u64 - 1..=n as u64 + 4).contains(&times),
            "{instance} slept {times} times for its sequence's {n} requests"
        );
    }
}
