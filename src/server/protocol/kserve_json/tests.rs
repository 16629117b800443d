//! Unit tests of the KServe JSON (and binary) request parsing and response
//! building.

use super::*;

fn config() -> ModelConfig {
    crate::core::config::parse_config(
        br#"name: "m" max_batch_size: 8
            input [ { name: "A" data_type: TYPE_INT32 dims: [ -1 ] } ]
            output [ { name: "B" data_type: TYPE_INT32 dims: [ -1 ] } ]"#,
    )
    .unwrap()
    .config
}

#[test]
fn json_and_binary_inputs() {
    let mut body = br#"{"inputs":[{"name":"A","datatype":"INT32","shape":[1,2],"data":[[1,2]]},
        {"name":"C","datatype":"INT32","shape":[1],"parameters":{"binary_data_size":4}}],
        "outputs":[{"name":"B","parameters":{"binary_data":true,"classification":2}}]}"#
        .to_vec();
    let header = body.len();
    body.extend_from_slice(&7i32.to_le_bytes());
    let (req, fmt) = parse_request(&body, Some(header), &config()).unwrap();
    assert_eq!(
        req.inputs[0].data,
        [1i32.to_le_bytes(), 2i32.to_le_bytes()].concat()
    );
    assert_eq!(req.inputs[1].data, 7i32.to_le_bytes());
    assert_eq!(req.outputs[0].classification, Some(2));
    assert!(fmt.is_binary("B"));
}

#[test]
fn element_count_and_fp16_json_are_rejected() {
    let body = br#"{"inputs":[{"name":"A","datatype":"INT32","shape":[1,3],"data":[1,2]}]}"#;
    let e = parse_request(body, None, &config()).unwrap_err();
    assert_eq!(
        e.message,
        "Unable to parse 'data': Shape does not match true shape of 'data' field"
    );
    let body = br#"{"inputs":[{"name":"A","datatype":"FP16","shape":[1],"data":[1.0]}]}"#;
    let e = parse_request(body, None, &config()).unwrap_err();
    assert!(e.message.contains("binary data format"), "{}", e.message);
    let e = parse_request(b"{not json", None, &config()).unwrap_err();
    assert!(
        e.message
            .starts_with("failed to parse the request JSON buffer"),
        "{}",
        e.message
    );
}

#[test]
fn raw_request_is_batch_one_of_the_single_input() {
    let data: Vec<u8> = (1i32..=3).flat_map(|x| x.to_le_bytes()).collect();
    let (req, fmt) = parse_request(&data, Some(0), &config()).unwrap();
    assert_eq!(req.inputs[0].shape, vec![1, 3]);
    assert!(fmt.binary_default);
}

#[test]
fn bytes_outputs_that_are_not_utf8_are_refused_as_json() {
    let resp = |data: &[&[u8]]| InferResponse {
        parameters: Default::default(),
        last: true,
        model_name: "m".into(),
        model_version: "1".into(),
        id: String::new(),
        outputs: vec![Tensor {
            name: "OUT".into(),
            datatype: DataType::Bytes,
            shape: vec![data.len() as i64],
            data: Tensor::serialize_bytes(data.iter().copied()),
        }],
    };
    let bad = resp(&[b"ok", b"\xff\xfe"]);
    let e = build_response(bad.clone(), &OutputFormat::default()).unwrap_err();
    assert!(e.message.contains("output 'OUT'"), "{}", e.message);
    assert!(e.message.contains("not valid UTF-8"), "{}", e.message);
    let binary = OutputFormat {
        binary_default: true,
        ..Default::default()
    };
    assert!(build_response(bad, &binary).is_ok());
    let (pieces, _) = build_response(resp(&["é".as_bytes()]), &OutputFormat::default()).unwrap();
    let doc: Value = serde_json::from_slice(&pieces[0]).unwrap();
    assert_eq!(doc["outputs"][0]["data"], json!(["é"]));
}

