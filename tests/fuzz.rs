//! A fuzzing harness on stable Rust (proptest) for the parsers that face the
//! network or the user:
//! - KServe v2 HTTP request bodies (`kserve_json::parse_request`): JSON only,
//!   JSON + binary tail (`Inference-Header-Content-Length`) and raw bodies;
//!   valid requests encoded by hand (an oracle: every encoding gives the same
//!   tensors), structural mutations of their JSON, byte mutations;
//! - the gRPC request conversion (`grpc_convert::infer_request`): generated
//!   `ModelInferRequest`s (an oracle for what it accepts), and bytes decoded
//!   through prost (arbitrary, or mutated encodings);
//! - Triton's generate bodies (`protocol::generate::parse_request`): valid
//!   ones (an oracle: the tensor and the parameters) and byte mutations;
//! - `config.pbtxt` (`parse_config`): text generated from the schema's
//!   descriptors (an oracle: the expected config and every field's line and
//!   column), hostile generated text, and token-level mutations of the
//!   fixtures and of generated configs (an oracle: a config that parses
//!   prints and parses back to itself). `parse.rs` has the byte mutations.
//!
//! Every case checks: no panic; each parse within a time budget and a memory
//! budget (the peak of live bytes allocated on the parsing thread, counted
//! by this binary's global allocator, bounded by the input's size); and Ok or
//! an error with a message. Each target prints how many cases it ran (see
//! them with `--nocapture`).
//!
//! Default counts keep this module to a few seconds in a debug build.
//! `TRTIS_FUZZ_CASES=N` sets every target's count (`scripts/fuzz.sh`);
//! `PROPTEST_RNG_SEED=N` replays a run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use prost::Message as _;
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor};
use serde_json::{json, Map, Value};

use trtis::core::config::pb::ModelInput;
use trtis::core::config::pbtxt::model_config_descriptor;
use trtis::core::config::{parse_config, ModelConfig};
use trtis::core::types::{DataType, InferRequest, SequenceId, Tensor};
use trtis::server::protocol::grpc_convert::infer_request;
use trtis::server::protocol::kserve_json::{parse_request, OutputFormat};
use trtis::server::protocol::pb::inference::{
    infer_parameter::ParameterChoice,
    model_infer_request::{InferInputTensor, InferRequestedOutputTensor},
    InferParameter, InferTensorContents, ModelInferRequest,
};

// ---------------------------------------------------------------------------
// The harness: case counts, the time and memory budget, the runner.
// ---------------------------------------------------------------------------

/// Counts the bytes live on the current thread while a parse is measured, and
/// their peak. Other threads (and this one, outside a measurement) pay one
/// thread-local read per allocation.
struct CountingAllocator;

