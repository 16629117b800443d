//! The few TensorFlow protobuf messages trtis reads and writes, as prost
//! messages written from their field numbers (backends-2026-facts §A10):
//! a SavedModel's `saved_model.pb` and the `MetaGraphDef` the C API hands
//! back (the signatures), a `GraphDef`'s node names and ops, and the
//! `ConfigProto` of a session's threads. Fields trtis does not read are
//! left out; prost skips them when decoding.

use std::collections::BTreeMap;

/// `saved_model.pb`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SavedModel {
    #[prost(int64, tag = "1")]
    pub saved_model_schema_version: i64,
    #[prost(message, repeated, tag = "2")]
    pub meta_graphs: Vec<MetaGraphDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetaGraphDef {
    #[prost(message, optional, tag = "1")]
    pub meta_info_def: Option<MetaInfoDef>,
    #[prost(btree_map = "string, message", tag = "5")]
    pub signature_def: BTreeMap<String, SignatureDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetaInfoDef {
    #[prost(string, repeated, tag = "4")]
    pub tags: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SignatureDef {
    #[prost(btree_map = "string, message", tag = "1")]
    pub inputs: BTreeMap<String, TensorInfo>,
    #[prost(btree_map = "string, message", tag = "2")]
    pub outputs: BTreeMap<String, TensorInfo>,
    #[prost(string, tag = "3")]
    pub method_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorInfo {
    /// `<op>:<index>`; empty for the sparse and composite encodings.
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(int32, tag = "2")]
    pub dtype: i32,
    #[prost(message, optional, tag = "3")]
    pub tensor_shape: Option<TensorShape>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShape {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
    #[prost(bool, tag = "3")]
    pub unknown_rank: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Dim {
    #[prost(int64, tag = "1")]
    pub size: i64,
}

impl TensorInfo {
    /// The shape (-1 for unknown dimensions); None for an unknown rank.
    pub fn shape(&self) -> Option<Vec<i64>> {
        match &self.tensor_shape {
            Some(s) if !s.unknown_rank => Some(s.dim.iter().map(|d| d.size).collect()),
            _ => None,
        }
    }
}

/// `GraphDef`, its nodes' names and ops only.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphDef {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeDef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub op: String,
}

/// `ConfigProto`, the session settings the backend sets.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigProto {
    #[prost(btree_map = "string, int32", tag = "1")]
    pub device_count: BTreeMap<String, i32>,
    #[prost(int32, tag = "2")]
    pub intra_op_parallelism_threads: i32,
    #[prost(int32, tag = "5")]
    pub inter_op_parallelism_threads: i32,
    #[prost(bool, tag = "7")]
    pub allow_soft_placement: bool,
    #[prost(bool, tag = "9")]
    pub use_per_session_threads: bool,
    #[prost(message, optional, tag = "16")]
    pub experimental: Option<Experimental>,
}

/// `ConfigProto.Experimental`, the one field the backend sets.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Experimental {
    /// Worker threads sleep as soon as they find no work, instead of
    /// spinning a while first.
    #[prost(bool, tag = "9")]
    pub disable_thread_spinning: bool,
}

/// The signature a SavedModel serves: `wanted` when given (an error when
/// absent), else `serving_default`, else the first that is not an init or
/// train op (with the warning Triton logs).
pub fn pick_signature<'a>(
    meta: &'a MetaGraphDef,
    wanted: Option<&str>,
    model: &str,
) -> Result<(&'a str, &'a SignatureDef), String> {
    if let Some(w) = wanted {
        return meta
            .signature_def
            .get_key_value(w)
            .map(|(k, v)| (k.as_str(), v))
            .ok_or_else(|| format!("unable to load model '{model}', expected '{w}' signature"));
    }
    if let Some((k, v)) = meta.signature_def.get_key_value("serving_default") {
        return Ok((k.as_str(), v));
    }
    let (k, v) = meta
        .signature_def
        .iter()
        .find(|(k, _)| *k != "__saved_model_init_op" && *k != "__saved_model_train_op")
        .ok_or_else(|| {
            format!("unable to load model '{model}', expected 'serving_default' signature")
        })?;
    crate::core::logging::log(
        'W',
        &format!(
            "unable to find 'serving_default' signature for model '{model}', using signature '{k}'"
        ),
    );
    Ok((k.as_str(), v))
}

/// The MetaGraph of a SavedModel tagged `tag`.
pub fn meta_graph<'a>(
    saved: &'a SavedModel,
    tag: &str,
    model: &str,
) -> Result<&'a MetaGraphDef, String> {
    saved
        .meta_graphs
        .iter()
        .find(|m| {
            m.meta_info_def
                .as_ref()
                .is_some_and(|i| i.tags.iter().any(|t| t == tag))
        })
        .ok_or_else(|| format!("unable to load model '{model}', expected '{tag}' tag"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn config_proto_encodes_as_tensorflow_reads_it() {
        // The facts' example: intra=2, inter=1 is `10 02 28 01`; per-session
        // threads add `48 01`.
        let c = ConfigProto {
            intra_op_parallelism_threads: 2,
            inter_op_parallelism_threads: 1,
            ..Default::default()
        };
        assert_eq!(c.encode_to_vec(), [0x10, 0x02, 0x28, 0x01]);
        let c = ConfigProto {
            use_per_session_threads: true,
            ..c
        };
        assert_eq!(c.encode_to_vec(), [0x10, 0x02, 0x28, 0x01, 0x48, 0x01]);
        // experimental (16, a message) { disable_thread_spinning (9): true }
        let c = ConfigProto {
            experimental: Some(Experimental {
                disable_thread_spinning: true,
            }),
            ..Default::default()
        };
        assert_eq!(c.encode_to_vec(), [0x82, 0x01, 0x02, 0x48, 0x01]);
        // A negative count is a ten-byte varint.
        let c = ConfigProto {
            inter_op_parallelism_threads: -1,
            ..Default::default()
        };
        assert_eq!(c.encode_to_vec().len(), 11);
    }

    #[test]
    fn signatures_are_picked_as_triton_picks_them() {
        let sig = |k: &str| (k.to_string(), SignatureDef::default());
        let meta = MetaGraphDef {
            meta_info_def: None,
            signature_def: [
                sig("__saved_model_init_op"),
                sig("other"),
                sig("serving_default"),
            ]
            .into_iter()
            .collect(),
        };
        assert_eq!(
            pick_signature(&meta, None, "m").unwrap().0,
            "serving_default"
        );
        assert_eq!(
            pick_signature(&meta, Some("other"), "m").unwrap().0,
            "other"
        );
        assert_eq!(
            pick_signature(&meta, Some("nope"), "m").unwrap_err(),
            "unable to load model 'm', expected 'nope' signature"
        );
        let meta = MetaGraphDef {
            meta_info_def: None,
            signature_def: [sig("__saved_model_init_op"), sig("b"), sig("a")]
                .into_iter()
                .collect(),
        };
        assert_eq!(pick_signature(&meta, None, "m").unwrap().0, "a");
    }
}
