//! Backends: what executes a model. A backend loads one instance of a model
//! version; the instance runs requests synchronously on its own OS thread
//! (see `core::instance`), never on the async runtime.
//!
//! Built in: `identity` (Triton's test backend), `onnxruntime` (ONNX
//! Runtime through `ort`, the shared library loaded at run time; feature
//! `onnx`) and `pytorch` (TorchScript through `tch` and libtorch, in a
//! shared library of its own, `backends/torch`, loaded when a PyTorch model
//! loads), `python` (a worker process per instance running a `model.py`)
//! and `custom` (a shared library implementing TRTIS's `custom.h` C API),
//! `tensorflow` (GraphDef and SavedModel models through the TensorFlow C
//! API, the library loaded at run time; feature `tensorflow`).

pub mod custom;
pub mod fil;
pub mod generate;
pub mod identity;
// Without the `onnx` feature, `onnx/disabled.rs` stands in for
// `onnx/mod.rs`: the same interface, every use failing with the reason.
#[cfg_attr(not(feature = "onnx"), path = "onnx/disabled.rs")]
pub mod onnx;
#[cfg(feature = "openvino")]
pub mod openvino;
pub mod python;
pub mod pytorch;
mod reshape;
#[cfg(feature = "tensorflow")]
pub mod tensorflow;

use std::path::{Path, PathBuf};

use crate::core::config::autocomplete::ModelTensor;
use crate::core::config::{Issue, ModelConfig};
use crate::core::error::{Error, Result};
use crate::core::responder::BackendRequest;
use crate::core::types::{InferRequest, InferResponse, Tensor};

pub use crate::core::config::catalog::takes_request_lists;

/// A backend: what the server does with a model of it, behind one
/// registry (`registry`). What the rest of the server decides by a
/// backend's name is in its catalog entry (`config::catalog`), as data.
/// Adding a backend is a folder here with its `Backend`, one line in
/// `registry`, its catalog entry and its docs page.
pub trait Backend: Sync {
    /// Its catalog entry's name (the config's `backend`).
    fn name(&self) -> &'static str;

    /// Loads one instance of a model version.
    fn load(&self, ctx: &LoadContext) -> Result<Instance>;

    /// What it would refuse of `config` at load that can be known without
    /// loading it (read from the model files in `version_dirs`; with
    /// `model_files`, also those it would open to check). `validate-config`
    /// and `serve` both report these.
    fn check(
        &self,
        _config: &ModelConfig,
        _version_dirs: &[PathBuf],
        _model_files: bool,
    ) -> Vec<Issue> {
        Vec::new()
    }

    /// The config completed from the model's files (auto-complete on);
    /// None when it has nothing to complete.
    fn auto_complete(
        &self,
        _config: &ModelConfig,
        _ctx: &CompleteContext,
    ) -> Option<Result<ModelConfig>> {
        None
    }

    /// Whether it runs KIND_GPU instances in this installation (asked
    /// only when the server has GPUs).
    fn gpu_ready(&self) -> bool {
        false
    }

    /// `trtis gen-config`: fills `config` (its name, backend and platform
    /// set from the catalog's format of `file`, one of this backend's
    /// marked `gen_config`) from the model file; returns the comment lines that go above it and notes
    /// for the user, or the error to print.
    fn gen_config(
        &self,
        file: &Path,
        _req: &generate::GenRequest,
        _config: &mut ModelConfig,
    ) -> std::result::Result<generate::Generated, String> {
        Err(format!(
            "{}: gen-config does not read models of the '{}' backend",
            file.display(),
            self.name()
        ))
    }
}

/// What auto-complete needs beside the config.
pub struct CompleteContext<'a> {
    /// `<repo>/<model>`.
    pub model_dir: &'a Path,
    /// The newest version's directory.
    pub version_dir: &'a Path,
    pub options: &'a BackendOptions,
    /// Triton's normalization (for what a model's own completion added).
    pub normalize: &'a dyn Fn(&mut ModelConfig) -> std::result::Result<(), Issue>,
}

/// Triton's words for a model whose load failed: "load failed for model
/// 'NAME': WHY".
pub fn load_failed(config: &ModelConfig, why: impl std::fmt::Display) -> Error {
    Error::invalid_arg(format!("load failed for model '{}': {why}", config.name))
}