thread_local! {
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn account(delta: isize) {
    let _ = MEASURING.try_with(|measuring| {
        if measuring.get() {
            let _ = LIVE.try_with(|live| {
                let now = live.get() + delta;
                live.set(now);
                let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
            });
        }
    });
}

// SAFETY: every call is forwarded to `System` unchanged; the accounting
// touches only const-initialized thread-locals without destructors, so it
// never allocates or re-enters the allocator.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        account(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            account(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Runs `f` and returns its result, its wall time and the peak of the bytes
/// it allocated and had not freed yet (its result included).
fn measure<T>(f: impl FnOnce() -> T) -> (T, Duration, usize) {
    struct Stop;
    impl Drop for Stop {
        fn drop(&mut self) {
            MEASURING.with(|m| m.set(false));
        }
    }
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    let start = Instant::now();
    MEASURING.with(|m| m.set(true));
    let stop = Stop;
    let out = f();
    drop(stop);
    let elapsed = start.elapsed();
    (out, elapsed, PEAK.with(|p| p.get()).max(0) as usize)
}

/// One parse of a small input must finish well within this (debug build,
/// a shared 2-core machine): it is a bound on runaway work, not a benchmark.
const PARSE_TIME_LIMIT: Duration = Duration::from_secs(2);

/// The most one parse may have allocated at its peak for `len` input bytes.
fn memory_limit(len: usize) -> usize {
    (1 << 20) + 256 * len
}

/// Cases per target: `TRTIS_FUZZ_CASES` or the target's default.
fn case_count(default: u32) -> u32 {
    std::env::var("TRTIS_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

#[derive(Default)]
struct Stats {
    cases: Cell<u64>,
    parses: Cell<u64>,
    ok: Cell<u64>,
    slowest: Cell<Duration>,
    /// The largest peak allocation and the input size it was for.
    peak: Cell<(usize, usize)>,
}

impl Stats {
    /// Runs one parse of an input of `len` bytes within the budget; returns
    /// what the parser returned.
    fn parse<T, E>(
        &self,
        len: usize,
        f: impl FnOnce() -> Result<T, E>,
    ) -> Result<Result<T, E>, TestCaseError> {
        let (out, elapsed, peak) = measure(f);
        self.parses.set(self.parses.get() + 1);
        if out.is_ok() {
            self.ok.set(self.ok.get() + 1);
        }
        self.slowest.set(self.slowest.get().max(elapsed));
        if peak > self.peak.get().0 {
            self.peak.set((peak, len));
        }
        prop_assert!(
            elapsed <= PARSE_TIME_LIMIT,
            "one parse of {} bytes took {:?}",
            len,
            elapsed
        );
        prop_assert!(
            peak <= memory_limit(len),
            "one parse of {} bytes allocated {} bytes at its peak",
            len,
            peak
        );
        Ok(out)
    }
}

/// Runs one fuzz target: `cases` inputs from `strategy` through `test`
/// (proptest shrinks a failure to a small input), then prints the counts.
fn fuzz<S>(
    target: &str,
    default_cases: u32,
    strategy: S,
    test: impl Fn(S::Value, &Stats) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    let cases = case_count(default_cases);
    let mut runner = TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let stats = Stats::default();
    let start = Instant::now();
    let result = runner.run(&strategy, |value| {
        stats.cases.set(stats.cases.get() + 1);
        test(value, &stats)
    });
    let (peak, peak_len) = stats.peak.get();
    eprintln!(
        "fuzz {target}: {} cases, {} parses ({} Ok) in {:.2?}; slowest parse {:.2?}; \
         largest peak allocation {peak} bytes (for {peak_len} input bytes)",
        stats.cases.get(),
        stats.parses.get(),
        stats.ok.get(),
        start.elapsed(),
        stats.slowest.get(),
    );
    if let Err(e) = result {
        panic!("fuzz {target}: {e}");
    }
}

fn has_message<T, E: std::fmt::Display>(r: &Result<T, E>) -> Result<(), TestCaseError> {
    if let Err(e) = r {
        prop_assert!(
            !e.to_string().trim().is_empty(),
            "an error without a message"
        );
    }
    Ok(())
}

/// Byte edits shared by the byte-level targets: replace, insert, remove, or
/// splice in a token from a dictionary.
#[derive(Debug, Clone)]
enum ByteEdit {
    Set(usize, u8),
    Insert(usize, u8),
    Remove(usize),
    Splice(usize, usize),
    Cut(usize, usize),
}

fn byte_edit(dictionary_len: usize) -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| ByteEdit::Set(p, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| ByteEdit::Insert(p, b)),
        any::<usize>().prop_map(ByteEdit::Remove),
        (any::<usize>(), 0..dictionary_len).prop_map(|(p, d)| ByteEdit::Splice(p, d)),
        (any::<usize>(), 1usize..16).prop_map(|(p, n)| ByteEdit::Cut(p, n)),
    ]
}

fn apply_byte_edits(bytes: &mut Vec<u8>, edits: &[ByteEdit], dictionary: &[&[u8]]) {
    for edit in edits {
        // A position in 0..=len.
        let at = |p: usize, len: usize| p % (len + 1);
        match *edit {
            ByteEdit::Set(p, b) => {
                if bytes.is_empty() {
                    bytes.push(b);
                } else {
                    let i = p % bytes.len();
                    bytes[i] = b;
                }
            }
            ByteEdit::Insert(p, b) => {
                let i = at(p, bytes.len());
                bytes.insert(i, b);
            }
            ByteEdit::Remove(p) => {
                if !bytes.is_empty() {
                    bytes.remove(p % bytes.len());
                }
            }
            ByteEdit::Splice(p, d) => {
                let i = at(p, bytes.len());
                bytes.splice(i..i, dictionary[d].iter().copied());
            }
            ByteEdit::Cut(p, n) => {
                let i = at(p, bytes.len());
                let end = (i + n).min(bytes.len());
                bytes.drain(i..end);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// KServe v2 HTTP bodies.
// ---------------------------------------------------------------------------

/// A model for the HTTP parser: its name is in messages, and its single input
/// makes `Inference-Header-Content-Length: 0` (a raw body) reachable.
fn http_model() -> ModelConfig {
    ModelConfig {
        name: "m".into(),
        max_batch_size: 8,
        input: vec![ModelInput {
            name: "INPUT0".into(),
            data_type: DataType::Int32.to_config() as i32,
            dims: vec![-1],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A tensor as a client would send it: its elements as JSON values and as
/// the raw bytes the server must end up with.
#[derive(Debug, Clone)]
struct GenTensor {
    name: String,
    dt: DataType,
    shape: Vec<i64>,
    values: Vec<Value>,
    data: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Encoding {
    /// `data` nested by the shape.
    Nested,
    /// `data` as one flat array.
    Flat,
    /// `binary_data_size` and the bytes in the binary tail.
    Binary,
}

#[derive(Debug, Clone)]
struct GenOutput {
    name: String,
    binary: Option<bool>,
    classification: Option<u64>,
}

/// A valid inference request, before encoding.
#[derive(Debug, Clone)]
struct GenRequest {
    id: Option<String>,
    inputs: Vec<(GenTensor, Encoding)>,
    priority: Option<u64>,
    timeout: Option<u64>,
    sequence_id: Option<SequenceId>,
    sequence_start: Option<bool>,
    sequence_end: Option<bool>,
    binary_data_output: Option<bool>,
    outputs: Vec<GenOutput>,
    /// Send `Inference-Header-Content-Length` even without a binary tail.
    always_frame: bool,
}

fn is_half(dt: DataType) -> bool {
    matches!(dt, DataType::Fp16 | DataType::Bf16)
}

fn text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..=max).prop_map(String::from_iter)
}

/// One element of `dt`: its JSON value and its little-endian bytes.
fn element(dt: DataType) -> BoxedStrategy<(Value, Vec<u8>)> {
    macro_rules! int {
        ($t:ty) => {
            any::<$t>()
                .prop_map(|x| (json!(x), x.to_le_bytes().to_vec()))
                .boxed()
        };
    }
    use prop::num::{f32 as f32s, f64 as f64s};
    let finite32 = f32s::POSITIVE | f32s::NEGATIVE | f32s::NORMAL | f32s::SUBNORMAL | f32s::ZERO;
    let finite64 = f64s::POSITIVE | f64s::NEGATIVE | f64s::NORMAL | f64s::SUBNORMAL | f64s::ZERO;
    match dt {
        DataType::Bool => any::<bool>()
            .prop_map(|b| (json!(b), vec![b as u8]))
            .boxed(),
        DataType::Uint8 => int!(u8),
        DataType::Uint16 => int!(u16),
        DataType::Uint32 => int!(u32),
        DataType::Uint64 => int!(u64),
        DataType::Int8 => int!(i8),
        DataType::Int16 => int!(i16),
        DataType::Int32 => int!(i32),
        DataType::Int64 => int!(i64),
        DataType::Fp32 => finite32
            .prop_map(|x| (json!(x as f64), x.to_le_bytes().to_vec()))
            .boxed(),
        DataType::Fp64 => finite64
            .prop_map(|x| (json!(x), x.to_le_bytes().to_vec()))
            .boxed(),
        DataType::Fp16 => any::<u16>()
            .prop_map(half::f16::from_bits)
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| (json!(x.to_f32()), x.to_le_bytes().to_vec()))
            .boxed(),
        DataType::Bf16 => any::<u16>()
            .prop_map(half::bf16::from_bits)
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| (json!(x.to_f32()), x.to_le_bytes().to_vec()))
            .boxed(),
        DataType::Bytes => text(6)
            .prop_map(|s| {
                let data = Tensor::serialize_bytes([s.as_bytes()]);
                (json!(s), data)
            })
            .boxed(),
    }
}

fn gen_tensor() -> impl Strategy<Value = GenTensor> {
    (
        prop::sample::select(DataType::ALL.to_vec()),
        prop::collection::vec(0i64..=3, 0..=3),
    )
        .prop_flat_map(|(dt, shape)| {
            let n = shape.iter().product::<i64>() as usize;
            prop::collection::vec(element(dt), n).prop_map(move |elements| {
                let (values, bytes): (Vec<Value>, Vec<Vec<u8>>) = elements.into_iter().unzip();
                GenTensor {
                    name: String::new(),
                    dt,
                    shape: shape.clone(),
                    values,
                    data: bytes.concat(),
                }
            })
        })
}

fn gen_request() -> impl Strategy<Value = GenRequest> {
    let encoding = prop::sample::select(vec![Encoding::Nested, Encoding::Flat, Encoding::Binary]);
    let sequence_id = prop_oneof![
        any::<u64>().prop_map(SequenceId::Number),
        text(4).prop_map(SequenceId::Text),
    ];
    let output = (prop::option::of(any::<bool>()), prop::option::of(1u64..100));
    (
        (
            prop::option::of(text(8)),
            prop::collection::vec((gen_tensor(), encoding), 0..4),
            prop::option::of(any::<u64>()),
            prop::option::of(any::<u64>()),
            prop::option::of(sequence_id),
        ),
        (
            prop::option::of(any::<bool>()),
            prop::option::of(any::<bool>()),
            prop::option::of(any::<bool>()),
            prop::collection::vec(output, 0..3),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (id, mut inputs, priority, timeout, sequence_id),
                (sequence_start, sequence_end, binary_data_output, outputs, always_frame),
            )| {
                for (i, (t, _)) in inputs.iter_mut().enumerate() {
                    t.name = format!("INPUT{i}");
                }
                let outputs = outputs
                    .into_iter()
                    .enumerate()
                    .map(|(i, (binary, classification))| GenOutput {
                        name: format!("OUTPUT{i}"),
                        binary,
                        classification,
                    })
                    .collect();
                GenRequest {
                    id,
                    inputs,
                    priority,
                    timeout,
                    sequence_id,
                    sequence_start,
                    sequence_end,
                    binary_data_output,
                    outputs,
                    always_frame,
                }
            },
        )
}

/// `values` nested as `shape` (a scalar for an empty shape).
fn nest(values: &[Value], shape: &[i64]) -> Value {
    match shape {
        [] => values[0].clone(),
        [_] => Value::Array(values.to_vec()),
        [d, rest @ ..] => {
            let inner = rest.iter().product::<i64>() as usize;
            Value::Array(
                (0..*d as usize)
                    .map(|i| nest(&values[i * inner..(i + 1) * inner], rest))
                    .collect(),
            )
        }
    }
}

/// The request's JSON document and binary tail, each input encoded as
/// `choose` says.
fn encode_doc(
    req: &GenRequest,
    choose: impl Fn(&GenTensor, Encoding) -> Encoding,
) -> (Value, Vec<u8>) {
    let mut tail = Vec::new();
    let inputs: Vec<Value> = req
        .inputs
        .iter()
        .map(|(t, enc)| {
            let mut input = json!({ "name": t.name, "datatype": t.dt.name(), "shape": t.shape });
            match choose(t, *enc) {
                Encoding::Binary => {
                    input["parameters"] = json!({ "binary_data_size": t.data.len() });
                    tail.extend_from_slice(&t.data);
                }
                Encoding::Flat => input["data"] = Value::Array(t.values.clone()),
                Encoding::Nested => input["data"] = nest(&t.values, &t.shape),
            }
            input
        })
        .collect();
    let mut doc = Map::new();
    if let Some(id) = &req.id {
        doc.insert("id".into(), json!(id));
    }
    let mut params = Map::new();
    if let Some(p) = req.priority {
        params.insert("priority".into(), json!(p));
    }
    if let Some(t) = req.timeout {
        params.insert("timeout".into(), json!(t));
    }
    match &req.sequence_id {
        Some(SequenceId::Number(n)) => {
            params.insert("sequence_id".into(), json!(n));
        }
        Some(SequenceId::Text(s)) => {
            params.insert("sequence_id".into(), json!(s));
        }
        _ => {}
    }
    if let Some(b) = req.sequence_start {
        params.insert("sequence_start".into(), json!(b));
    }
    if let Some(b) = req.sequence_end {
        params.insert("sequence_end".into(), json!(b));
    }
    if let Some(b) = req.binary_data_output {
        params.insert("binary_data_output".into(), json!(b));
    }
    if !params.is_empty() {
        doc.insert("parameters".into(), Value::Object(params));
    }
    doc.insert("inputs".into(), Value::Array(inputs));
    if !req.outputs.is_empty() {
        let outputs = req
            .outputs
            .iter()
            .map(|o| {
                let mut out = json!({ "name": o.name });
                let mut params = Map::new();
                if let Some(b) = o.binary {
                    params.insert("binary_data".into(), json!(b));
                }
                if let Some(c) = o.classification {
                    params.insert("classification".into(), json!(c));
                }
                if !params.is_empty() {
                    out["parameters"] = Value::Object(params);
                }
                out
            })
            .collect();
        doc.insert("outputs".into(), Value::Array(outputs));
    }
    (Value::Object(doc), tail)
}

/// A body and its `Inference-Header-Content-Length`.
fn frame(json: Vec<u8>, tail: &[u8], always: bool) -> (Vec<u8>, Option<usize>) {
    let header = (always || !tail.is_empty()).then_some(json.len());
    let mut body = json;
    body.extend_from_slice(tail);
    (body, header)
}

fn encode(
    req: &GenRequest,
    choose: impl Fn(&GenTensor, Encoding) -> Encoding,
) -> (Vec<u8>, Option<usize>) {
    let (doc, tail) = encode_doc(req, choose);
    frame(serde_json::to_vec(&doc).unwrap(), &tail, req.always_frame)
}

/// The oracle: the parsed request is the generated one.
fn check_request(
    req: &GenRequest,
    parsed: &(InferRequest, OutputFormat),
) -> Result<(), TestCaseError> {
    let (r, format) = parsed;
    let expected: Vec<Tensor> = req
        .inputs
        .iter()
        .map(|(t, _)| Tensor {
            name: t.name.clone(),
            datatype: t.dt,
            shape: t.shape.clone(),
            data: t.data.clone(),
        })
        .collect();
    prop_assert_eq!(&r.inputs, &expected);
    prop_assert!(r.shm_inputs.is_empty());
    prop_assert_eq!(r.id.as_str(), req.id.as_deref().unwrap_or(""));
    prop_assert_eq!(r.priority, req.priority.unwrap_or(0));
    prop_assert_eq!(r.timeout_us, req.timeout.unwrap_or(0));
    prop_assert_eq!(
        &r.sequence.id,
        req.sequence_id.as_ref().unwrap_or(&SequenceId::None)
    );
    prop_assert_eq!(r.sequence.start, req.sequence_start.unwrap_or(false));
    prop_assert_eq!(r.sequence.end, req.sequence_end.unwrap_or(false));
    prop_assert_eq!(
        format.binary_default,
        req.binary_data_output.unwrap_or(false)
    );
    prop_assert_eq!(r.outputs.len(), req.outputs.len());
    for (got, want) in r.outputs.iter().zip(&req.outputs) {
        prop_assert_eq!(&got.name, &want.name);
        prop_assert_eq!(got.classification, want.classification.map(|c| c as usize));
        prop_assert!(got.shm.is_none());
        prop_assert_eq!(
            format.binary.get(&want.name).copied(),
            Some(want.binary.unwrap_or(false))
        );
    }
    Ok(())
}

/// Valid requests encoded by hand parse to the tensors they were made of,
/// whether each input is nested JSON, flat JSON or binary; all-binary and
/// all-JSON encodings of the same request parse to the same tensors; FP16
/// and BF16 in JSON are refused with Triton's message.
#[test]
fn fuzz_kserve_valid_requests_round_trip() {
    let config = http_model();
    fuzz("kserve_roundtrip", 1500, gen_request(), |req, stats| {
        let half_as_binary =
            |t: &GenTensor, enc| if is_half(t.dt) { Encoding::Binary } else { enc };
        for choose in [
            &half_as_binary as &dyn Fn(&GenTensor, Encoding) -> Encoding,
            &|_: &GenTensor, _| Encoding::Binary,
        ] {
            let (body, header) = encode(&req, choose);
            let parsed = stats.parse(body.len(), || parse_request(&body, header, &config))?;
            match parsed {
                Ok(parsed) => check_request(&req, &parsed)?,
                Err(e) => {
                    return Err(TestCaseError::fail(format!(
                        "a valid request was refused: {}\n{}",
                        e.message,
                        String::from_utf8_lossy(&body)
                    )))
                }
            }
        }
        let (body, header) = encode(&req, |_, enc| {
            if enc == Encoding::Binary {
                Encoding::Flat
            } else {
                enc
            }
        });
        let parsed = stats.parse(body.len(), || parse_request(&body, header, &config))?;
        match req.inputs.iter().find(|(t, _)| is_half(t.dt)) {
            None => check_request(&req, &parsed.map_err(|e| TestCaseError::fail(e.message))?)?,
            Some((t, _)) => {
                let e = parsed
                    .err()
                    .ok_or_else(|| TestCaseError::fail("FP16/BF16 JSON accepted"))?;
                prop_assert_eq!(
                    e.message,
                    format!(
                        "receiving {} data via JSON is not supported. Please use the binary data format for input {}",
                        t.dt.name(),
                        t.name
                    )
                );
            }
        }
        Ok(())
    });
}

/// JSON values a hostile client might put anywhere.
fn garbage() -> impl Strategy<Value = Value> {
    let interesting_ints = vec![
        0i64,
        -1,
        1,
        2,
        4,
        255,
        256,
        65536,
        1 << 31,
        1 << 32,
        1 << 62,
        i64::MAX,
        i64::MIN,
        -(1 << 31),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(interesting_ints).prop_map(Value::from),
        prop::sample::select(vec![u64::MAX, 1 << 63, (1 << 63) + 1]).prop_map(Value::from),
        prop::sample::select(vec![1e308, -1e308, 0.5, -0.0, 1e19, 4294967296.5])
            .prop_map(Value::from),
        prop::sample::select(vec![
            "",
            "BYTES",
            "FP16",
            "BF16",
            "BOOL",
            "INT64",
            "UINT8",
            "fp32",
            "INPUT0",
            "data",
            "binary_data_size",
            "r",
        ])
        .prop_map(Value::from),
        text(8).prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((json_key(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn json_key() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "name",
        "datatype",
        "shape",
        "data",
        "parameters",
        "binary_data_size",
        "shared_memory_region",
        "shared_memory_byte_size",
        "shared_memory_offset",
        "inputs",
        "outputs",
        "id",
        "binary_data",
        "binary_data_output",
        "classification",
        "priority",
        "timeout",
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "x",
    ])
    .prop_map(String::from)
}

fn hostile_dims() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(
        prop_oneof![
            0i64..4,
            prop::sample::select(vec![
                -1i64,
                -2,
                i64::MIN,
                i64::MAX,
                1 << 31,
                1 << 32,
                1 << 62,
                (1 << 62) + 1,
                3_037_000_500,
            ]),
        ],
        0..6,
    )
}

/// A structural edit of a request's JSON document; nodes are picked by their
/// index in a pre-order walk (modulo the node count).
#[derive(Debug, Clone)]
enum JsonEdit {
    Replace(usize, Value),
    /// An object gets the key; an array gets the value appended.
    Insert(usize, String, Value),
    /// An object loses its n-th key; an array its n-th element.
    Remove(usize, usize),
    /// An array's n-th element twice (duplicate input names).
    Duplicate(usize, usize),
    /// The node inside n arrays.
    Wrap(usize, u8),
    Shape(usize, Vec<i64>),
    Datatype(usize, String),
    BinaryDataSize(usize, Value),
    Data(usize, Value),
}

fn json_edit() -> impl Strategy<Value = JsonEdit> {
    let datatype = prop_oneof![
        prop::sample::select(DataType::ALL.to_vec()).prop_map(|d| d.name().to_string()),
        prop::sample::select(vec![
            "",
            "int32",
            "FP8",
            "TYPE_FP32",
            "STRING",
            "BYTES\u{0}"
        ])
        .prop_map(String::from),
    ];
    let size = prop_oneof![(0u64..64).prop_map(Value::from), garbage(),];
    prop_oneof![
        (any::<usize>(), garbage()).prop_map(|(n, v)| JsonEdit::Replace(n, v)),
        (any::<usize>(), json_key(), garbage()).prop_map(|(n, k, v)| JsonEdit::Insert(n, k, v)),
        (any::<usize>(), any::<usize>()).prop_map(|(n, i)| JsonEdit::Remove(n, i)),
        (any::<usize>(), any::<usize>()).prop_map(|(n, i)| JsonEdit::Duplicate(n, i)),
        (any::<usize>(), 1u8..=140).prop_map(|(n, d)| JsonEdit::Wrap(n, d)),
        (any::<usize>(), hostile_dims()).prop_map(|(i, d)| JsonEdit::Shape(i, d)),
        (any::<usize>(), datatype).prop_map(|(i, d)| JsonEdit::Datatype(i, d)),
        (any::<usize>(), size).prop_map(|(i, v)| JsonEdit::BinaryDataSize(i, v)),
        (any::<usize>(), garbage()).prop_map(|(i, v)| JsonEdit::Data(i, v)),
    ]
}

fn count_nodes(v: &Value) -> usize {
    1 + match v {
        Value::Array(items) => items.iter().map(count_nodes).sum(),
        Value::Object(map) => map.values().map(count_nodes).sum(),
        _ => 0,
    }
}

/// The pre-order `n`-th node of `v` (modulo the node count).
fn nth_node(v: &mut Value, n: usize) -> &mut Value {
    fn go<'a>(v: &'a mut Value, target: &mut usize) -> Option<&'a mut Value> {
        if *target == 0 {
            return Some(v);
        }
        *target -= 1;
        match v {
            Value::Array(items) => items.iter_mut().find_map(|i| go(i, target)),
            Value::Object(map) => map.values_mut().find_map(|i| go(i, target)),
            _ => None,
        }
    }
    let mut target = n % count_nodes(v);
    go(v, &mut target).expect("the target is within the node count")
}

/// The `i`-th input object (modulo the count), if `inputs` is still an array
/// of objects.
fn nth_input(doc: &mut Value, i: usize) -> Option<&mut Map<String, Value>> {
    let inputs = doc.get_mut("inputs")?.as_array_mut()?;
    if inputs.is_empty() {
        return None;
    }
    let n = inputs.len();
    inputs[i % n].as_object_mut()
}

fn apply_json_edit(doc: &mut Value, edit: &JsonEdit) {
    match edit {
        JsonEdit::Replace(n, v) => *nth_node(doc, *n) = v.clone(),
        JsonEdit::Insert(n, k, v) => match nth_node(doc, *n) {
            Value::Object(map) => {
                map.insert(k.clone(), v.clone());
            }
            Value::Array(items) => items.push(v.clone()),
            _ => {}
        },
        JsonEdit::Remove(n, i) => match nth_node(doc, *n) {
            Value::Object(map) if !map.is_empty() => {
                let key = map.keys().nth(i % map.len()).cloned().unwrap();
                map.shift_remove(&key);
            }
            Value::Array(items) if !items.is_empty() => {
                items.remove(i % items.len());
            }
            _ => {}
        },
        JsonEdit::Duplicate(n, i) => {
            if let Value::Array(items) = nth_node(doc, *n) {
                if !items.is_empty() {
                    let item = items[i % items.len()].clone();
                    items.push(item);
                }
            }
        }
        JsonEdit::Wrap(n, depth) => {
            let node = nth_node(doc, *n);
            let mut v = node.take();
            for _ in 0..*depth {
                v = Value::Array(vec![v]);
            }
            *node = v;
        }
        JsonEdit::Shape(i, dims) => {
            if let Some(input) = nth_input(doc, *i) {
                input.insert("shape".into(), json!(dims));
            }
        }
        JsonEdit::Datatype(i, d) => {
            if let Some(input) = nth_input(doc, *i) {
                input.insert("datatype".into(), json!(d));
            }
        }
        JsonEdit::BinaryDataSize(i, v) => {
            if let Some(input) = nth_input(doc, *i) {
                input.shift_remove("data");
                let params = input.entry("parameters").or_insert_with(|| json!({}));
                if let Some(p) = params.as_object_mut() {
                    p.insert("binary_data_size".into(), v.clone());
                }
            }
        }
        JsonEdit::Data(i, v) => {
            if let Some(input) = nth_input(doc, *i) {
                input.insert("data".into(), v.clone());
            }
        }
    }
}

/// How the binary tail is changed.
#[derive(Debug, Clone)]
enum TailEdit {
    Keep,
    Truncate(usize),
    Append(Vec<u8>),
    Replace(Vec<u8>),
}

/// Which `Inference-Header-Content-Length` is sent.
#[derive(Debug, Clone)]
enum HeaderChoice {
    /// The JSON part's length (None without a tail).
    Exact,
    Missing,
    Off(i16),
    /// A raw body.
    Zero,
    Any(usize),
}

fn tail_edit() -> impl Strategy<Value = TailEdit> {
    prop_oneof![
        4 => Just(TailEdit::Keep),
        1 => any::<usize>().prop_map(TailEdit::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..16).prop_map(TailEdit::Append),
        1 => prop::collection::vec(any::<u8>(), 0..32).prop_map(TailEdit::Replace),
    ]
}

fn header_choice() -> impl Strategy<Value = HeaderChoice> {
    prop_oneof![
        6 => Just(HeaderChoice::Exact),
        1 => Just(HeaderChoice::Missing),
        2 => (-8i16..8).prop_map(HeaderChoice::Off),
        1 => Just(HeaderChoice::Zero),
        1 => prop_oneof![any::<usize>(), Just(usize::MAX)].prop_map(HeaderChoice::Any),
    ]
}

/// The body and header of a hostile request: `json` then the edited tail.
fn hostile_body(
    json: Vec<u8>,
    tail: &[u8],
    tail_edit: &TailEdit,
    header: &HeaderChoice,
) -> (Vec<u8>, Option<usize>) {
    let mut tail = tail.to_vec();
    match tail_edit {
        TailEdit::Keep => {}
        TailEdit::Truncate(n) => tail.truncate(n % (tail.len() + 1)),
        TailEdit::Append(extra) => tail.extend_from_slice(extra),
        TailEdit::Replace(bytes) => tail = bytes.clone(),
    }
    let json_len = json.len();
    let header = match header {
        HeaderChoice::Exact => (!tail.is_empty()).then_some(json_len),
        HeaderChoice::Missing => None,
        HeaderChoice::Off(d) => Some((json_len as i64 + *d as i64).max(0) as usize),
        HeaderChoice::Zero => Some(0),
        HeaderChoice::Any(n) => Some(*n),
    };
    let mut body = json;
    body.extend_from_slice(&tail);
    (body, header)
}

/// What any parse of a hostile body must satisfy: an error has a message, and
/// an accepted request holds no more data than the body could describe (a
/// JSON element of at least 1 byte and its separator is at most 8 bytes).
fn check_hostile(
    body: &[u8],
    parsed: &trtis::core::error::Result<(InferRequest, OutputFormat)>,
) -> Result<(), TestCaseError> {
    has_message(parsed)?;
    if let Ok((r, _)) = parsed {
        let data: usize = r.inputs.iter().map(|t| t.data.len()).sum();
        prop_assert!(
            data <= 8 * body.len() + 8,
            "{} bytes of tensor data from a {}-byte body",
            data,
            body.len()
        );
        for &(i, _) in &r.shm_inputs {
            prop_assert!(i < r.inputs.len());
        }
    }
    Ok(())
}

/// Valid requests with their JSON structurally mutated: garbage anywhere,
/// hostile shapes (negative, overflowing products), datatypes,
/// `binary_data_size` values and `data` arrays, deep nesting, duplicated
/// inputs, removed keys; with a changed binary tail and header length.
#[test]
fn fuzz_kserve_structured_mutations() {
    let config = http_model();
    let strategy = (
        gen_request(),
        prop::collection::vec(json_edit(), 1..6),
        tail_edit(),
        header_choice(),
    );
    fuzz(
        "kserve_structure",
        3000,
        strategy,
        |(req, edits, tail_edit, header), stats| {
            let (mut doc, tail) = encode_doc(&req, |_, enc| enc);
            for edit in &edits {
                apply_json_edit(&mut doc, edit);
            }
            let json = serde_json::to_vec(&doc).unwrap();
            let (body, header) = hostile_body(json, &tail, &tail_edit, &header);
            let parsed = stats.parse(body.len(), || parse_request(&body, header, &config))?;
            check_hostile(&body, &parsed)
        },
    );
}

const JSON_DICTIONARY: &[&[u8]] = &[
    b"-1",
    b"0",
    b"1e400",
    b"-1e400",
    b"18446744073709551616",
    b"18446744073709551615",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"4294967296",
    b"1.5",
    b"[",
    b"]",
    b"{",
    b"}",
    b"\"",
    b",",
    b":",
    b"null",
    b"true",
    b"\"\"",
    b"\\u0000",
    b"\\ud800",
    b"\"binary_data_size\":",
    b"\"binary_data_size\":99999999999,",
    b"\"data\":",
    b"\"shape\":[4294967296,4294967296],",
    b"\"shared_memory_region\":\"r\",",
    b"[[[[[[[[[[[[[[[[",
    b"]]]]]]]]",
    b"\"BYTES\"",
    b"\"FP16\"",
    b"\"BOOL\"",
    b"\xff",
    b"{\"name\":\"INPUT0\",\"datatype\":\"INT32\",\"shape\":[1],\"data\":[1]},",
];

/// Byte-level mutations of valid bodies (JSON part and binary tail), with
/// the header length recomputed, left stale, or chosen at random.
#[test]
fn fuzz_kserve_byte_mutations() {
    let config = http_model();
    let strategy = (
        gen_request(),
        prop::collection::vec(byte_edit(JSON_DICTIONARY.len()), 1..8),
        any::<bool>(),
        tail_edit(),
        header_choice(),
    );
    fuzz(
        "kserve_bytes",
        3000,
        strategy,
        |(req, edits, stale_header, tail_edit, header), stats| {
            let (doc, tail) = encode_doc(&req, |_, enc| enc);
            let original = serde_json::to_vec(&doc).unwrap();
            let mut json = original.clone();
            apply_byte_edits(&mut json, &edits, JSON_DICTIONARY);
            let (body, mut header) = hostile_body(json, &tail, &tail_edit, &header);
            if stale_header && header.is_some() {
                header = Some(original.len());
            }
            let parsed = stats.parse(body.len(), || parse_request(&body, header, &config))?;
            check_hostile(&body, &parsed)
        },
    );
}

/// A model with one input of every datatype (`in_<DATATYPE>`, dims `[-1]`,
/// batching), for Triton's generate bodies.
fn generate_model() -> ModelConfig {
    ModelConfig {
        name: "g".into(),
        max_batch_size: 4,
        input: DataType::ALL
            .iter()
            .map(|dt| ModelInput {
                name: format!("in_{}", dt.name()),
                data_type: dt.to_config() as i32,
                dims: vec![-1],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// A parameter's value as the generate body carries it.
fn generate_parameter() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(|x| Value::from(x + 0.5)),
        text(8).prop_map(Value::from),
    ]
    .boxed()
}

/// Triton's generate bodies (`protocol::generate::parse_request`): an input
/// of a datatype given as a scalar or a 1-D array, and parameters at the top
/// level and under `parameters`. An oracle for the valid body (the tensor's
/// bytes and shape `[1, n]`, every parameter), then byte mutations of it:
/// no panic, within the budgets, Ok or an error with a message.
#[test]
fn fuzz_generate_bodies() {
    use trtis::server::protocol::generate::parse_request as parse_generate;
    let config = generate_model();
    let strategy = prop::sample::select(DataType::ALL.to_vec())
        .prop_flat_map(|dt| (Just(dt), prop::collection::vec(element(dt), 1..5)))
        .prop_flat_map(|(dt, elements)| {
            (
                Just(dt),
                Just(elements),
                prop::collection::btree_map("p_[a-z]{1,6}", generate_parameter(), 0..4),
                prop::collection::btree_map("q_[a-z]{1,6}", generate_parameter(), 0..3),
                prop::collection::vec(byte_edit(JSON_DICTIONARY.len()), 1..8),
            )
        });
    fuzz(
        "generate_bodies",
        1500,
        strategy,
        |(dt, elements, top, nested, edits), stats| {
            let name = format!("in_{}", dt.name());
            let mut doc = Map::new();
            let values: Vec<Value> = elements.iter().map(|(v, _)| v.clone()).collect();
            doc.insert(
                name.clone(),
                if values.len() == 1 {
                    values[0].clone()
                } else {
                    Value::Array(values)
                },
            );
            doc.extend(top.clone());
            if !nested.is_empty() {
                doc.insert(
                    "parameters".into(),
                    Value::Object(nested.clone().into_iter().collect()),
                );
            }
            let body = serde_json::to_vec(&Value::Object(doc)).unwrap();
            let parsed = stats.parse(body.len(), || parse_generate(&body, &config, 1 << 20))?;
            let request = parsed.map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            prop_assert_eq!(request.inputs.len(), 1);
            let t = &request.inputs[0];
            prop_assert_eq!(&t.name, &name);
            prop_assert_eq!(&t.shape, &vec![1, elements.len() as i64]);
            let data: Vec<u8> = elements.iter().flat_map(|(_, b)| b.clone()).collect();
            prop_assert_eq!(&t.data, &data);
            for (k, v) in top.iter().chain(nested.iter()) {
                prop_assert_eq!(request.parameters.get(k), Some(v), "parameter {}", k);
            }
            let mut mutated = body.clone();
            apply_byte_edits(&mut mutated, &edits, JSON_DICTIONARY);
            let parsed =
                stats.parse(mutated.len(), || parse_generate(&mutated, &config, 1 << 20))?;
            has_message(&parsed)
        },
    );
}

/// Raw bodies (`Inference-Header-Content-Length: 0`) for single-input
/// models of every datatype and of dims that pass validation (each >= 1 or
/// -1), huge ones included.
#[test]
fn fuzz_kserve_raw_bodies() {
    let dim = prop_oneof![
        3 => 1i64..5,
        2 => Just(-1i64),
        1 => prop::sample::select(vec![1i64 << 31, 1 << 32, 1 << 40, 1 << 62, i64::MAX]),
    ];
    let strategy = (
        prop::sample::select(DataType::ALL.to_vec()),
        prop::collection::vec(dim, 1..4),
        prop::sample::select(vec![0, 8]),
        prop::collection::vec(any::<u8>(), 0..64),
    );
    fuzz(
        "kserve_raw",
        2000,
        strategy,
        |(dt, dims, max_batch_size, body), stats| {
            let config = ModelConfig {
                name: "raw".into(),
                max_batch_size,
                input: vec![ModelInput {
                    name: "IN".into(),
                    data_type: dt.to_config() as i32,
                    dims: dims.clone(),
                    ..Default::default()
                }],
                ..Default::default()
            };
            let parsed = stats.parse(body.len(), || parse_request(&body, Some(0), &config))?;
            has_message(&parsed)?;
            let Ok((r, format)) = parsed else {
                return Ok(());
            };
            prop_assert!(format.binary_default);
            prop_assert_eq!(r.inputs.len(), 1);
            let t = &r.inputs[0];
            let shape = if max_batch_size > 0 {
                prop_assert_eq!(t.shape[0], 1);
                &t.shape[1..]
            } else {
                &t.shape[..]
            };
            match dt.size() {
                None => {
                    prop_assert_eq!(&t.data, &Tensor::serialize_bytes([body.as_slice()]));
                    // Only dims of one element take a raw BYTES input.
                    prop_assert_eq!(shape, &dims[..]);
                    prop_assert!(dims.iter().all(|&d| d == 1));
                }
                Some(size) => {
                    prop_assert_eq!(&t.data, &body);
                    prop_assert_eq!(shape.len(), dims.len());
                    let fixed = dims
                        .iter()
                        .filter(|&&d| d != -1)
                        .try_fold(1i64, |a, &d| a.checked_mul(d));
                    for (&got, &want) in shape.iter().zip(&dims) {
                        if want != -1 {
                            prop_assert_eq!(got, want);
                        } else if let Some(fixed) = fixed.filter(|&f| f > 0) {
                            prop_assert_eq!(got, (body.len() / size) as i64 / fixed);
                        } else {
                            prop_assert_eq!(got, 0);
                        }
                    }
                }
            }
            Ok(())
        },
    );
}

/// A raw body for a model whose fixed dims multiply past i64: the variable
/// dim is 0 (no body can fill it), not an overflow panic.
#[test]
fn raw_body_with_overflowing_fixed_dims() {
    let config = ModelConfig {
        name: "raw".into(),
        input: vec![ModelInput {
            name: "IN".into(),
            data_type: DataType::Fp32.to_config() as i32,
            dims: vec![-1, 1 << 32, 1 << 32],
            ..Default::default()
        }],
        ..Default::default()
    };
    let (r, _) = parse_request(&[0; 16], Some(0), &config).unwrap();
    assert_eq!(r.inputs[0].shape, vec![0, 1 << 32, 1 << 32]);
    assert_eq!(r.inputs[0].data.len(), 16);
}

// ---------------------------------------------------------------------------
// gRPC ModelInferRequest → engine request.
// ---------------------------------------------------------------------------

fn param() -> impl Strategy<Value = InferParameter> {
    let choice = prop_oneof![
        any::<bool>().prop_map(ParameterChoice::BoolParam),
        prop_oneof![
            any::<i64>(),
            prop::sample::select(vec![0i64, 1, -1, 3, 64, i64::MIN, i64::MAX]),
        ]
        .prop_map(ParameterChoice::Int64Param),
        prop_oneof![text(6), Just("r".to_string())].prop_map(ParameterChoice::StringParam),
        any::<f64>().prop_map(ParameterChoice::DoubleParam),
        prop_oneof![any::<u64>(), Just(u64::MAX), Just(0u64)]
            .prop_map(ParameterChoice::Uint64Param),
    ];
    prop::option::weighted(0.9, choice)
        .prop_map(|parameter_choice| InferParameter { parameter_choice })
}

fn params(keys: &'static [&'static str]) -> impl Strategy<Value = HashMap<String, InferParameter>> {
    prop::collection::hash_map(
        prop::sample::select(keys).prop_map(String::from),
        param(),
        0..4,
    )
}

const INPUT_KEYS: &[&str] = &[
    "shared_memory_region",
    "shared_memory_offset",
    "shared_memory_byte_size",
    "binary_data_size",
    "classification",
    "x",
];
const OUTPUT_KEYS: &[&str] = &[
    "classification",
    "shared_memory_region",
    "shared_memory_offset",
    "shared_memory_byte_size",
    "binary_data",
];
const REQUEST_KEYS: &[&str] = &[
    "priority",
    "timeout",
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "binary_data_output",
    "triton_x",
    "x",
];

fn some_list<T: Debug, S: Strategy<Value = T>>(s: S) -> impl Strategy<Value = Vec<T>> {
    prop::option::weighted(0.25, prop::collection::vec(s, 1..6)).prop_map(Option::unwrap_or_default)
}

fn contents() -> impl Strategy<Value = InferTensorContents> {
    (
        some_list(any::<bool>()),
        some_list(prop_oneof![any::<i32>(), -300i32..300]),
        some_list(any::<i64>()),
        some_list(prop_oneof![any::<u32>(), 0u32..300]),
        some_list(any::<u64>()),
        some_list(any::<f32>()),
        some_list(any::<f64>()),
        some_list(prop::collection::vec(any::<u8>(), 0..6)),
    )
        .prop_map(|(b, i, i64s, u, u64s, f, d, bytes)| InferTensorContents {
            bool_contents: b,
            int_contents: i,
            int64_contents: i64s,
            uint_contents: u,
            uint64_contents: u64s,
            fp32_contents: f,
            fp64_contents: d,
            bytes_contents: bytes,
        })
}

/// Raw input contents: random bytes, well-formed BYTES serializations, and
/// BYTES with length prefixes that lie.
fn raw_blob() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..32),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..5), 0..4)
            .prop_map(|els| Tensor::serialize_bytes(els.iter().map(Vec::as_slice))),
        (
            prop_oneof![any::<u32>(), Just(u32::MAX), 0u32..16],
            prop::collection::vec(any::<u8>(), 0..12),
        )
            .prop_map(|(len, rest)| [len.to_le_bytes().to_vec(), rest].concat()),
    ]
}

fn grpc_datatype() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(DataType::ALL.to_vec()).prop_map(|d| d.name().to_string()),
        1 => prop::sample::select(vec!["", "int32", "FP8", "TYPE_FP32", "STRING"]).prop_map(String::from),
    ]
}

