//! Triton's gRPC service (`inference.GRPCInferenceService`) and the standard
//! health service, over the same `Engine` as HTTP. `code_of` is **the**
//! `ErrorKind` → gRPC code table (Triton's `grpc_utils.cc`).

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use super::load_override;

mod stream;
use crate::core::engine::{parse_version, Engine};
use crate::core::error::{Error, ErrorKind};
use crate::core::logging::{self, Setting};
use crate::core::types::TraceContext;
use crate::server::protocol::grpc_convert;
use crate::server::protocol::pb::health::{
    health_check_response::ServingStatus,
    health_server::{Health, HealthServer},
    HealthCheckRequest, HealthCheckResponse,
};
use crate::server::protocol::pb::inference::{
    grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer},
    infer_parameter::ParameterChoice,
    model_repository_parameter::ParameterChoice as RepoParam,
    repository_index_response::ModelIndex,
    *,
};
use stream::{failed, Sent, StreamCall};

/// Triton's mapping of error kinds to gRPC codes.
pub fn code_of(kind: ErrorKind) -> tonic::Code {
    match kind {
        ErrorKind::Unknown => tonic::Code::Unknown,
        ErrorKind::Internal => tonic::Code::Internal,
        ErrorKind::NotFound => tonic::Code::NotFound,
        ErrorKind::InvalidArg => tonic::Code::InvalidArgument,
        ErrorKind::Unavailable => tonic::Code::Unavailable,
        ErrorKind::Unsupported => tonic::Code::Unimplemented,
        ErrorKind::AlreadyExists => tonic::Code::AlreadyExists,
        ErrorKind::Cancelled => tonic::Code::Cancelled,
    }
}

fn status(e: Error) -> Status {
    Status::new(code_of(e.kind), e.message)
}

/// How many requests of one stream may be in flight at once (the next
/// request is read when one ends). Large, because the requests read after
/// a waiting one may be what frees it (a sequence's END request releasing
/// the batch slot a backlogged sequence waits for, a decoupled request
/// that never ends); Triton reads a stream's requests as they arrive.
const STREAM_IN_FLIGHT: usize = 1 << 16;

/// How much before the client's deadline a unary call gives up
/// (`model_infer`).
const DEADLINE_MARGIN: std::time::Duration = std::time::Duration::from_millis(2);

/// The `grpc-timeout` header's value (gRPC's wire format: at most 8 digits
/// and a unit, `H` `M` `S` `m` `u` `n`).
fn grpc_timeout(value: &str) -> Option<std::time::Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => std::time::Duration::from_secs(n * 3600),
        "M" => std::time::Duration::from_secs(n * 60),
        "S" => std::time::Duration::from_secs(n),
        "m" => std::time::Duration::from_millis(n),
        "u" => std::time::Duration::from_micros(n),
        "n" => std::time::Duration::from_nanos(n),
        _ => return None,
    })
}

/// The default bound on one gRPC request message (`--grpc-max-input-size`),
/// the same as `--http-max-input-size`'s.
pub const DEFAULT_MAX_INPUT_SIZE: usize = 64 * 1024 * 1024;

/// The gRPC services over one engine.
#[derive(Clone)]
pub struct GrpcService {
    engine: Engine,
    max_input_size: usize,
    compress_responses: bool,
    forward: Option<std::sync::Arc<super::forward::HeaderForward>>,
}

impl GrpcService {
    pub fn new(engine: Engine) -> Self {
        GrpcService {
            engine,
            max_input_size: DEFAULT_MAX_INPUT_SIZE,
            compress_responses: false,
            forward: None,
        }
    }

    /// Forwards the metadata whose names match to the model as request
    /// parameters (`--grpc-header-forward-pattern`).
    pub fn with_header_forward(mut self, forward: Option<super::forward::HeaderForward>) -> Self {
        self.forward = forward.map(std::sync::Arc::new);
        self
    }

    /// Compresses responses with gzip for clients that accept it
    /// (`--grpc-infer-response-compression-level` other than none).
    /// Compressed requests (gzip, deflate) are read either way.
    pub fn with_response_compression(mut self, on: bool) -> Self {
        self.compress_responses = on;
        self
    }

    /// Bounds the size of one request message: a message that declares more
    /// is refused (OUT_OF_RANGE) from its 5-byte header, before its body is
    /// buffered.
    pub fn with_max_input_size(mut self, bytes: usize) -> Self {
        self.max_input_size = bytes;
        self
    }

