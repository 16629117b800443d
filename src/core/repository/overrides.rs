//! The model repository extension's load parameters: `config`, a model
//! configuration in JSON used instead of the model's `config.pbtxt`, and
//! `file:<path>` contents that stand in for the model's directory. The
//! files are written to a private temporary directory that lives as long
//! as the model stays loaded from it.

use std::path::{Component, Path};

use prost_reflect::DynamicMessage;

use crate::core::config::pbtxt::model_config_descriptor;
use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};

/// What a load request gives instead of the repository's files.
#[derive(Debug, Clone, Default)]
pub struct LoadOverride {
    /// The `config` parameter: a `ModelConfig` in protobuf's JSON mapping.
    pub config: String,
    /// The `file:<path>` parameters: each path relative to the model's
    /// directory (`1/model.onnx`) with its contents.
    pub files: Vec<(String, Vec<u8>)>,
}

/// The longest file name a path component may have (Linux's `NAME_MAX`).
const NAME_MAX: usize = 255;

/// Parses the `config` parameter (protobuf's JSON mapping: numbers may be
/// strings, unknown fields are refused).
pub(super) fn parse_config(name: &str, json: &str) -> Result<ModelConfig> {
    let fail = |e: &dyn std::fmt::Display| {
        Error::invalid_arg(format!(
            "failed to load '{name}', failed to parse the 'config' parameter as a model configuration in JSON: {e}"
        ))
    };
    let mut de = serde_json::Deserializer::from_str(json);
    let message =
        DynamicMessage::deserialize(model_config_descriptor(), &mut de).map_err(|e| fail(&e))?;
    de.end().map_err(|e| fail(&e))?;
    message.transcode_to::<ModelConfig>().map_err(|e| fail(&e))
}

/// Writes the `file:` contents under `<temporary>/<name>/`; `None` when
/// there are none (the model's own directory is used).
pub(super) fn write_files(name: &str, over: &LoadOverride) -> Result<Option<tempfile::TempDir>> {
    if over.files.is_empty() {
        return Ok(None);
    }
    let scratch = tempfile::Builder::new()
        .prefix("trtis-load-")
        .tempdir()
        .map_err(|e| Error::internal(format!("failed to load '{name}': {e}")))?;
    let root = scratch.path().join(name);
    for (path, bytes) in &over.files {
        check_path(name, path)?;
        // What the paths ask for cannot be written (a file where another
        // path needs a directory, a path too long): the request's fault.
        let unwritable = |e: std::io::Error| {
            Error::invalid_arg(format!(
                "failed to load '{name}', cannot write 'file:{path}': {e}"
            ))
        };
        let dest = root.join(path);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(unwritable)?;
        }
        std::fs::write(&dest, bytes).map_err(unwritable)?;
    }
    Ok(Some(scratch))
}

/// A `file:` path must stay inside the model's directory: relative, no
/// `..`, no empty or over-long component.
fn check_path(name: &str, path: &str) -> Result<()> {
    let invalid = |why: &str| {
        Error::invalid_arg(format!(
            "failed to load '{name}', Invalid file path 'file:{path}': {why}"
        ))
    };
    if path.is_empty() || path.contains('\0') {
        return Err(invalid("a file path must name a file"));
    }
    for component in Path::new(path).components() {
        match component {
            Component::Normal(c) if c.len() > NAME_MAX => {
                return Err(invalid("a path component is longer than 255 bytes"))
            }
            Component::Normal(_) => {}
            _ => return Err(invalid("a file path must stay inside the model directory")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_config_parses_with_numbers_as_strings() {
        let c = parse_config("simple", r#"{"max_batch_size":"16"}"#).unwrap();
        assert_eq!(c.max_batch_size, 16);
        let c = parse_config(
            "m",
            r#"{"backend":"identity","input":[{"name":"IN","data_type":"TYPE_FP32","dims":[4]}]}"#,
        )
        .unwrap();
        assert_eq!(c.input[0].dims, vec![4]);
    }

    #[test]
    fn a_malformed_config_fails_to_load() {
        for bad in [
            r#""parameters": {"config": {{"max_batch_size": "16"}}}"#,
            r#"{"max_batch_size": 1} trailing"#,
            r#"{"no_such_field": 1}"#,
        ] {
            let e = parse_config("simple", bad).unwrap_err();
            assert!(
                e.message.starts_with("failed to load 'simple'"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn file_paths_stay_inside_the_model_directory() {
        for bad in ["", "../x", "/etc/passwd", "1/../../x", &"A".repeat(256)] {
            let e = check_path("m", bad).unwrap_err();
            assert!(e.message.contains("Invalid file path"), "{}", e.message);
        }
        check_path("m", "1/model.onnx").unwrap();
        let over = LoadOverride {
            config: "{}".into(),
            files: vec![("1/model.onnx".into(), b"bytes".to_vec())],
        };
        let dir = write_files("m", &over).unwrap().unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("m/1/model.onnx")).unwrap(),
            b"bytes"
        );
    }
}