fn grpc_input() -> impl Strategy<Value = InferInputTensor> {
    (
        prop::sample::select(vec!["INPUT0", "INPUT1", "", "é"]),
        grpc_datatype(),
        hostile_dims(),
        prop::option::weighted(0.3, params(INPUT_KEYS)).prop_map(Option::unwrap_or_default),
        prop::option::weighted(0.5, contents()),
    )
        .prop_map(
            |(name, datatype, shape, parameters, contents)| InferInputTensor {
                name: name.into(),
                datatype,
                shape,
                parameters,
                contents,
            },
        )
}

/// A request the converter must accept, or a chaotic one.
fn grpc_request() -> impl Strategy<Value = (ModelInferRequest, bool)> {
    prop_oneof![
        1 => valid_grpc_request().prop_map(|m| (m, true)),
        1 => chaotic_grpc_request().prop_map(|m| (m, false)),
    ]
}

/// Typed contents in the list of `dt`'s kind (`dt` is not FP16/BF16).
fn contents_for(dt: DataType) -> BoxedStrategy<InferTensorContents> {
    let n = 0..6;
    let c = InferTensorContents::default;
    match dt {
        DataType::Bool => prop::collection::vec(any::<bool>(), n)
            .prop_map(move |v| InferTensorContents {
                bool_contents: v,
                ..c()
            })
            .boxed(),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => {
            prop::collection::vec(any::<i32>(), n)
                .prop_map(move |v| InferTensorContents {
                    int_contents: v,
                    ..c()
                })
                .boxed()
        }
        DataType::Int64 => prop::collection::vec(any::<i64>(), n)
            .prop_map(move |v| InferTensorContents {
                int64_contents: v,
                ..c()
            })
            .boxed(),
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 => {
            prop::collection::vec(any::<u32>(), n)
                .prop_map(move |v| InferTensorContents {
                    uint_contents: v,
                    ..c()
                })
                .boxed()
        }
        DataType::Uint64 => prop::collection::vec(any::<u64>(), n)
            .prop_map(move |v| InferTensorContents {
                uint64_contents: v,
                ..c()
            })
            .boxed(),
        DataType::Fp32 => prop::collection::vec(any::<f32>(), n)
            .prop_map(move |v| InferTensorContents {
                fp32_contents: v,
                ..c()
            })
            .boxed(),
        DataType::Fp64 => prop::collection::vec(any::<f64>(), n)
            .prop_map(move |v| InferTensorContents {
                fp64_contents: v,
                ..c()
            })
            .boxed(),
        DataType::Bytes | DataType::Fp16 | DataType::Bf16 => {
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..6), n)
                .prop_map(move |v| InferTensorContents {
                    bytes_contents: v,
                    ..c()
                })
                .boxed()
        }
    }
}

