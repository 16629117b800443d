//! An async client for Triton-protocol servers (trtis or Triton itself),
//! over HTTP/REST or gRPC behind one interface: health, metadata, config,
//! inference (binary tensors over HTTP, raw contents over gRPC), statistics
//! and repository control. The server's errors come back as typed
//! [`ClientError`]s. `trtis status` and `trtis infer` use only this.

mod error;
mod grpc;
mod http;
pub mod image;
pub mod inputs;
mod kserve;
mod options;
mod prepared;
mod v1;

pub use error::ClientError;
pub use options::{ClientTls, ConnectOptions};
pub use prepared::{Prepared, SeqFlags, Timing};

use crate::core::config::ModelConfig;
use crate::core::metrics::stats::Snapshot;
use crate::core::types::{InferResponse, ModelMetadata, RequestedOutput, Tensor};

/// Which protocol to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Grpc,
}

/// Which API: KServe v2 (Triton), or the legacy TRTIS v1 API (`/api/...`,
/// `nvidia.inferenceserver.GRPCService`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Api {
    #[default]
    V2,
    V1,
}

/// Server metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerMetadata {
    pub name: String,
    pub version: String,
    pub extensions: Vec<String>,
}

/// The GPUs a trtis server reports (`GET /v2/trtis/devices`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct Devices {
    pub gpus: Vec<GpuInfo>,
    /// Why the server has no GPU, when it has none.
    pub no_gpu_reason: Option<String>,
}

/// One GPU of [`Devices`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct GpuInfo {
    /// The CUDA ordinal configs name in `instance_group.gpus`.
    pub id: i32,
    pub name: String,
    pub uuid: String,
    /// Bytes.
    pub memory_total: u64,
    pub compute_capability: String,
    /// Whether the server places instances on it.
    pub used: bool,
}

/// One line of the repository index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub name: String,
    pub version: String,
    /// `READY`, `UNAVAILABLE`, ...; empty when the server reports none.
    pub state: String,
    pub reason: String,
}

/// Statistics of one model version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelStats {
    pub name: String,
    pub version: String,
    pub stats: Snapshot,
}

/// A connection to one server.
pub enum Client {
    Http(http::HttpClient),
    Grpc(grpc::GrpcClient),
    /// The v1 API, over either protocol.
    V1(v1::V1Client),
}

impl Client {
    /// Connects to `url` (`host:port`, optionally with `http://`).
    pub async fn connect(url: &str, protocol: Protocol) -> Result<Client, ClientError> {
        Self::connect_api(url, protocol, Api::V2).await
    }

    /// Connects to `url` speaking `api` over `protocol`.
    pub async fn connect_api(
        url: &str,
        protocol: Protocol,
        api: Api,
    ) -> Result<Client, ClientError> {
        Self::connect_with(url, protocol, api, &ConnectOptions::default()).await
    }

    /// Connects with headers on every request and, when `options.tls` is
    /// set, over TLS (`https://`).
    pub async fn connect_with(
        url: &str,
        protocol: Protocol,
        api: Api,
        options: &ConnectOptions,
    ) -> Result<Client, ClientError> {
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        if options.tls.is_some() && url.starts_with("http://") {
            return Err(ClientError::Unsupported(format!(
                "TLS is asked for but the URL {url} says http://: give https:// or host:port"
            )));
        }
        let base = if url.starts_with("http://") || url.starts_with("https://") {
            url.trim_end_matches('/').to_string()
        } else {
            format!("{scheme}://{}", url.trim_end_matches('/'))
        };
        Ok(match (api, protocol) {
            (Api::V1, p) => {
                Client::V1(v1::V1Client::connect(base, p == Protocol::Grpc, options).await?)
            }
            (Api::V2, Protocol::Http) => Client::Http(http::HttpClient::new(base, options)?),
            (Api::V2, Protocol::Grpc) => {
                Client::Grpc(grpc::GrpcClient::connect(base, options).await?)
            }
        })
    }

    pub async fn live(&mut self) -> Result<bool, ClientError> {
        match self {
            Client::Http(c) => c.live().await,
            Client::Grpc(c) => c.live().await,
            Client::V1(c) => c.live().await,
        }
    }

    pub async fn ready(&mut self) -> Result<bool, ClientError> {
        match self {
            Client::Http(c) => c.ready().await,
            Client::Grpc(c) => c.ready().await,
            Client::V1(c) => c.ready().await,
        }
    }

    pub async fn model_ready(&mut self, model: &str, version: &str) -> Result<bool, ClientError> {
        match self {
            Client::Http(c) => c.model_ready(model, version).await,
            Client::Grpc(c) => c.model_ready(model, version).await,
            Client::V1(c) => Ok(!c.model_metadata(model, version).await?.versions.is_empty()),
        }
    }

    pub async fn server_metadata(&mut self) -> Result<ServerMetadata, ClientError> {
        match self {
            Client::Http(c) => c.server_metadata().await,
            Client::Grpc(c) => c.server_metadata().await,
            Client::V1(c) => c.server_metadata().await,
        }
    }

    /// The server's GPUs: trtis's own endpoint, over HTTP only (Triton
    /// has none; the KServe gRPC service no method for it).
    pub async fn devices(&mut self) -> Result<Devices, ClientError> {
        match self {
            Client::Http(c) => c.devices().await,
            _ => Err(ClientError::Unsupported(
                "the server's GPUs are reported over HTTP only (GET /v2/trtis/devices)".into(),
            )),
        }
    }