    /// The inference service, ready to add to a tonic server.
    pub fn inference(&self) -> GrpcInferenceServiceServer<GrpcService> {
        use tonic::codec::CompressionEncoding::{Deflate, Gzip};
        let server = GrpcInferenceServiceServer::new(self.clone())
            .max_decoding_message_size(self.max_input_size)
            .max_encoding_message_size(usize::MAX)
            .accept_compressed(Gzip)
            .accept_compressed(Deflate);
        if self.compress_responses {
            server.send_compressed(Gzip)
        } else {
            server
        }
    }

    /// The `grpc.health.v1.Health` service.
    pub fn health(&self) -> HealthServer<GrpcService> {
        HealthServer::new(self.clone())
    }

    async fn infer(
        engine: &Engine,
        req: ModelInferRequest,
        trace: Option<TraceContext>,
    ) -> Result<ModelInferResponse, Error> {
        let model = engine.model(&req.model_name, &req.model_version)?;
        Self::infer_model(engine, model, req, trace).await
    }

    /// A unary inference on a model already looked up (`trace`: the
    /// call's W3C trace context).
    async fn infer_model(
        engine: &Engine,
        model: std::sync::Arc<crate::core::repository::LoadedModel>,
        req: ModelInferRequest,
        trace: Option<TraceContext>,
    ) -> Result<ModelInferResponse, Error> {
        if model.decoupled() {
            return Err(Error::unsupported(
                "ModelInfer RPC doesn't support models with decoupled transaction policy",
            ));
        }
        let mut request = grpc_convert::infer_request(req)?;
        request.trace_context = trace;
        engine.admit(&request)?;
        let response = engine.infer_on(model, request).await?;
        Ok(grpc_convert::infer_response(response))
    }

    /// A streamed request to a decoupled model: its responses as they
    /// come (each marked `triton_final_response: false` when the client
    /// set `triton_enable_empty_final_response`, which also gets the empty
    /// final response Triton sends then), an error as the stream's
    /// `error_message`. The request runs while the returned stream is
    /// polled; dropping it (the client cancelled the stream) cancels the
    /// request.
    fn infer_decoupled(
        engine: Engine,
        model: std::sync::Arc<crate::core::repository::LoadedModel>,
        req: ModelInferRequest,
        trace: Option<TraceContext>,
    ) -> impl Stream<Item = Sent> + Send + 'static {
        let id = req.id.clone();
        let empty_final = matches!(
            req.parameters
                .get("triton_enable_empty_final_response")
                .and_then(|p| p.parameter_choice.as_ref()),
            Some(ParameterChoice::BoolParam(true))
        );
        let final_flag = |last: bool| {
            std::collections::HashMap::from([(
                "triton_final_response".to_string(),
                InferParameter {
                    parameter_choice: Some(ParameterChoice::BoolParam(last)),
                },
            )])
        };
        let error = |id: &str, e: Error| failed(id, e);
        let request =
            match grpc_convert::infer_request(req).and_then(|r| engine.admit(&r).map(|()| r)) {
                Ok(mut r) => {
                    r.trace_context = trace;
                    r
                }
                Err(e) => {
                    let refused = error(&id, e);
                    return futures_util::stream::iter(vec![refused]).left_stream();
                }
            };
        // As Triton: the response that came with the final flag says so
        // (`triton_final_response: true`); only a final flag sent bare
        // gets the empty final response.
        let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = std::sync::Arc::clone(&ended);
        let (name, version) = (model.name.clone(), model.version.to_string());
        let last_id = id.clone();
        let last = futures_util::stream::once(async move {
            (empty_final && !seen.load(std::sync::atomic::Ordering::Relaxed)).then(|| {
                (
                    ModelStreamInferResponse {
                        error_message: String::new(),
                        infer_response: Some(ModelInferResponse {
                            model_name: name,
                            model_version: version,
                            id: last_id,
                            parameters: final_flag(true),
                            ..Default::default()
                        }),
                    },
                    None,
                )
            })
        })
        .filter_map(std::future::ready);
        let responses =
            super::answers::each(engine, model, request).map(move |answer| match answer {
                Ok(response) => {
                    let fin = response.last;
                    if fin {
                        ended.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    let mut response = grpc_convert::infer_response(response);
                    if empty_final {
                        response.parameters.extend(final_flag(fin));
                    }
                    (
                        ModelStreamInferResponse {
                            error_message: String::new(),
                            infer_response: Some(response),
                        },
                        None,
                    )
                }
                Err(e) => error(&id, e),
            });
        responses.chain(last).right_stream()
    }
}

/// A call's W3C trace context (`traceparent`, `tracestate` metadata).
fn trace_of(metadata: &tonic::metadata::MetadataMap) -> Option<TraceContext> {
    TraceContext::from_headers(|name| metadata.get(name).map(|v| v.as_bytes()))
}