/// `config` completed, by auto-complete's rules, from the inputs and
/// outputs a model file declares (`io`, as the backend read them), a
/// batching model given `ctx`'s default max_batch_size.
pub fn completed_from(
    config: &ModelConfig,
    io: Result<(Vec<ModelTensor>, Vec<ModelTensor>)>,
    ctx: &CompleteContext,
) -> Result<ModelConfig> {
    let (inputs, outputs) = io?;
    let max_batch_size = ctx.options.default_max_batch_size;
    crate::core::config::autocomplete::completed(config, &inputs, &outputs, max_batch_size)
        .map_err(|why| load_failed(config, why))
}

/// The backends built into this binary: one line each.
pub fn registry() -> &'static [&'static dyn Backend] {
    static ALL: std::sync::OnceLock<Vec<&'static dyn Backend>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        #[allow(unused_mut)]
        let mut all: Vec<&'static dyn Backend> = vec![
            &identity::Identity,
            &pytorch::PyTorch,
            &python::Python,
            &custom::Custom,
            &fil::Fil,
        ];
        #[cfg(feature = "onnx")]
        all.push(&onnx::Onnx);
        #[cfg(feature = "tensorflow")]
        all.push(&tensorflow::TensorFlow);
        #[cfg(feature = "openvino")]
        all.push(&openvino::OpenVino);
        all
    })
}

/// The backend of this build named `name`.
pub fn lookup(name: &str) -> Option<&'static dyn Backend> {
    registry().iter().copied().find(|b| b.name() == name)
}

/// One loaded instance of a model version, in the one execution mode its
/// backend's catalog entry gives it (`catalog::takes_request_lists`),
/// chosen once at load: the schedulers and warmup hand it work of that
/// mode only.
pub enum Instance {
    /// Runs a batch of concatenated tensors.
    Batches(Box<dyn BatchExec>),
    /// Runs a batch as a list of requests, each answering on its own.
    Lists(Box<dyn ListExec>),
}

impl Instance {
    /// Memory the instance holds outside the server process (a Python
    /// worker's resident set), read once it has loaded, for the
    /// statistics' `memory_usage`; empty where there is none to tell.
    pub fn memory_usage(&self) -> Vec<crate::core::metrics::memory::MemoryUsage> {
        match self {
            Instance::Batches(_) => Vec::new(),
            Instance::Lists(l) => l.memory_usage(),
        }
    }
}

/// An instance that runs batches of concatenated tensors.
pub trait BatchExec: Send {
    /// Runs one batch: `inputs` are validated against the model config
    /// (names, types, shapes incl. the batch dimension; reshaped where the
    /// config says so) and the instance's to keep; returns the tensors
    /// named in `outputs`, in that order.
    fn execute(&mut self, inputs: Vec<Tensor>, outputs: &[String]) -> Result<Vec<Tensor>>;

    /// Of the last `execute`, the time spent handing the inputs to the
    /// framework and taking the outputs back (Triton's compute_input and
    /// compute_output); zero where the backend has no such step.
    fn timing(&self) -> (std::time::Duration, std::time::Duration) {
        Default::default()
    }

    /// The parameters each response of the last `execute` carries (Triton's
    /// `TRITONBACKEND_ResponseSet*Parameter`); None for none.
    fn response_parameters(
        &self,
    ) -> Option<std::sync::Arc<crate::core::types::ResponseParameters>> {
        None
    }
}

/// An instance that takes a batch's requests apart (Triton's Python
/// backend hands `execute` a list of requests; a custom library gets one
/// payload per request).
pub trait ListExec: Send {
    /// Runs a batch the scheduler formed as separate requests: each request
    /// answers through its responder, now or later (a decoupled model). An
    /// error fails the requests left unanswered.
    fn execute_requests(&mut self, requests: Vec<BackendRequest>) -> Result<()>;

    /// For a backend that can be handed its next batch of requests while
    /// one runs (`core::instance` then runs it pipelined); None otherwise.
    fn pipeline(&mut self) -> Option<&mut dyn Pipeline> {
        None
    }

    /// Memory the instance holds outside the server process (a Python
    /// worker's resident set).
    fn memory_usage(&self) -> Vec<crate::core::metrics::memory::MemoryUsage> {
        Vec::new()
    }
}

