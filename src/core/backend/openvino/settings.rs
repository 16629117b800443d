//! The settings an OpenVINO model's config asks for in `parameters`, read
//! as Triton's OpenVINO backend reads them, with its messages (pure: no
//! OpenVINO here, so `validate-config` reports a bad value as `serve` does).
//!
//! | key | what it does here |
//! | --- | --- |
//! | `PERFORMANCE_HINT` | the CPU's `PERFORMANCE_HINT` (LATENCY, THROUGHPUT, CUMULATIVE_THROUGHPUT) |
//! | `NUM_STREAMS` | the CPU's `NUM_STREAMS` (AUTO, NUMA or a number) |
//! | `INFERENCE_NUM_THREADS`, `COMPILATION_NUM_THREADS` | the same-named CPU properties |
//! | `HINT_BF16` | `YES`: `INFERENCE_PRECISION_HINT` bf16 |
//! | `INFERENCE_PRECISION_HINT` | trtis's own (Triton's backend ignores the key): `f32`, `bf16` or `f16`, the CPU's same-named property. Without it or `HINT_BF16` the precision is OpenVINO's default, as in Triton: bf16 on a CPU with native bf16 (AVX512_BF16, AMX), else f32 |
//! | `RESHAPE_IO_LAYERS` | `YES`: the config's dims (after the batch dimension) become the model inputs' shapes, -1 dynamic |
//! | `SKIP_OV_DYNAMIC_BATCHSIZE` | read as Triton does; OpenVINO's automatic batching is a GPU feature its CPU plugin ignores, so either value serves the same |
//! | `ENABLE_BATCH_PADDING` | `YES`: as Triton, the batch dimension is compiled static at `max_batch_size` and every smaller batch is padded with zeros to it (outputs cut back); otherwise it stays dynamic (1 to `max_batch_size`: no padding needed, trtis's default) |
//! | `TARGET_DEVICE` | `CPU` only (the plugin this installation carries) |
//! | `CPU_EXTENSION_PATH` | refused: custom CPU extensions are not loaded by this backend yet |
//!
//! Booleans are Triton's: `yes` (any case) is true, anything else false.

use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};

/// What an OpenVINO model is compiled with.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OvSettings {
    /// CPU properties, in the order they are set: (key, value).
    pub properties: Vec<(&'static str, String)>,
    pub reshape_io_layers: bool,
    pub skip_dynamic_batchsize: bool,
    pub batch_padding: bool,
}

/// The parameters the backend reads.
pub const PARAMETERS: &[&str] = &[
    "PERFORMANCE_HINT",
    "NUM_STREAMS",
    "INFERENCE_NUM_THREADS",
    "COMPILATION_NUM_THREADS",
    "HINT_BF16",
    "INFERENCE_PRECISION_HINT",
    "RESHAPE_IO_LAYERS",
    "SKIP_OV_DYNAMIC_BATCHSIZE",
    "ENABLE_BATCH_PADDING",
    "TARGET_DEVICE",
    "CPU_EXTENSION_PATH",
];

impl OvSettings {
    pub fn from_config(config: &ModelConfig) -> Result<OvSettings> {
        let param = |key: &str| {
            config
                .parameters
                .get(key)
                .map(|p| p.string_value.trim().to_string())
        };
        let yes = |key: &str| param(key).is_some_and(|v| v.eq_ignore_ascii_case("yes"));
        let mut s = OvSettings {
            reshape_io_layers: yes("RESHAPE_IO_LAYERS"),
            skip_dynamic_batchsize: yes("SKIP_OV_DYNAMIC_BATCHSIZE"),
            batch_padding: yes("ENABLE_BATCH_PADDING"),
            ..Default::default()
        };
        if let Some(v) = param("PERFORMANCE_HINT") {
            let lower = v.to_ascii_lowercase();
            let value = match lower.as_str() {
                "latency" => "LATENCY",
                "throughput" => "THROUGHPUT",
                "cumulative_throughput" => "CUMULATIVE_THROUGHPUT",
                _ => {
                    return Err(Error::invalid_arg(format!(
                        "expected the parameter 'PERFORMANCE_HINT' to be LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got {lower}"
                    )))
                }
            };
            s.properties.push(("PERFORMANCE_HINT", value.into()));
        }
        if let Some(v) = param("NUM_STREAMS") {
            let upper = v.to_ascii_uppercase();
            if upper != "AUTO" && upper != "NUMA" && !is_number(&v) {
                return Err(Error::invalid_arg(format!(
                    "expected the parameter 'NUM_STREAMS' to be either AUTO/NUMA/<int_value>, got {v}"
                )));
            }
            s.properties.push(("NUM_STREAMS", upper));
        }
        for key in ["INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"] {
            if let Some(v) = param(key) {
                if !is_number(&v) {
                    return Err(Error::invalid_arg(format!(
                        "expected the parameter '{key}' to be a non-negative number, got {v}"
                    )));
                }
                s.properties.push((key, v));
            }
        }
        // The precision: Triton's HINT_BF16 (YES only) or trtis's own
        // INFERENCE_PRECISION_HINT, one property either way.
        let bf16 = match param("HINT_BF16") {
            Some(v) if !v.eq_ignore_ascii_case("yes") => {
                return Err(Error::invalid_arg(format!(
                    "expected the parameter 'HINT_BF16' to be YES, got {v}"
                )))
            }
            given => given.is_some(),
        };
        let precision = match param("INFERENCE_PRECISION_HINT") {
            Some(v) => {
                let lower = v.to_ascii_lowercase();
                if !matches!(lower.as_str(), "f32" | "bf16" | "f16") {
                    return Err(Error::invalid_arg(format!(
                        "expected the parameter 'INFERENCE_PRECISION_HINT' to be f32/bf16/f16, got {v}"
                    )));
                }
                if bf16 && lower != "bf16" {
                    return Err(Error::invalid_arg(format!(
                        "the parameters 'HINT_BF16' (YES: bf16) and 'INFERENCE_PRECISION_HINT' ({lower}) disagree; give one"
                    )));
                }
                Some(lower)
            }
            None => bf16.then(|| "bf16".to_string()),
        };
        if let Some(precision) = precision {
            s.properties.push(("INFERENCE_PRECISION_HINT", precision));
        }
        if let Some(v) = param("TARGET_DEVICE") {
            if !v.eq_ignore_ascii_case("cpu") {
                return Err(Error::unsupported(format!(
                    "parameter 'TARGET_DEVICE' of model '{}' is {}: this OpenVINO backend runs on the CPU only \
                     (it carries OpenVINO's CPU plugin); use CPU",
                    config.name,
                    v.to_ascii_uppercase()
                )));
            }
        }
        if param("CPU_EXTENSION_PATH").is_some() {
            return Err(Error::unsupported(format!(
                "parameter 'CPU_EXTENSION_PATH' of model '{}': this OpenVINO backend does not load custom CPU \
                 extensions yet",
                config.name
            )));
        }
        Ok(s)
    }
}

