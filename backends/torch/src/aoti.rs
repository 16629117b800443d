//! PyTorch 2 AOTInductor packages (`model.pt2`, platform `torch_aoti`):
//! loaded by libtorch's `AOTIModelPackageLoader` through the C++ shim, run
//! on the instance's thread like a TorchScript module.
//!
//! Before the compiled code is loaded, the package is read and checked
//! without it (`trtis::core::backend::pytorch::pt2`, the same rules
//! `validate-config` applies): the torch version it was compiled by, its
//! device and CPU ISA, the config's names, types and shapes against its
//! call spec and input checks. Each request's input shapes are checked
//! against what the compiled code expects (it checks nothing itself: a
//! wrong shape would be undefined behaviour). Inputs are copied once into
//! tensors libtorch owns, outputs once into the server's buffers, as for
//! TorchScript.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use trtis::core::backend::pytorch::abi::OutputSink;
use trtis::core::backend::pytorch::pt2::{self, LeafInput, Pt2Binding};
use trtis::core::backend::pytorch::settings::TorchSettings;
use trtis::core::config::ModelConfig;
use trtis::core::error::{Error, Result};

use crate::{apply_inter_op, emit_tensor, log, require_cuda, to_tch, InferenceGuard, View};

use crate::loader::{libtorch_version, Loader};

/// Packages loaded once for a model's instances (ENABLE_WEIGHT_SHARING).
static SHARED: crate::Shared<Loader> = crate::Shared::new();

pub struct AotiInstance {
    loader: Arc<Loader>,
    binding: Pt2Binding,
    /// What the compiled code expects of each flattened input.
    info: Option<Vec<LeafInput>>,
    settings: TorchSettings,
    device: tch::Device,
    instance: String,
}

/// The TorchScript-only parameters, which mean nothing to compiled code.
const JIT_ONLY: [&str; 4] = [
    "DISABLE_OPTIMIZED_EXECUTION",
    "ENABLE_JIT_EXECUTOR",
    "ENABLE_JIT_PROFILING",
    "ENABLE_TENSOR_FUSER",
];

impl AotiInstance {
    pub fn load(
        config: &ModelConfig,
        version_dir: &Path,
        instance: &str,
        device: tch::Device,
    ) -> Result<Self> {
        if let tch::Device::Cuda(id) = device {
            require_cuda(id, instance)?;
        }
        let settings = TorchSettings::from_config(config)?;
        for key in JIT_ONLY {
            if config.parameters.contains_key(key) {
                log(
                    1,
                    &format!(
                        "model '{}': parameter '{key}' applies to TorchScript's JIT and has no effect on an AOTInductor package",
                        config.name
                    ),
                );
            }
        }
        let file = if config.default_model_filename.is_empty() {
            "model.pt2"
        } else {
            config.default_model_filename.as_str()
        };
        let path = version_dir.join(file);
        let libtorch = libtorch_version();
        let gpu = matches!(device, tch::Device::Cuda(_));
        let (package, binding) = pt2::bind_package(config, &path, instance, gpu, Some(&libtorch))?;
        apply_inter_op(&settings, &config.name);
        crate::apply_thread_settings(&settings);
        let index = match device {
            tch::Device::Cuda(id) => id as i32,
            _ => -1,
        };
        let loader = if settings.weight_sharing {
            // One compiled model per instance sharing the weights.
            let runners = config
                .instance_group
                .iter()
                .map(|g| g.count.max(1) as usize)
                .sum::<usize>()
                .max(1);
            SHARED.get_or_load(
                &path,
                index.to_string(),
                &config.name,
                "AOTInductor package",
                instance,
                || Loader::load(&path, runners, index, &libtorch),
            )?
        } else {
            Arc::new(Loader::load(&path, 1, index, &libtorch)?)
        };
        let binding = match binding {
            Some(b) => b,
            None => {
                log(
                    1,
                    &format!(
                        "model '{}': {} carries no wrapper source: the config's types and shapes are not checked \
                         against the compiled code, and neither are requests' (a wrong shape is undefined behaviour there)",
                        config.name,
                        path.display()
                    ),
                );
                let (input, output) = loader.call_spec()?;
                pt2::bind(config, &pt2::leaves(&input, &output)?, None, instance)?
            }
        };
        Ok(AotiInstance {
            loader,
            binding,
            info: package.inputs,
            settings,
            device,
            instance: instance.to_string(),
        })
    }

    pub fn execute(&self, inputs: &[View], outputs: &[&str], out: &OutputSink) -> Result<[u64; 2]> {
        let start = Instant::now();
        crate::apply_thread_settings(&self.settings);
        tch::Cuda::set_user_enabled_cudnn(!self.settings.disable_cudnn);
        let mut args: Vec<Option<tch::Tensor>> = (0..self.binding.leaves).map(|_| None).collect();
        for t in inputs {
            let leaf = self
                .binding
                .inputs
                .iter()
                .find(|(name, _)| name == t.name)
                .map(|(_, leaf)| *leaf)
                .ok_or_else(|| {
                    Error::invalid_arg(format!("unexpected inference input '{}'", t.name))
                })?;
            if let Some(info) = self.info.as_ref().and_then(|i| i.get(leaf)) {
                pt2::check_shape(t.name, t.shape, info)?;
            }
            let tensor = to_tch(t)?;
            let tensor = if self.device == tch::Device::Cpu {
                tensor
            } else {
                tensor
                    .f_to_device(self.device)
                    .map_err(|e| Error::internal(format!("input '{}': {e}", t.name)))?
            };
            args[leaf] = Some(tensor);
        }
        let args = args
            .into_iter()
            .enumerate()
            .map(|(i, a)| {
                a.ok_or_else(|| {
                    let name = self
                        .binding
                        .inputs
                        .iter()
                        .find(|(_, leaf)| *leaf == i)
                        .map_or("?", |(n, _)| n.as_str());
                    Error::invalid_arg(format!("expected input '{name}' is missing"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let converted = start.elapsed();
        let results = {
            let _no_grad = tch::no_grad_guard();
            let _inference = InferenceGuard::new(self.settings.inference_mode);
            self.loader.run(&args)
        }
        .map_err(|e| {
            Error::internal(format!(
                "Inductor model instance \"{}\" execution failure: {}",
                self.instance, e.message
            ))
        })?;
        let ran = Instant::now();
        drop(args);
        for (index, name) in outputs.iter().enumerate() {
            let slot = self
                .binding
                .outputs
                .iter()
                .find(|o| o.name == *name)
                .ok_or_else(|| Error::internal(format!("unexpected output '{name}'")))?;
            let value = results.get(slot.index).ok_or_else(|| {
                Error::invalid_arg(format!(
                    "The output \"{name}\" in the model configuration refers to an output index which doesn't exist. This model has {} outputs.",
                    results.len()
                ))
            })?;
            emit_tensor(out, index, slot, value)?;
        }
        Ok([converted.as_nanos() as u64, ran.elapsed().as_nanos() as u64])
    }
}