fn choice(c: ParameterChoice) -> InferParameter {
    InferParameter {
        parameter_choice: Some(c),
    }
}

/// A well-formed request: valid datatypes; either every input's data in
/// raw contents (one each) or typed contents of the right kind; some inputs
/// in shared memory; parameters of the types the converter wants.
fn valid_grpc_request() -> impl Strategy<Value = ModelInferRequest> {
    let input = (
        prop::sample::select(DataType::ALL.to_vec()),
        prop::collection::vec(0i64..4, 0..4),
        prop::option::weighted(0.2, (0i64..64, prop::option::of(0i64..64))),
    );
    let output = (
        prop::option::of(1i64..10),
        prop::option::weighted(0.2, 0i64..64),
    );
    let request_params = (
        prop::option::of(prop_oneof![
            (0i64..=i64::MAX).prop_map(ParameterChoice::Int64Param),
            any::<u64>().prop_map(ParameterChoice::Uint64Param),
        ]),
        prop::option::of(any::<i64>()),
        prop::option::of(prop_oneof![
            any::<i64>().prop_map(ParameterChoice::Int64Param),
            text(4).prop_map(ParameterChoice::StringParam),
        ]),
        prop::option::of(any::<bool>()),
        prop::option::of(any::<bool>()),
    );
    (
        any::<bool>(),
        prop::collection::vec(input, 0..4),
        prop::collection::vec(output, 0..3),
        request_params,
        text(4),
    )
        .prop_flat_map(|(raw_mode, inputs, outputs, request_params, id)| {
            // Typed contents cannot carry FP16/BF16: those go raw.
            let raw_mode = raw_mode || inputs.iter().any(|(dt, ..)| is_half(*dt));
            let data: Vec<BoxedStrategy<(Option<InferTensorContents>, Vec<u8>)>> = inputs
                .iter()
                .map(|(dt, ..)| {
                    if raw_mode {
                        prop::collection::vec(any::<u8>(), 0..24)
                            .prop_map(|raw| (None, raw))
                            .boxed()
                    } else {
                        contents_for(*dt)
                            .prop_map(|c| (Some(c), Vec::new()))
                            .boxed()
                    }
                })
                .collect();
            (Just((inputs, outputs, request_params, id, raw_mode)), data)
        })
        .prop_map(|((inputs, outputs, request_params, id, raw_mode), data)| {
            let mut raw_input_contents = Vec::new();
            let inputs = inputs
                .into_iter()
                .zip(data)
                .enumerate()
                .map(|(i, ((dt, shape, shm), (contents, raw)))| {
                    let mut parameters = HashMap::new();
                    let contents = match shm {
                        Some((byte_size, offset)) => {
                            parameters.insert(
                                "shared_memory_region".to_string(),
                                choice(ParameterChoice::StringParam("r".into())),
                            );
                            parameters.insert(
                                "shared_memory_byte_size".to_string(),
                                choice(ParameterChoice::Int64Param(byte_size)),
                            );
                            if let Some(o) = offset {
                                parameters.insert(
                                    "shared_memory_offset".to_string(),
                                    choice(ParameterChoice::Int64Param(o)),
                                );
                            }
                            None
                        }
                        None => {
                            if raw_mode {
                                raw_input_contents.push(raw);
                            }
                            contents
                        }
                    };
                    InferInputTensor {
                        name: format!("INPUT{i}"),
                        datatype: dt.name().to_string(),
                        shape,
                        parameters,
                        contents,
                    }
                })
                .collect();
            let outputs = outputs
                .into_iter()
                .enumerate()
                .map(|(i, (classification, shm))| {
                    let mut parameters = HashMap::new();
                    match (classification, shm) {
                        (_, Some(byte_size)) => {
                            parameters.insert(
                                "shared_memory_region".to_string(),
                                choice(ParameterChoice::StringParam("o".into())),
                            );
                            parameters.insert(
                                "shared_memory_byte_size".to_string(),
                                choice(ParameterChoice::Int64Param(byte_size)),
                            );
                        }
                        (Some(c), None) => {
                            parameters.insert(
                                "classification".to_string(),
                                choice(ParameterChoice::Int64Param(c)),
                            );
                        }
                        (None, None) => {}
                    }
                    InferRequestedOutputTensor {
                        name: format!("OUTPUT{i}"),
                        parameters,
                    }
                })
                .collect();
            let (priority, timeout, sequence_id, start, end) = request_params;
            let mut parameters = HashMap::new();
            let mut put = |k: &str, c: Option<ParameterChoice>| {
                if let Some(c) = c {
                    parameters.insert(k.to_string(), choice(c));
                }
            };
            put("priority", priority);
            put("timeout", timeout.map(ParameterChoice::Int64Param));
            put("sequence_id", sequence_id);
            put("sequence_start", start.map(ParameterChoice::BoolParam));
            put("sequence_end", end.map(ParameterChoice::BoolParam));
            ModelInferRequest {
                model_name: "m".into(),
                model_version: String::new(),
                id,
                parameters,
                inputs,
                outputs,
                raw_input_contents,
            }
        })
}

