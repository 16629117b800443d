//! The gRPC side of the client (the generated tonic client), with raw
//! tensor contents for inference.

use std::collections::HashMap;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use super::options::Headers;

use crate::core::config::ModelConfig;
use crate::core::metrics::stats::Snapshot;
use crate::core::types::{
    DataType, InferResponse, ModelMetadata, RequestedOutput, ShmRef, Tensor, TensorMetadata,
};
use crate::server::protocol::pb::inference::{
    grpc_inference_service_client::GrpcInferenceServiceClient,
    infer_parameter::ParameterChoice,
    model_infer_request::{InferInputTensor, InferRequestedOutputTensor},
    model_metadata_response::TensorMetadata as TensorMetadataPb,
    InferParameter, ModelConfigRequest, ModelInferRequest, ModelInferResponse,
    ModelMetadataRequest, ModelReadyRequest, ModelStatisticsRequest, RepositoryIndexRequest,
    RepositoryModelLoadRequest, RepositoryModelUnloadRequest, ServerLiveRequest,
    ServerMetadataRequest, ServerReadyRequest, StatisticDuration,
    SystemSharedMemoryRegisterRequest, SystemSharedMemoryUnregisterRequest,
};

use super::{ClientError, IndexEntry, ModelStats, ServerMetadata};

/// The generated stub over a channel that adds the connection's headers.
pub(super) type Stub = GrpcInferenceServiceClient<InterceptedService<Channel, Headers>>;

pub struct GrpcClient {
    stub: Stub,
    /// The stub's channel with its headers, for requests sent as bytes
    /// encoded once (`send_encoded`).
    raw: Raw,
}

/// The stub's channel with the connection's headers, as a plain HTTP/2
/// service, for requests sent as ready bytes (`send_encoded`).
pub(super) type Raw = InterceptedService<Channel, Headers>;

impl GrpcClient {
    /// The stub's channel and headers (cheap to clone, as the stub).
    pub(super) fn raw(&self) -> Raw {
        self.raw.clone()
    }

