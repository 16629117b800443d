//! A bench helper, not a user example: the loopback floor for `trtis serve`.
//!
//! A bare server that answers Triton's perf_analyzer for one identity-like
//! model (one input, one output of the same type and shape) over KServe v2
//! HTTP and gRPC, echoing the request's tensor bytes as the output, and
//! doing nothing else: no repository, no scheduler, no instance thread, no
//! copy of the tensor it does not need (over HTTP the output is the
//! request body's own bytes). What perf_analyzer asks before it starts
//! (health, model metadata and config) is answered from JSON files the
//! bench driver fetched from a running `trtis serve` for the same model.
//! `scripts/bench.sh serve` sets trtis against it: CPU per inference at
//! concurrency 1 for small tensors, throughput for 16 MB ones.
//!
//! With `--blocking`, it serves HTTP only, on a thread per connection that
//! blocks in `read`: two system calls and one sleep per request, no event
//! loop. That is the kernel's own floor for a request over loopback TCP,
//! which no server can go below without spinning.
//!
//! ```text
//! cargo run --release --example echo_floor -- HTTP_PORT GRPC_PORT METADATA.json CONFIG.json [--blocking]
//! ```

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::Stream;
use serde_json::{json, Value};
use tonic::{Request, Status, Streaming};

use trtis::core::config::pb::ModelConfig;
use trtis::server::protocol::pb::inference::grpc_inference_service_server::{
    GrpcInferenceService, GrpcInferenceServiceServer,
};
use trtis::server::protocol::pb::inference::*;

struct Model {
    /// Inferences answered (`GET /v2/models/NAME/stats` reports it as
    /// trtis does, for the driver's CPU per inference).
    count: std::sync::atomic::AtomicU64,
    metadata: Value,
    config_json: Value,
    config: ModelConfig,
    output: String,
}

fn read_json(path: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let blocking = args.len() == 6 && args[5] == "--blocking";
    if args.len() != 5 && !blocking {
        eprintln!("usage: echo_floor HTTP_PORT GRPC_PORT METADATA.json CONFIG.json [--blocking]");
        std::process::exit(2);
    }
    let metadata = read_json(&args[3]);
    let config_json = read_json(&args[4]);
    let config = trtis::core::config::json::from_json(&config_json).expect("a model config");
    let output = metadata["outputs"][0]["name"]
        .as_str()
        .expect("an output")
        .to_string();
    let model = Arc::new(Model {
        count: Default::default(),
        metadata,
        config_json,
        config,
        output,
    });
    if blocking {
        blocking_http(&args[1], model);
    }
    // As trtis serve: a multi-threaded runtime with a worker per core.
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async move {
        let http: SocketAddr = format!("0.0.0.0:{}", args[1]).parse().expect("a port");
        let grpc: SocketAddr = format!("0.0.0.0:{}", args[2]).parse().expect("a port");
        let app = Router::new()
            .route("/v2/health/live", get(|| async { StatusCode::OK }))
            .route("/v2/health/ready", get(|| async { StatusCode::OK }))
            .route("/v2", get(server_metadata))
            .route("/v2/models/{name}", get(model_metadata))
            .route("/v2/models/{name}/ready", get(|| async { StatusCode::OK }))
            .route("/v2/models/{name}/config", get(model_config))
            .route("/v2/models/{name}/stats", get(model_stats))
            .route("/v2/models/{name}/infer", post(infer))
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(Arc::clone(&model));
        let listener = tokio::net::TcpListener::bind(http)
            .await
            .expect("the HTTP port");
        let service = GrpcInferenceServiceServer::new(Echo(model))
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        let grpc_server = tonic::transport::Server::builder()
            .add_service(service)
            .serve(grpc);
        eprintln!("echo_floor: HTTP {http}, gRPC {grpc}");
        tokio::select! {
            r = axum::serve(listener, app) => r.expect("the HTTP server"),
            r = grpc_server => r.expect("the gRPC server"),
        }
    });
}

/// `--blocking`: HTTP/1.1 on a thread per connection. The headers are
/// scanned by hand rather than parsed by a crate: the floor does the least
/// that answers perf_analyzer (request line, `content-length` and
/// `inference-header-content-length`), and one `write` per response.
fn blocking_http(port: &str, model: Arc<Model>) -> ! {
    let listener = std::net::TcpListener::bind(format!("0.0.0.0:{port}")).expect("the HTTP port");
    eprintln!("echo_floor: HTTP 0.0.0.0:{port}, a blocking thread per connection");
    for stream in listener.incoming().flatten() {
        let model = Arc::clone(&model);
        std::thread::spawn(move || blocking_connection(stream, &model));
    }
    unreachable!("incoming() never ends")
}