fn chaotic_grpc_request() -> impl Strategy<Value = ModelInferRequest> {
    (
        prop::sample::select(vec!["m", "", "a/b"]),
        prop::sample::select(vec!["", "1", "-1"]),
        text(4),
        prop::option::weighted(0.4, params(REQUEST_KEYS)).prop_map(Option::unwrap_or_default),
        prop::collection::vec(grpc_input(), 0..4),
        prop::collection::vec(
            (
                prop::sample::select(vec!["OUTPUT0", "OUTPUT1", ""]),
                prop::option::weighted(0.4, params(OUTPUT_KEYS))
                    .prop_map(Option::unwrap_or_default),
            )
                .prop_map(|(name, parameters)| InferRequestedOutputTensor {
                    name: name.into(),
                    parameters,
                }),
            0..3,
        ),
        prop::collection::vec(raw_blob(), 0..5),
    )
        .prop_map(
            |(model_name, model_version, id, parameters, inputs, outputs, raw_input_contents)| {
                ModelInferRequest {
                    model_name: model_name.into(),
                    model_version: model_version.into(),
                    id,
                    parameters,
                    inputs,
                    outputs,
                    raw_input_contents,
                }
            },
        )
}

/// The bytes typed `contents` stand for, for a request the converter
/// accepted: the list of `dt`'s kind, narrowed for 8- and 16-bit types.
fn typed_bytes(dt: DataType, c: &InferTensorContents) -> Vec<u8> {
    match dt {
        DataType::Bool => c.bool_contents.iter().map(|&b| b as u8).collect(),
        DataType::Int8 => c.int_contents.iter().map(|&v| v.to_le_bytes()[0]).collect(),
        DataType::Int16 => c
            .int_contents
            .iter()
            .flat_map(|&v| v.to_le_bytes()[..2].to_vec())
            .collect(),
        DataType::Int32 => c
            .int_contents
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DataType::Int64 => c
            .int64_contents
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DataType::Uint8 => c
            .uint_contents
            .iter()
            .map(|&v| v.to_le_bytes()[0])
            .collect(),
        DataType::Uint16 => c
            .uint_contents
            .iter()
            .flat_map(|&v| v.to_le_bytes()[..2].to_vec())
            .collect(),
        DataType::Uint32 => c
            .uint_contents
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DataType::Uint64 => c
            .uint64_contents
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DataType::Fp32 => c
            .fp32_contents
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DataType::Fp64 => c
            .fp64_contents
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DataType::Bytes => Tensor::serialize_bytes(c.bytes_contents.iter().map(Vec::as_slice)),
        DataType::Fp16 | DataType::Bf16 => Vec::new(),
    }
}

