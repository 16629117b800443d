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

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Instant, SystemTime};

use trtis::core::backend::pytorch::abi::OutputSink;
use trtis::core::backend::pytorch::pt2::{self, LeafInput, Pt2Binding};
use trtis::core::backend::pytorch::settings::TorchSettings;
use trtis::core::config::ModelConfig;
use trtis::core::error::{Error, Result};

use crate::{apply_inter_op, emit_tensor, log, require_cuda, to_tch, InferenceGuard, View};

extern "C" {
    fn trtis_torch_version() -> *const c_char;
    fn trtis_aoti_load(
        path: *const c_char,
        model_name: *const c_char,
        num_runners: usize,
        device_index: i32,
        err: *mut *mut c_char,
    ) -> *mut c_void;
    fn trtis_aoti_free(loader: *mut c_void);
    fn trtis_aoti_call_spec(loader: *mut c_void, which: i32, err: *mut *mut c_char) -> *mut c_char;
    fn trtis_aoti_run(
        loader: *mut c_void,
        inputs: *const *const torch_sys::C_tensor,
        n_inputs: usize,
        outputs: *mut *mut *mut torch_sys::C_tensor,
        n_outputs: *mut usize,
        err: *mut *mut c_char,
    ) -> i32;
}

/// Makes sure a library named `libtorch.so` is in the process before a
/// package's compiled model (which names it) is loaded: the real one where
/// it loads (a full torch install), else the embedded stand-in (build.rs),
/// loaded from memory. Once per process.
fn ensure_libtorch_name() -> Result<()> {
    static DONE: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        // SAFETY: plain dlopen calls; the handles stay open for the process.
        unsafe {
            let flags = libc::RTLD_NOW | libc::RTLD_GLOBAL;
            if !libc::dlopen(c"libtorch.so".as_ptr(), flags).is_null() {
                return Ok(());
            }
            static STUB: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libtorch_stub.so"));
            let fd = libc::memfd_create(c"libtorch.so".as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
            }
            let written = libc::write(fd, STUB.as_ptr() as *const c_void, STUB.len());
            let path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
            let handle = if written == STUB.len() as isize {
                libc::dlopen(path.as_ptr(), flags)
            } else {
                std::ptr::null_mut()
            };
            libc::close(fd);
            if handle.is_null() {
                let why = libc::dlerror();
                return Err(if why.is_null() {
                    "dlopen failed".into()
                } else {
                    CStr::from_ptr(why).to_string_lossy().into_owned()
                });
            }
            Ok(())
        }
    })
    .clone()
    .map_err(|e| {
        Error::internal(format!(
            "AOTInductor packages cannot be loaded: libtorch.so: {e}"
        ))
    })
}

/// The libtorch version this library was built against.
pub fn libtorch_version() -> String {
    // SAFETY: a static C string.
    unsafe { CStr::from_ptr(trtis_torch_version()) }
        .to_string_lossy()
        .into_owned()
}

/// Takes a malloc'ed C string from the shim.
fn take_string(ptr: *mut c_char) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the shim hands over a malloc'ed, NUL-terminated string.
    let s = unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned();
    unsafe { libc::free(ptr as *mut c_void) };
    Some(s)
}

/// A loaded package (the loader owns its extracted files and compiled
/// model; `run` may be called from several threads, up to the runners it
/// was made with at once, the others wait).
struct Loader(*mut c_void);

// SAFETY: AOTIModelPackageLoader's container locks around its runners.
unsafe impl Send for Loader {}
unsafe impl Sync for Loader {}

impl Drop for Loader {
    fn drop(&mut self) {
        // SAFETY: made by trtis_aoti_load, dropped once.
        unsafe { trtis_aoti_free(self.0) }
    }
}

impl Loader {
    fn load(path: &Path, runners: usize, device: i32, libtorch: &str) -> Result<Loader> {
        ensure_libtorch_name()?;
        let c_path = CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| Error::invalid_arg("the model path holds a NUL byte"))?;
        let name = CString::new(pt2::MODEL_NAME).expect("no NUL");
        let mut err = std::ptr::null_mut();
        // SAFETY: live C strings; the shim catches libtorch's exceptions.
        let handle =
            unsafe { trtis_aoti_load(c_path.as_ptr(), name.as_ptr(), runners, device, &mut err) };
        if handle.is_null() {
            let message = take_string(err).unwrap_or_else(|| "unknown error".into());
            return Err(Error::internal(pt2::explain_load_error(
                path, &message, libtorch,
            )));
        }
        Ok(Loader(handle))
    }

    fn call_spec(&self) -> Result<(String, String)> {
        let spec = |which| {
            let mut err = std::ptr::null_mut();
            // SAFETY: a live loader.
            let s = unsafe { trtis_aoti_call_spec(self.0, which, &mut err) };
            take_string(s).ok_or_else(|| {
                Error::internal(format!(
                    "the package's call spec: {}",
                    take_string(err).unwrap_or_default()
                ))
            })
        };
        Ok((spec(0)?, spec(1)?))
    }

    fn run(&self, inputs: &[tch::Tensor]) -> Result<Vec<tch::Tensor>> {
        let ptrs: Vec<*const torch_sys::C_tensor> = inputs.iter().map(|t| t.as_ptr()).collect();
        let mut out: *mut *mut torch_sys::C_tensor = std::ptr::null_mut();
        let mut n = 0usize;
        let mut err = std::ptr::null_mut();
        // SAFETY: live tensors; the shim allocates `out` with malloc and
        // each tensor with new (tch frees them with delete).
        let status = unsafe {
            trtis_aoti_run(
                self.0,
                ptrs.as_ptr(),
                ptrs.len(),
                &mut out,
                &mut n,
                &mut err,
            )
        };
        if status != 0 {
            return Err(Error::internal(take_string(err).unwrap_or_default()));
        }
        let tensors = (0..n)
            .map(|i| unsafe { tch::Tensor::from_ptr(*out.add(i)) })
            .collect();
        unsafe { libc::free(out as *mut c_void) };
        Ok(tensors)
    }
}

/// Packages loaded with ENABLE_WEIGHT_SHARING, by file (with its size and
/// time) and device.
type ShareKey = (PathBuf, u64, Option<SystemTime>, i32);
static SHARED: Mutex<Option<HashMap<ShareKey, Weak<Loader>>>> = Mutex::new(None);

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
            load_shared(&path, runners, index, &libtorch, instance)?
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
            let _inference = InferenceGuard(if self.settings.inference_mode {
                // SAFETY: the guard ends on this thread, below.
                unsafe { crate::trtis_inference_mode_enter(1) }
            } else {
                std::ptr::null_mut()
            });
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

fn load_shared(
    path: &Path,
    runners: usize,
    device: i32,
    libtorch: &str,
    instance: &str,
) -> Result<Arc<Loader>> {
    let meta =
        std::fs::metadata(path).map_err(|e| Error::internal(format!("{}: {e}", path.display())))?;
    let key = (path.to_path_buf(), meta.len(), meta.modified().ok(), device);
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    let map = shared.get_or_insert_with(HashMap::new);
    map.retain(|_, l| l.strong_count() > 0);
    if let Some(loader) = map.get(&key).and_then(Weak::upgrade) {
        log(
            2,
            &format!("Reusing AOTInductor package for instance '{instance}'"),
        );
        return Ok(loader);
    }
    let loader = Arc::new(Loader::load(path, runners, device, libtorch)?);
    map.insert(key, Arc::downgrade(&loader));
    Ok(loader)
}