fn blocking_connection(mut stream: std::net::TcpStream, model: &Model) {
    use std::io::{Read, Write};
    stream.set_nodelay(true).ok();
    let mut buf = vec![0u8; 1 << 16];
    let (mut have, mut out) = (0, Vec::new());
    fn fill(stream: &mut std::net::TcpStream, buf: &mut Vec<u8>, have: &mut usize) -> bool {
        if *have == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match stream.read(&mut buf[*have..]) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                *have += n;
                true
            }
        }
    }
    loop {
        let end = loop {
            if let Some(p) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            if !fill(&mut stream, &mut buf, &mut have) {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let field = |name: &str| {
            head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().parse::<usize>().ok())?
            })
        };
        let body_len = field("content-length").unwrap_or(0);
        while have < end + body_len {
            if !fill(&mut stream, &mut buf, &mut have) {
                return;
            }
        }
        let mut request_line = head.split_whitespace();
        let (method, path) = (
            request_line.next().unwrap_or(""),
            request_line.next().unwrap_or(""),
        );
        let body = &buf[end..end + body_len];
        out.clear();
        let json_len = field("inference-header-content-length").filter(|&n| n <= body_len);
        match (method, json_len) {
            ("POST", Some(json_len)) => {
                let request: Value =
                    serde_json::from_slice(&body[..json_len]).unwrap_or(Value::Null);
                let data = &body[json_len..];
                let header = serde_json::to_vec(&json!({
                    "model_name": request.get("model_name").cloned().unwrap_or(Value::Null),
                    "outputs": [{
                        "name": model.output,
                        "datatype": request["inputs"][0]["datatype"],
                        "shape": request["inputs"][0]["shape"],
                        "parameters": {"binary_data_size": data.len()},
                    }],
                }))
                .expect("JSON");
                model
                    .count
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let _ = write!(
                    out,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n\
                     inference-header-content-length: {}\r\ncontent-length: {}\r\n\r\n",
                    header.len(),
                    header.len() + data.len()
                );
                out.extend_from_slice(&header);
                out.extend_from_slice(data);
            }
            _ => {
                let count = model.count.load(std::sync::atomic::Ordering::Relaxed);
                let json = match path {
                    "/v2" => json!({"name": "echo_floor", "version": "0", "extensions": []}),
                    p if p.ends_with("/config") => model.config_json.clone(),
                    p if p.ends_with("/stats") => {
                        json!({"model_stats": [{"inference_count": count}]})
                    }
                    p if p.starts_with("/v2/models/") && !p.ends_with("/ready") => {
                        model.metadata.clone()
                    }
                    _ => Value::Null,
                };
                let text = if json.is_null() {
                    String::new()
                } else {
                    json.to_string()
                };
                let _ = write!(
                    out,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
                    text.len()
                );
            }
        }
        if stream.write_all(&out).is_err() {
            return;
        }
        buf.copy_within(end + body_len..have, 0);
        have -= end + body_len;
    }
}

async fn server_metadata() -> Response {
    axum::Json(json!({"name": "echo_floor", "version": "0", "extensions": []})).into_response()
}

async fn model_metadata(State(model): State<Arc<Model>>) -> Response {
    axum::Json(model.metadata.clone()).into_response()
}

async fn model_stats(State(model): State<Arc<Model>>) -> Response {
    let count = model.count.load(std::sync::atomic::Ordering::Relaxed);
    axum::Json(json!({"model_stats": [{"inference_count": count}]})).into_response()
}

async fn model_config(State(model): State<Arc<Model>>) -> Response {
    axum::Json(model.config_json.clone()).into_response()
}

/// The binary tensor extension only (what perf_analyzer sends): the JSON
/// header's first input's bytes go back as the output.
async fn infer(State(model): State<Arc<Model>>, headers: HeaderMap, body: Bytes) -> Response {
    let bad = |m: &str| (StatusCode::BAD_REQUEST, axum::Json(json!({"error": m}))).into_response();
    let Some(json_len) = headers
        .get("inference-header-content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n <= body.len())
    else {
        return bad("the floor takes binary tensors only");
    };
    let Ok(request) = serde_json::from_slice::<Value>(&body[..json_len]) else {
        return bad("a request header that is not JSON");
    };
    let input = &request["inputs"][0];
    let data = body.slice(json_len..);
    let header = json!({
        "model_name": request.get("model_name").cloned().unwrap_or(Value::Null),
        "outputs": [{
            "name": model.output,
            "datatype": input["datatype"],
            "shape": input["shape"],
            "parameters": {"binary_data_size": data.len()},
        }],
    });
    let header = Bytes::from(serde_json::to_vec(&header).expect("JSON"));
    model
        .count
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let header_len = header.len();
    let chunks = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(header), Ok(data)]);
    Response::builder()
        .header("content-type", "application/octet-stream")
        .header("inference-header-content-length", header_len)
        .header("content-length", header_len + body.len() - json_len)
        .body(Body::from_stream(chunks))
        .expect("a response")
}

struct Echo(Arc<Model>);