    pub async fn connect(
        url: String,
        options: &super::ConnectOptions,
    ) -> Result<Self, ClientError> {
        let channel = super::options::grpc_channel(&url, options).await?;
        let service = InterceptedService::new(channel, Headers::new(&options.headers)?);
        Ok(GrpcClient {
            stub: GrpcInferenceServiceClient::new(service.clone())
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX),
            raw: service,
        })
    }

    pub async fn live(&mut self) -> Result<bool, ClientError> {
        Ok(self
            .stub
            .server_live(ServerLiveRequest {})
            .await?
            .into_inner()
            .live)
    }

    pub async fn ready(&mut self) -> Result<bool, ClientError> {
        Ok(self
            .stub
            .server_ready(ServerReadyRequest {})
            .await?
            .into_inner()
            .ready)
    }

    pub async fn model_ready(&mut self, model: &str, version: &str) -> Result<bool, ClientError> {
        let req = ModelReadyRequest {
            name: model.into(),
            version: version.into(),
        };
        Ok(self.stub.model_ready(req).await?.into_inner().ready)
    }

    pub async fn server_metadata(&mut self) -> Result<ServerMetadata, ClientError> {
        let m = self
            .stub
            .server_metadata(ServerMetadataRequest {})
            .await?
            .into_inner();
        Ok(ServerMetadata {
            name: m.name,
            version: m.version,
            extensions: m.extensions,
        })
    }

    pub async fn model_metadata(
        &mut self,
        model: &str,
        version: &str,
    ) -> Result<ModelMetadata, ClientError> {
        let req = ModelMetadataRequest {
            name: model.into(),
            version: version.into(),
        };
        let m = self.stub.model_metadata(req).await?.into_inner();
        let tensors = |ts: Vec<TensorMetadataPb>| {
            ts.into_iter()
                .map(|t| TensorMetadata {
                    name: t.name,
                    datatype: t.datatype,
                    shape: t.shape,
                })
                .collect()
        };
        Ok(ModelMetadata {
            name: m.name,
            versions: m.versions,
            platform: m.platform,
            inputs: tensors(m.inputs),
            outputs: tensors(m.outputs),
        })
    }

    pub async fn model_config(
        &mut self,
        model: &str,
        version: &str,
    ) -> Result<ModelConfig, ClientError> {
        let req = ModelConfigRequest {
            name: model.into(),
            version: version.into(),
        };
        self.stub
            .model_config(req)
            .await?
            .into_inner()
            .config
            .ok_or_else(|| ClientError::Decode("the server sent no config".into()))
    }

    pub async fn statistics(&mut self, model: &str) -> Result<Vec<ModelStats>, ClientError> {
        let req = ModelStatisticsRequest {
            name: model.into(),
            version: String::new(),
        };
        let pair = |d: Option<StatisticDuration>| d.map(|d| (d.count, d.ns)).unwrap_or_default();
        Ok(self
            .stub
            .model_statistics(req)
            .await?
            .into_inner()
            .model_stats
            .into_iter()
            .map(|m| {
                let st = m.inference_stats.unwrap_or_default();
                ModelStats {
                    name: m.name,
                    version: m.version,
                    stats: Snapshot {
                        last_inference: m.last_inference,
                        inference_count: m.inference_count,
                        execution_count: m.execution_count,
                        success: pair(st.success),
                        fail: pair(st.fail),
                        queue: pair(st.queue),
                        compute_input: pair(st.compute_input),
                        compute_infer: pair(st.compute_infer),
                        compute_output: pair(st.compute_output),
                        cache_hit: pair(st.cache_hit),
                        cache_miss: pair(st.cache_miss),
                        batches: Vec::new(),
                        request_batches: Vec::new(),
                        memory_usage: Vec::new(),
                    },
                }
            })
            .collect())
    }

    pub async fn index(&mut self) -> Result<Vec<IndexEntry>, ClientError> {
        let req = RepositoryIndexRequest {
            repository_name: String::new(),
            ready: false,
        };
        Ok(self
            .stub
            .repository_index(req)
            .await?
            .into_inner()
            .models
            .into_iter()
            .map(|m| IndexEntry {
                name: m.name,
                version: m.version,
                state: m.state,
                reason: m.reason,
            })
            .collect())
    }

    pub async fn load(&mut self, model: &str) -> Result<(), ClientError> {
        let req = RepositoryModelLoadRequest {
            model_name: model.into(),
            ..Default::default()
        };
        self.stub.repository_model_load(req).await?;
        Ok(())
    }

    pub async fn unload(&mut self, model: &str) -> Result<(), ClientError> {
        let req = RepositoryModelUnloadRequest {
            model_name: model.into(),
            ..Default::default()
        };
        self.stub.repository_model_unload(req).await?;
        Ok(())
    }

    pub async fn register_shm(
        &mut self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<(), ClientError> {
        let req = SystemSharedMemoryRegisterRequest {
            name: name.into(),
            key: key.into(),
            offset,
            byte_size,
        };
        self.stub.system_shared_memory_register(req).await?;
        Ok(())
    }

    pub async fn unregister_shm(&mut self, name: &str) -> Result<(), ClientError> {
        let req = SystemSharedMemoryUnregisterRequest { name: name.into() };
        self.stub.system_shared_memory_unregister(req).await?;
        Ok(())
    }

    pub async fn stream_infer(
        &mut self,
        model: &str,
        version: &str,
        requests: Vec<Vec<Tensor>>,
        outputs: Vec<RequestedOutput>,
    ) -> Result<Vec<Result<InferResponse, ClientError>>, ClientError> {
        let requests: Vec<ModelInferRequest> = requests
            .into_iter()
            .enumerate()
            .map(|(i, inputs)| {
                let mut req = infer_request(model, version, inputs, outputs.clone());
                req.id = i.to_string();
                req
            })
            .collect();
        let mut stream = self
            .stub
            .model_stream_infer(tokio_stream::iter(requests))
            .await?
            .into_inner();
        let mut out = Vec::new();
        while let Some(item) = tokio_stream::StreamExt::next(&mut stream).await {
            let item = item?;
            if !item.error_message.is_empty() {
                out.push(Err(ClientError::Grpc {
                    code: "stream".into(),
                    message: item.error_message,
                }));
                continue;
            }
            let resp = item
                .infer_response
                .ok_or_else(|| ClientError::Decode("a stream response without a result".into()))?;
            out.push(infer_response(resp));
        }
        Ok(out)
    }

    pub async fn infer(
        &mut self,
        model: &str,
        version: &str,
        inputs: Vec<Tensor>,
        outputs: Vec<RequestedOutput>,
    ) -> Result<InferResponse, ClientError> {
        let req = infer_request(model, version, inputs, outputs);
        infer_response(self.stub.model_infer(req).await?.into_inner())
    }
}