/// The oracle for an accepted gRPC request: names, datatypes and shapes as
/// sent; shared-memory inputs exactly those naming a region; typed contents
/// converted to their bytes; the raw contents handed out in order to the
/// inputs without contents; no more data than the message held.
fn check_grpc(
    msg: &ModelInferRequest,
    encoded_len: usize,
    converted: &trtis::core::error::Result<InferRequest>,
) -> Result<(), TestCaseError> {
    has_message(converted)?;
    let Ok(r) = converted else {
        return Ok(());
    };
    prop_assert_eq!(&r.id, &msg.id);
    prop_assert_eq!(r.inputs.len(), msg.inputs.len());
    prop_assert_eq!(r.outputs.len(), msg.outputs.len());
    let shm: HashSet<usize> = r.shm_inputs.iter().map(|(i, _)| *i).collect();
    let mut raw = msg.raw_input_contents.iter();
    for (i, (sent, t)) in msg.inputs.iter().zip(&r.inputs).enumerate() {
        prop_assert_eq!(&t.name, &sent.name);
        prop_assert_eq!(t.datatype.name(), sent.datatype.as_str());
        prop_assert_eq!(&t.shape, &sent.shape);
        let region = sent
            .parameters
            .get("shared_memory_region")
            .and_then(|p| p.parameter_choice.as_ref());
        prop_assert_eq!(shm.contains(&i), region.is_some(), "input {}", i);
        if shm.contains(&i) {
            prop_assert!(t.data.is_empty());
            continue;
        }
        match &sent.contents {
            Some(c) => prop_assert_eq!(&t.data, &typed_bytes(t.datatype, c)),
            None => {
                let next = raw.next();
                prop_assert_eq!(
                    Some(&t.data),
                    next,
                    "input {} takes the next raw contents",
                    i
                );
            }
        }
    }
    let data: usize = r.inputs.iter().map(|t| t.data.len()).sum();
    prop_assert!(
        data <= 8 * encoded_len + 8,
        "{} bytes of data from a {}-byte message",
        data,
        encoded_len
    );
    Ok(())
}

/// Generated `ModelInferRequest`s: typed contents of every kind (several
/// lists at once, lists of the wrong kind), raw contents with counts that
/// differ from the inputs, hostile shapes, every kind of parameter under the
/// keys the converter reads, BYTES with lying length prefixes.
#[test]
fn fuzz_grpc_structured_requests() {
    fuzz(
        "grpc_structure",
        4000,
        grpc_request(),
        |(msg, valid), stats| {
            let encoded_len = msg.encoded_len();
            let input = msg.clone();
            let converted = stats.parse(encoded_len, move || infer_request(input))?;
            if valid {
                if let Err(e) = &converted {
                    return Err(TestCaseError::fail(format!(
                        "a valid request was refused: {}",
                        e.message
                    )));
                }
            }
            check_grpc(&msg, encoded_len, &converted)
        },
    );
}

const PROTO_DICTIONARY: &[&[u8]] = &[
    // inputs (field 5), a length-delimited message claiming 2^32 bytes
    b"\x2a\x80\x80\x80\x80\x10",
    // raw_input_contents (field 7), a huge length
    b"\x3a\xff\xff\xff\xff\x0f",
    // a packed repeated field with a truncated length
    b"\x0a\x05\x01\x02",
    // varint of 10 bytes (the longest)
    b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
    // a group start tag (wire type 3) and end tag
    b"\x0b",
    b"\x0c",
    b"\x00",
    b"\xff",
];

/// Bytes decoded as a `ModelInferRequest` through prost, then converted:
/// arbitrary bytes, and byte mutations of encoded generated requests.
#[test]
fn fuzz_grpc_bytes() {
    let strategy = prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..256),
        3 => (grpc_request(), prop::collection::vec(byte_edit(PROTO_DICTIONARY.len()), 1..4)).prop_map(
            |((msg, _), edits)| {
                let mut bytes = msg.encode_to_vec();
                apply_byte_edits(&mut bytes, &edits, PROTO_DICTIONARY);
                bytes
            }
        ),
    ];
    fuzz("grpc_bytes", 4000, strategy, |bytes, stats| {
        let decoded = stats.parse(bytes.len(), || ModelInferRequest::decode(bytes.as_slice()))?;
        let Ok(msg) = decoded else {
            return Ok(());
        };
        let input = msg.clone();
        let converted = stats.parse(bytes.len(), move || infer_request(input))?;
        check_grpc(&msg, bytes.len(), &converted)
    });
}

// ---------------------------------------------------------------------------
// config.pbtxt.
// ---------------------------------------------------------------------------

/// Decisions read from a byte string (as `arbitrary` does): proptest shrinks
/// the bytes, and running out of them makes every later decision the first
/// (simplest) option, which ends the text.
struct Choices<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.bytes.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        u16::from_le_bytes([self.byte(), self.byte()]) as usize % n
    }

    /// True with about `percent`% probability; false once the bytes ran out.
    fn chance(&mut self, percent: u8) -> bool {
        !self.exhausted() && self.byte() % 100 < percent
    }

    fn exhausted(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn pick<'t, T>(&mut self, items: &'t [T]) -> &'t T {
        &items[self.below(items.len())]
    }
}

/// The 1-based line and column of byte `offset`, as the source map counts
/// them (columns in characters).
fn line_col(text: &str, offset: usize) -> (u32, u32) {
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        line as u32,
        text[line_start..offset].chars().count() as u32 + 1,
    )
}

/// A `config.pbtxt` written from the schema's descriptors. In valid mode it
/// also builds the message the text stands for and where each field path
/// starts; in hostile mode it mixes in wrong values, duplicates, missing
/// punctuation and unknown names.
struct TextGen<'a> {
    c: Choices<'a>,
    hostile: bool,
    text: String,
    /// Field path → byte offset, first occurrence only.
    spots: BTreeMap<String, usize>,
    /// Fields left to write: bounds the text's size.
    budget: usize,
}

/// Values out of range, of the wrong kind or badly formed.
const BAD_VALUES: &[&str] = &[
    "99999999999999999999",
    "-9223372036854775809",
    "18446744073709551616",
    "4294967296",
    "-0x8000000000000001",
    "0x",
    "08",
    "0x1Gz",
    "1.2.3",
    "--1",
    "- 1",
    "1e99999",
    "-1e-99999",
    ".5e-3",
    "1f",
    "nan",
    "-inf",
    "Infinity",
    "\"unterminated",
    "\"\\400\"",
    "\"\\xff\"",
    "\"\\u12\"",
    "\"\\z\"",
    "'single'",
    "\"a\" 'b' \"c\"",
    "TYPE_FP32",
    "KIND_GPU",
    "true",
    "t",
    "2",
    "{ }",
    "< >",
    "[ ]",
    "[ 1, ]",
    "[ , ]",
    "{",
    "}",
    "]",
    ">",
    "",
    ":",
    ";",
    ",",
    "/",
    "[inference.x]",
    "[type.googleapis.com/inference.ModelConfig] { }",
];

