//! The HTTP/REST side of the client (reqwest), with the binary tensor data
//! extension for inference.

use prost_reflect::DynamicMessage;
use serde_json::{json, Value};

use crate::core::config::pbtxt::model_config_descriptor;
use crate::core::config::ModelConfig;
use crate::core::protocol::kserve_json;
use crate::core::stats::Snapshot;
use crate::core::types::{
    DataType, InferResponse, ModelMetadata, RequestedOutput, ShmRef, Tensor, TensorMetadata,
};

use super::{version_path, ClientError, IndexEntry, ModelStats, ServerMetadata};

pub(super) const HEADER_LENGTH: &str = "inference-header-content-length";

pub struct HttpClient {
    base: String,
    http: reqwest::Client,
}

/// An error answer: the `{"error": ...}` message, or the body as text.
pub(super) fn http_error(status: u16, body: &[u8]) -> ClientError {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    ClientError::Http { status, message }
}

fn decode(what: &str) -> impl Fn(serde_json::Error) -> ClientError + '_ {
    move |e| ClientError::Decode(format!("{what}: {e}"))
}

impl HttpClient {
    pub fn new(base: String) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
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

    async fn get_json(&self, path: &str) -> Result<Value, ClientError> {
        let resp = self
            .send(self.http.get(format!("{}{path}", self.base)))
            .await?;
        let body = resp.bytes().await?;
        serde_json::from_slice(&body).map_err(decode(path))
    }

