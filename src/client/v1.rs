//! The client side of the legacy TRTIS v1 API, over HTTP (`/api/...`,
//! `NV-InferRequest`, raw tensors) or gRPC (`nvidia.inferenceserver.
//! GRPCService`), for `trtis status --api v1` and `trtis infer --api v1`
//! against a TRTIS 0.12/1.x server (or trtis itself). Everything the v2
//! client learns from metadata, config and statistics calls comes here from
//! the one `ServerStatus` (as the TRTIS client library did); a failed call
//! is the `RequestStatus`'s code and message.

use prost::Message;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::core::config::ModelConfig;
use crate::core::metrics::stats::Snapshot;
use crate::core::types::{
    DataType, InferResponse, ModelMetadata, RequestedOutput, Tensor, TensorMetadata,
};
use crate::server::protocol::v1::pb::{
    self,
    grpc_service_client::GrpcServiceClient,
    infer_request_header,
    shared_memory_control_request::{self as shm_req, SharedMemoryControl},
    InferRequestHeader, InferResponseHeader, RequestStatus, RequestStatusCode,
};
use crate::server::protocol::v1::text;

use super::options::Headers;
use super::{ClientError, IndexEntry, ModelStats, SeqFlags, ServerMetadata};

enum Transport {
    Http { base: String, http: reqwest::Client },
    Grpc(GrpcServiceClient<InterceptedService<Channel, Headers>>),
}

pub struct V1Client {
    transport: Transport,
}

/// A `RequestStatus` that is not SUCCESS as the client's error (HTTP: the
/// answer's status; gRPC: the v1 code's name).
fn check(status: Option<&RequestStatus>, http: Option<u16>) -> Result<(), ClientError> {
    let Some(status) = status else {
        return Err(ClientError::Decode(
            "the server's answer carries no request status".into(),
        ));
    };
    if status.code == RequestStatusCode::Success as i32 {
        return Ok(());
    }
    let code = RequestStatusCode::try_from(status.code)
        .map(|c| c.as_str_name().to_string())
        .unwrap_or_else(|_| status.code.to_string());
    let message = format!("{code}: {}", status.msg);
    Err(match http {
        Some(status) => ClientError::Http { status, message },
        None => ClientError::Grpc { code, message },
    })
}

fn decode_err(what: &str) -> impl Fn(prost::DecodeError) -> ClientError + '_ {
    move |e| ClientError::Decode(format!("{what}: {e}"))
}

impl V1Client {
    pub async fn connect(
        base: String,
        grpc: bool,
        options: &super::ConnectOptions,
    ) -> Result<Self, ClientError> {
        let transport = if grpc {
            let channel = super::options::grpc_channel(&base, options).await?;
            Transport::Grpc(
                GrpcServiceClient::with_interceptor(channel, Headers::new(&options.headers)?)
                    .max_decoding_message_size(usize::MAX)
                    .max_encoding_message_size(usize::MAX),
            )
        } else {
            let http = super::options::http_client(options)?;
            Transport::Http { base, http }
        };
        Ok(V1Client { transport })
    }

