//! The settings a TensorFlow model's config asks for in `parameters`, read
//! as Triton's TensorFlow backend reads them (pure: no TensorFlow here, so
//! `validate-config` reports a bad value as `serve` does).
//!
//! | key | default | what it does |
//! | --- | --- | --- |
//! | `TF_NUM_INTRA_THREADS` | 0 (TensorFlow chooses) | `intra_op_parallelism_threads` of the session |
//! | `TF_NUM_INTER_THREADS` | 0 (TensorFlow chooses) | `inter_op_parallelism_threads`; negative runs ops on the caller's thread |
//! | `TF_USE_PER_SESSION_THREADS` | false | `use_per_session_threads`: the session's own pools instead of the process's |
//! | `TF_DISABLE_THREAD_SPINNING` | false | trtis's own (not in Triton): `experimental.disable_thread_spinning`, TensorFlow's threads sleep at once when out of work instead of spinning a while (they share the cores with the frontend and the client) |
//! | `TF_GRAPH_TAG` | `serve` | the SavedModel MetaGraph's tag |
//! | `TF_SIGNATURE_DEF` | `serving_default` | the SavedModel signature served |
//! | `TF_INIT_OPS_FILE` | none | a JSON file `{"init_ops": [...]}` (in the version directory, else the model's): each op runs once after the load |
//! | `MAX_SESSION_SHARE_COUNT` | 1 | must be 1 here: each instance has a session of its own |

use std::path::{Path, PathBuf};

use prost::Message;

use super::proto::ConfigProto;
use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};

/// What a TensorFlow instance loads and runs with.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TfSettings {
    pub intra_threads: i32,
    pub inter_threads: i32,
    pub per_session_threads: bool,
    pub disable_thread_spinning: bool,
    pub graph_tag: Option<String>,
    pub signature: Option<String>,
    pub init_ops_file: Option<String>,
}

/// The parameters the backend reads (`config::catalog`
/// lists the same; a test holds the two together).
pub const PARAMETERS: &[&str] = &[
    "TF_NUM_INTRA_THREADS",
    "TF_NUM_INTER_THREADS",
    "TF_USE_PER_SESSION_THREADS",
    "TF_DISABLE_THREAD_SPINNING",
    "TF_GRAPH_TAG",
    "TF_SIGNATURE_DEF",
    "TF_INIT_OPS_FILE",
    "MAX_SESSION_SHARE_COUNT",
];