/// A backend that runs batches of requests one after the other in a
/// process of its own, and can be handed the next while one runs, so that
/// it finds it waiting when the one before ends (the Python backend: its
/// worker does not sleep between two batches). Batches end in the order
/// they were sent.
pub trait Pipeline {
    /// Whether it can take a batch now while others run (false when, say,
    /// its process died: the batches it holds fail first).
    fn can_send(&mut self) -> bool;

    /// Hands over a batch of requests (as `execute_requests`), to run after
    /// those sent before; an error fails the batch before it ran.
    fn send(&mut self, requests: Vec<BackendRequest>) -> Result<()>;

    /// Waits until the oldest batch sent has ended and returns how (an
    /// error fails its requests left unanswered), or, given `wake`, returns
    /// None as soon as `wake` is signalled.
    fn finish(&mut self, wake: Option<&Wake>) -> Option<Result<()>>;
}

/// A wake-up another thread can signal and a blocking wait can poll, with
/// the other file descriptors it waits on: an eventfd. Hand-written on
/// `libc` (already a dependency) for its four calls.
pub struct Wake {
    fd: std::os::fd::OwnedFd,
}

impl Wake {
    pub fn new() -> std::io::Result<Wake> {
        use std::os::fd::FromRawFd;
        // SAFETY: eventfd has no memory-safety preconditions; a descriptor
        // it returns is ours to own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Wake {
            // SAFETY: a fresh descriptor nothing else owns.
            fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Makes the descriptor readable until `clear`.
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64; a full counter (never
        // reached) would only fail the write.
        unsafe {
            libc::write(self.fd(), (&one as *const u64).cast(), 8);
        }
    }

    /// Takes the signals given so far.
    pub fn clear(&self) {
        let mut count: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64; non-blocking.
        unsafe {
            libc::read(self.fd(), (&mut count as *mut u64).cast(), 8);
        }
    }

    /// The descriptor to poll (readable once signalled).
    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }
}

/// Where a `Host::infer` call's answers go: each response or error, then
/// `None`.
pub type HostAnswers = Box<dyn FnMut(Option<Result<InferResponse>>) + Send>;

/// What a backend may ask of the server it runs in: a Python model's own
/// inference calls (BLS) go through the server's engine, its schedulers
/// and every backend, never over the network.
pub trait Host: Send + Sync {
    /// Runs `request` on model `name` (`version` "" for the one the policy
    /// serves), without blocking: `each` gets every response as it comes
    /// (one, or a decoupled model's any number), or the error, then `None`.
    fn infer(&self, name: String, version: String, request: InferRequest, each: HostAnswers);

    /// Loads, unloads or asks after a model (a Python model's
    /// `pb_utils.load_model` / `unload_model` / `is_model_ready`), as the
    /// server's model control mode allows, without blocking: `done` gets
    /// the answer (for `Ready`, whether it is ready).
    fn control(&self, op: ModelControl, done: Box<dyn FnOnce(Result<bool>) + Send>);
}

/// What a model asks of the server's model control.
#[derive(Debug, Clone)]
pub enum ModelControl {
    /// Load (or reload) `name`, with a `config` (JSON) and `file:` files
    /// in place of the repository's when given, as a load request's.
    Load {
        name: String,
        config: String,
        files: Vec<(String, Vec<u8>)>,
    },
    /// Unload `name` (with `dependents`, an ensemble's composing models).
    Unload { name: String, dependents: bool },
    /// Whether `name` (`version` "" for any) is ready.
    Ready { name: String, version: String },
}

/// What the server's command line gives the backends.
#[derive(Clone)]
pub struct BackendOptions {
    /// The interpreter that runs Python models (`--python`,
    /// `TRTIS_PYTHON`); else the project's `.venv`, else `python3`.
    pub python: Option<PathBuf>,
    /// How long a Python worker may take to start and initialize (Triton's
    /// `--backend-config=python,stub-timeout-seconds=N`; default 30 s).
    pub stub_timeout: Option<std::time::Duration>,
    /// The max_batch_size auto-complete gives a model that batches
    /// (`--backend-config=default-max-batch-size=N`; Triton's 4).
    pub default_max_batch_size: i32,
    /// The server, for BLS.
    pub host: Option<std::sync::Arc<dyn Host>>,
}

