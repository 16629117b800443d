//! The KServe v2 / Triton JSON the HTTP client exchanges, as serde structs
//! that mirror the protocol: the answers it reads (errors, server and model
//! metadata, statistics, the repository index, inference responses), where
//! unknown fields are ignored and missing ones are empty, and the requests
//! it writes (inference, shared memory registration). `From` conversions
//! give the client's and the engine's types.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::metrics::stats::Snapshot;
use crate::core::types::{ModelMetadata, RequestedOutput, ShmRef, Tensor, TensorMetadata};

use super::{IndexEntry, ModelStats, ServerMetadata};

/// An error answer: `{"error": "..."}`.
#[derive(Debug, Deserialize)]
pub(super) struct ErrorJson {
    pub error: String,
}

/// `GET /v2`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ServerMetadataJson {
    pub name: String,
    pub version: String,
    pub extensions: Vec<String>,
}

impl From<ServerMetadataJson> for ServerMetadata {
    fn from(m: ServerMetadataJson) -> Self {
        ServerMetadata {
            name: m.name,
            version: m.version,
            extensions: m.extensions,
        }
    }
}

/// An input or output of the model metadata.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct TensorMetadataJson {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

impl From<TensorMetadataJson> for TensorMetadata {
    fn from(t: TensorMetadataJson) -> Self {
        TensorMetadata {
            name: t.name,
            datatype: t.datatype,
            shape: t.shape,
        }
    }
}

/// `GET /v2/models/<model>[/versions/<v>]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ModelMetadataJson {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMetadataJson>,
    pub outputs: Vec<TensorMetadataJson>,
}

impl From<ModelMetadataJson> for ModelMetadata {
    fn from(m: ModelMetadataJson) -> Self {
        ModelMetadata {
            name: m.name,
            versions: m.versions,
            platform: m.platform,
            inputs: m.inputs.into_iter().map(Into::into).collect(),
            outputs: m.outputs.into_iter().map(Into::into).collect(),
        }
    }
}

/// `GET /v2/models[/<model>]/stats`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct StatisticsJson {
    pub model_stats: Vec<ModelStatsJson>,
}

/// The statistics of one model version (`batch_stats` and the rest are
/// not read).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ModelStatsJson {
    pub name: String,
    pub version: String,
    pub last_inference: u64,
    pub inference_count: u64,
    pub execution_count: u64,
    pub inference_stats: InferenceStatsJson,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct InferenceStatsJson {
    pub success: DurationJson,
    pub fail: DurationJson,
    pub queue: DurationJson,
    pub compute_input: DurationJson,
    pub compute_infer: DurationJson,
    pub compute_output: DurationJson,
    pub cache_hit: DurationJson,
    pub cache_miss: DurationJson,
}

/// A count and its total time.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct DurationJson {
    pub count: u64,
    pub ns: u64,
}

impl From<DurationJson> for (u64, u64) {
    fn from(d: DurationJson) -> Self {
        (d.count, d.ns)
    }
}

impl From<ModelStatsJson> for ModelStats {
    fn from(m: ModelStatsJson) -> Self {
        let st = m.inference_stats;
        ModelStats {
            name: m.name,
            version: m.version,
            stats: Snapshot {
                last_inference: m.last_inference,
                inference_count: m.inference_count,
                execution_count: m.execution_count,
                success: st.success.into(),
                fail: st.fail.into(),
                queue: st.queue.into(),
                compute_input: st.compute_input.into(),
                compute_infer: st.compute_infer.into(),
                compute_output: st.compute_output.into(),
                cache_hit: st.cache_hit.into(),
                cache_miss: st.cache_miss.into(),
                batches: Vec::new(),
                request_batches: Vec::new(),
                memory_usage: Vec::new(),
            },
        }
    }
}

/// One entry of `POST /v2/repository/index` (an array of them).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct IndexEntryJson {
    pub name: String,
    pub version: String,
    pub state: String,
    pub reason: String,
}

impl From<IndexEntryJson> for IndexEntry {
    fn from(e: IndexEntryJson) -> Self {
        IndexEntry {
            name: e.name,
            version: e.version,
            state: e.state,
            reason: e.reason,
        }
    }
}

/// The JSON part of an inference response.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct InferResponseJson {
    pub model_name: String,
    pub model_version: String,
    pub id: String,
    pub outputs: Vec<OutputJson>,
}