macro_rules! unimplemented_calls {
    ($($call:ident: $req:ty => $resp:ty;)*) => {$(
        // What #[tonic::async_trait] makes of an `async fn` (it does not
        // see into a macro's expansion).
        fn $call<'life0, 'async_trait>(
            &'life0 self,
            _: Request<$req>,
        ) -> Pin<Box<dyn std::future::Future<Output = Result<tonic::Response<$resp>, Status>> + Send + 'async_trait>>
        where
            'life0: 'async_trait,
            Self: 'async_trait,
        {
            Box::pin(async { Err(Status::unimplemented("not in the echo floor")) })
        }
    )*};
}

type Responses = Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send>>;

#[tonic::async_trait]
impl GrpcInferenceService for Echo {
    async fn server_live(
        &self,
        _: Request<ServerLiveRequest>,
    ) -> Result<tonic::Response<ServerLiveResponse>, Status> {
        Ok(tonic::Response::new(ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _: Request<ServerReadyRequest>,
    ) -> Result<tonic::Response<ServerReadyResponse>, Status> {
        Ok(tonic::Response::new(ServerReadyResponse { ready: true }))
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Result<tonic::Response<ServerMetadataResponse>, Status> {
        Ok(tonic::Response::new(ServerMetadataResponse {
            name: "echo_floor".to_string(),
            version: "0".to_string(),
            extensions: Vec::new(),
        }))
    }

    async fn model_ready(
        &self,
        _: Request<ModelReadyRequest>,
    ) -> Result<tonic::Response<ModelReadyResponse>, Status> {
        Ok(tonic::Response::new(ModelReadyResponse { ready: true }))
    }

    async fn model_metadata(
        &self,
        _: Request<ModelMetadataRequest>,
    ) -> Result<tonic::Response<ModelMetadataResponse>, Status> {
        let m = &self.0.metadata;
        let tensors = |key: &str| {
            m[key]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| model_metadata_response::TensorMetadata {
                    name: t["name"].as_str().unwrap_or_default().to_string(),
                    datatype: t["datatype"].as_str().unwrap_or_default().to_string(),
                    shape: t["shape"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_i64)
                        .collect(),
                })
                .collect()
        };
        Ok(tonic::Response::new(ModelMetadataResponse {
            name: m["name"].as_str().unwrap_or_default().to_string(),
            versions: vec!["1".to_string()],
            platform: m["platform"].as_str().unwrap_or_default().to_string(),
            inputs: tensors("inputs"),
            outputs: tensors("outputs"),
        }))
    }

    async fn model_config(
        &self,
        _: Request<ModelConfigRequest>,
    ) -> Result<tonic::Response<ModelConfigResponse>, Status> {
        Ok(tonic::Response::new(ModelConfigResponse {
            config: Some(self.0.config.clone()),
        }))
    }

    async fn model_infer(
        &self,
        request: Request<ModelInferRequest>,
    ) -> Result<tonic::Response<ModelInferResponse>, Status> {
        let mut request = request.into_inner();
        let Some(input) = request.inputs.first() else {
            return Err(Status::invalid_argument("no input"));
        };
        if request.raw_input_contents.is_empty() {
            return Err(Status::invalid_argument(
                "the floor takes raw contents only",
            ));
        }
        let output = model_infer_response::InferOutputTensor {
            name: self.0.output.clone(),
            datatype: input.datatype.clone(),
            shape: input.shape.clone(),
            ..Default::default()
        };
        self.0
            .count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(tonic::Response::new(ModelInferResponse {
            model_name: std::mem::take(&mut request.model_name),
            id: std::mem::take(&mut request.id),
            outputs: vec![output],
            raw_output_contents: vec![request.raw_input_contents.swap_remove(0)],
            ..Default::default()
        }))
    }

    type ModelStreamInferStream = Responses;

    async fn model_stream_infer(
        &self,
        _: Request<Streaming<ModelInferRequest>>,
    ) -> Result<tonic::Response<Responses>, Status> {
        Err(Status::unimplemented("not in the echo floor"))
    }

    unimplemented_calls! {
        model_statistics: ModelStatisticsRequest => ModelStatisticsResponse;
        repository_index: RepositoryIndexRequest => RepositoryIndexResponse;
        repository_model_load: RepositoryModelLoadRequest => RepositoryModelLoadResponse;
        repository_model_unload: RepositoryModelUnloadRequest => RepositoryModelUnloadResponse;
        system_shared_memory_status: SystemSharedMemoryStatusRequest => SystemSharedMemoryStatusResponse;
        system_shared_memory_register: SystemSharedMemoryRegisterRequest => SystemSharedMemoryRegisterResponse;
        system_shared_memory_unregister: SystemSharedMemoryUnregisterRequest => SystemSharedMemoryUnregisterResponse;
        cuda_shared_memory_status: CudaSharedMemoryStatusRequest => CudaSharedMemoryStatusResponse;
        cuda_shared_memory_register: CudaSharedMemoryRegisterRequest => CudaSharedMemoryRegisterResponse;
        cuda_shared_memory_unregister: CudaSharedMemoryUnregisterRequest => CudaSharedMemoryUnregisterResponse;
        trace_setting: TraceSettingRequest => TraceSettingResponse;
        log_settings: LogSettingsRequest => LogSettingsResponse;
    }
}
