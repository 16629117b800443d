//! Inference requests built once and sent many times (the load generator's
//! path): the body is encoded up front, and each send reports where its time
//! went, as perf_analyzer splits it: `send` (building and handing over the
//! request), `wait` (until the answer arrived) and `recv` (decoding it).

use std::time::{Duration, Instant};

use prost::Message;

use crate::core::types::{InferResponse, RequestedOutput, ShmRef, Tensor};
use crate::server::protocol::pb::inference::{
    infer_parameter::ParameterChoice, InferParameter, ModelInferRequest,
};

use super::{grpc, http, Client, ClientError};

/// Where one request's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    pub send: Duration,
    pub wait: Duration,
    pub recv: Duration,
}

impl Timing {
    pub fn total(&self) -> Duration {
        self.send + self.wait + self.recv
    }
}

/// The sequence parameters of one send (the sequence extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqFlags {
    pub id: u64,
    pub start: bool,
    pub end: bool,
}

impl SeqFlags {
    /// The members for a request's `parameters` object (no braces).
    fn json_members(&self) -> String {
        format!(
            "\"sequence_id\":{},\"sequence_start\":{},\"sequence_end\":{}",
            self.id, self.start, self.end
        )
    }
}

/// A request ready to send; cloning it shares the connection (gRPC) or the
/// connection pool (HTTP) and the encoded body.
#[derive(Clone)]
pub enum Prepared {
    Http {
        http: reqwest::Client,
        url: String,
        body: bytes::Bytes,
        json_len: usize,
    },
    Grpc {
        raw: grpc::Raw,
        /// The request's protobuf encoding, made once.
        encoded: bytes::Bytes,
    },
}

impl Client {
    /// Encodes an inference request for repeated sending.
    pub fn prepare(
        &self,
        model: &str,
        version: &str,
        inputs: Vec<Tensor>,
        outputs: Vec<RequestedOutput>,
    ) -> Result<Prepared, ClientError> {
        self.prepare_shm(model, version, inputs, &[], outputs)
    }

    /// As `prepare`, with inputs (where `input_shm[i]` is set) and outputs
    /// (where their `shm` is set) in registered system shared memory.
    pub fn prepare_shm(
        &self,
        model: &str,
        version: &str,
        inputs: Vec<Tensor>,
        input_shm: &[Option<ShmRef>],
        outputs: Vec<RequestedOutput>,
    ) -> Result<Prepared, ClientError> {
        Ok(match self {
            Client::Http(c) => {
                let (body, json_len) = http::infer_body_shm(&inputs, input_shm, &outputs)?;
                Prepared::Http {
                    http: c.http().clone(),
                    url: c.infer_url(model, version),
                    body: body.into(),
                    json_len,
                }
            }
            Client::Grpc(c) => Prepared::Grpc {
                raw: c.raw(),
                encoded: grpc::infer_request_shm(model, version, inputs, input_shm, outputs)
                    .encode_to_vec()
                    .into(),
            },
            Client::V1(_) => {
                return Err(ClientError::Unsupported(
                    "prepared (timed or repeated) requests are not available with the v1 API; use the v2 API".into(),
                ))
            }
        })
    }
}

impl Prepared {
    /// Sends the request once and decodes the answer.
    pub async fn send(&self) -> Result<Timing, ClientError> {
        self.infer(None).await.map(|(t, _)| t)
    }

    /// Sends the request once as part of a sequence.
    pub async fn send_seq(&self, seq: Option<SeqFlags>) -> Result<Timing, ClientError> {
        self.infer(seq).await.map(|(t, _)| t)
    }

    /// Sends the request once (with `seq`'s sequence parameters); the
    /// answer and where the time went.
    pub async fn infer(
        &self,
        seq: Option<SeqFlags>,
    ) -> Result<(Timing, InferResponse), ClientError> {
        match self {
            Prepared::Http {
                http,
                url,
                body,
                json_len,
            } => {
                let t0 = Instant::now();
                let (body, json_len) = match seq {
                    None => (body.clone(), *json_len),
                    Some(seq) => with_sequence(body, *json_len, &seq),
                };
                let req = http
                    .post(url)
                    .header(http::HEADER_LENGTH, json_len.to_string())
                    .header("content-type", "application/octet-stream")
                    .body(body);
                let t1 = Instant::now();
                let resp = req.send().await?;
                let status = resp.status();
                let header_len = http::header_length(&resp);
                let bytes = resp.bytes().await?;
                let t2 = Instant::now();
                if !status.is_success() {
                    return Err(http::http_error(status.as_u16(), &bytes));
                }
                let response = http::infer_response(header_len, &bytes)?;
                let timing = Timing {
                    send: t1 - t0,
                    wait: t2 - t1,
                    recv: t2.elapsed(),
                };
                Ok((timing, response))
            }
            Prepared::Grpc { raw, encoded } => {
                let t0 = Instant::now();
                let mut parts = vec![encoded.clone()];
                if let Some(seq) = seq {
                    // Protobuf merges concatenated messages: these map
                    // entries join the encoded request's parameters.
                    parts.push(sequence_parameters(&seq).encode_to_vec().into());
                }
                let t1 = Instant::now();
                let resp = grpc::send_encoded(raw.clone(), parts).await?;
                let t2 = Instant::now();
                let response = grpc::infer_response(resp)?;
                let timing = Timing {
                    send: t1 - t0,
                    wait: t2 - t1,
                    recv: t2.elapsed(),
                };
                Ok((timing, response))
            }
        }
    }
}