/// One output: its data in the binary part (`binary_data_size`), as JSON
/// (`data`), or neither (written to shared memory).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct OutputJson {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub parameters: OutputParametersJson,
    pub data: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct OutputParametersJson {
    pub binary_data_size: Option<u64>,
}

/// The JSON part of an inference request: every tensor's data in the
/// binary part or in shared memory, every output asked for in binary.
/// `parameters` comes last, so that request parameters can be appended to
/// the encoded header (`Prepared::send_seq`).
#[derive(Debug, Serialize)]
pub(super) struct InferRequestJson<'a> {
    pub inputs: Vec<InputJson<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<RequestedOutputJson<'a>>,
    pub parameters: RequestParametersJson,
}

#[derive(Debug, Serialize)]
pub(super) struct InputJson<'a> {
    pub name: &'a str,
    pub datatype: &'static str,
    pub shape: &'a [i64],
    pub parameters: InputParametersJson<'a>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(super) enum InputParametersJson<'a> {
    Shm(ShmJson<'a>),
    Binary { binary_data_size: usize },
}

/// Where a tensor is in a registered shared memory region.
#[derive(Debug, Serialize)]
pub(super) struct ShmJson<'a> {
    pub shared_memory_region: &'a str,
    pub shared_memory_byte_size: usize,
    pub shared_memory_offset: usize,
}

impl<'a> From<&'a ShmRef> for ShmJson<'a> {
    fn from(r: &'a ShmRef) -> Self {
        ShmJson {
            shared_memory_region: &r.region,
            shared_memory_byte_size: r.byte_size,
            shared_memory_offset: r.offset,
        }
    }
}

#[derive(Debug, Serialize)]
pub(super) struct RequestedOutputJson<'a> {
    pub name: &'a str,
    pub parameters: RequestedOutputParametersJson<'a>,
}

/// Shared memory, or binary data; then the classification, if any.
#[derive(Debug, Serialize)]
pub(super) struct RequestedOutputParametersJson<'a> {
    #[serde(flatten)]
    pub shm: Option<ShmJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary_data: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classification: Option<usize>,
}

#[derive(Debug, Serialize)]
pub(super) struct RequestParametersJson {
    pub binary_data_output: bool,
}

impl<'a> InferRequestJson<'a> {
    /// The request for `inputs` (in shared memory where `input_shm[i]` is
    /// set, else in the binary part, in order) and `outputs`.
    pub fn new(
        inputs: &'a [Tensor],
        input_shm: &'a [Option<ShmRef>],
        outputs: &'a [RequestedOutput],
    ) -> Self {
        let inputs = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| InputJson {
                name: &t.name,
                datatype: t.datatype.name(),
                shape: &t.shape,
                parameters: match input_shm.get(i).and_then(Option::as_ref) {
                    Some(r) => InputParametersJson::Shm(r.into()),
                    None => InputParametersJson::Binary {
                        binary_data_size: t.data.len(),
                    },
                },
            })
            .collect();
        let outputs = outputs
            .iter()
            .map(|o| RequestedOutputJson {
                name: &o.name,
                parameters: RequestedOutputParametersJson {
                    shm: o.shm.as_ref().map(ShmJson::from),
                    binary_data: o.shm.is_none().then_some(true),
                    classification: o.classification,
                },
            })
            .collect();
        InferRequestJson {
            inputs,
            outputs,
            parameters: RequestParametersJson {
                binary_data_output: true,
            },
        }
    }
}