impl TextGen<'_> {
    fn new(bytes: &[u8], hostile: bool) -> TextGen<'_> {
        TextGen {
            c: Choices { bytes, pos: 0 },
            hostile,
            text: String::new(),
            spots: BTreeMap::new(),
            budget: 80,
        }
    }

    fn spot(&mut self, path: Option<&str>, offset: usize) {
        if let Some(path) = path {
            self.spots.entry(path.to_string()).or_insert(offset);
        }
    }

    fn space(&mut self) {
        let s = *self.c.pick(&[
            " ",
            " ",
            " ",
            "\n",
            "\n  ",
            "\t",
            "\r\n",
            " # a comment { [ \" '\n",
            "  ",
        ]);
        self.text.push_str(s);
    }

    fn maybe_space(&mut self) {
        if self.c.chance(50) {
            self.space();
        }
    }

    /// Writes fields of `desc` into the text and into `msg`.
    fn message(
        &mut self,
        desc: &MessageDescriptor,
        msg: &mut DynamicMessage,
        path: Option<&str>,
        depth: usize,
    ) {
        let fields: Vec<FieldDescriptor> = desc.fields().collect();
        if fields.is_empty() {
            return;
        }
        let mut set: HashSet<u32> = HashSet::new();
        let n = if depth == 0 {
            1 + self.c.below(12)
        } else {
            self.c.below(5)
        };
        for _ in 0..n {
            if self.budget == 0 || self.c.exhausted() {
                break;
            }
            self.budget -= 1;
            if self.hostile && self.c.chance(8) {
                self.hostile_token();
                continue;
            }
            let f = self.c.pick(&fields).clone();
            if !self.hostile {
                let repeated = f.is_list() || f.is_map();
                if !repeated && set.contains(&f.number()) {
                    continue;
                }
                if let Some(oneof) = f.containing_oneof() {
                    if oneof
                        .fields()
                        .any(|g| g.number() != f.number() && set.contains(&g.number()))
                    {
                        continue;
                    }
                }
                if matches!(f.kind(), Kind::Message(_)) && depth >= 6 {
                    continue;
                }
            }
            set.insert(f.number());
            self.field(&f, msg, path, depth);
            match self.c.below(8) {
                0 => self.text.push(','),
                1 => self.text.push(';'),
                _ => {}
            }
            self.space();
        }
    }

    fn hostile_token(&mut self) {
        let t = *self.c.pick(BAD_VALUES);
        self.text.push_str(t);
        self.space();
    }

    fn field(
        &mut self,
        f: &FieldDescriptor,
        msg: &mut DynamicMessage,
        prefix: Option<&str>,
        depth: usize,
    ) {
        let path = prefix.map(|p| {
            if p.is_empty() {
                f.name().to_string()
            } else {
                format!("{p}.{}", f.name())
            }
        });
        let name = if self.hostile && self.c.chance(5) {
            // A typo of the name.
            let mut n = f.name().to_string();
            n.push('s');
            n
        } else {
            f.name().to_string()
        };
        self.spot(path.as_deref(), self.text.len());
        self.text.push_str(&name);
        if f.is_list() || f.is_map() {
            self.repeated(f, &name, msg, path.as_deref(), depth);
        } else {
            let value = self.single(f, path.as_deref(), depth);
            msg.set_field(f, value);
        }
    }

    /// `:` (optional before a message value) and the value of a singular field.
    fn single(
        &mut self,
        f: &FieldDescriptor,
        path: Option<&str>,
        depth: usize,
    ) -> prost_reflect::Value {
        let is_message = matches!(f.kind(), Kind::Message(_));
        let mut colon = !is_message || self.c.chance(40);
        if self.hostile && self.c.chance(10) {
            colon = !colon;
        }
        if colon {
            self.text.push(':');
        }
        self.maybe_space();
        self.value(&f.kind(), path, depth)
    }

    fn repeated(
        &mut self,
        f: &FieldDescriptor,
        name: &str,
        msg: &mut DynamicMessage,
        path: Option<&str>,
        depth: usize,
    ) {
        let count = self.c.below(4);
        let list_syntax = self.c.chance(50);
        let mut index = if f.is_map() {
            0
        } else {
            msg.get_field(f).as_list().map_or(0, <[_]>::len)
        };
        if list_syntax {
            // `name: [ a, b ]` or the colon-less `name [ a, b ]`.
            if self.c.chance(50) {
                self.text.push(':');
            }
            self.maybe_space();
            self.text.push('[');
            for i in 0..count {
                if i > 0 {
                    self.text.push(',');
                }
                self.maybe_space();
                self.element(f, msg, path, &mut index, depth);
            }
            self.maybe_space();
            if self.hostile && self.c.chance(5) {
                self.text.push(',');
            }
            self.text.push(']');
        } else {
            // `name: a name: b` (one element at least: the name is written).
            for i in 0..count.max(1) {
                if i > 0 {
                    self.space();
                    self.text.push_str(name);
                }
                let is_message = matches!(f.kind(), Kind::Message(_));
                if !is_message || self.c.chance(40) {
                    self.text.push(':');
                }
                self.maybe_space();
                self.element(f, msg, path, &mut index, depth);
            }
        }
    }

    /// One element of a list or map field, written and added to `msg`.
    fn element(
        &mut self,
        f: &FieldDescriptor,
        msg: &mut DynamicMessage,
        path: Option<&str>,
        index: &mut usize,
        depth: usize,
    ) {
        let kind = f.kind();
        if f.is_map() {
            let entry = kind
                .as_message()
                .expect("a map field's kind is its entry")
                .clone();
            let taken: HashSet<MapKey> = msg
                .get_field(f)
                .as_map()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            let (key, value) = self.map_entry(&entry, path, &taken, depth);
            if let Some(map) = msg.get_field_mut(f).as_map_mut() {
                map.insert(key, value);
            }
            return;
        }
        let element_path = path.map(|p| format!("{p}[{index}]"));
        *index += 1;
        let value = self.value(&kind, element_path.as_deref(), depth);
        if let Some(list) = msg.get_field_mut(f).as_list_mut() {
            list.push(value);
        }
    }

    /// `{ key: K value: V }` in either order; returns the key and value.
    /// The source map names an entry by its key's text where it first
    /// occurs: spots are expected only for plain keys not `taken` before.
    fn map_entry(
        &mut self,
        entry: &MessageDescriptor,
        path: Option<&str>,
        taken: &HashSet<MapKey>,
        depth: usize,
    ) -> (MapKey, prost_reflect::Value) {
        let key_field = entry.map_entry_key_field();
        let value_field = entry.map_entry_value_field();
        let start = self.text.len();
        // The key first, to know the entry's path; written where it falls.
        let (key_text, key_value, plain) = self.scalar(&key_field.kind());
        let key = map_key(&key_value);
        let named = plain && !taken.contains(&key);
        let entry_path = path.filter(|_| named).map(|p| match key_field.kind() {
            Kind::String => format!("{p}[{:?}]", key_text.trim_matches(['"', '\''])),
            _ => format!("{p}[{key_text}]"),
        });
        let (open, close) = if self.c.chance(20) {
            ('<', '>')
        } else {
            ('{', '}')
        };
        self.spot(entry_path.as_deref(), start);
        self.text.push(open);
        self.maybe_space();
        let mut entry_msg = DynamicMessage::new(entry.clone());
        let value_first = self.c.chance(30);
        let with_value = self.c.chance(85);
        let sub = |name: &str| entry_path.as_ref().map(|p| format!("{p}.{name}"));
        let write_key = |g: &mut Self| {
            g.spot(sub("key").as_deref(), g.text.len());
            g.text.push_str("key: ");
            g.text.push_str(&key_text);
            g.space();
        };
        if !value_first {
            write_key(self);
        }
        if with_value {
            let value_path = sub("value");
            self.spot(value_path.as_deref(), self.text.len());
            self.text.push_str("value");
            let value = self.single(&value_field, value_path.as_deref(), depth + 1);
            entry_msg.set_field(&value_field, value);
            self.space();
        }
        if value_first {
            write_key(self);
        }
        entry_msg.set_field(&key_field, key_value);
        self.text.push(close);
        (key, entry_msg.get_field(&value_field).into_owned())
    }

    /// A value of `kind` at `path` (messages recurse).
    fn value(&mut self, kind: &Kind, path: Option<&str>, depth: usize) -> prost_reflect::Value {
        self.spot(path, self.text.len());
        if self.hostile && self.c.chance(6) {
            self.hostile_token();
            return prost_reflect::Value::default_value(kind);
        }
        if let Kind::Message(m) = kind {
            let (open, close) = if self.c.chance(20) {
                ('<', '>')
            } else {
                ('{', '}')
            };
            self.text.push(open);
            self.maybe_space();
            let mut child = DynamicMessage::new(m.clone());
            self.message(m, &mut child, path, depth + 1);
            if !(self.hostile && self.c.chance(5)) {
                self.text.push(close);
            }
            return prost_reflect::Value::Message(child);
        }
        let (text, value, _) = self.scalar(kind);
        self.text.push_str(&text);
        value
    }

    /// The text of a scalar of `kind`, its value, and whether the source map
    /// names a map entry by this text (plain strings and decimal integers).
    fn scalar(&mut self, kind: &Kind) -> (String, prost_reflect::Value, bool) {
        use prost_reflect::Value as V;
        macro_rules! int {
            ($t:ty, $v:path) => {{
                let x: $t = match self.c.below(4) {
                    0 => (self.c.below(20) as $t),
                    1 => <$t>::MAX,
                    2 => <$t>::MIN,
                    _ => <$t>::from_le_bytes(std::array::from_fn(|_| self.c.byte())),
                };
                let (text, plain) = int_text(x as i128, self.c.below(5));
                (text, $v(x), plain)
            }};
        }
        match kind {
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => int!(i32, V::I32),
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => int!(i64, V::I64),
            Kind::Uint32 | Kind::Fixed32 => int!(u32, V::U32),
            Kind::Uint64 | Kind::Fixed64 => int!(u64, V::U64),
            Kind::Float | Kind::Double => {
                let (text, x) = self.float_text();
                let value = if matches!(kind, Kind::Float) {
                    V::F32(x as f32)
                } else {
                    V::F64(x)
                };
                (text, value, false)
            }
            Kind::Bool => {
                let (text, b) = *self.c.pick(&[
                    ("true", true),
                    ("false", false),
                    ("True", true),
                    ("False", false),
                    ("t", true),
                    ("f", false),
                    ("1", true),
                    ("0", false),
                    ("0x1", true),
                ]);
                (text.to_string(), V::Bool(b), false)
            }
            Kind::String | Kind::Bytes => {
                let (text, bytes, plain) = self.string_text();
                let value = if matches!(kind, Kind::String) {
                    V::String(String::from_utf8(bytes).expect("generated strings are UTF-8"))
                } else {
                    V::Bytes(bytes.into())
                };
                (text, value, plain)
            }
            Kind::Enum(e) => {
                let values: Vec<_> = e.values().collect();
                let v = self.c.pick(&values).clone();
                match self.c.below(5) {
                    0 => (v.number().to_string(), V::EnumNumber(v.number()), false),
                    1 => {
                        let n = self.c.below(2000) as i32 - 1000;
                        (n.to_string(), V::EnumNumber(n), false)
                    }
                    _ => (v.name().to_string(), V::EnumNumber(v.number()), false),
                }
            }
            Kind::Message(_) => unreachable!("messages are not scalars"),
        }
    }

    /// A float literal in one of the text format's spellings, and its value
    /// (parsed as f64, as the text format does).
    fn float_text(&mut self) -> (String, f64) {
        let digits = |c: &mut Choices, min: usize| -> String {
            let n = min + c.below(4);
            let mut s: String = (0..n)
                .map(|_| char::from(b'0' + c.below(10) as u8))
                .collect();
            if min > 0 && s.starts_with('0') && s.len() > 1 {
                s.replace_range(0..1, "1");
            }
            s
        };
        let exponent = |c: &mut Choices| -> String {
            if c.chance(30) {
                let sign = *c.pick(&["", "+", "-"]);
                let e = *c.pick(&["e", "E"]);
                format!("{e}{sign}{}", c.below(40))
            } else {
                String::new()
            }
        };
        let suffix = |c: &mut Choices| *c.pick(&["", "", "", "f", "F"]);
        let mut text = match self.c.below(6) {
            // 12 or 0
            0 => {
                let d = digits(&mut self.c, 1);
                if d.len() > 1 && d.starts_with('0') {
                    "0".to_string()
                } else {
                    d
                }
            }
            // 1.5, 1., 1.5e-3f
            1 | 2 => {
                let int = digits(&mut self.c, 1);
                let frac = digits(&mut self.c, 0);
                let e = exponent(&mut self.c);
                format!("{int}.{frac}{e}{}", suffix(&mut self.c))
            }
            // .5, .5e-3
            3 => {
                let frac = digits(&mut self.c, 1);
                let e = exponent(&mut self.c);
                format!(".{frac}{e}{}", suffix(&mut self.c))
            }
            // 1e5
            4 => {
                let int = digits(&mut self.c, 1);
                format!("{int}e{}{}", self.c.below(30), suffix(&mut self.c))
            }
            5 => self
                .c
                .pick(&["inf", "Infinity", "INF", "1f", "0f"])
                .to_string(),
            _ => unreachable!("below(6)"),
        };
        let mut x: f64 = if text.starts_with(|c: char| c.is_ascii_alphabetic()) {
            f64::INFINITY
        } else {
            let number = text.trim_end_matches(['f', 'F']);
            number.parse().expect("generated float literals parse")
        };
        if self.c.chance(30) {
            text.insert(0, '-');
            x = -x;
        }
        (text, x)
    }

    /// A quoted string with escapes; its bytes; whether the source map names
    /// a map entry by it (plain characters only).
    fn string_text(&mut self) -> (String, Vec<u8>, bool) {
        let quote = if self.c.chance(20) { '\'' } else { '"' };
        let mut text = String::from(quote);
        let mut bytes = Vec::new();
        let mut plain = true;
        for _ in 0..self.c.below(7) {
            let piece: (&str, &[u8]) = match self.c.below(16) {
                0 => ("\\n", b"\n"),
                1 => ("\\t", b"\t"),
                2 => ("\\\\", b"\\"),
                3 => ("\\\"", b"\""),
                4 => ("\\'", b"'"),
                5 => ("\\x41", b"A"),
                6 => ("\\101", b"A"),
                7 => ("\\000", b"\0"),
                8 => ("\\u00e9", "é".as_bytes()),
                9 => ("é", "é".as_bytes()),
                10 => ("😀", "😀".as_bytes()),
                11 => (" ", b" "),
                12 => ("#", b"#"),
                13 => ("{", b"{"),
                _ => {
                    let c = *self.c.pick(&["a", "b", "x", "0", "_", "-", "."]);
                    (c, c.as_bytes())
                }
            };
            if !piece
                .0
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
            {
                plain = false;
            }
            text.push_str(piece.0);
            bytes.extend_from_slice(piece.1);
        }
        text.push(quote);
        if self.c.chance(10) {
            // Adjacent strings concatenate.
            text.push_str(" \"b\"");
            bytes.push(b'b');
            plain = false;
        }
        (text, bytes, plain)
    }
}

fn map_key(v: &prost_reflect::Value) -> MapKey {
    match v {
        prost_reflect::Value::String(s) => MapKey::String(s.clone()),
        prost_reflect::Value::U64(v) => MapKey::U64(*v),
        prost_reflect::Value::I64(v) => MapKey::I64(*v),
        prost_reflect::Value::U32(v) => MapKey::U32(*v),
        prost_reflect::Value::I32(v) => MapKey::I32(*v),
        prost_reflect::Value::Bool(v) => MapKey::Bool(*v),
        other => panic!("not a map key: {other:?}"),
    }
}

/// An integer literal for `x`: decimal, hex or octal (negative ones with a
/// `-`); whether it is plain decimal.
fn int_text(x: i128, style: usize) -> (String, bool) {
    let (sign, abs) = if x < 0 {
        ("-", x.unsigned_abs())
    } else {
        ("", x as u128)
    };
    match style {
        0 => (format!("{sign}0x{abs:x}"), false),
        1 if abs != 0 => (format!("{sign}0{abs:o}"), false),
        _ => (format!("{sign}{abs}"), true),
    }
}

/// The text and expectations of a generated valid config.
struct Generated {
    text: String,
    expected: ModelConfig,
    spots: BTreeMap<String, usize>,
}