/// Sends a ModelInfer request given as its protobuf encoding, in parts
/// that are concatenated (protobuf's merge: a later part's map entries add
/// to, or replace, the earlier's). The load generator encodes its request
/// once; each send hands the same bytes to HTTP/2 as they are (the gRPC
/// message header, then the parts as DATA), so no input byte is copied in
/// user space: tonic's encoder would copy every part into a fresh frame
/// buffer, 600 KB per send for an image tensor, on the cores the server
/// shares. The answer is read by tonic's own decoder, with gRPC's status
/// rules (a trailers-only error, then the trailers' grpc-status).
pub(super) async fn send_encoded(
    mut service: Raw,
    parts: Vec<bytes::Bytes>,
) -> Result<ModelInferResponse, ClientError> {
    use tonic::client::GrpcService;
    use tonic::codegen::http;

    let len: usize = parts.iter().map(|p| p.len()).sum();
    let len = u32::try_from(len).map_err(|_| {
        tonic::Status::resource_exhausted(format!(
            "the request's {len} bytes exceed gRPC's 4 GiB message limit"
        ))
    })?;
    // gRPC's length-prefixed message: not compressed, then the length.
    let mut header = [0u8; 5];
    header[1..].copy_from_slice(&len.to_be_bytes());
    let mut frames = Vec::with_capacity(parts.len() + 1);
    frames.push(bytes::Bytes::copy_from_slice(&header));
    frames.extend(parts);
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .version(http::Version::HTTP_2)
        .uri("/inference.GRPCInferenceService/ModelInfer")
        .header(http::header::TE, "trailers")
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .body(tonic::body::Body::new(Frames(frames.into_iter())))
        .map_err(|e| ClientError::Transport(format!("invalid gRPC request: {e}")))?;
    request.extensions_mut().insert(tonic::GrpcMethod::new(
        "inference.GRPCInferenceService",
        "ModelInfer",
    ));
    std::future::poll_fn(|cx| GrpcService::poll_ready(&mut service, cx))
        .await
        .map_err(|e| tonic::Status::unavailable(format!("service was not ready: {e}")))?;
    let response = GrpcService::call(&mut service, request)
        .await
        .map_err(|e| tonic::Status::from_error(e.into()))?;
    // A trailers-only answer: the status is in the headers, with no body.
    if let Some(status) = tonic::Status::from_header_map(response.headers()) {
        if status.code() != tonic::Code::Ok {
            return Err(status.into());
        }
    }
    let status_code = response.status();
    let mut body = tonic::codec::Streaming::new_response(
        tonic_prost::ProstDecoder::<ModelInferResponse>::new(Default::default()),
        response.into_body(),
        status_code,
        None,
        // No limit on the answer's size, as the stub's.
        Some(usize::MAX),
    );
    let message = body
        .message()
        .await?
        .ok_or_else(|| tonic::Status::internal("Missing response message."))?;
    // The trailers' grpc-status: an error there fails the call.
    body.trailers().await?;
    Ok(message)
}