    /// An HTTP request: the answer's status, `NV-Status` and body.
    async fn http(
        &self,
        req: impl FnOnce(&reqwest::Client, &str) -> reqwest::RequestBuilder,
    ) -> Result<
        (
            u16,
            Option<RequestStatus>,
            reqwest::header::HeaderMap,
            Vec<u8>,
        ),
        ClientError,
    > {
        let Transport::Http { base, http } = &self.transport else {
            unreachable!("only called for HTTP");
        };
        let resp = req(http, base).send().await?;
        let code = resp.status().as_u16();
        let status = resp
            .headers()
            .get("nv-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| text::parse::<RequestStatus>(v, "RequestStatus").ok());
        let headers = resp.headers().clone();
        let body = resp.bytes().await?.to_vec();
        if code != 200 && status.is_none() {
            return Err(ClientError::Http {
                status: code,
                message: "the server answered without a request status (NV-Status)".into(),
            });
        }
        Ok((code, status, headers, body))
    }

    async fn health(&mut self, mode: &str) -> Result<bool, ClientError> {
        match &mut self.transport {
            Transport::Grpc(stub) => {
                let r = stub
                    .health(pb::HealthRequest { mode: mode.into() })
                    .await?
                    .into_inner();
                check(r.request_status.as_ref(), None)?;
                Ok(r.health)
            }
            Transport::Http { .. } => {
                let path = format!("/api/health/{mode}");
                let (code, _, _, _) = self.http(|h, b| h.get(format!("{b}{path}"))).await?;
                Ok(code == 200)
            }
        }
    }

    pub async fn live(&mut self) -> Result<bool, ClientError> {
        self.health("live").await
    }

    pub async fn ready(&mut self) -> Result<bool, ClientError> {
        self.health("ready").await
    }

    /// The server status: of every model, or of one.
    pub async fn status(&mut self, model: &str) -> Result<pb::ServerStatus, ClientError> {
        match &mut self.transport {
            Transport::Grpc(stub) => {
                let r = stub
                    .status(pb::StatusRequest {
                        model_name: model.into(),
                    })
                    .await?
                    .into_inner();
                check(r.request_status.as_ref(), None)?;
                Ok(r.server_status.unwrap_or_default())
            }
            Transport::Http { .. } => {
                let path = if model.is_empty() {
                    "/api/status?format=binary".to_string()
                } else {
                    format!("/api/status/{model}?format=binary")
                };
                let (code, status, _, body) = self.http(|h, b| h.get(format!("{b}{path}"))).await?;
                check(status.as_ref(), Some(code))?;
                pb::ServerStatus::decode(body.as_slice()).map_err(decode_err("ServerStatus"))
            }
        }
    }

    pub async fn server_metadata(&mut self) -> Result<ServerMetadata, ClientError> {
        let status = self.status("").await?;
        Ok(ServerMetadata {
            name: status.id,
            version: status.version,
            extensions: Vec::new(),
        })
    }

    /// A model's v1 config, read with today's schema (the same field
    /// numbers).
    pub async fn model_config(
        &mut self,
        model: &str,
        _version: &str,
    ) -> Result<ModelConfig, ClientError> {
        let status = self.status(model).await?;
        let config = status
            .model_status
            .get(model)
            .and_then(|m| m.config.clone())
            .unwrap_or_default();
        ModelConfig::decode(config.encode_to_vec().as_slice()).map_err(decode_err("ModelConfig"))
    }

    pub async fn model_metadata(
        &mut self,
        model: &str,
        version: &str,
    ) -> Result<ModelMetadata, ClientError> {
        let status = self.status(model).await?;
        let entry = status.model_status.get(model).cloned().unwrap_or_default();
        let config = entry.config.unwrap_or_default();
        let batching = config.max_batch_size > 0;
        let tensor = |name: &str, data_type: i32, dims: &[i64]| TensorMetadata {
            name: name.to_string(),
            datatype: DataType::from_config(data_type)
                .map(|d| d.name().to_string())
                .unwrap_or_default(),
            shape: batching
                .then_some(-1)
                .into_iter()
                .chain(dims.iter().copied())
                .collect(),
        };
        let versions: Vec<String> = entry
            .version_status
            .iter()
            .filter(|(v, s)| {
                s.ready_state == pb::ModelReadyState::ModelReady as i32
                    && (version.is_empty() || version == v.to_string())
            })
            .map(|(v, _)| v.to_string())
            .collect();
        Ok(ModelMetadata {
            name: config.name.clone(),
            versions,
            platform: config.platform.clone(),
            inputs: config
                .input
                .iter()
                .map(|i| tensor(&i.name, i.data_type, &i.dims))
                .collect(),
            outputs: config
                .output
                .iter()
                .map(|o| tensor(&o.name, o.data_type, &o.dims))
                .collect(),
        })
    }

    pub async fn index(&mut self) -> Result<Vec<IndexEntry>, ClientError> {
        let status = self.status("").await?;
        let mut out = Vec::new();
        for (name, model) in &status.model_status {
            if model.version_status.is_empty() {
                out.push(IndexEntry {
                    name: name.clone(),
                    version: String::new(),
                    state: String::new(),
                    reason: String::new(),
                });
            }
            for (version, vs) in &model.version_status {
                let state = pb::ModelReadyState::try_from(vs.ready_state)
                    .map(|s| s.as_str_name().trim_start_matches("MODEL_").to_string())
                    .unwrap_or_default();
                out.push(IndexEntry {
                    name: name.clone(),
                    version: version.to_string(),
                    state,
                    reason: vs
                        .ready_state_reason
                        .as_ref()
                        .map(|r| r.message.clone())
                        .unwrap_or_default(),
                });
            }
        }
        Ok(out)
    }

    pub async fn statistics(&mut self, model: &str) -> Result<Vec<ModelStats>, ClientError> {
        let status = self.status(model).await?;
        let pair = |d: &Option<pb::StatDuration>| {
            d.as_ref()
                .map(|d| (d.count, d.total_time_ns))
                .unwrap_or_default()
        };
        let add = |a: (u64, u64), b: (u64, u64)| (a.0 + b.0, a.1 + b.1);
        let mut out = Vec::new();
        for (name, m) in &status.model_status {
            for (version, vs) in &m.version_status {
                let mut stats = Snapshot {
                    last_inference: vs.last_inference_timestamp_milliseconds,
                    inference_count: vs.model_inference_count,
                    execution_count: vs.model_execution_count,
                    ..Default::default()
                };
                for s in vs.infer_stats.values() {
                    stats.success = add(stats.success, pair(&s.success));
                    stats.fail = add(stats.fail, pair(&s.failed));
                    stats.queue = add(stats.queue, pair(&s.queue));
                    stats.compute_infer = add(stats.compute_infer, pair(&s.compute));
                }
                out.push(ModelStats {
                    name: name.clone(),
                    version: version.to_string(),
                    stats,
                });
            }
        }
        Ok(out)
    }

    async fn model_control(&mut self, model: &str, load: bool) -> Result<(), ClientError> {
        match &mut self.transport {
            Transport::Grpc(stub) => {
                let r = stub
                    .model_control(pb::ModelControlRequest {
                        model_name: model.into(),
                        r#type: if load {
                            pb::model_control_request::Type::Load
                        } else {
                            pb::model_control_request::Type::Unload
                        } as i32,
                    })
                    .await?
                    .into_inner();
                check(r.request_status.as_ref(), None)
            }
            Transport::Http { .. } => {
                let path = format!(
                    "/api/modelcontrol/{}/{model}",
                    if load { "load" } else { "unload" }
                );
                let (code, status, _, _) = self.http(|h, b| h.post(format!("{b}{path}"))).await?;
                check(status.as_ref(), Some(code))
            }
        }
    }