fn generate_valid(bytes: &[u8]) -> Generated {
    let desc = model_config_descriptor();
    let mut g = TextGen::new(bytes, false);
    let mut msg = DynamicMessage::new(desc.clone());
    g.message(&desc, &mut msg, Some(""), 0);
    Generated {
        text: g.text,
        expected: msg
            .transcode_to()
            .expect("the generated message is a ModelConfig"),
        spots: g.spots,
    }
}

/// An error's position is inside the file.
fn check_position(text: &[u8], e: &trtis::core::config::ParseError) -> Result<(), TestCaseError> {
    let lines = text.split(|&b| b == b'\n').count() as u32;
    prop_assert!(
        e.line >= 1 && e.line <= lines.max(1),
        "line {} of {}",
        e.line,
        lines
    );
    prop_assert!(e.col >= 1);
    prop_assert!(!e.message.trim().is_empty());
    Ok(())
}

/// Text generated from the schema: every field kind, list and repeated-field
/// forms (colon-less lists too), maps with keys before or after values,
/// `{}` and `<>`, separators, comments, escapes, hex/octal/negative integers,
/// float spellings. The oracle: it parses to the message it was written
/// from, and the source map puts each field path where it was written.
#[test]
fn fuzz_pbtxt_generated_valid() {
    fuzz(
        "pbtxt_generated",
        2500,
        prop::collection::vec(any::<u8>(), 0..600),
        |bytes, stats| {
            let g = generate_valid(&bytes);
            let parsed = stats.parse(g.text.len(), || parse_config(g.text.as_bytes()))?;
            let parsed =
                parsed.map_err(|e| TestCaseError::fail(format!("{e}\n---\n{}", g.text)))?;
            prop_assert_eq!(&parsed.config, &g.expected, "\n---\n{}", g.text);
            for (path, &offset) in &g.spots {
                prop_assert!(
                    parsed.source_map.contains(path),
                    "{} is not in the source map\n---\n{}",
                    path,
                    g.text
                );
                prop_assert_eq!(
                    parsed.source_map.locate(path),
                    line_col(&g.text, offset),
                    "where {} is\n---\n{}",
                    path,
                    g.text
                );
            }
            Ok(())
        },
    );
}

/// Found by `fuzz_pbtxt_generated_valid`: a float written with a leading
/// dot and a signed exponent (`.5e-3`) was three tokens to the source map's
/// lexer, so the list elements after it were counted wrong.
#[test]
fn source_map_counts_list_elements_after_a_leading_dot_float() {
    let text =
        "model_metrics { metric_control [ { histogram_options { buckets: [ .5e-3, 2 ] } } ] }";
    let parsed = parse_config(text.as_bytes()).unwrap();
    let buckets = "model_metrics.metric_control[0].histogram_options.buckets";
    let at = |s: &str| line_col(text, text.find(s).unwrap());
    assert_eq!(
        parsed.source_map.locate(&format!("{buckets}[0]")),
        at(".5e-3")
    );
    assert_eq!(
        parsed.source_map.locate(&format!("{buckets}[1]")),
        at("2 ]")
    );
    assert!(!parsed.source_map.contains(&format!("{buckets}[2]")));
}

/// Generated text with hostile pieces: values out of range or of the wrong
/// kind, bad escapes, typos of field names, duplicated fields and oneofs,
/// missing colons and brackets, stray tokens.
#[test]
fn fuzz_pbtxt_generated_hostile() {
    fuzz(
        "pbtxt_hostile",
        2500,
        prop::collection::vec(any::<u8>(), 0..600),
        |bytes, stats| {
            let desc = model_config_descriptor();
            let mut g = TextGen::new(&bytes, true);
            let mut msg = DynamicMessage::new(desc.clone());
            g.message(&desc, &mut msg, None, 0);
            let parsed = stats.parse(g.text.len(), || parse_config(g.text.as_bytes()))?;
            match parsed {
                Ok(p) => {
                    let _ = p.source_map.locate("input[0].dims[0]");
                }
                Err(e) => check_position(g.text.as_bytes(), &e)?,
            }
            Ok(())
        },
    );
}

/// Splits text into tokens for mutation: white space, comments, strings,
/// words (identifiers and numbers) and single punctuation characters.
fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let len = if c.is_whitespace() {
            rest.find(|c: char| !c.is_whitespace())
                .unwrap_or(rest.len())
        } else if c == '#' {
            rest.find('\n').unwrap_or(rest.len())
        } else if c == '"' || c == '\'' {
            let mut escaped = false;
            let mut end = rest.len();
            for (i, ch) in rest.char_indices().skip(1) {
                if ch == '\n' {
                    end = i;
                    break;
                }
                if ch == c && !escaped {
                    end = i + 1;
                    break;
                }
                escaped = ch == '\\' && !escaped;
            }
            end
        } else if c.is_alphanumeric() || c == '_' || c == '.' {
            rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                .unwrap_or(rest.len())
        } else {
            c.len_utf8()
        };
        out.push(&rest[..len]);
        rest = &rest[len..];
    }
    out
}

const TOKEN_DICTIONARY: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "<",
    ">",
    ":",
    ",",
    ";",
    "-",
    ".",
    "/",
    "\"",
    "'",
    "#",
    "\n",
    " ",
    "0",
    "-1",
    "1.5",
    ".5e-3",
    "1e5f",
    "0x7fffffffffffffff",
    "0777",
    "99999999999999999999",
    "-9223372036854775808",
    "nan",
    "inf",
    "true",
    "\"s\"",
    "'s'",
    "\"\\\"\"",
    "\"\\x\"",
    "\"\\400\"",
    "\"é\"",
    "\"unterminated",
    "# comment\n",
    "TYPE_FP32",
    "TYPE_STRING",
    "KIND_GPU",
    "KIND_CPU",
    "name",
    "input",
    "output",
    "dims",
    "data_type",
    "max_batch_size",
    "instance_group",
    "dynamic_batching",
    "sequence_batching",
    "ensemble_scheduling",
    "parameters",
    "key",
    "value",
    "string_value",
    "reshape",
    "shape",
    "[inference.x]",
    "é",
    "\u{feff}",
    "\r",
];

#[derive(Debug, Clone)]
enum TokenEdit {
    Delete(usize),
    Duplicate(usize),
    Swap(usize, usize),
    Replace(usize, usize),
    Insert(usize, usize),
    Move(usize, usize),
    Truncate(usize),
}

fn token_edit() -> impl Strategy<Value = TokenEdit> {
    let d = TOKEN_DICTIONARY.len();
    prop_oneof![
        any::<usize>().prop_map(TokenEdit::Delete),
        any::<usize>().prop_map(TokenEdit::Duplicate),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| TokenEdit::Swap(a, b)),
        (any::<usize>(), 0..d).prop_map(|(a, b)| TokenEdit::Replace(a, b)),
        (any::<usize>(), 0..d).prop_map(|(a, b)| TokenEdit::Insert(a, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| TokenEdit::Move(a, b)),
        any::<usize>().prop_map(TokenEdit::Truncate),
    ]
}

fn apply_token_edits(text: &str, edits: &[TokenEdit]) -> String {
    let mut toks: Vec<&str> = tokens(text);
    for edit in edits {
        if toks.is_empty() {
            toks.push(TOKEN_DICTIONARY[0]);
        }
        let n = toks.len();
        match *edit {
            TokenEdit::Delete(i) => {
                toks.remove(i % n);
            }
            TokenEdit::Duplicate(i) => toks.insert(i % n, toks[i % n]),
            TokenEdit::Swap(a, b) => toks.swap(a % n, b % n),
            TokenEdit::Replace(i, d) => toks[i % n] = TOKEN_DICTIONARY[d],
            TokenEdit::Insert(i, d) => toks.insert(i % (n + 1), TOKEN_DICTIONARY[d]),
            TokenEdit::Move(a, b) => {
                let t = toks.remove(a % n);
                toks.insert(b % n, t);
            }
            TokenEdit::Truncate(i) => toks.truncate(i % (n + 1)),
        }
    }
    toks.concat()
}

/// Every `config.pbtxt` under tests/fixtures.
fn fixture_configs() -> Vec<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for p in paths {
            if p.is_dir() {
                walk(&p, out);
            } else if p.file_name().is_some_and(|n| n == "config.pbtxt") {
                if let Ok(text) = std::fs::read_to_string(&p) {
                    out.push(text);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"),
        &mut out,
    );
    out
}

/// Token-level mutations (delete, duplicate, swap, move, replace or insert
/// from a dictionary of punctuation, edge-case literals and schema names,
/// truncate) of the fixture configs and of generated ones. A result that
/// parses must print (text format) and parse back to the same config.
#[test]
fn fuzz_pbtxt_token_mutations() {
    let fixtures = fixture_configs();
    assert!(fixtures.len() > 10, "the fixture configs are found");
    let desc = model_config_descriptor();
    let strategy = (
        any::<prop::sample::Index>(),
        prop::option::weighted(0.3, prop::collection::vec(any::<u8>(), 0..400)),
        prop::collection::vec(token_edit(), 1..6),
    );
    fuzz(
        "pbtxt_tokens",
        4000,
        strategy,
        |(seed, generated, edits), stats| {
            let base = match &generated {
                Some(bytes) => generate_valid(bytes).text,
                None => seed.get(&fixtures).clone(),
            };
            let text = apply_token_edits(&base, &edits);
            let parsed = stats.parse(text.len(), || parse_config(text.as_bytes()))?;
            match parsed {
                Err(e) => check_position(text.as_bytes(), &e),
                Ok(p) => {
                    let _ = p.source_map.locate("input[0].dims[0]");
                    let printed =
                        DynamicMessage::decode(desc.clone(), p.config.encode_to_vec().as_slice())
                            .expect("a parsed config encodes and decodes")
                            .to_text_format();
                    let again = parse_config(printed.as_bytes()).map_err(|e| {
                        TestCaseError::fail(format!(
                            "printed config does not parse: {e}\n---\n{printed}"
                        ))
                    })?;
                    // NaN is not equal to itself; the print's parse is enough then.
                    if !printed.to_ascii_lowercase().contains("nan") {
                        prop_assert_eq!(&again.config, &p.config, "\n---\n{}", printed);
                    }
                    Ok(())
                }
            }
        },
    );
}

/// `dims: [-1, 2^32, 2^32]` with the same reshape: validation multiplied
/// the fixed chunks between the -1s without a check (a debug build
/// panicked); now the element count is refused.
#[test]
fn validate_reshape_with_overflowing_variable_chunks() {
    use trtis::core::config::normalize::{normalize, NormalizeContext};
    use trtis::core::config::validate::{validate, ValidateContext};
    use trtis::core::config::Severity;
    let text = r#"name: "m" backend: "identity"
        input [ { name: "I" data_type: TYPE_FP32 dims: [ -1, 4294967296, 4294967296 ]
                  reshape { shape: [ -1, 4294967296, 4294967296 ] } } ]
        output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ]"#;
    let mut config = parse_config(text.as_bytes()).unwrap().config;
    let ctx = NormalizeContext {
        model_name: "m".into(),
        first_version_entries: Vec::new(),
        gpus: &[],
        gpu_backends: &[],
    };
    normalize(&mut config, &ctx).unwrap();
    let ctx = ValidateContext {
        gpus: &[],
        missing_gpu: Severity::Error,
        min_compute_capability: 6.0,
    };
    let issues = validate(&config, &ctx);
    assert!(
        issues
            .iter()
            .any(|i| i.message.contains("exceeds maximum size")),
        "{issues:?}"
    );
}
