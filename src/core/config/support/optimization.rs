//! `optimization`: graph levels, priorities, eager batching and the
//! execution accelerators, refused or noted by what the backend can do.

use crate::core::config::catalog::BackendSpec;
use crate::core::config::pb::model_instance_group::Kind;
use crate::core::config::pb::model_optimization_policy::ModelPriority;
use crate::core::config::ModelConfig;

use super::Findings;

pub(super) fn check(config: &ModelConfig, spec: Option<&BackendSpec>, out: &mut Findings) {
    if let Some(o) = &config.optimization {
        if o.graph.as_ref().is_some_and(|g| g.level != 0)
            && !spec.is_some_and(|s| s.graph_optimization)
        {
            out.hint(
                "optimization.graph.level",
                &format!(
                    "the '{}' backend has no graph optimizations",
                    config.backend
                ),
            );
        }
        if o.priority != ModelPriority::PriorityDefault as i32 {
            out.hint(
                "optimization.priority",
                "it orders GPU work, and there is no GPU work here",
            );
        }
        if o.eager_batching {
            out.hint(
                "optimization.eager_batching",
                "the dynamic batcher forms a batch whenever an instance is free",
            );
        }
        if let Some(accel) = &o.execution_accelerators {
            let on_gpu = config
                .instance_group
                .iter()
                .any(|g| g.kind == Kind::Gpu as i32);
            for (j, a) in accel.gpu_execution_accelerator.iter().enumerate() {
                let field =
                    format!("optimization.execution_accelerators.gpu_execution_accelerator[{j}]");
                if !spec.is_some_and(|s| s.gpu) {
                    out.refuse(field,
                        &format!(
                            "GPU execution accelerator '{}': the '{}' backend does not run on a GPU",
                            a.name, config.backend
                        ),
                    );
                } else if !on_gpu {
                    // (Its name and parameters are checked with the
                    // backend's parameters: backend::onnx::settings.)
                    out.hint(field,
                        &format!(
                            "GPU execution accelerator '{}' acts on KIND_GPU instances, and this model's run on the CPU",
                            a.name
                        ),
                    );
                }
            }
            for (j, a) in accel.cpu_execution_accelerator.iter().enumerate() {
                let field =
                    format!("optimization.execution_accelerators.cpu_execution_accelerator[{j}]");
                // Triton's ONNX Runtime backend offers OpenVINO as a CPU
                // accelerator; the PyPI library has no such provider, so the
                // model runs on trtis's OpenVINO backend instead
                // (backend::openvino::load_for_onnx).
                let on_openvino = a.name == "openvino"
                    && spec.is_some_and(|s| s.cpu_accelerators.contains(&"openvino"));
                if !on_openvino {
                    out.refuse(field,
                        &format!(
                            "CPU execution accelerator '{}': the ONNX Runtime library from PyPI has no such execution provider{}",
                            a.name,
                            if a.name == "openvino" { ", and only an ONNX Runtime model is run on OpenVINO instead" } else { "" }
                        ),
                    );
                    continue;
                }
                for (k, v) in &a.parameters {
                    let cpu = k == "device_type" && (v == "CPU" || v == "CPU_FP32");
                    if !cpu {
                        out.refuse(format!("{field}.parameters[\"{k}\"]"),
                            &format!(
                                "the OpenVINO accelerator runs the model on trtis's OpenVINO backend, on the CPU in FP32 (as ONNX Runtime's OpenVINO provider does); \
                                 '{k}: {v}' is not applied (device_type CPU or CPU_FP32 only)"
                            ),
                        );
                    }
                }
                for key in config.parameters.keys() {
                    out.hint(format!("parameters[\"{key}\"]"),
                        "the model runs on trtis's OpenVINO backend (cpu_execution_accelerator 'openvino'), which does not read ONNX Runtime's parameters",
                    );
                }
            }
        }
    }
}
