//! `ModelConfig` as JSON the way Triton emits it: proto field names, enums
//! as names, every field printed (defaults included), and 64-bit integers as
//! JSON numbers rather than protobuf-JSON's strings.

use prost::Message;
use prost_reflect::{DeserializeOptions, DynamicMessage, SerializeOptions};

use super::{pbtxt::model_config_descriptor, ModelConfig};
use crate::core::error::{Error, Result};

/// The config as a JSON value.
pub fn to_json(config: &ModelConfig) -> Result<serde_json::Value> {
    let message =
        DynamicMessage::decode(model_config_descriptor(), config.encode_to_vec().as_slice())
            .map_err(|e| Error::internal(format!("model config encoding: {e}")))?;
    let options = SerializeOptions::new()
        .use_proto_field_name(true)
        .stringify_64_bit_integers(false)
        .skip_default_fields(false);
    message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| Error::internal(format!("model config to JSON: {e}")))
}

/// A config from JSON in the same shape (what a Python model's
/// `auto_complete_config` returns); unknown fields are an error.
pub fn from_json(json: &serde_json::Value) -> Result<ModelConfig> {
    let message = DynamicMessage::deserialize_with_options(
        model_config_descriptor(),
        json,
        &DeserializeOptions::new(),
    )
    .map_err(|e| Error::invalid_arg(format!("the model configuration JSON is not valid: {e}")))?;
    ModelConfig::decode(message.encode_to_vec().as_slice())
        .map_err(|e| Error::internal(format!("model config decoding: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::parse_config;

    #[test]
    fn int64_fields_are_numbers_and_defaults_are_printed() {
        let parsed = parse_config(
            br#"name: "m" max_batch_size: 8 input [ { name: "I" data_type: TYPE_FP32 dims: [ -1, 16 ] } ]
                dynamic_batching { max_queue_delay_microseconds: 100 }"#,
        )
        .unwrap();
        let json = to_json(&parsed.config).unwrap();
        assert_eq!(json["input"][0]["dims"], serde_json::json!([-1, 16]));
        assert_eq!(json["input"][0]["data_type"], "TYPE_FP32");
        assert_eq!(json["input"][0]["format"], "FORMAT_NONE");
        assert_eq!(
            json["dynamic_batching"]["max_queue_delay_microseconds"],
            100
        );
        assert_eq!(json["max_batch_size"], 8);
        assert_eq!(json["platform"], "");
    }

    #[test]
    fn json_round_trips_to_the_same_config() {
        let parsed = parse_config(
            br#"name: "m" backend: "python" max_batch_size: 4
                input [ { name: "I" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]
                output [ { name: "O" data_type: TYPE_STRING dims: [ -1 ] } ]
                dynamic_batching { max_queue_delay_microseconds: 100 }
                model_transaction_policy { decoupled: true }
                parameters { key: "K" value { string_value: "V" } }"#,
        )
        .unwrap();
        let json = to_json(&parsed.config).unwrap();
        assert_eq!(from_json(&json).unwrap(), parsed.config);
        let e = from_json(&serde_json::json!({"name": "m", "no_such_field": 1})).unwrap_err();
        assert!(e.message.contains("no_such_field"), "{e:?}");
    }
}