/// A request body of ready frames, each sent as one DATA chunk.
struct Frames(std::vec::IntoIter<bytes::Bytes>);

impl http_body::Body for Frames {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.next().map(|b| Ok(http_body::Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.len() == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.0.as_slice().iter().map(|b| b.len() as u64).sum())
    }
}

/// Engine tensors → a gRPC request with raw input contents.
pub(super) fn infer_request(
    model: &str,
    version: &str,
    inputs: Vec<Tensor>,
    outputs: Vec<RequestedOutput>,
) -> ModelInferRequest {
    infer_request_shm(model, version, inputs, &[], outputs)
}

/// The shared memory parameters of a tensor.
fn shm_params(r: &ShmRef) -> HashMap<String, InferParameter> {
    let p = |c: ParameterChoice| InferParameter {
        parameter_choice: Some(c),
    };
    [
        (
            "shared_memory_region".to_string(),
            p(ParameterChoice::StringParam(r.region.clone())),
        ),
        (
            "shared_memory_byte_size".to_string(),
            p(ParameterChoice::Int64Param(r.byte_size as i64)),
        ),
        (
            "shared_memory_offset".to_string(),
            p(ParameterChoice::Int64Param(r.offset as i64)),
        ),
    ]
    .into_iter()
    .collect()
}

/// As `infer_request`, with inputs (where `input_shm[i]` is set) and
/// outputs (where `shm` is set) in system shared memory.
pub(super) fn infer_request_shm(
    model: &str,
    version: &str,
    inputs: Vec<Tensor>,
    input_shm: &[Option<ShmRef>],
    outputs: Vec<RequestedOutput>,
) -> ModelInferRequest {
    let mut raw = Vec::with_capacity(inputs.len());
    let inputs = inputs
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let parameters = match input_shm.get(i).and_then(Option::as_ref) {
                Some(r) => shm_params(r),
                None => {
                    raw.push(t.data);
                    Default::default()
                }
            };
            InferInputTensor {
                name: t.name,
                datatype: t.datatype.name().to_string(),
                shape: t.shape,
                parameters,
                ..Default::default()
            }
        })
        .collect();
    let outputs = outputs
        .into_iter()
        .map(|o| {
            let mut parameters = o.shm.as_ref().map(shm_params).unwrap_or_default();
            if let Some(n) = o.classification {
                parameters.insert(
                    "classification".to_string(),
                    InferParameter {
                        parameter_choice: Some(ParameterChoice::Int64Param(n as i64)),
                    },
                );
            }
            InferRequestedOutputTensor {
                name: o.name,
                parameters,
            }
        })
        .collect();
    ModelInferRequest {
        model_name: model.into(),
        model_version: version.into(),
        inputs,
        outputs,
        raw_input_contents: raw,
        ..Default::default()
    }
}

/// A gRPC response with raw output contents → engine tensors.
pub(super) fn infer_response(resp: ModelInferResponse) -> Result<InferResponse, ClientError> {
    let mut raw = resp.raw_output_contents.into_iter();
    let mut tensors = Vec::new();
    for o in resp.outputs {
        let datatype = DataType::from_name(&o.datatype)
            .ok_or_else(|| ClientError::Decode(format!("unknown datatype '{}'", o.datatype)))?;
        tensors.push(Tensor {
            name: o.name,
            datatype,
            shape: o.shape,
            data: raw.next().unwrap_or_default(),
        });
    }
    Ok(InferResponse {
        model_name: resp.model_name,
        model_version: resp.model_version,
        id: resp.id,
        outputs: tensors,
        // The command line shows no response parameters.
        parameters: Default::default(),
        last: true,
    })
}
