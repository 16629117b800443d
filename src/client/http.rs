//! The HTTP/REST side of the client (reqwest), with the binary tensor data
//! extension for inference.

use prost_reflect::DynamicMessage;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::{json, Value};

use crate::core::config::pbtxt::model_config_descriptor;
use crate::core::config::ModelConfig;
use crate::core::types::{DataType, InferResponse, ModelMetadata, RequestedOutput, ShmRef, Tensor};
use crate::server::protocol::kserve_json::{elements_to_bytes, flat_elements};

use super::kserve::{
    ErrorJson, IndexEntryJson, InferRequestJson, InferResponseJson, ModelMetadataJson,
    RegisterShmJson, ServerMetadataJson, StatisticsJson,
};
use super::{version_path, ClientError, IndexEntry, ModelStats, ServerMetadata};

pub(super) const HEADER_LENGTH: &str = "inference-header-content-length";

pub struct HttpClient {
    base: String,
    http: reqwest::Client,
}

/// An error answer: the `{"error": ...}` message, or the body as text.
pub(super) fn http_error(status: u16, body: &[u8]) -> ClientError {
    let message = match serde_json::from_slice::<ErrorJson>(body) {
        Ok(e) => e.error,
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    ClientError::Http { status, message }
}

fn decode(what: &str) -> impl Fn(serde_json::Error) -> ClientError + '_ {
    move |e| ClientError::Decode(format!("{what}: {e}"))
}

impl HttpClient {
    pub fn new(base: String, options: &super::ConnectOptions) -> Result<Self, ClientError> {
        let http = super::options::http_client(options)?;
        Ok(HttpClient { base, http })
    }

    /// Sends a request; a non-2xx answer becomes `ClientError::Http`.
    pub(super) async fn send(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ClientError> {
        let resp = req.send().await?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let body = resp.bytes().await.unwrap_or_default();
        Err(http_error(status.as_u16(), &body))
    }

    /// GETs `path` and decodes the JSON answer as `T`.
    async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let resp = self
            .send(self.http.get(format!("{}{path}", self.base)))
            .await?;
        let body = resp.bytes().await?;
        serde_json::from_slice(&body).map_err(decode(path))
    }

    /// POSTs `body` to `path` and decodes the JSON answer as `T` (an
    /// empty answer as `T`'s default).
    async fn post_json<T: DeserializeOwned + Default>(
        &self,
        path: &str,
        body: &impl serde::Serialize,
    ) -> Result<T, ClientError> {
        let resp = self
            .send(self.http.post(format!("{}{path}", self.base)).json(body))
            .await?;
        let body = resp.bytes().await?;
        if body.is_empty() {
            return Ok(T::default());
        }
        serde_json::from_slice(&body).map_err(decode(path))
    }

    async fn probe(&self, path: &str) -> Result<bool, ClientError> {
        let resp = self.http.get(format!("{}{path}", self.base)).send().await?;
        Ok(resp.status().is_success())
    }

    pub async fn live(&self) -> Result<bool, ClientError> {
        self.probe("/v2/health/live").await
    }

    pub async fn ready(&self) -> Result<bool, ClientError> {
        self.probe("/v2/health/ready").await
    }

    pub async fn model_ready(&self, model: &str, version: &str) -> Result<bool, ClientError> {
        self.probe(&format!(
            "/v2/models/{model}{}/ready",
            version_path(version)
        ))
        .await
    }

    pub async fn server_metadata(&self) -> Result<ServerMetadata, ClientError> {
        let m: ServerMetadataJson = self.get_json("/v2").await?;
        Ok(m.into())
    }

    pub async fn devices(&self) -> Result<super::Devices, ClientError> {
        self.get_json("/v2/trtis/devices").await
    }

    pub async fn model_metadata(
        &self,
        model: &str,
        version: &str,
    ) -> Result<ModelMetadata, ClientError> {
        let m: ModelMetadataJson = self
            .get_json(&format!("/v2/models/{model}{}", version_path(version)))
            .await?;
        Ok(m.into())
    }

    pub async fn model_config(
        &self,
        model: &str,
        version: &str,
    ) -> Result<ModelConfig, ClientError> {
        let v: Value = self
            .get_json(&format!(
                "/v2/models/{model}{}/config",
                version_path(version)
            ))
            .await?;
        let message = DynamicMessage::deserialize(model_config_descriptor(), v)
            .map_err(decode("model config"))?;
        message
            .transcode_to()
            .map_err(|e| ClientError::Decode(format!("model config: {e}")))
    }

    pub async fn statistics(&self, model: &str) -> Result<Vec<ModelStats>, ClientError> {
        let path = if model.is_empty() {
            "/v2/models/stats".to_string()
        } else {
            format!("/v2/models/{model}/stats")
        };
        let stats: StatisticsJson = self.get_json(&path).await?;
        Ok(stats.model_stats.into_iter().map(Into::into).collect())
    }

    pub async fn index(&self) -> Result<Vec<IndexEntry>, ClientError> {
        let index: Vec<IndexEntryJson> = self.post_json("/v2/repository/index", &json!({})).await?;
        Ok(index.into_iter().map(Into::into).collect())
    }