impl Default for BackendOptions {
    fn default() -> Self {
        BackendOptions {
            python: None,
            stub_timeout: None,
            default_max_batch_size: crate::core::config::autocomplete::DEFAULT_MAX_BATCH_SIZE,
            host: None,
        }
    }
}

impl std::fmt::Debug for BackendOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendOptions")
            .field("python", &self.python)
            .field("stub_timeout", &self.stub_timeout)
            .field("default_max_batch_size", &self.default_max_batch_size)
            .field("host", &self.host.is_some())
            .finish()
    }
}

/// A backend's runtime library named by the environment variable `var`,
/// when it is set (an error naming the variable, with `hint`, when it does
/// not name a file).
pub fn library_from_env(var: &str, hint: &str) -> Option<Result<PathBuf>> {
    let path = PathBuf::from(std::env::var_os(var)?);
    Some(if path.is_file() {
        Ok(path)
    } else {
        Err(Error::unavailable(format!(
            "{var} names '{}', which is not a file; {hint}",
            path.display()
        )))
    })
}

/// Where a project-local install of a backend's library may be: the
/// working directory, then each ancestor of the trtis executable.
pub fn project_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        roots.push(cwd);
    }
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    roots
}

/// What a backend needs to load an instance.
#[derive(Debug, Clone)]
pub struct LoadContext<'a> {
    pub config: &'a ModelConfig,
    /// `<repo>/<model>`.
    pub model_dir: &'a Path,
    /// `<repo>/<model>/<version>`.
    pub version_dir: PathBuf,
    /// `<group name>_<index>`.
    pub instance_name: String,
    /// Its place among the model's instances, in the order they are made
    /// (Triton's instance id, which its identity backend's
    /// `instance_wise_delay_multiplier` reads).
    pub instance_index: usize,
    /// Where the instance runs (`device::place`).
    pub device: crate::core::device::Device,
    pub options: &'a BackendOptions,
}

/// The backends that run KIND_GPU instances in this installation, asked
/// only when the server has GPUs (`visible`; otherwise empty, and nothing is
/// loaded): the Python backend (the model does its own GPU work), ONNX
/// Runtime when its library has the CUDA provider, PyTorch when its library
/// is linked with libtorch_cuda. Normalization resolves KIND_AUTO to
/// KIND_GPU for these only.
pub fn gpu_backends(visible: &[i32]) -> &'static [&'static str] {
    if visible.is_empty() {
        return &[];
    }
    static FOUND: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    FOUND.get_or_init(|| {
        registry()
            .iter()
            .filter(|b| b.gpu_ready())
            .map(|b| b.name())
            .collect()
    })
}

/// The model file a config names (`default_model_filename`), else the
/// backend's `default`.
pub(crate) fn model_file<'a>(config: &'a ModelConfig, default: &'a str) -> &'a str {
    if config.default_model_filename.is_empty() {
        default
    } else {
        &config.default_model_filename
    }
}

/// An instance to run requests on the caller's thread instead of an
/// instance thread, for a backend whose execution is a few moves of
/// memory: `identity` without its test delays and recording (no
/// `execute_delay_ms`, `delay_input`, `record_inputs`) and without
/// reshapes. A request then costs no thread hop (Triton's identity runs on
/// a backend thread; here that hop was the most of its cost at low load).
pub fn inline_instance(config: &ModelConfig, version: &str) -> Option<Box<dyn BatchExec>> {
    let plain = config.backend == "identity"
        && [
            "execute_delay_ms",
            "instance_wise_delay_multiplier",
            "delay_input",
            "record_inputs",
            "creation_delay_sec",
        ]
        .iter()
        .all(|p| !config.parameters.contains_key(*p))
        && config.input.iter().all(|i| i.reshape.is_none())
        && config.output.iter().all(|o| o.reshape.is_none());
    if !plain {
        return None;
    }
    identity::IdentityInstance::new(config, 0, version)
        .ok()
        .map(|i| Box::new(i) as Box<dyn BatchExec>)
}