    pub async fn model_metadata(
        &mut self,
        model: &str,
        version: &str,
    ) -> Result<ModelMetadata, ClientError> {
        match self {
            Client::Http(c) => c.model_metadata(model, version).await,
            Client::Grpc(c) => c.model_metadata(model, version).await,
            Client::V1(c) => c.model_metadata(model, version).await,
        }
    }

    pub async fn model_config(
        &mut self,
        model: &str,
        version: &str,
    ) -> Result<ModelConfig, ClientError> {
        match self {
            Client::Http(c) => c.model_config(model, version).await,
            Client::Grpc(c) => c.model_config(model, version).await,
            Client::V1(c) => c.model_config(model, version).await,
        }
    }

    /// Statistics of one model (every version), or of every model when
    /// `model` is empty.
    pub async fn statistics(&mut self, model: &str) -> Result<Vec<ModelStats>, ClientError> {
        match self {
            Client::Http(c) => c.statistics(model).await,
            Client::Grpc(c) => c.statistics(model).await,
            Client::V1(c) => c.statistics(model).await,
        }
    }

    pub async fn index(&mut self) -> Result<Vec<IndexEntry>, ClientError> {
        match self {
            Client::Http(c) => c.index().await,
            Client::Grpc(c) => c.index().await,
            Client::V1(c) => c.index().await,
        }
    }

    pub async fn load(&mut self, model: &str) -> Result<(), ClientError> {
        match self {
            Client::Http(c) => c.load(model).await,
            Client::Grpc(c) => c.load(model).await,
            Client::V1(c) => c.load(model).await,
        }
    }

    pub async fn unload(&mut self, model: &str) -> Result<(), ClientError> {
        match self {
            Client::Http(c) => c.unload(model).await,
            Client::Grpc(c) => c.unload(model).await,
            Client::V1(c) => c.unload(model).await,
        }
    }

    /// Registers a system shared memory region on the server.
    pub async fn register_system_shared_memory(
        &mut self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<(), ClientError> {
        match self {
            Client::Http(c) => c.register_shm(name, key, offset, byte_size).await,
            Client::Grpc(c) => c.register_shm(name, key, offset, byte_size).await,
            Client::V1(c) => c.register_shm(name, key, offset, byte_size).await,
        }
    }

    /// Unregisters one region, or every region when `name` is empty.
    pub async fn unregister_system_shared_memory(&mut self, name: &str) -> Result<(), ClientError> {
        match self {
            Client::Http(c) => c.unregister_shm(name).await,
            Client::Grpc(c) => c.unregister_shm(name).await,
            Client::V1(c) => c.unregister_shm(name).await,
        }
    }

    /// Runs several requests on one gRPC stream (in order, concurrently on
    /// the server); each answer is a response or the server's error for that
    /// request. HTTP has no stream: the requests run one after another.
    pub async fn stream_infer(
        &mut self,
        model: &str,
        requests: Vec<Vec<Tensor>>,
    ) -> Result<Vec<Result<InferResponse, ClientError>>, ClientError> {
        self.stream_infer_with_outputs(model, "", requests, Vec::new())
            .await
    }

    /// As `stream_infer`, asking every request for these outputs.
    pub async fn stream_infer_with_outputs(
        &mut self,
        model: &str,
        version: &str,
        requests: Vec<Vec<Tensor>>,
        outputs: Vec<RequestedOutput>,
    ) -> Result<Vec<Result<InferResponse, ClientError>>, ClientError> {
        match self {
            Client::Http(c) => {
                let mut out = Vec::with_capacity(requests.len());
                for inputs in requests {
                    out.push(c.infer(model, version, inputs, outputs.clone()).await);
                }
                Ok(out)
            }
            Client::Grpc(c) => c.stream_infer(model, version, requests, outputs).await,
            Client::V1(c) => {
                let mut out = Vec::with_capacity(requests.len());
                for inputs in requests {
                    out.push(c.infer(model, version, inputs, outputs.clone(), None).await);
                }
                Ok(out)
            }
        }
    }

    /// Runs one inference as part of a sequence (its correlation id and
    /// start/end flags).
    pub async fn infer_in_sequence(
        &mut self,
        model: &str,
        version: &str,
        inputs: Vec<Tensor>,
        outputs: Vec<RequestedOutput>,
        sequence: SeqFlags,
    ) -> Result<InferResponse, ClientError> {
        match self {
            Client::V1(c) => {
                c.infer(model, version, inputs, outputs, Some(sequence))
                    .await
            }
            _ => {
                let request = self.prepare(model, version, inputs, outputs)?;
                request.infer(Some(sequence)).await.map(|(_, r)| r)
            }
        }
    }

    /// Runs one inference; tensors travel as binary (HTTP) or raw (gRPC).
    /// `outputs` empty means every output.
    pub async fn infer(
        &mut self,
        model: &str,
        version: &str,
        inputs: Vec<Tensor>,
        outputs: Vec<RequestedOutput>,
    ) -> Result<InferResponse, ClientError> {
        match self {
            Client::Http(c) => c.infer(model, version, inputs, outputs).await,
            Client::Grpc(c) => c.infer(model, version, inputs, outputs).await,
            Client::V1(c) => c.infer(model, version, inputs, outputs, None).await,
        }
    }
}

/// `/versions/<v>` when a version is given.
fn version_path(version: &str) -> String {
    if version.is_empty() {
        String::new()
    } else {
        format!("/versions/{version}")
    }
}