fn is_number(v: &str) -> bool {
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::parse_config;

    fn with(params: &[(&str, &str)]) -> Result<OvSettings> {
        let mut text = String::from("name: \"m\"\nbackend: \"openvino\"\n");
        for (k, v) in params {
            text.push_str(&format!(
                "parameters {{ key: \"{k}\" value: {{ string_value: \"{v}\" }} }}\n"
            ));
        }
        OvSettings::from_config(&parse_config(text.as_bytes()).unwrap().config)
    }

    #[test]
    fn config_support_lists_the_parameters_read_here() {
        assert_eq!(
            crate::core::config::catalog::parameter_names("openvino"),
            PARAMETERS
        );
    }

    #[test]
    fn tritons_parameters_are_read_with_its_messages() {
        let s = with(&[
            ("PERFORMANCE_HINT", "Throughput"),
            ("NUM_STREAMS", "2"),
            ("INFERENCE_NUM_THREADS", "1"),
            ("HINT_BF16", "yes"),
            ("RESHAPE_IO_LAYERS", "YES"),
            ("ENABLE_BATCH_PADDING", "no"),
            ("TARGET_DEVICE", "cpu"),
        ])
        .unwrap();
        assert_eq!(
            s.properties,
            [
                ("PERFORMANCE_HINT", "THROUGHPUT".to_string()),
                ("NUM_STREAMS", "2".to_string()),
                ("INFERENCE_NUM_THREADS", "1".to_string()),
                ("INFERENCE_PRECISION_HINT", "bf16".to_string()),
            ]
        );
        assert!(s.reshape_io_layers && !s.skip_dynamic_batchsize);
        let e = with(&[("PERFORMANCE_HINT", "Fast")]).unwrap_err();
        assert_eq!(e.message, "expected the parameter 'PERFORMANCE_HINT' to be LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got fast");
        let e = with(&[("NUM_STREAMS", "-1")]).unwrap_err();
        assert!(e.message.contains("AUTO/NUMA/<int_value>, got -1"));
        let e = with(&[("INFERENCE_NUM_THREADS", "x")]).unwrap_err();
        assert!(e.message.contains("to be a non-negative number, got x"));
        assert!(with(&[("HINT_BF16", "no")]).is_err());
        let precision = |params: &[(&str, &str)]| with(params).map(|s| s.properties);
        let hint = |v: &str| vec![("INFERENCE_PRECISION_HINT", v.to_string())];
        assert_eq!(
            precision(&[("INFERENCE_PRECISION_HINT", "F32")]).unwrap(),
            hint("f32")
        );
        assert_eq!(
            precision(&[("INFERENCE_PRECISION_HINT", "fp64")])
                .unwrap_err()
                .message,
            "expected the parameter 'INFERENCE_PRECISION_HINT' to be f32/bf16/f16, got fp64"
        );
        let both = |v| precision(&[("HINT_BF16", "YES"), ("INFERENCE_PRECISION_HINT", v)]);
        assert!(both("f32").unwrap_err().message.contains("disagree"));
        assert_eq!(both("bf16").unwrap(), hint("bf16"));
        assert!(
            with(&[("ENABLE_BATCH_PADDING", "YES")])
                .unwrap()
                .batch_padding
        );
        assert!(with(&[("TARGET_DEVICE", "GPU")])
            .unwrap_err()
            .message
            .contains("CPU only"));
        assert!(with(&[("CPU_EXTENSION_PATH", "/x.so")]).is_err());
    }
}