/// Loads one instance with the backend the (normalized) config names.
/// The config's `reshape`s wrap every backend's instance.
pub fn load_instance(ctx: &LoadContext) -> Result<Instance> {
    if let crate::core::device::Device::Gpu(id) = ctx.device {
        // Not run on the CPU instead: that is not what the config asks (the
        // backend places its session on the device).
        if !crate::core::config::catalog::spec(&ctx.config.backend).is_some_and(|s| s.gpu) {
            return Err(Error::unsupported(format!(
            "instance '{}' of model '{}' is placed on GPU {id} (KIND_GPU), but the '{}' backend of this build runs on the CPU only; use KIND_CPU",
            ctx.instance_name, ctx.config.name, ctx.config.backend
            )));
        }
    }
    let Some(backend) = lookup(&ctx.config.backend) else {
        return Err(Error::unsupported(format!(
            "unable to find backend library for backend '{}', try specifying runtime on the model configuration.",
            ctx.config.backend
        )));
    };
    let instance = backend.load(ctx)?;
    Ok(reshape::wrap(ctx.config, instance))
}

/// What a backend would refuse of `config` at load that can be known
/// without loading it: the values of its `parameters`, and for the PyTorch
/// backend how the config binds to `forward()` (read from the model file in
/// each of `version_dirs` that has one). `validate-config` and `serve` both
/// report these (through `repository::check`), so they agree.
/// With `model_files`, an ONNX model's file is opened to check what its
/// loading checks (`validate-config`; `serve` finds it when loading).
pub fn check_config(
    config: &ModelConfig,
    version_dirs: &[PathBuf],
    model_files: bool,
) -> Vec<Issue> {
    lookup(&config.backend)
        .map(|b| b.check(config, version_dirs, model_files))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_identity_model_runs_inline() {
        use crate::core::config::parse_config;
        let config = |text: &str| parse_config(text.as_bytes()).unwrap().config;
        let io = "input [ { name: \"I\" data_type: TYPE_FP32 dims: [ 4 ] } ]\n\
                  output [ { name: \"O\" data_type: TYPE_FP32 dims: [ 4 ] } ]\n";
        let plain = config(&format!("name: \"m\"\nbackend: \"identity\"\n{io}"));
        assert!(inline_instance(&plain, "1").is_some());
        for extra in [
            "parameters { key: \"execute_delay_ms\" value: { string_value: \"0\" } }",
            "parameters { key: \"record_inputs\" value: { string_value: \"/tmp/x\" } }",
        ] {
            let c = config(&format!(
                "name: \"m\"\nbackend: \"identity\"\n{io}{extra}\n"
            ));
            assert!(inline_instance(&c, "1").is_none(), "{extra}");
        }
        let reshaped = config(
            "name: \"m\"\nbackend: \"identity\"\n\
             input [ { name: \"I\" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]\n\
             output [ { name: \"O\" data_type: TYPE_FP32 dims: [ 4 ] } ]\n",
        );
        assert!(inline_instance(&reshaped, "1").is_none());
        let onnx = config(&format!("name: \"m\"\nbackend: \"onnxruntime\"\n{io}"));
        assert!(inline_instance(&onnx, "1").is_none());
    }

    /// What the catalog says is built is what the registry has, one each
    /// (a load may still fail for want of a model file, not of a backend).
    #[test]
    fn every_backend_the_catalog_says_is_built_is_registered() {
        let built: Vec<&str> = crate::core::config::catalog::built()
            .map(|s| s.name)
            .collect();
        let mut registered: Vec<&str> = registry().iter().map(|b| b.name()).collect();
        registered.sort();
        registered.dedup();
        assert_eq!(registered.len(), registry().len(), "one line each");
        let mut sorted = built.clone();
        sorted.sort();
        assert_eq!(sorted, registered);
        for backend in built {
            let config = ModelConfig {
                name: "m".into(),
                backend: backend.to_string(),
                ..Default::default()
            };
            let dir = std::env::temp_dir();
            let ctx = LoadContext {
                config: &config,
                model_dir: &dir,
                version_dir: dir.join("no-such-version"),
                instance_name: "m_0".into(),
                instance_index: 0,
                device: crate::core::device::Device::Cpu,
                options: &Default::default(),
            };
            if let Err(e) = load_instance(&ctx) {
                assert!(
                    !e.message.contains("unable to find backend library"),
                    "{backend}: {}",
                    e.message
                );
            }
        }
    }
}