    pub async fn load(&mut self, model: &str) -> Result<(), ClientError> {
        self.model_control(model, true).await
    }

    pub async fn unload(&mut self, model: &str) -> Result<(), ClientError> {
        self.model_control(model, false).await
    }

    async fn shm_control(
        &mut self,
        control: SharedMemoryControl,
        path: String,
    ) -> Result<(), ClientError> {
        match &mut self.transport {
            Transport::Grpc(stub) => {
                let r = stub
                    .shared_memory_control(pb::SharedMemoryControlRequest {
                        shared_memory_control: Some(control),
                    })
                    .await?
                    .into_inner();
                check(r.request_status.as_ref(), None)
            }
            Transport::Http { .. } => {
                let (code, status, _, _) = self.http(|h, b| h.post(format!("{b}{path}"))).await?;
                check(status.as_ref(), Some(code))
            }
        }
    }

    pub async fn register_shm(
        &mut self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<(), ClientError> {
        let control = SharedMemoryControl::Register(shm_req::Register {
            name: name.into(),
            byte_size,
            shared_memory_types: Some(shm_req::register::SharedMemoryTypes::SystemSharedMemory(
                shm_req::register::SystemSharedMemoryIdentifier {
                    shared_memory_key: key.into(),
                    offset,
                },
            )),
        });
        let path = format!("/api/sharedmemorycontrol/register/{name}/{key}/{offset}/{byte_size}");
        self.shm_control(control, path).await
    }

    pub async fn unregister_shm(&mut self, name: &str) -> Result<(), ClientError> {
        if name.is_empty() {
            let control = SharedMemoryControl::UnregisterAll(shm_req::UnregisterAll {});
            self.shm_control(control, "/api/sharedmemorycontrol/unregisterall".into())
                .await
        } else {
            let control =
                SharedMemoryControl::Unregister(shm_req::Unregister { name: name.into() });
            self.shm_control(
                control,
                format!("/api/sharedmemorycontrol/unregister/{name}"),
            )
            .await
        }
    }

    /// One inference. `outputs` empty: every output of the model (a v1
    /// request that lists none gets none back). A classification output
    /// comes back as v2 does (`"value:index:label"` strings), so callers
    /// treat both APIs alike.
    pub async fn infer(
        &mut self,
        model: &str,
        version: &str,
        inputs: Vec<Tensor>,
        outputs: Vec<RequestedOutput>,
        sequence: Option<SeqFlags>,
    ) -> Result<InferResponse, ClientError> {
        let status = self.status(model).await?;
        let config = status
            .model_status
            .get(model)
            .and_then(|m| m.config.clone())
            .unwrap_or_default();
        let batching = config.max_batch_size > 0;
        let batch = match (batching, inputs.first()) {
            (true, Some(t)) => t.shape.first().copied().unwrap_or(1).max(1) as u32,
            _ => 1,
        };
        let mut header = InferRequestHeader {
            batch_size: batch,
            ..Default::default()
        };
        if let Some(seq) = &sequence {
            header.correlation_id = seq.id;
            header.flags = u32::from(seq.start) | (u32::from(seq.end) << 1);
        }
        for t in &inputs {
            let dims = if batching && !t.shape.is_empty() {
                t.shape[1..].to_vec()
            } else {
                t.shape.clone()
            };
            header.input.push(infer_request_header::Input {
                name: t.name.clone(),
                dims,
                batch_byte_size: t.data.len() as u64,
                shared_memory: None,
            });
        }
        let wanted: Vec<RequestedOutput> = if outputs.is_empty() {
            config
                .output
                .iter()
                .map(|o| RequestedOutput::named(o.name.clone()))
                .collect()
        } else {
            outputs
        };
        for o in &wanted {
            header.output.push(infer_request_header::Output {
                name: o.name.clone(),
                cls: o
                    .classification
                    .map(|n| infer_request_header::output::Class { count: n as u32 }),
                shared_memory: None,
            });
        }
        let version_number: i64 = if version.is_empty() {
            -1
        } else {
            version.parse().map_err(|_| {
                ClientError::Decode(format!("model version '{version}' is not a number"))
            })?
        };
        let (meta, raw) = match &mut self.transport {
            Transport::Grpc(stub) => {
                let r = stub
                    .infer(pb::InferRequest {
                        model_name: model.into(),
                        model_version: version_number,
                        meta_data: Some(header),
                        raw_input: inputs.into_iter().map(|t| t.data).collect(),
                    })
                    .await?
                    .into_inner();
                check(r.request_status.as_ref(), None)?;
                (r.meta_data.unwrap_or_default(), r.raw_output)
            }
            Transport::Http { .. } => {
                let path = if version.is_empty() {
                    format!("/api/infer/{model}")
                } else {
                    format!("/api/infer/{model}/{version}")
                };
                let header_text = text::short(&header, "InferRequestHeader");
                let body: Vec<u8> = inputs.into_iter().flat_map(|t| t.data).collect();
                let (code, status, headers, body) = self
                    .http(|h, b| {
                        h.post(format!("{b}{path}"))
                            .header("NV-InferRequest", header_text)
                            .header("content-type", "application/octet-stream")
                            .body(body)
                    })
                    .await?;
                check(status.as_ref(), Some(code))?;
                let meta = headers
                    .get("nv-inferresponse")
                    .and_then(|v| v.to_str().ok())
                    .map(|v| text::parse::<InferResponseHeader>(v, "InferResponseHeader"))
                    .transpose()
                    .map_err(|e| ClientError::Decode(e.message))?
                    .ok_or_else(|| {
                        ClientError::Decode("the answer has no NV-InferResponse".into())
                    })?;
                let mut raw = Vec::with_capacity(meta.output.len());
                let mut at = 0usize;
                for o in &meta.output {
                    let n = o.raw.as_ref().map_or(0, |r| r.batch_byte_size as usize);
                    let end = at.saturating_add(n);
                    let part = body.get(at..end).ok_or_else(|| {
                        ClientError::Decode(format!(
                            "the body is too short for output '{}'",
                            o.name
                        ))
                    })?;
                    raw.push(part.to_vec());
                    at += n;
                }
                (meta, raw)
            }
        };
        let mut tensors = Vec::with_capacity(meta.output.len());
        for (i, o) in meta.output.iter().enumerate() {
            let data_type = config
                .output
                .iter()
                .find(|c| c.name == o.name)
                .map_or(0, |c| c.data_type);
            if let Some(r) = &o.raw {
                let shape: Vec<i64> = batching
                    .then_some(i64::from(meta.batch_size))
                    .into_iter()
                    .chain(r.dims.iter().copied())
                    .collect();
                tensors.push(Tensor {
                    name: o.name.clone(),
                    datatype: DataType::from_config(data_type).unwrap_or(DataType::Bytes),
                    shape,
                    data: raw.get(i).cloned().unwrap_or_default(),
                });
            } else {
                let rows = o.batch_classes.len();
                let k = o.batch_classes.first().map_or(0, |c| c.cls.len());
                let strings: Vec<Vec<u8>> = o
                    .batch_classes
                    .iter()
                    .flat_map(|c| &c.cls)
                    .map(|c| {
                        let mut s = format!("{:.6}:{}", c.value, c.idx);
                        if !c.label.is_empty() {
                            s.push(':');
                            s.push_str(&c.label);
                        }
                        s.into_bytes()
                    })
                    .collect();
                tensors.push(Tensor {
                    name: o.name.clone(),
                    datatype: DataType::Bytes,
                    shape: if batching {
                        vec![rows as i64, k as i64]
                    } else {
                        vec![k as i64]
                    },
                    data: Tensor::serialize_bytes(strings.iter().map(Vec::as_slice)),
                });
            }
        }
        Ok(InferResponse {
            model_name: meta.model_name,
            model_version: meta.model_version.to_string(),
            id: meta.id.to_string(),
            outputs: tensors,
            // The command line shows no response parameters.
            parameters: Default::default(),
            last: true,
        })
    }
}
