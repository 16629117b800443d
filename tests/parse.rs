//! Hostile and odd `config.pbtxt` input: each gives one clear error with a
//! position, never a panic; and a property test that throws mutated configs
//! at the parser.

use proptest::prelude::*;
use trtis::core::config::{parse_config, ParseError};

fn err(bytes: &[u8]) -> ParseError {
    parse_config(bytes).expect_err("this input must not parse")
}

const VALID: &str = r#"
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
    label_filename: "labels.txt"
  }
]
instance_group [ { count: 2, kind: KIND_CPU } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_queue_policy { key: 1 value: { max_queue_size: 3 } }
}
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
"#;

#[test]
fn a_valid_config_parses_and_maps_fields_to_lines() {
    let parsed = parse_config(VALID.as_bytes()).unwrap();
    assert_eq!(parsed.config.input.len(), 2);
    assert_eq!(parsed.config.input[1].dims, vec![16]);
    let map = &parsed.source_map;
    assert_eq!(map.locate("max_batch_size"), (4, 1));
    assert_eq!(map.locate("input[1]"), (11, 3));
    assert_eq!(map.locate("input[1].name"), (12, 5));
    assert_eq!(map.locate("input[1].dims[0]"), (14, 13));
    assert_eq!(map.locate("output[0].label_filename"), (22, 5));
    assert_eq!(map.locate("instance_group[0].kind"), (25, 30));
    assert_eq!(
        map.locate("dynamic_batching.preferred_batch_size[1]"),
        (27, 30)
    );
    assert_eq!(
        map.locate("dynamic_batching.priority_queue_policy[1].value.max_queue_size"),
        (29, 43)
    );
    assert_eq!(
        map.locate("parameters[\"intra_op_thread_count\"]"),
        (31, 12)
    );
    assert!(map.contains("parameters[\"intra_op_thread_count\"].value.string_value"));
    // A field that is not written falls back to its closest written parent.
    assert_eq!(map.locate("input[1].format"), (11, 3));
    assert_eq!(map.locate("sequence_batching.state[0]"), (1, 1));
}

#[test]
fn empty_file_is_an_empty_config() {
    // Triton reads an empty config.pbtxt as an empty ModelConfig; validation
    // then says what is missing.
    let parsed = parse_config(b"").unwrap();
    assert_eq!(parsed.config.name, "");
    let parsed = parse_config(b"# only a comment\n\n").unwrap();
    assert!(parsed.config.input.is_empty());
}

#[test]
fn binary_garbage_is_one_error() {
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let e = err(&garbage);
    assert!(e.line >= 1 && e.col >= 1);
    assert!(!e.message.is_empty());
}

#[test]
fn non_utf8_byte_is_located() {
    let e = err(b"name: \"ok\"\nplatform: \"caf\xe9\"\n");
    assert_eq!((e.line, e.col), (2, 15));
    assert!(
        e.message.contains("invalid UTF-8 (byte 0xe9)"),
        "{}",
        e.message
    );
}

#[test]
fn nul_byte_is_located() {
    let e = err(b"name: \"a\"\n\0");
    assert_eq!((e.line, e.col), (2, 1));
}

#[test]
fn ten_megabyte_file_is_refused_by_size() {
    let big = vec![b'#'; 10 << 20];
    let e = err(&big);
    assert!(e.message.contains("at most 4194304 bytes"), "{}", e.message);
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    let deep = "input { ".repeat(100_000);
    let e = err(deep.as_bytes());
    assert!(
        e.message.contains("nesting is deeper than 64 levels"),
        "{}",
        e.message
    );
    let deep_lists = "dims: ".to_string() + &"[".repeat(100_000);
    let e = err(deep_lists.as_bytes());
    assert!(e.message.contains("nesting"), "{}", e.message);
    // Within the limit, a wrong nesting is an ordinary parse error.
    let e = err("input { input { } }".as_bytes());
    assert!(
        e.message
            .contains("unknown field 'input' in inference.ModelInput"),
        "{}",
        e.message
    );
}

#[test]
fn wrong_type_unknown_field_and_duplicates() {
    let e = err(b"max_batch_size: \"eight\"");
    assert_eq!((e.line, e.col), (1, 17));
    assert!(e.message.contains("expected an integer"), "{}", e.message);

    let e = err(b"platform: \"x\"\n  max_bach_size: 8");
    assert_eq!((e.line, e.col), (2, 3));
    assert_eq!(
        e.message,
        "unknown field 'max_bach_size' in inference.ModelConfig; did you mean 'max_batch_size'?"
    );

    let e = err(b"input [ { data_type: TYPE_FLOAT32 } ]");
    assert!(
        e.message.contains("did you mean 'TYPE_FP32'"),
        "{}",
        e.message
    );
    let e = err(b"input [ { data_type: TYPE_BYTES } ]");
    assert!(
        e.message.contains("did you mean 'TYPE_STRING'"),
        "{}",
        e.message
    );
    let e = err(b"instance_group [ { kind: KIND_CPUS } ]");
    assert!(
        e.message.contains("did you mean 'KIND_CPU'"),
        "{}",
        e.message
    );

    let e = err(b"max_batch_size: 1\nmax_batch_size: 2");
    assert_eq!((e.line, e.col), (2, 1));
    assert_eq!(e.message, "field 'max_batch_size' is set more than once");

    let e = err(b"input [ { name: \"a\" } ");
    assert!(e.message.contains("end of input"), "{}", e.message);
}

#[test]
fn colon_less_lists_keep_error_positions_right() {
    // The pre-pass inserts ':' before '['; positions after it must still
    // point at the original text.
    let e = err(b"input [ { name: \"a\" } ]\noutput [ { nme: \"b\" } ]");
    assert_eq!((e.line, e.col), (2, 12));
    let e = err(b"input[{name:\"a\"}] output[{nme:\"b\"}]");
    assert_eq!((e.line, e.col), (1, 27));
}

fn mutate(base: &str, ops: &[(usize, u8, u8)]) -> Vec<u8> {
    let mut bytes = base.as_bytes().to_vec();
    for &(pos, op, byte) in ops {
        if bytes.is_empty() {
            bytes.push(byte);
            continue;
        }
        let at = pos % bytes.len();
        match op % 3 {
            0 => bytes[at] = byte,
            1 => bytes.insert(at, byte),
            _ => {
                bytes.remove(at);
            }
        }
    }
    bytes
}

proptest! {
    // PROPTEST_CASES raises the count for a longer fuzzing run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Mutated configs (bytes replaced, inserted, deleted; structural bytes
    /// favoured) parse or fail with a position inside the file, never panic.
    #[test]
    fn mutated_configs_never_panic(ops in prop::collection::vec(
        (any::<usize>(), any::<u8>(), prop::sample::select(b"{}[]<>:,\"'#-.0123456789abcxyz_ \n\xff\x00".to_vec())),
        1..12,
    )) {
        let bytes = mutate(VALID, &ops);
        let lines = bytes.split(|&b| b == b'\n').count() as u32;
        match parse_config(&bytes) {
            Ok(parsed) => { let _ = parsed.source_map.locate("input[0].dims[0]"); }
            Err(e) => {
                prop_assert!(e.line >= 1 && e.line <= lines.max(1), "line {} of {}", e.line, lines);
                prop_assert!(e.col >= 1);
                prop_assert!(!e.message.is_empty());
            }
        }
    }

    /// Arbitrary bytes never panic the parser.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_config(&bytes);
    }
}