    async fn post_json(&self, path: &str, body: Value) -> Result<Value, ClientError> {
        let resp = self
            .send(self.http.post(format!("{}{path}", self.base)).json(&body))
            .await?;
        let body = resp.bytes().await?;
        if body.is_empty() {
            return Ok(Value::Null);
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
        let v = self.get_json("/v2").await?;
        Ok(ServerMetadata {
            name: str_of(&v, "name"),
            version: str_of(&v, "version"),
            extensions: v["extensions"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    pub async fn model_metadata(
        &self,
        model: &str,
        version: &str,
    ) -> Result<ModelMetadata, ClientError> {
        let v = self
            .get_json(&format!("/v2/models/{model}{}", version_path(version)))
            .await?;
        let tensors = |key: &str| -> Vec<TensorMetadata> {
            v[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|t| TensorMetadata {
                            name: str_of(t, "name"),
                            datatype: str_of(t, "datatype"),
                            shape: t["shape"]
                                .as_array()
                                .map(|s| s.iter().filter_map(Value::as_i64).collect())
                                .unwrap_or_default(),
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        Ok(ModelMetadata {
            name: str_of(&v, "name"),
            versions: v["versions"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            platform: str_of(&v, "platform"),
            inputs: tensors("inputs"),
            outputs: tensors("outputs"),
        })
    }

    pub async fn model_config(
        &self,
        model: &str,
        version: &str,
    ) -> Result<ModelConfig, ClientError> {
        let v = self
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
        let v = self.get_json(&path).await?;
        let pair = |d: &Value| {
            (
                d["count"].as_u64().unwrap_or(0),
                d["ns"].as_u64().unwrap_or(0),
            )
        };
        Ok(v["model_stats"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|m| {
                        let st = &m["inference_stats"];
                        ModelStats {
                            name: str_of(m, "name"),
                            version: str_of(m, "version"),
                            stats: Snapshot {
                                last_inference: m["last_inference"].as_u64().unwrap_or(0),
                                inference_count: m["inference_count"].as_u64().unwrap_or(0),
                                execution_count: m["execution_count"].as_u64().unwrap_or(0),
                                success: pair(&st["success"]),
                                fail: pair(&st["fail"]),
                                queue: pair(&st["queue"]),
                                compute_input: pair(&st["compute_input"]),
                                compute_infer: pair(&st["compute_infer"]),
                                compute_output: pair(&st["compute_output"]),
                                batches: Vec::new(),
                            },
                        }
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    pub async fn index(&self) -> Result<Vec<IndexEntry>, ClientError> {
        let v = self.post_json("/v2/repository/index", json!({})).await?;
        Ok(v.as_array()
            .map(|a| {
                a.iter()
                    .map(|e| IndexEntry {
                        name: str_of(e, "name"),
                        version: str_of(e, "version"),
                        state: str_of(e, "state"),
                        reason: str_of(e, "reason"),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    pub async fn load(&self, model: &str) -> Result<(), ClientError> {
        self.post_json(&format!("/v2/repository/models/{model}/load"), json!({}))
            .await
            .map(|_| ())
    }

    pub async fn unload(&self, model: &str) -> Result<(), ClientError> {
        self.post_json(&format!("/v2/repository/models/{model}/unload"), json!({}))
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
        let body = json!({ "key": key, "offset": offset, "byte_size": byte_size });
        self.post_json(
            &format!("/v2/systemsharedmemory/region/{name}/register"),
            body,
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
        self.post_json(&path, json!({})).await.map(|_| ())
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

fn shm_json(r: &ShmRef) -> Value {
    json!({
        "shared_memory_region": r.region,
        "shared_memory_byte_size": r.byte_size,
        "shared_memory_offset": r.offset,
    })
}

/// As `infer_body`, with inputs (where `input_shm[i]` is set) and outputs
/// (where `shm` is set) in system shared memory.
pub fn infer_body_shm(
    inputs: &[Tensor],
    input_shm: &[Option<ShmRef>],
    outputs: &[RequestedOutput],
) -> Result<(Vec<u8>, usize), ClientError> {
    let mut tail = Vec::new();
    let inputs_json: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let parameters = match input_shm.get(i).and_then(Option::as_ref) {
                Some(r) => shm_json(r),
                None => {
                    tail.extend_from_slice(&t.data);
                    json!({ "binary_data_size": t.data.len() })
                }
            };
            json!({
                "name": t.name,
                "datatype": t.datatype.name(),
                "shape": t.shape,
                "parameters": parameters,
            })
        })
        .collect();
    let outputs_json: Vec<Value> = outputs
        .iter()
        .map(|o| {
            let mut params = match &o.shm {
                Some(r) => shm_json(r),
                None => json!({ "binary_data": true }),
            };
            if let Some(n) = o.classification {
                params["classification"] = json!(n);
            }
            json!({ "name": o.name, "parameters": params })
        })
        .collect();
    let mut header = json!({ "inputs": inputs_json });
    if !outputs_json.is_empty() {
        header["outputs"] = Value::Array(outputs_json);
    }
    // Last, so request parameters (a sequence's) can be appended to the
    // encoded header without parsing it (`Prepared::send_seq`).
    header["parameters"] = json!({ "binary_data_output": true });
    let mut body = serde_json::to_vec(&header).map_err(decode("request"))?;
    let json_len = body.len();
    body.extend_from_slice(&tail);
    Ok((body, json_len))
}

/// An inference response body (JSON, then binary output data).
pub fn infer_response(
    header_len: Option<usize>,
    body: &[u8],
) -> Result<InferResponse, ClientError> {
    let json_len = header_len.unwrap_or(body.len()).min(body.len());
    let (head, mut binary) = body.split_at(json_len);
    let v: Value = serde_json::from_slice(head).map_err(decode("response"))?;
    let mut tensors = Vec::new();
    for o in v["outputs"].as_array().cloned().unwrap_or_default() {
        let datatype_name = str_of(&o, "datatype");
        let datatype = DataType::from_name(&datatype_name)
            .ok_or_else(|| ClientError::Decode(format!("unknown datatype '{datatype_name}'")))?;
        let shape: Vec<i64> = o["shape"]
            .as_array()
            .map(|s| s.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default();
        let data = match o["parameters"]["binary_data_size"].as_u64() {
            Some(n) => {
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
            None if o["data"].is_null() => Vec::new(),
            None => json_output_data(datatype, &o["data"])?,
        };
        tensors.push(Tensor {
            name: str_of(&o, "name"),
            datatype,
            shape,
            data,
        });
    }
    Ok(InferResponse {
        model_name: str_of(&v, "model_name"),
        model_version: str_of(&v, "model_version"),
        id: str_of(&v, "id"),
        outputs: tensors,
    })
}

fn str_of(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// A JSON output's `data` as raw bytes (for servers that answer JSON).
fn json_output_data(dt: DataType, data: &Value) -> Result<Vec<u8>, ClientError> {
    kserve_json::elements_to_bytes(dt, &kserve_json::flat_elements(data))
        .map_err(|v| ClientError::Decode(format!("output value {v} is not {}", dt.name())))
}