/// `POST /v2/systemsharedmemory/region/<name>/register`.
#[derive(Debug, Serialize)]
pub(super) struct RegisterShmJson<'a> {
    pub key: &'a str,
    pub offset: u64,
    pub byte_size: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::types::DataType;

    #[test]
    fn tritons_answers_decode_with_extra_fields_ignored() {
        let stats: StatisticsJson = serde_json::from_str(
            r#"{"model_stats":[{"name":"simple","version":"1","last_inference":17,
            "inference_count":6,"execution_count":3,
            "inference_stats":{"success":{"count":3,"ns":900},"fail":{"count":0,"ns":0},
            "queue":{"count":3,"ns":30},"compute_input":{"count":3,"ns":6},
            "compute_infer":{"count":3,"ns":60},"compute_output":{"count":3,"ns":9},
            "cache_hit":{"count":0,"ns":0}},
            "response_stats":{},"batch_stats":[{"batch_size":2}],"memory_usage":[]}]}"#,
        )
        .unwrap();
        let m: ModelStats = stats.model_stats.into_iter().next().unwrap().into();
        assert_eq!((m.name.as_str(), m.version.as_str()), ("simple", "1"));
        assert_eq!(m.stats.last_inference, 17);
        assert_eq!(m.stats.inference_count, 6);
        assert_eq!(m.stats.success, (3, 900));
        assert_eq!(m.stats.compute_output, (3, 9));

        // The index leaves out what a model that never loaded lacks.
        let index: Vec<IndexEntryJson> =
            serde_json::from_str(r#"[{"name":"a","version":"1","state":"READY"},{"name":"b"}]"#)
                .unwrap();
        let index: Vec<IndexEntry> = index.into_iter().map(Into::into).collect();
        assert_eq!(index[0].state, "READY");
        assert_eq!(
            (index[1].version.as_str(), index[1].state.as_str()),
            ("", "")
        );

        let meta: ModelMetadataJson = serde_json::from_str(
            r#"{"name":"m","versions":["1","2"],"platform":"onnxruntime_onnx",
            "inputs":[{"name":"IN","datatype":"FP32","shape":[-1,4]}],"outputs":[]}"#,
        )
        .unwrap();
        let meta: ModelMetadata = meta.into();
        assert_eq!(meta.versions, ["1", "2"]);
        assert_eq!(meta.inputs[0].shape, [-1, 4]);

        let server: ServerMetadata = serde_json::from_str::<ServerMetadataJson>(
            r#"{"name":"triton","version":"2.51.0","extensions":["classification"]}"#,
        )
        .unwrap()
        .into();
        assert_eq!(server.extensions, ["classification"]);
    }

    #[test]
    fn malformed_answers_say_what_is_wrong() {
        let e =
            serde_json::from_str::<ModelMetadataJson>(r#"{"name":"m","inputs":[{"shape":[1.5]}]}"#)
                .unwrap_err();
        assert!(
            e.to_string()
                .contains("invalid type: floating point `1.5`, expected i64"),
            "{e}"
        );
        let e = serde_json::from_str::<StatisticsJson>(r#"{"model_stats":{}}"#).unwrap_err();
        assert!(e.to_string().contains("expected a sequence"), "{e}");
    }

    #[test]
    fn requests_encode_in_the_protocols_field_order() {
        let t = |name: &str| Tensor {
            name: name.into(),
            datatype: DataType::Int32,
            shape: vec![1, 2],
            data: vec![0; 8],
        };
        let shm = ShmRef {
            region: "r".into(),
            byte_size: 8,
            offset: 16,
        };
        let inputs = [t("A"), t("B")];
        let input_shm = [None, Some(shm.clone())];
        let outputs = [
            RequestedOutput {
                name: "X".into(),
                classification: Some(3),
                shm: None,
            },
            RequestedOutput {
                name: "Y".into(),
                classification: None,
                shm: Some(shm),
            },
        ];
        let text =
            serde_json::to_string(&InferRequestJson::new(&inputs, &input_shm, &outputs)).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"inputs":[{"name":"A","datatype":"INT32","shape":[1,2],"parameters":{"binary_data_size":8}},"#,
                r#"{"name":"B","datatype":"INT32","shape":[1,2],"parameters":{"shared_memory_region":"r","shared_memory_byte_size":8,"shared_memory_offset":16}}],"#,
                r#""outputs":[{"name":"X","parameters":{"binary_data":true,"classification":3}},"#,
                r#"{"name":"Y","parameters":{"shared_memory_region":"r","shared_memory_byte_size":8,"shared_memory_offset":16}}],"#,
                r#""parameters":{"binary_data_output":true}}"#
            )
        );
        let text = serde_json::to_string(&InferRequestJson::new(&inputs[..1], &[], &[])).unwrap();
        assert_eq!(
            text,
            r#"{"inputs":[{"name":"A","datatype":"INT32","shape":[1,2],"parameters":{"binary_data_size":8}}],"parameters":{"binary_data_output":true}}"#
        );
    }
}