    pub async fn load(&self, model: &str) -> Result<(), ClientError> {
        self.post_json::<IgnoredAny>(&format!("/v2/repository/models/{model}/load"), &json!({}))
            .await
            .map(|_| ())
    }

    pub async fn unload(&self, model: &str) -> Result<(), ClientError> {
        self.post_json::<IgnoredAny>(&format!("/v2/repository/models/{model}/unload"), &json!({}))
            .await
            .map(|_| ())
    }

    pub async fn register_shm(
        &self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<(), ClientError> {
        let body = RegisterShmJson {
            key,
            offset,
            byte_size,
        };
        self.post_json::<IgnoredAny>(
            &format!("/v2/systemsharedmemory/region/{name}/register"),
            &body,
        )
        .await
        .map(|_| ())
    }

    pub async fn unregister_shm(&self, name: &str) -> Result<(), ClientError> {
        let path = if name.is_empty() {
            "/v2/systemsharedmemory/unregister".to_string()
        } else {
            format!("/v2/systemsharedmemory/region/{name}/unregister")
        };
        self.post_json::<IgnoredAny>(&path, &json!({}))
            .await
            .map(|_| ())
    }

    pub async fn infer(
        &self,
        model: &str,
        version: &str,
        inputs: Vec<Tensor>,
        outputs: Vec<RequestedOutput>,
    ) -> Result<InferResponse, ClientError> {
        let (body, json_len) = infer_body(&inputs, &outputs)?;
        let resp = self
            .send(
                self.http
                    .post(self.infer_url(model, version))
                    .header(HEADER_LENGTH, json_len.to_string())
                    .header("content-type", "application/octet-stream")
                    .body(body),
            )
            .await?;
        let header_len = header_length(&resp);
        let body = resp.bytes().await?;
        infer_response(header_len, &body)
    }

    pub fn infer_url(&self, model: &str, version: &str) -> String {
        format!(
            "{}/v2/models/{model}{}/infer",
            self.base,
            version_path(version)
        )
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }
}

/// The `Inference-Header-Content-Length` of a response.
pub fn header_length(resp: &reqwest::Response) -> Option<usize> {
    resp.headers()
        .get(HEADER_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
}

/// An inference request body with binary tensor data, and the length of
/// its JSON part.
pub fn infer_body(
    inputs: &[Tensor],
    outputs: &[RequestedOutput],
) -> Result<(Vec<u8>, usize), ClientError> {
    infer_body_shm(inputs, &[], outputs)
}

/// As `infer_body`, with inputs (where `input_shm[i]` is set) and outputs
/// (where `shm` is set) in system shared memory.
pub(crate) fn infer_body_shm(
    inputs: &[Tensor],
    input_shm: &[Option<ShmRef>],
    outputs: &[RequestedOutput],
) -> Result<(Vec<u8>, usize), ClientError> {
    let header = InferRequestJson::new(inputs, input_shm, outputs);
    let mut body = serde_json::to_vec(&header).map_err(decode("request"))?;
    let json_len = body.len();
    for (i, t) in inputs.iter().enumerate() {
        if input_shm.get(i).and_then(Option::as_ref).is_none() {
            body.extend_from_slice(&t.data);
        }
    }
    Ok((body, json_len))
}

/// An inference response body (JSON, then binary output data).
pub(crate) fn infer_response(
    header_len: Option<usize>,
    body: &[u8],
) -> Result<InferResponse, ClientError> {
    let json_len = header_len.unwrap_or(body.len()).min(body.len());
    let (head, mut binary) = body.split_at(json_len);
    let v: InferResponseJson = serde_json::from_slice(head).map_err(decode("response"))?;
    let mut tensors = Vec::with_capacity(v.outputs.len());
    for o in v.outputs {
        let datatype = DataType::from_name(&o.datatype)
            .ok_or_else(|| ClientError::Decode(format!("unknown datatype '{}'", o.datatype)))?;
        let data = match (o.parameters.binary_data_size, o.data) {
            (Some(n), _) => {
                let n = n as usize;
                if n > binary.len() {
                    return Err(ClientError::Decode(
                        "binary output data is shorter than announced".into(),
                    ));
                }
                let (mine, rest) = binary.split_at(n);
                binary = rest;
                mine.to_vec()
            }
            // An output written to shared memory has no data here.
            (None, None) => Vec::new(),
            (None, Some(data)) => json_output_data(datatype, &data)?,
        };
        tensors.push(Tensor {
            name: o.name,
            datatype,
            shape: o.shape,
            data,
        });
    }
    Ok(InferResponse {
        model_name: v.model_name,
        model_version: v.model_version,
        id: v.id,
        outputs: tensors,
        // The command line shows no response parameters.
        parameters: Default::default(),
        last: true,
    })
}

/// A JSON output's `data` as raw bytes (for servers that answer JSON).
fn json_output_data(dt: DataType, data: &Value) -> Result<Vec<u8>, ClientError> {
    elements_to_bytes(dt, &flat_elements(data))
        .map_err(|v| ClientError::Decode(format!("output value {v} is not {}", dt.name())))
}
