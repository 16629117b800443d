//! The legacy TRTIS v1 gRPC service (`nvidia.inferenceserver.GRPCService`),
//! served beside the v2 services on the same port, over the same engine.
//! As TRTIS: every call answers gRPC OK, and a failure is in the answer's
//! `request_status`.

use std::pin::Pin;
use std::time::Instant;

use futures_util::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::core::engine::Engine;
use crate::core::error::{Error, Result};
use crate::server::protocol::v1::pb::{
    self,
    grpc_service_server::GrpcServiceServer,
    model_control_request,
    shared_memory_control_request::{register::SharedMemoryTypes, SharedMemoryControl},
    shared_memory_control_response, InferRequest, InferResponse,
};
use crate::server::protocol::v1::{self, infer, Api, API_STATS};

/// How many requests of one `StreamInfer` call run at once; their answers
/// still go out in request order.
const STREAM_IN_FLIGHT: usize = 256;

/// The v1 service over one engine.
#[derive(Clone)]
pub struct GrpcV1Service {
    engine: Engine,
    max_input_size: usize,
}

impl GrpcV1Service {
    pub fn new(engine: Engine, max_input_size: usize) -> Self {
        GrpcV1Service {
            engine,
            max_input_size,
        }
    }

    /// The service, ready to add to a tonic server.
    pub fn server(&self) -> GrpcServiceServer<GrpcV1Service> {
        GrpcServiceServer::new(self.clone())
            .max_decoding_message_size(self.max_input_size)
            .max_encoding_message_size(usize::MAX)
    }

    fn status(&self, result: std::result::Result<(), &Error>) -> Option<pb::RequestStatus> {
        Some(v1::request_status(&self.engine, result))
    }
}

/// One v1 inference: the answer, its error in `request_status`.
async fn infer_one(engine: &Engine, req: InferRequest) -> InferResponse {
    let header = req.meta_data.unwrap_or_default();
    let id = header.id;
    let result: Result<InferResponse> = async {
        let version = if req.model_version < 0 {
            String::new()
        } else {
            req.model_version.to_string()
        };
        let data = infer::InputData::Raw(req.raw_input);
        let (meta_data, raw_output) =
            infer::run(engine, &req.model_name, &version, &header, data).await?;
        Ok(InferResponse {
            request_status: Some(v1::request_status(engine, Ok(()))),
            meta_data: Some(meta_data),
            raw_output,
        })
    }
    .await;
    result.unwrap_or_else(|e| InferResponse {
        request_status: Some(v1::request_status(engine, Err(&e))),
        meta_data: Some(infer::failed_header(id)),
        raw_output: Vec::new(),
    })
}

