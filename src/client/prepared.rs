//! Inference requests built once and sent many times (the load generator's
//! path): the body is encoded up front, and each send reports where its time
//! went, as perf_analyzer splits it: `send` (building and handing over the
//! request), `wait` (until the answer arrived) and `recv` (decoding it).

use std::time::{Duration, Instant};

use tonic::transport::Channel;

use crate::core::protocol::pb::inference::{
    grpc_inference_service_client::GrpcInferenceServiceClient, ModelInferRequest,
};
use crate::core::types::{InferResponse, RequestedOutput, ShmRef, Tensor};

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
        stub: GrpcInferenceServiceClient<Channel>,
        request: Box<ModelInferRequest>,
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
                stub: c.stub(),
                request: Box::new(grpc::infer_request_shm(
                    model, version, inputs, input_shm, outputs,
                )),
            },
        })
    }
}

impl Prepared {
    /// Sends the request once and decodes the answer.
    pub async fn send(&self) -> Result<Timing, ClientError> {
        self.infer().await.map(|(t, _)| t)
    }

    /// Sends the request once; the answer and where the time went.
    pub async fn infer(&self) -> Result<(Timing, InferResponse), ClientError> {
        match self {
            Prepared::Http {
                http,
                url,
                body,
                json_len,
            } => {
                let t0 = Instant::now();
                let req = http
                    .post(url)
                    .header(http::HEADER_LENGTH, json_len.to_string())
                    .header("content-type", "application/octet-stream")
                    .body(body.clone());
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
            Prepared::Grpc { stub, request } => {
                let t0 = Instant::now();
                let mut stub = stub.clone();
                let req = tonic::Request::new(request.as_ref().clone());
                let t1 = Instant::now();
                let resp = stub.model_infer(req).await?.into_inner();
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