impl TfSettings {
    pub fn from_config(config: &ModelConfig) -> Result<TfSettings> {
        let model = &config.name;
        let param = |key: &str| {
            config
                .parameters
                .get(key)
                .map(|p| p.string_value.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let int = |key: &str| -> Result<Option<i64>> {
            param(key)
                .map(|v| {
                    v.parse::<i64>().map_err(|_| {
                        Error::invalid_arg(format!("failed to convert '{v}' to integral number"))
                    })
                })
                .transpose()
        };
        let mut s = TfSettings::default();
        if let Some(n) = int("TF_NUM_INTRA_THREADS")? {
            if n < 0 {
                return Err(Error::invalid_arg(format!(
                    "parameter 'TF_NUM_INTRA_THREADS' must be non-negative number for TensorFlow model '{model}'"
                )));
            }
            s.intra_threads = n.min(i32::MAX as i64) as i32;
        }
        if let Some(n) = int("TF_NUM_INTER_THREADS")? {
            s.inter_threads = n.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
        }
        let boolean = |key: &str| -> Result<Option<bool>> {
            param(key)
                .map(|v| match v.to_ascii_lowercase().as_str() {
                    "true" | "on" | "1" => Ok(true),
                    "false" | "off" | "0" => Ok(false),
                    _ => Err(Error::invalid_arg(format!(
                        "failed to convert '{v}' to boolean"
                    ))),
                })
                .transpose()
        };
        if let Some(b) = boolean("TF_USE_PER_SESSION_THREADS")? {
            s.per_session_threads = b;
        }
        if let Some(b) = boolean("TF_DISABLE_THREAD_SPINNING")? {
            s.disable_thread_spinning = b;
        }
        if let Some(n) = int("MAX_SESSION_SHARE_COUNT")? {
            if n <= 0 {
                return Err(Error::invalid_arg(format!(
                    "parameter 'MAX_SESSION_SHARE_COUNT' must be positive number for TensorFlow model '{model}'"
                )));
            }
            if n > 1 {
                return Err(Error::invalid_arg(format!(
                    "parameter 'MAX_SESSION_SHARE_COUNT' of TensorFlow model '{model}' is {n}: not supported by trtis: each instance has a session of its own (use fewer instances to use less memory)"
                )));
            }
        }
        s.graph_tag = param("TF_GRAPH_TAG");
        s.signature = param("TF_SIGNATURE_DEF");
        s.init_ops_file = param("TF_INIT_OPS_FILE");
        Ok(s)
    }

    /// The session's `ConfigProto`, serialized: threads as asked, soft
    /// placement on (Triton's default), no GPU (this backend runs on the
    /// CPU).
    pub fn config_proto(&self) -> Vec<u8> {
        ConfigProto {
            device_count: [("GPU".to_string(), 0)].into_iter().collect(),
            intra_op_parallelism_threads: self.intra_threads,
            inter_op_parallelism_threads: self.inter_threads,
            allow_soft_placement: true,
            use_per_session_threads: self.per_session_threads,
            experimental: self
                .disable_thread_spinning
                .then_some(super::proto::Experimental {
                    disable_thread_spinning: true,
                }),
        }
        .encode_to_vec()
    }

    pub fn tag(&self) -> &str {
        self.graph_tag.as_deref().unwrap_or("serve")
    }

    /// The init ops file, looked up in the version directory, then the
    /// model's.
    pub fn init_ops_path(&self, version_dir: &Path, model_dir: &Path) -> Option<PathBuf> {
        let name = self.init_ops_file.as_ref()?;
        let in_version = version_dir.join(name);
        Some(if in_version.is_file() {
            in_version
        } else {
            model_dir.join(name)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(params: &[(&str, &str)]) -> Result<TfSettings> {
        let mut c = ModelConfig {
            name: "m".into(),
            ..Default::default()
        };
        for (k, v) in params {
            c.parameters.insert(
                k.to_string(),
                crate::core::config::pb::ModelParameter {
                    string_value: v.to_string(),
                },
            );
        }
        TfSettings::from_config(&c)
    }

    #[test]
    fn the_support_table_lists_what_is_read() {
        assert_eq!(
            crate::core::config::catalog::parameter_names("tensorflow"),
            PARAMETERS
        );
    }

    #[test]
    fn parameters_are_read_with_tritons_rules_and_messages() {
        let s = with(&[
            ("TF_NUM_INTRA_THREADS", "2"),
            ("TF_NUM_INTER_THREADS", "-1"),
            ("TF_USE_PER_SESSION_THREADS", "On"),
            ("TF_DISABLE_THREAD_SPINNING", "1"),
            ("TF_SIGNATURE_DEF", "triple"),
        ])
        .unwrap();
        assert_eq!(
            (
                s.intra_threads,
                s.inter_threads,
                s.per_session_threads,
                s.disable_thread_spinning
            ),
            (2, -1, true, true)
        );
        assert!(!with(&[]).unwrap().disable_thread_spinning);
        assert_eq!(s.signature.as_deref(), Some("triple"));
        assert_eq!(s.tag(), "serve");
        let err = |p: &[(&str, &str)]| with(p).unwrap_err().message;
        assert_eq!(
            err(&[("TF_NUM_INTRA_THREADS", "-2")]),
            "parameter 'TF_NUM_INTRA_THREADS' must be non-negative number for TensorFlow model 'm'"
        );
        assert_eq!(
            err(&[("TF_NUM_INTER_THREADS", "two")]),
            "failed to convert 'two' to integral number"
        );
        assert_eq!(
            err(&[("TF_USE_PER_SESSION_THREADS", "yes")]),
            "failed to convert 'yes' to boolean"
        );
        assert_eq!(
            err(&[("TF_DISABLE_THREAD_SPINNING", "maybe")]),
            "failed to convert 'maybe' to boolean"
        );
        assert!(err(&[("MAX_SESSION_SHARE_COUNT", "0")]).contains("must be positive number"));
        assert!(err(&[("MAX_SESSION_SHARE_COUNT", "2")]).contains("not supported by trtis"));
        assert!(with(&[("MAX_SESSION_SHARE_COUNT", "1")]).is_ok());
    }
}