/// qa/L0_parameters: keys starting with `triton_` are Triton's own.
#[test]
fn reserved_triton_parameters_are_refused() {
    let body = br#"{"parameters":{"triton_":true,"key2":"value2"},
        "inputs":[{"name":"A","datatype":"INT32","shape":[1,1],"data":[1]}]}"#;
    let e = parse_request(body, None, &config()).unwrap_err();
    assert_eq!(
        e.message,
        "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."
    );
    let body = br#"{"parameters":{"triton":true,"key2":"value2"},
        "inputs":[{"name":"A","datatype":"INT32","shape":[1,1],"data":[1]}]}"#;
    let (req, _) = parse_request(body, None, &config()).unwrap();
    assert_eq!(req.parameters["triton"], json!(true));
}

/// Triton's rule (`http_server.cc`): an output the request lists is
/// binary only when its own `binary_data` says so; `binary_data_output`
/// is for the outputs it does not list.
#[test]
fn listed_outputs_without_binary_data_are_json() {
    let body = br#"{"parameters":{"binary_data_output":true},
        "inputs":[{"name":"A","datatype":"INT32","shape":[1,1],"data":[1]}],
        "outputs":[{"name":"B","parameters":{"binary_data":false}},{"name":"C"},
                   {"name":"D","parameters":{"binary_data":true}}]}"#;
    let (_, fmt) = parse_request(body, None, &config()).unwrap();
    assert!(!fmt.is_binary("B"));
    assert!(!fmt.is_binary("C"));
    assert!(fmt.is_binary("D"));
    assert!(fmt.is_binary("not-listed"));
    let body = br#"{"inputs":[{"name":"A","datatype":"INT32","shape":[1,1],"data":[1]}]}"#;
    let (_, fmt) = parse_request(body, None, &config()).unwrap();
    assert!(!fmt.is_binary("B"));
}