type GrpcResult<T> = Result<Response<T>, Status>;

/// Triton serves one repository namespace: naming one is refused.
fn no_repository_name(name: &str) -> Result<(), Status> {
    if name.is_empty() {
        Ok(())
    } else {
        Err(Status::unimplemented(
            "'repository_name' specification is not supported",
        ))
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for GrpcService {
    async fn server_live(&self, _: Request<ServerLiveRequest>) -> GrpcResult<ServerLiveResponse> {
        Ok(Response::new(ServerLiveResponse {
            live: self.engine.live(),
        }))
    }

    async fn server_ready(
        &self,
        _: Request<ServerReadyRequest>,
    ) -> GrpcResult<ServerReadyResponse> {
        Ok(Response::new(ServerReadyResponse {
            ready: self.engine.ready(),
        }))
    }

    async fn model_ready(&self, req: Request<ModelReadyRequest>) -> GrpcResult<ModelReadyResponse> {
        let r = req.into_inner();
        parse_version(&r.version).map_err(status)?;
        Ok(Response::new(ModelReadyResponse {
            ready: self.engine.model_ready(&r.name, &r.version),
        }))
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> GrpcResult<ServerMetadataResponse> {
        Ok(Response::new(ServerMetadataResponse {
            name: self.engine.config().id.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            extensions: self
                .engine
                .extensions()
                .iter()
                .map(|e| e.to_string())
                .collect(),
        }))
    }

    async fn model_metadata(
        &self,
        req: Request<ModelMetadataRequest>,
    ) -> GrpcResult<ModelMetadataResponse> {
        let r = req.into_inner();
        let meta = self
            .engine
            .model_metadata(&r.name, &r.version)
            .map_err(status)?;
        Ok(Response::new(grpc_convert::model_metadata(meta)))
    }

    async fn model_infer(&self, req: Request<ModelInferRequest>) -> GrpcResult<ModelInferResponse> {
        let deadline = req
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(grpc_timeout);
        let (metadata, _, mut request) = req.into_parts();
        if let Some(forward) = &self.forward {
            forward.apply_grpc(&metadata, &mut request.parameters);
        }
        let trace = trace_of(&metadata);
        let infer = Self::infer(&self.engine, request, trace);
        let answer = match deadline {
            // A request past the client's deadline ends as Triton's
            // (gRPC core's) DEADLINE_EXCEEDED, a moment before tonic's own
            // deadline would end it as CANCELLED "Timeout expired".
            Some(d) => tokio::time::timeout(d.saturating_sub(DEADLINE_MARGIN), infer)
                .await
                .map_err(|_| Status::deadline_exceeded("Deadline Exceeded"))?,
            None => infer.await,
        };
        answer.map(Response::new).map_err(status)
    }

    type ModelStreamInferStream =
        Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send + 'static>>;

    async fn model_stream_infer(
        &self,
        req: Request<Streaming<ModelInferRequest>>,
    ) -> GrpcResult<Self::ModelStreamInferStream> {
        // The call's metadata, forwarded into each of its requests.
        let mut forwarded = std::collections::HashMap::new();
        if let Some(forward) = &self.forward {
            forward.apply_grpc(req.metadata(), &mut forwarded);
        }
        // The stream's trace context, for each of its requests (Triton).
        let trace = trace_of(req.metadata());
        let grpc_error = req
            .metadata()
            .get("triton_grpc_error")
            .is_some_and(|v| v.as_bytes() == b"true");
        let mut responses = StreamCall::new(self.engine.clone(), req.into_inner());
        responses.forwarded = forwarded;
        responses.trace = trace;
        responses.grpc_error = grpc_error;
        Ok(Response::new(Box::pin(responses)))
    }

    async fn model_config(
        &self,
        req: Request<ModelConfigRequest>,
    ) -> GrpcResult<ModelConfigResponse> {
        let r = req.into_inner();
        let model = self.engine.model(&r.name, &r.version).map_err(status)?;
        Ok(Response::new(ModelConfigResponse {
            config: Some(model.config.clone()),
        }))
    }

    async fn model_statistics(
        &self,
        req: Request<ModelStatisticsRequest>,
    ) -> GrpcResult<ModelStatisticsResponse> {
        let r = req.into_inner();
        let models = if r.name.is_empty() {
            self.engine.loaded_models()
        } else {
            self.engine
                .model_stats(&r.name, &r.version)
                .map_err(status)?
        };
        Ok(Response::new(ModelStatisticsResponse {
            model_stats: models
                .iter()
                .map(|m| grpc_convert::model_statistics(m))
                .collect(),
        }))
    }

    async fn repository_index(
        &self,
        req: Request<RepositoryIndexRequest>,
    ) -> GrpcResult<RepositoryIndexResponse> {
        let r = req.into_inner();
        no_repository_name(&r.repository_name)?;
        let models = self
            .engine
            .index(r.ready)
            .map_err(status)?
            .into_iter()
            .map(|e| ModelIndex {
                state: if e.version.is_empty() && e.reason.is_empty() {
                    String::new()
                } else {
                    e.state.name().to_string()
                },
                name: e.name,
                version: e.version,
                reason: e.reason,
            })
            .collect();
        Ok(Response::new(RepositoryIndexResponse { models }))
    }

    async fn repository_model_load(
        &self,
        req: Request<RepositoryModelLoadRequest>,
    ) -> GrpcResult<RepositoryModelLoadResponse> {
        let r = req.into_inner();
        no_repository_name(&r.repository_name)?;
        let mut config = None;
        let mut files = Vec::new();
        for (key, value) in r.parameters {
            match (key.as_str(), value.parameter_choice) {
                ("config", Some(RepoParam::StringParam(text))) => config = Some(text),
                ("config", _) => {
                    return Err(Status::invalid_argument(format!(
                        "invalid value type for load parameter '{key}', expected string_param."
                    )))
                }
                (k, Some(RepoParam::BytesParam(bytes))) if k.starts_with("file:") => {
                    files.push((k["file:".len()..].to_string(), bytes))
                }
                (k, _) if k.starts_with("file:") => {
                    return Err(Status::invalid_argument(format!(
                        "invalid value type for load parameter '{key}', expected bytes_param."
                    )))
                }
                _ => {
                    return Err(Status::invalid_argument(format!(
                        "unrecognized load parameter '{key}'."
                    )))
                }
            }
        }
        let over = load_override(&r.model_name, config, files).map_err(status)?;
        self.engine
            .load_with(&r.model_name, over)
            .await
            .map_err(status)?;
        Ok(Response::new(RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        req: Request<RepositoryModelUnloadRequest>,
    ) -> GrpcResult<RepositoryModelUnloadResponse> {
        let r = req.into_inner();
        no_repository_name(&r.repository_name)?;
        let mut dependents = false;
        if let Some(v) = r.parameters.get("unload_dependents") {
            match v.parameter_choice {
                Some(RepoParam::BoolParam(b)) => dependents = b,
                _ => return Err(Status::invalid_argument(
                    "invalid value type for 'unload_dependents' parameter, expected bool_param.",
                )),
            }
        }
        self.engine
            .unload_with(&r.model_name, dependents)
            .await
            .map_err(status)?;
        Ok(Response::new(RepositoryModelUnloadResponse {}))
    }

    async fn system_shared_memory_status(
        &self,
        req: Request<SystemSharedMemoryStatusRequest>,
    ) -> GrpcResult<SystemSharedMemoryStatusResponse> {
        let name = req.into_inner().name;
        let regions = self
            .engine
            .shm_status((!name.is_empty()).then_some(name.as_str()))
            .map_err(status)?;
        Ok(Response::new(SystemSharedMemoryStatusResponse {
            regions: regions
                .into_iter()
                .map(|r| {
                    let status = system_shared_memory_status_response::RegionStatus {
                        name: r.name.clone(),
                        key: r.key,
                        offset: r.offset,
                        byte_size: r.byte_size,
                    };
                    (r.name, status)
                })
                .collect(),
        }))
    }

    async fn system_shared_memory_register(
        &self,
        req: Request<SystemSharedMemoryRegisterRequest>,
    ) -> GrpcResult<SystemSharedMemoryRegisterResponse> {
        let r = req.into_inner();
        self.engine
            .shm_register(&r.name, &r.key, r.offset, r.byte_size)
            .map_err(status)?;
        Ok(Response::new(SystemSharedMemoryRegisterResponse {}))
    }

    async fn system_shared_memory_unregister(
        &self,
        req: Request<SystemSharedMemoryUnregisterRequest>,
    ) -> GrpcResult<SystemSharedMemoryUnregisterResponse> {
        let name = req.into_inner().name;
        self.engine
            .shm_unregister((!name.is_empty()).then_some(name.as_str()))
            .map_err(status)?;
        Ok(Response::new(SystemSharedMemoryUnregisterResponse {}))
    }

    // CUDA shared memory: regions on this server's GPUs; without a GPU,
    // registration gets Triton's CPU-only answer and status lists none.
    async fn cuda_shared_memory_status(
        &self,
        req: Request<CudaSharedMemoryStatusRequest>,
    ) -> GrpcResult<CudaSharedMemoryStatusResponse> {
        let name = req.into_inner().name;
        let regions = self
            .engine
            .cuda_shm_status((!name.is_empty()).then_some(name.as_str()))
            .map_err(status)?;
        Ok(Response::new(CudaSharedMemoryStatusResponse {
            regions: regions
                .into_iter()
                .map(|r| {
                    let status = cuda_shared_memory_status_response::RegionStatus {
                        name: r.name.clone(),
                        device_id: r.device_id,
                        byte_size: r.byte_size,
                    };
                    (r.name, status)
                })
                .collect(),
        }))
    }

    async fn cuda_shared_memory_register(
        &self,
        req: Request<CudaSharedMemoryRegisterRequest>,
    ) -> GrpcResult<CudaSharedMemoryRegisterResponse> {
        let r = req.into_inner();
        self.engine
            .cuda_shm_register(&r.name, &r.raw_handle, r.device_id, r.byte_size)
            .map_err(status)?;
        Ok(Response::new(CudaSharedMemoryRegisterResponse {}))
    }

    async fn cuda_shared_memory_unregister(
        &self,
        req: Request<CudaSharedMemoryUnregisterRequest>,
    ) -> GrpcResult<CudaSharedMemoryUnregisterResponse> {
        let name = req.into_inner().name;
        self.engine
            .cuda_shm_unregister((!name.is_empty()).then_some(name.as_str()))
            .map_err(status)?;
        Ok(Response::new(CudaSharedMemoryUnregisterResponse {}))
    }

    async fn trace_setting(
        &self,
        req: Request<TraceSettingRequest>,
    ) -> GrpcResult<TraceSettingResponse> {
        let r = req.into_inner();
        let model = (!r.model_name.is_empty()).then_some(r.model_name.as_str());
        let settings = if r.settings.is_empty() {
            self.engine.trace_settings(model).map_err(status)?
        } else {
            // An empty value list clears a model's override (JSON null in HTTP).
            let updates = r
                .settings
                .into_iter()
                .map(|(k, v)| (k, (!v.value.is_empty()).then_some(v.value)))
                .collect();
            self.engine
                .update_trace_settings(model, &updates)
                .map_err(status)?
        };
        Ok(Response::new(TraceSettingResponse {
            settings: settings
                .to_map()
                .into_iter()
                .map(|(k, value)| {
                    (
                        k.to_string(),
                        trace_setting_response::SettingValue { value },
                    )
                })
                .collect(),
        }))
    }

    async fn log_settings(
        &self,
        req: Request<LogSettingsRequest>,
    ) -> GrpcResult<LogSettingsResponse> {
        use log_settings_request::setting_value::ParameterChoice as In;
        use log_settings_response::setting_value::ParameterChoice as Out;
        let mut updates = Vec::new();
        for (key, value) in req.into_inner().settings {
            let setting = match value.parameter_choice {
                Some(In::BoolParam(b)) => Setting::Bool(b),
                Some(In::Uint32Param(n)) => Setting::Uint(n),
                Some(In::StringParam(s)) => Setting::String(s),
                None => {
                    return Err(Status::invalid_argument(format!(
                        "no value for log setting '{key}'"
                    )))
                }
            };
            updates.push((key, setting));
        }
        logging::update(&updates).map_err(status)?;
        let settings = logging::settings()
            .into_iter()
            .map(|(key, value)| {
                let choice = match value {
                    Setting::Bool(b) => Out::BoolParam(b),
                    Setting::Uint(n) => Out::Uint32Param(n),
                    Setting::String(s) => Out::StringParam(s),
                };
                let v = log_settings_response::SettingValue {
                    parameter_choice: Some(choice),
                };
                (key.to_string(), v)
            })
            .collect();
        Ok(Response::new(LogSettingsResponse { settings }))
    }
}

#[tonic::async_trait]
impl Health for GrpcService {
    async fn check(&self, _: Request<HealthCheckRequest>) -> GrpcResult<HealthCheckResponse> {
        let status = if self.engine.ready() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        Ok(Response::new(HealthCheckResponse {
            status: status as i32,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn grpc_timeout_values_parse_as_grpc_writes_them() {
        assert_eq!(grpc_timeout("150m"), Some(Duration::from_millis(150)));
        assert_eq!(grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(grpc_timeout("99999u"), Some(Duration::from_micros(99999)));
        for bad in ["", "m", "123456789m", "10x", "-1S", "1.5S"] {
            assert_eq!(grpc_timeout(bad), None, "{bad}");
        }
    }
}