type StreamOf<T> = Pin<Box<dyn Stream<Item = std::result::Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl pb::grpc_service_server::GrpcService for GrpcV1Service {
    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> std::result::Result<Response<pb::StatusResponse>, Status> {
        let start = Instant::now();
        let name = request.into_inner().model_name;
        let model = (!name.is_empty()).then_some(name.as_str());
        let answer = match v1::server_status(&self.engine, model) {
            Ok(server_status) => {
                API_STATS.record(Api::Status, start.elapsed());
                pb::StatusResponse {
                    request_status: self.status(Ok(())),
                    server_status: Some(server_status),
                }
            }
            Err(e) => pb::StatusResponse {
                request_status: self.status(Err(&e)),
                server_status: None,
            },
        };
        Ok(Response::new(answer))
    }

    async fn profile(
        &self,
        request: Request<pb::ProfileRequest>,
    ) -> std::result::Result<Response<pb::ProfileResponse>, Status> {
        let result = v1::profile(&request.into_inner().cmd);
        Ok(Response::new(pb::ProfileResponse {
            request_status: self.status(result.as_ref().map(|_| ())),
        }))
    }

    async fn health(
        &self,
        request: Request<pb::HealthRequest>,
    ) -> std::result::Result<Response<pb::HealthResponse>, Status> {
        let start = Instant::now();
        let mode = request.into_inner().mode;
        let answer = match mode.as_str() {
            "live" | "ready" => {
                let health = if mode == "live" {
                    self.engine.live()
                } else {
                    self.engine.ready()
                };
                API_STATS.record(Api::Health, start.elapsed());
                pb::HealthResponse {
                    request_status: self.status(Ok(())),
                    health,
                }
            }
            _ => pb::HealthResponse {
                request_status: self.status(Err(&Error::new(
                    crate::core::error::ErrorKind::Unknown,
                    format!("unknown health mode '{mode}', expected 'live' or 'ready'"),
                ))),
                health: false,
            },
        };
        Ok(Response::new(answer))
    }

    async fn infer(
        &self,
        request: Request<InferRequest>,
    ) -> std::result::Result<Response<InferResponse>, Status> {
        Ok(Response::new(
            infer_one(&self.engine, request.into_inner()).await,
        ))
    }

    type StreamInferStream = StreamOf<InferResponse>;

    async fn stream_infer(
        &self,
        request: Request<Streaming<InferRequest>>,
    ) -> std::result::Result<Response<Self::StreamInferStream>, Status> {
        let engine = self.engine.clone();
        // A broken stream ends the answers (tonic ends the call).
        let answers = request
            .into_inner()
            .take_while(|r| std::future::ready(r.is_ok()))
            .filter_map(|r| std::future::ready(r.ok()))
            .map(move |req| {
                let engine = engine.clone();
                async move { infer_one(&engine, req).await }
            })
            .buffered(STREAM_IN_FLIGHT)
            .map(Ok);
        Ok(Response::new(Box::pin(answers)))
    }

    async fn model_control(
        &self,
        request: Request<pb::ModelControlRequest>,
    ) -> std::result::Result<Response<pb::ModelControlResponse>, Status> {
        let start = Instant::now();
        let req = request.into_inner();
        let result = match model_control_request::Type::try_from(req.r#type) {
            Ok(model_control_request::Type::Load) => self.engine.load(&req.model_name).await,
            Ok(model_control_request::Type::Unload) => self.engine.unload(&req.model_name).await,
            Err(_) => Err(Error::invalid_arg(format!(
                "unknown model control type {}",
                req.r#type
            ))),
        };
        if result.is_ok() {
            API_STATS.record(Api::ModelControl, start.elapsed());
        }
        Ok(Response::new(pb::ModelControlResponse {
            request_status: self.status(result.as_ref().map(|_| ())),
        }))
    }

    async fn shared_memory_control(
        &self,
        request: Request<pb::SharedMemoryControlRequest>,
    ) -> std::result::Result<Response<pb::SharedMemoryControlResponse>, Status> {
        let start = Instant::now();
        let mut regions = None;
        let result =
            match request.into_inner().shared_memory_control {
                Some(SharedMemoryControl::Register(r)) => match r.shared_memory_types {
                    Some(SharedMemoryTypes::SystemSharedMemory(sys)) => self.engine.shm_register(
                        &r.name,
                        &sys.shared_memory_key,
                        sys.offset,
                        r.byte_size,
                    ),
                    Some(SharedMemoryTypes::CudaSharedMemory(cuda)) => self
                        .engine
                        .cuda_shm_register(&r.name, &cuda.raw_handle, cuda.device_id, r.byte_size),
                    None => Err(Error::invalid_arg(
                        "shared memory register request names no system or CUDA shared memory",
                    )),
                },
                Some(SharedMemoryControl::Unregister(u)) => {
                    self.engine.shm_unregister_any(Some(&u.name))
                }
                Some(SharedMemoryControl::UnregisterAll(_)) => self.engine.shm_unregister_any(None),
                Some(SharedMemoryControl::Status(_)) => {
                    v1::shm_regions(&self.engine).map(|r| regions = Some(r))
                }
                None => Err(Error::invalid_arg(
                    "shared memory control request has no command",
                )),
            };
        if result.is_ok() {
            API_STATS.record(Api::ShmControl, start.elapsed());
        }
        Ok(Response::new(pb::SharedMemoryControlResponse {
            request_status: self.status(result.as_ref().map(|_| ())),
            shared_memory_control: regions.map(|shared_memory_region| {
                shared_memory_control_response::SharedMemoryControl::SharedMemoryStatus(
                    shared_memory_control_response::Status {
                        shared_memory_region,
                    },
                )
            }),
        }))
    }

    async fn repository(
        &self,
        request: Request<pb::RepositoryRequest>,
    ) -> std::result::Result<Response<pb::RepositoryResponse>, Status> {
        let start = Instant::now();
        let result = match request.into_inner().request_type {
            Some(pb::repository_request::RequestType::Index(true)) => {
                v1::repository_index(&self.engine)
            }
            _ => Err(Error::invalid_arg(
                "repository request must ask for the index",
            )),
        };
        if result.is_ok() {
            API_STATS.record(Api::Repository, start.elapsed());
        }
        let status = self.status(result.as_ref().map(|_| ()));
        Ok(Response::new(pb::RepositoryResponse {
            request_status: status,
            response_type: result
                .ok()
                .map(pb::repository_response::ResponseType::Index),
        }))
    }
}