/// Triton's words (core `InferenceRequest::Normalize`), as
/// qa/L0_http's raw-request cases match them.
#[test]
fn raw_requests_are_refused_in_tritons_words() {
    let cfg = |inputs: &str| {
        crate::core::config::parse_config(
            format!(
                r#"name: "r" max_batch_size: 8 input [ {inputs} ]
                output [ {{ name: "O" data_type: TYPE_INT32 dims: [ -1 ] }} ]"#
            )
            .as_bytes(),
        )
        .unwrap()
        .config
    };
    let refused = |inputs: &str| {
        parse_request(b"427", Some(0), &cfg(inputs))
            .unwrap_err()
            .message
    };
    assert_eq!(
        refused(
            r#"{ name: "A" data_type: TYPE_INT32 dims: [ 1 ] },
               { name: "B" data_type: TYPE_INT32 dims: [ 1 ] },
               { name: "C" data_type: TYPE_INT32 dims: [ 1 ] }"#
        ),
        "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced but got 3 inputs in 'r' model configuration"
    );
    assert_eq!(
        refused(r#"{ name: "A" data_type: TYPE_INT32 dims: [ -1, -1 ] }"#),
        "[request id: <id_unknown>] The shape of the raw input 'A' can not be deduced because there are more than one variable-sized dimension"
    );
    for dims in ["-1", "2", "1, -1", "1, 2"] {
        assert_eq!(
            refused(&format!(r#"{{ name: "A" data_type: TYPE_STRING dims: [ {dims} ] }}"#)),
            "[request id: <id_unknown>] For BYTE datatype raw input 'A', the model must have input shape [1]",
            "dims [{dims}]"
        );
    }
    for dims in ["1", "1, 1"] {
        let inputs = format!(r#"{{ name: "A" data_type: TYPE_STRING dims: [ {dims} ] }}"#);
        let (req, _) = parse_request(b"427", Some(0), &cfg(&inputs)).unwrap();
        let mut shape = vec![1];
        shape.extend(std::iter::repeat_n(1, dims.split(',').count()));
        assert_eq!(req.inputs[0].shape, shape);
        assert_eq!(req.inputs[0].data, Tensor::serialize_bytes([&b"427"[..]]));
    }
}

#[test]
fn response_binary_tail_follows_the_json() {
    let resp = InferResponse {
        parameters: Default::default(),
        last: true,
        model_name: "m".into(),
        model_version: "1".into(),
        id: String::new(),
        outputs: vec![Tensor {
            name: "B".into(),
            datatype: DataType::Int32,
            shape: vec![1, 1],
            data: 5i32.to_le_bytes().to_vec(),
        }],
    };
    let fmt = OutputFormat {
        binary_default: true,
        ..Default::default()
    };
    let joined = |(pieces, header): (Vec<bytes::Bytes>, _)| (pieces.concat(), header);
    let (body, header) = joined(build_response(resp.clone(), &fmt).unwrap());
    let header = header.unwrap();
    let doc: Value = serde_json::from_slice(&body[..header]).unwrap();
    assert_eq!(doc["outputs"][0]["parameters"]["binary_data_size"], 4);
    assert_eq!(&body[header..], 5i32.to_le_bytes());
    let (body, header) = joined(build_response(resp, &OutputFormat::default()).unwrap());
    assert!(header.is_none());
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["outputs"][0]["data"], json!([5]));
}

#[test]
fn json_elements_by_datatype() {
    let v = |text: &str| -> Value { serde_json::from_str(text).unwrap() };
    let bytes = |dt, text: &str| {
        let doc = v(text);
        elements_to_bytes(dt, &flat_elements(&doc))
    };
    assert_eq!(bytes(DataType::Uint8, "[0, [255]]"), Ok(vec![0, 255]));
    assert_eq!(bytes(DataType::Uint8, "[256]"), Err(v("256")));
    assert_eq!(bytes(DataType::Int8, "[-128]"), Ok(vec![0x80]));
    assert_eq!(bytes(DataType::Int32, "[1.0]"), Err(v("1.0")));
    assert_eq!(
        bytes(DataType::Uint64, "[18446744073709551615]"),
        Ok(u64::MAX.to_le_bytes().to_vec())
    );
    assert_eq!(
        bytes(DataType::Int64, "[18446744073709551615]"),
        Err(v("18446744073709551615"))
    );
    assert_eq!(bytes(DataType::Bool, "[true, false]"), Ok(vec![1, 0]));
    assert_eq!(bytes(DataType::Bool, "[1]"), Err(v("1")));
    assert_eq!(
        bytes(DataType::Fp32, "[2]"),
        Ok(2.0f32.to_le_bytes().to_vec())
    );
    assert_eq!(bytes(DataType::Fp32, "[true]"), Err(v("true")));
    assert_eq!(
        bytes(DataType::Fp16, "[0.1]"),
        Ok(half::f16::from_f64(0.1).to_le_bytes().to_vec())
    );
    assert_eq!(
        bytes(DataType::Bytes, r#"["ab"]"#),
        Ok(vec![2, 0, 0, 0, b'a', b'b'])
    );
    assert_eq!(bytes(DataType::Bytes, "[1]"), Err(v("1")));

    let values = |dt, data: Vec<u8>| {
        let t = Tensor {
            name: "t".into(),
            datatype: dt,
            shape: vec![],
            data,
        };
        serde_json::to_string(&json_values(&t).unwrap()).unwrap()
    };
    assert_eq!(values(DataType::Bool, vec![0, 1, 2]), "[false,true,true]");
    assert_eq!(values(DataType::Int8, vec![0xff]), "[-1]");
    assert_eq!(values(DataType::Uint16, vec![1, 1, 9]), "[257]");
    let floats = [0.1f32, f32::NAN].map(f32::to_le_bytes).concat();
    assert_eq!(values(DataType::Fp32, floats), "[0.10000000149011612,null]");
    let half = half::bf16::from_f32(1.5).to_le_bytes().to_vec();
    assert_eq!(values(DataType::Bf16, half), "[1.5]");
    let strings = Tensor::serialize_bytes([&b"hi"[..], &[0xff]]);
    assert_eq!(values(DataType::Bytes, strings), "[\"hi\",\"\u{fffd}\"]");
}