/// A request holding only `seq`'s sequence parameters, to be encoded after
/// (merged into) a whole request's encoding.
fn sequence_parameters(seq: &SeqFlags) -> ModelInferRequest {
    let param = |c| InferParameter {
        parameter_choice: Some(c),
    };
    let mut request = ModelInferRequest::default();
    let p = &mut request.parameters;
    p.insert(
        "sequence_id".into(),
        param(ParameterChoice::Int64Param(seq.id as i64)),
    );
    p.insert(
        "sequence_start".into(),
        param(ParameterChoice::BoolParam(seq.start)),
    );
    p.insert(
        "sequence_end".into(),
        param(ParameterChoice::BoolParam(seq.end)),
    );
    request
}

/// The HTTP body with the sequence parameters added to the request's
/// top-level `parameters`: our encoder writes `"parameters":
/// {"binary_data_output":true}` last, so they go before the header's two
/// closing braces; a header of another shape is re-encoded.
fn with_sequence(body: &bytes::Bytes, json_len: usize, seq: &SeqFlags) -> (bytes::Bytes, usize) {
    let header = &body[..json_len];
    let mut out = Vec::with_capacity(body.len() + 80);
    if header.ends_with(br#""parameters":{"binary_data_output":true}}"#) {
        out.extend_from_slice(&header[..json_len - 2]);
        out.push(b',');
        out.extend_from_slice(seq.json_members().as_bytes());
        out.extend_from_slice(b"}}");
    } else {
        // Not our encoder's shape: parse and re-encode the header.
        let mut v: serde_json::Value = serde_json::from_slice(header).unwrap_or_default();
        v["parameters"]["sequence_id"] = seq.id.into();
        v["parameters"]["sequence_start"] = seq.start.into();
        v["parameters"]["sequence_end"] = seq.end.into();
        out.extend_from_slice(serde_json::to_string(&v).unwrap_or_default().as_bytes());
    }
    let len = out.len();
    out.extend_from_slice(&body[json_len..]);
    (out.into(), len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::types::DataType;

    #[test]
    fn grpc_sequence_parameters_merge_into_the_encoded_request() {
        // What the server decodes from the two parts sent one after the
        // other: the request with the sequence parameters added, and a
        // parameter it already had kept.
        let mut request = grpc::infer_request(
            "m",
            "",
            vec![Tensor {
                name: "IN".into(),
                datatype: DataType::Int32,
                shape: vec![1],
                data: vec![1, 0, 0, 0],
            }],
            vec![],
        );
        request.parameters.insert(
            "priority".into(),
            InferParameter {
                parameter_choice: Some(ParameterChoice::Uint64Param(2)),
            },
        );
        let seq = SeqFlags {
            id: 7,
            start: false,
            end: true,
        };
        let mut wire = request.encode_to_vec();
        wire.extend(sequence_parameters(&seq).encode_to_vec());
        let decoded = ModelInferRequest::decode(wire.as_slice()).unwrap();
        let mut expected = request.clone();
        expected
            .parameters
            .extend(sequence_parameters(&seq).parameters);
        assert_eq!(decoded, expected);
        assert_eq!(decoded.parameters.len(), 4);
        assert_eq!(decoded.raw_input_contents, request.raw_input_contents);
    }

    #[test]
    fn sequence_parameters_join_the_top_level_parameters() {
        let header = br#"{"inputs":[{"name":"IN","parameters":{"binary_data_size":4}}],"outputs":[{"name":"OUT"}],"parameters":{"binary_data_output":true}}"#;
        let mut body = header.to_vec();
        body.extend_from_slice(&[1, 2, 3, 4]);
        let seq = SeqFlags {
            id: 9,
            start: true,
            end: false,
        };
        let (out, len) = with_sequence(&body.into(), header.len(), &seq);
        let v: serde_json::Value = serde_json::from_slice(&out[..len]).unwrap();
        assert_eq!(v["parameters"]["sequence_id"], 9);
        assert_eq!(v["parameters"]["sequence_start"], true);
        assert_eq!(v["parameters"]["sequence_end"], false);
        assert_eq!(v["parameters"]["binary_data_output"], true);
        assert_eq!(&out[len..], &[1, 2, 3, 4]);

        // Our encoder's header takes the fast path (with and without
        // requested outputs).
        let input = Tensor {
            name: "IN".into(),
            datatype: DataType::Int32,
            shape: vec![1],
            data: vec![0; 4],
        };
        for outputs in [vec![], vec![RequestedOutput::named("OUT")]] {
            let (body, json_len) =
                http::infer_body_shm(std::slice::from_ref(&input), &[], &outputs).unwrap();
            assert!(body[..json_len].ends_with(br#""parameters":{"binary_data_output":true}}"#));
        }

        // Another shape is re-encoded.
        let header = br#"{"parameters":{"binary_data_output":true},"inputs":[]}"#;
        let (out, len) = with_sequence(&header.to_vec().into(), header.len(), &seq);
        let v: serde_json::Value = serde_json::from_slice(&out[..len]).unwrap();
        assert_eq!(v["parameters"]["sequence_id"], 9);
        assert_eq!(v["parameters"]["binary_data_output"], true);
        assert_eq!(len, out.len());
    }
}
