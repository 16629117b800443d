//! trtis's PyTorch backend library (`libtrtis_torch.so`; `platform:
//! "pytorch_libtorch"`, `backend: "pytorch"`, file `model.pt`): TorchScript
//! modules run by libtorch through `tch`, as Triton's pytorch backend runs
//! them. The server loads this library the first time a PyTorch model loads
//! (`trtis::core::backend::pytorch`), so libtorch costs nothing to a server
//! or command without one; the calls are the C ABI of
//! `trtis::core::backend::pytorch::abi`. One module per instance (shared by a
//! model's instances with `ENABLE_WEIGHT_SHARING`), loaded on and run by the
//! instance's own thread.
//!
//! - Binding (`pytorch::binding`): Triton's naming conventions, checked at
//!   load against `forward()`'s signature, which `torchscript` reads from
//!   the archive (tch does not expose a method's schema).
//! - Settings (`pytorch::settings`): Triton's `parameters`; the thread count
//!   is set on the instance's thread.
//! - Tensors: every numeric type of the protocol (UINT16/32/64 and BF16 too,
//!   which Triton's backend refuses; tch's `Kind` has no unsigned wide types,
//!   so tensors are made and read by libtorch's scalar-type codes through
//!   torch-sys). An input is copied once into a tensor libtorch owns (a
//!   module may keep or change its inputs); an output is copied once, into
//!   the server's response buffer. BYTES are `List[str]`.

mod aoti;
mod loader;

use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Instant, SystemTime};

use prost::Message;
use tch::jit::IValue;
use tch::CModule;

use trtis::core::backend::pytorch::abi::{self, ErrorSink, LogFn, OutputSink, Str, TensorIn};
use trtis::core::backend::pytorch::binding::{
    self as pytorch_binding, Binding, Inputs, OutputSlot,
};
use trtis::core::backend::pytorch::settings::TorchSettings;
use trtis::core::config::ModelConfig;
use trtis::core::error::{Error, Result};
use trtis::core::types::{element_count, DataType, Tensor};

/// The server's log, set by `trtis_torch_init` (this library's copy of
/// `tracing` has no subscriber).
static LOG: OnceLock<LogFn> = OnceLock::new();

fn log(level: u32, message: &str) {
    if let Some(log) = LOG.get() {
        log(level, Str::of(message));
    }
}

/// A loaded instance: a TorchScript module, or an AOTInductor package
/// (`platform: "torch_aoti"`).
enum Instance {
    Script(TorchInstance),
    Package(aoti::AotiInstance),
}

impl Instance {
    fn load(
        config: &ModelConfig,
        version_dir: &Path,
        instance: &str,
        device: tch::Device,
    ) -> Result<Self> {
        if config.platform == "torch_aoti" {
            aoti::AotiInstance::load(config, version_dir, instance, device).map(Instance::Package)
        } else {
            TorchInstance::load(config, version_dir, instance, device).map(Instance::Script)
        }
    }

    fn execute(&self, inputs: &[View], outputs: &[&str], out: &OutputSink) -> Result<[u64; 2]> {
        match self {
            Instance::Script(i) => i.execute(inputs, outputs, out),
            Instance::Package(i) => i.execute(inputs, outputs, out),
        }
    }
}

/// An input as the server lends it for one call.
struct View<'a> {
    name: &'a str,
    datatype: DataType,
    shape: &'a [i64],
    data: &'a [u8],
}

extern "C" {
    fn trtis_inference_mode_enter(enabled: i32) -> *mut std::ffi::c_void;
    fn trtis_inference_mode_exit(guard: *mut std::ffi::c_void);
    fn trtis_set_executor_mode(on: i32);
}

/// What a model's instances load once and share with ENABLE_WEIGHT_SHARING,
/// by file (and its size and time, so that a changed file is loaded anew)
/// and device: TorchScript modules (tch's `CModule` is `Sync`: libtorch's
/// `forward` may run on several threads at once, which Triton's weight
/// sharing relies on too) and AOTInductor packages.
type ShareKey = (PathBuf, u64, Option<SystemTime>, String);
struct Shared<T>(Mutex<Option<HashMap<ShareKey, Weak<T>>>>);

impl<T> Shared<T> {
    const fn new() -> Self {
        Shared(Mutex::new(None))
    }

    /// The loaded `path` on `device` another instance holds (logged as
    /// reusing `what`), else `load`'s, kept for the next.
    fn get_or_load(
        &self,
        path: &Path,
        device: String,
        model: &str,
        what: &str,
        instance: &str,
        load: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        let meta = std::fs::metadata(path)
            .map_err(|e| Error::internal(format!("model '{model}': {}: {e}", path.display())))?;
        let key = (path.to_path_buf(), meta.len(), meta.modified().ok(), device);
        let mut shared = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let map = shared.get_or_insert_with(HashMap::new);
        map.retain(|_, m| m.strong_count() > 0);
        if let Some(loaded) = map.get(&key).and_then(Weak::upgrade) {
            log(2, &format!("Reusing {what} for instance '{instance}'"));
            return Ok(loaded);
        }
        let loaded = Arc::new(load()?);
        map.insert(key, Arc::downgrade(&loaded));
        Ok(loaded)
    }
}

static SHARED: Shared<CModule> = Shared::new();

pub struct TorchInstance {
    module: Arc<CModule>,
    binding: Binding,
    settings: TorchSettings,
    /// Where the module's weights are and its inputs go (KIND_GPU: CUDA).
    device: tch::Device,
}

/// The file the model's config names, as Triton's backend finds it.
fn model_file(config: &ModelConfig, version_dir: &Path, instance: &str) -> Result<PathBuf> {
    let file = if config.default_model_filename.is_empty() {
        "model.pt"
    } else {
        config.default_model_filename.as_str()
    };
    let path = version_dir.join(file);
    if !path.is_file() {
        return Err(Error::unavailable(format!(
            "unable to find '{}' for model instance '{instance}'",
            path.display(),
        )));
    }
    Ok(path)
}

/// What libtorch process-wide settings have been set to (inter-op threads
/// can be set once; the first model to ask wins, as in Triton).
static INTER_OP: Mutex<Option<usize>> = Mutex::new(None);

fn apply_inter_op(settings: &TorchSettings, model: &str) {
    let Some(n) = settings.inter_threads else {
        return;
    };
    let mut set = INTER_OP.lock().unwrap_or_else(|e| e.into_inner());
    match *set {
        None => {
            // libtorch refuses once its pool has started (e.g. a model used
            // fork): said, not fatal, as Triton ignores it.
            // SAFETY: a plain libtorch setter; its error is read below.
            unsafe { torch_sys::at_set_num_interop_threads(n as i32) };
            if let Some(msg) = last_torch_error() {
                log(
                    1,
                    &format!("model '{model}': INTER_OP_THREAD_COUNT {n} not applied: {msg}"),
                );
            }
            *set = Some(n);
        }
        Some(m) if m != n => log(
            1,
            &format!("model '{model}': INTER_OP_THREAD_COUNT {n} not applied: libtorch's inter-op pool is process-wide and was already set to {m} by an earlier model"),
        ),
        Some(_) => {}
    }
}

thread_local! {
    /// The intra-op thread count this thread was last set to.
    static INTRA_OP: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Per-thread settings, applied on the thread that runs the module.
fn apply_thread_settings(settings: &TorchSettings) {
    INTRA_OP.with(|set| {
        if set.get() != settings.intra_threads {
            // The first query initializes libtorch's per-thread count, which
            // would otherwise later overwrite ours with the process default.
            let _ = tch::get_num_threads();
            tch::set_num_threads(settings.intra_threads as i32);
            set.set(settings.intra_threads);
        }
    });
    tch::jit::set_graph_executor_optimize(settings.optimized_execution);
}

/// Process-wide switches, set before every run (cuDNN always, the JIT
/// switches when the model asks), as Triton does.
fn apply_process_settings(settings: &TorchSettings) {
    tch::Cuda::set_user_enabled_cudnn(!settings.disable_cudnn);
    if let Some(on) = settings.jit_executor {
        // SAFETY: plain setter of a libtorch atomic.
        unsafe { trtis_set_executor_mode(i32::from(on)) };
    }
    if let Some(on) = settings.jit_profiling {
        tch::jit::set_profiling_mode(on);
    }
    if let Some(on) = settings.tensor_fuser {
        tch::jit::set_tensor_expr_fuser_enabled(on);
    }
}

/// libtorch's scalar-type code (c10::ScalarType) of a protocol type.
fn scalar_type(t: DataType) -> Option<i32> {
    Some(match t {
        DataType::Uint8 => 0,
        DataType::Int8 => 1,
        DataType::Int16 => 2,
        DataType::Int32 => 3,
        DataType::Int64 => 4,
        DataType::Fp16 => 5,
        DataType::Fp32 => 6,
        DataType::Fp64 => 7,
        DataType::Bool => 11,
        DataType::Bf16 => 15,
        DataType::Uint16 => 27,
        DataType::Uint32 => 28,
        DataType::Uint64 => 29,
        DataType::Bytes => return None,
    })
}

fn data_type_of(code: i32) -> Option<DataType> {
    DataType::ALL
        .into_iter()
        .find(|t| scalar_type(*t) == Some(code))
}

/// The message of the last libtorch error raised through torch-sys.
fn last_torch_error() -> Option<String> {
    // SAFETY: torch-sys hands over a malloc'ed C string or null.
    unsafe {
        let ptr = torch_sys::get_and_reset_last_err();
        if ptr.is_null() {
            return None;
        }
        let msg = std::ffi::CStr::from_ptr(ptr).to_string_lossy().into_owned();
        libc::free(ptr as *mut libc::c_void);
        Some(msg)
    }
}

/// A numeric input as a libtorch tensor that owns a copy of the bytes. (Not
/// a view of the server's buffer: a module may keep an input past the call,
/// as an attribute or in a forked task, or change it in place.)
fn to_tch(t: &View) -> Result<tch::Tensor> {
    let code = scalar_type(t.datatype).expect("numeric");
    let size = t.datatype.size().expect("numeric");
    let count = element_count(t.shape).unwrap_or(usize::MAX);
    if count.checked_mul(size) != Some(t.data.len()) {
        return Err(Error::invalid_arg(format!(
            "input '{}' has {} bytes, its shape {:?} needs {}",
            t.name,
            t.data.len(),
            t.shape,
            count.saturating_mul(size)
        )));
    }
    // SAFETY: `data` holds `count` elements of the type (checked above);
    // libtorch copies them.
    let raw = unsafe {
        torch_sys::at_tensor_of_data(
            t.data.as_ptr() as *const c_void,
            t.shape.as_ptr(),
            t.shape.len(),
            size,
            code,
        )
    };
    if let Some(msg) = last_torch_error() {
        return Err(Error::internal(format!("input '{}': {msg}", t.name)));
    }
    // SAFETY: a fresh tensor owned by nobody else.
    Ok(unsafe { tch::Tensor::from_ptr(raw) })
}

/// A BYTES input as `List[str]`.
fn to_strings(t: &View) -> Result<Vec<String>> {
    let count = element_count(t.shape).unwrap_or(usize::MAX);
    let elements = Tensor::bytes_elements(t.data)?;
    if elements.len() != count {
        return Err(Error::invalid_arg(format!(
            "unexpected number of string elements {} for inference input '{}', expecting {count}",
            elements.len(),
            t.name
        )));
    }
    elements
        .into_iter()
        .map(|e| {
            if e.contains(&0) {
                // tch hands strings to libtorch as C strings.
                return Err(Error::invalid_arg(format!(
                    "input '{}': TorchScript strings cannot hold NUL bytes here",
                    t.name
                )));
            }
            String::from_utf8(e.to_vec()).map_err(|_| {
                Error::invalid_arg(format!(
                    "input '{}': TorchScript strings must be valid UTF-8",
                    t.name
                ))
            })
        })
        .collect()
}

/// Hands `data` to the server as requested output `index`.
fn put(
    out: &OutputSink,
    index: usize,
    name: &str,
    datatype: DataType,
    shape: &[i64],
    data: &[u8],
) -> Result<()> {
    let buffer = (out.alloc)(
        out.ctx,
        index,
        abi::datatype_code(datatype),
        shape.as_ptr(),
        shape.len(),
        data.len(),
    );
    if buffer.is_null() {
        return Err(Error::internal(format!("no buffer for output '{name}'")));
    }
    // SAFETY: the server's buffer holds `data.len()` bytes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buffer, data.len()) };
    Ok(())
}

/// A returned tensor as the output `slot` (Triton's checks: the config's
/// type exactly, no scalars), copied once, into the server's buffer.
fn emit_tensor(
    out: &OutputSink,
    index: usize,
    slot: &OutputSlot,
    value: &tch::Tensor,
) -> Result<()> {
    let name = &slot.name;
    // SAFETY: reads the scalar type of a live tensor.
    let code = unsafe { torch_sys::at_scalar_type(value.as_ptr() as *mut _) };
    let _ = last_torch_error();
    let actual = data_type_of(code);
    let want = slot.datatype;
    if actual.is_none() || actual != want {
        let name_of = |t: Option<DataType>| {
            t.map(|t| {
                format!(
                    "TYPE_{}",
                    if t == DataType::Bytes {
                        "STRING"
                    } else {
                        t.name()
                    }
                )
            })
            .unwrap_or_else(|| "TYPE_INVALID".to_string())
        };
        return Err(Error::invalid_arg(format!(
            "configuration expects datatype {} for output '{name}', model provides {}",
            // The config's TYPE_STRING is `None` here (a List[str]).
            want.map_or_else(|| "TYPE_STRING".to_string(), |_| name_of(want)),
            name_of(actual)
        )));
    }
    let datatype = actual.expect("checked");
    let shape = value.size();
    if shape.is_empty() {
        return Err(Error::invalid_arg(format!(
            "output '{name}' is a scalar which is not supported."
        )));
    }
    // On the CPU (a model may return a tensor on another device), dense and
    // contiguous.
    let value = value
        .f_to_device(tch::Device::Cpu)
        .and_then(|v| v.f_to_dense(None, false))
        .and_then(|v| v.f_contiguous())
        .map_err(|e| Error::internal(format!("output '{name}': {e}")))?;
    let bytes = value.numel() * datatype.size().expect("numeric");
    let ptr = value.data_ptr() as *const u8;
    if bytes > 0 && ptr.is_null() {
        return Err(Error::internal(format!("output '{name}' has no data")));
    }
    let data: &[u8] = if bytes == 0 {
        &[]
    } else {
        // SAFETY: a contiguous CPU tensor of `bytes` bytes, alive here.
        unsafe { std::slice::from_raw_parts(ptr, bytes) }
    };
    put(out, index, name, datatype, &shape, data)
}

/// A list of strings comes back from libtorch as a generic list of
/// strings: as one `List[str]` value.
fn strings_of(value: IValue) -> IValue {
    match value {
        IValue::GenericList(v) if v.iter().all(|e| matches!(e, IValue::String(_))) => {
            IValue::StringList(
                v.into_iter()
                    .map(|e| match e {
                        IValue::String(s) => s,
                        _ => unreachable!("checked"),
                    })
                    .collect(),
            )
        }
        other => other,
    }
}

/// The values `forward()` returned, in order.
fn returned(value: IValue) -> Result<Vec<IValue>> {
    Ok(match strings_of(value) {
        IValue::Tuple(v) | IValue::GenericList(v) => v.into_iter().map(strings_of).collect(),
        IValue::TensorList(v) => v.into_iter().map(IValue::Tensor).collect(),
        v @ (IValue::Tensor(_) | IValue::StringList(_)) => vec![v],
        other => {
            return Err(Error::internal(format!(
                "PyTorch execute failure: output must be of type Tensor, List[str] or a Tuple or List of these, received {}",
                describe(&other)
            )))
        }
    })
}

fn describe(v: &IValue) -> &'static str {
    match v {
        IValue::None => "None",
        IValue::Tensor(_) => "Tensor",
        IValue::Double(_) => "float",
        IValue::Int(_) => "int",
        IValue::Bool(_) => "bool",
        IValue::Tuple(_) => "Tuple",
        IValue::IntList(_) => "List[int]",
        IValue::DoubleList(_) => "List[float]",
        IValue::BoolList(_) => "List[bool]",
        IValue::String(_) => "str",
        IValue::StringList(_) => "List[str]",
        IValue::TensorList(_) => "List[Tensor]",
        IValue::GenericList(_) => "List",
        IValue::GenericDict(_) => "Dict",
        _ => "an object",
    }
}

impl TorchInstance {
    fn load(
        config: &ModelConfig,
        version_dir: &Path,
        instance: &str,
        device: tch::Device,
    ) -> Result<Self> {
        if let tch::Device::Cuda(id) = device {
            require_cuda(id, instance)?;
        }
        let settings = TorchSettings::from_config(config)?;
        let path = model_file(config, version_dir, instance)?;
        let binding = match pytorch_binding::bind_file(config, &path) {
            Ok((binding, unread)) => {
                if let Some(why) = unread {
                    log(
                        1,
                        &format!(
                            "model '{}': forward()'s signature not read ({why}); inputs bind by <name>__<index> or config order, unchecked",
                            config.name
                        ),
                    );
                }
                binding
            }
            Err(("default_model_filename", e)) => {
                return Err(Error::internal(format!(
                    "failed to load model '{}': {}",
                    config.name, e.message
                )))
            }
            Err((_, e)) => return Err(e),
        };
        apply_inter_op(&settings, &config.name);
        apply_thread_settings(&settings);
        let module = if settings.weight_sharing {
            SHARED.get_or_load(
                &path,
                format!("{device:?}"),
                &config.name,
                "TorchScript model",
                instance,
                || load_module(&path, &config.name, device),
            )?
        } else {
            Arc::new(load_module(&path, &config.name, device)?)
        };
        Ok(TorchInstance {
            module,
            binding,
            settings,
            device,
        })
    }
}

/// Fails with the reason when this libtorch cannot run on CUDA device `id`:
/// libtorch_cuda not linked (the library is built with `TRTIS_TORCH_CUDA=1`
/// against the full torch wheel for that), no driver, or no such device.
fn require_cuda(id: usize, instance: &str) -> Result<()> {
    let count = if tch::Cuda::is_available() {
        tch::Cuda::device_count()
    } else {
        0
    };
    if (id as i64) < count {
        return Ok(());
    }
    Err(Error::unavailable(format!(
        "instance '{instance}' is placed on GPU {id} (KIND_GPU), but the libtorch of this PyTorch backend \
         sees {count} CUDA device(s): build the backend library against the full torch wheel (with its \
         CUDA libraries) with TRTIS_TORCH_CUDA=1, as scripts/test-gpu.sh does, on a machine with the NVIDIA \
         driver; or use KIND_CPU"
    )))
}

fn load_module(path: &Path, model: &str, device: tch::Device) -> Result<CModule> {
    let mut module = CModule::load_on_device(path, device)
        .map_err(|e| Error::internal(format!("failed to load model '{model}': {e}")))?;
    module.set_eval();
    Ok(module)
}

/// Ends an InferenceMode guard when dropped.
struct InferenceGuard(*mut std::ffi::c_void);

impl InferenceGuard {
    /// `c10::InferenceMode` on this thread until dropped, when `enabled`
    /// (Triton's INFERENCE_MODE); else nothing.
    fn new(enabled: bool) -> Self {
        InferenceGuard(if enabled {
            // SAFETY: the guard ends on this thread, when dropped.
            unsafe { trtis_inference_mode_enter(1) }
        } else {
            std::ptr::null_mut()
        })
    }
}

impl Drop for InferenceGuard {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: made by trtis_inference_mode_enter on this thread.
            unsafe { trtis_inference_mode_exit(self.0) }
        }
    }
}

impl TorchInstance {
    /// Runs one request: its inputs, the outputs it wants (written into
    /// `out`, `index` = position in `outputs`); returns the input and output
    /// conversion times.
    fn execute(&self, inputs: &[View], outputs: &[&str], out: &OutputSink) -> Result<[u64; 2]> {
        let start = Instant::now();
        apply_thread_settings(&self.settings);
        apply_process_settings(&self.settings);
        let args = self.arguments(inputs)?;
        let converted = start.elapsed();
        let result = {
            let _no_grad = tch::no_grad_guard();
            let _inference = InferenceGuard::new(self.settings.inference_mode);
            self.module.forward_is(&args)
        }
        .map_err(|e| Error::internal(format!("PyTorch execute failure: {e}")))?;
        let ran = Instant::now();
        let values = returned(result)?;
        for (index, name) in outputs.iter().enumerate() {
            let slot = self
                .binding
                .outputs
                .iter()
                .find(|o| o.name == *name)
                .ok_or_else(|| Error::internal(format!("unexpected output '{name}'")))?;
            let value = values.get(slot.index).ok_or_else(|| {
                Error::invalid_arg(format!(
                    "The output {name} in the model configuration refers to an output index which doesn't exist. This model has {} outputs",
                    values.len()
                ))
            })?;
            match value {
                IValue::Tensor(t) => emit_tensor(out, index, slot, t)?,
                IValue::StringList(strings) if slot.datatype.is_none() => put(
                    out,
                    index,
                    name,
                    DataType::Bytes,
                    &[strings.len() as i64],
                    &Tensor::serialize_bytes(strings.iter().map(|s| s.as_bytes())),
                )?,
                IValue::StringList(_) => {
                    return Err(Error::invalid_arg(format!(
                        "output '{name}' is a List[str], but the configuration expects a tensor"
                    )))
                }
                other => {
                    return Err(Error::invalid_arg(format!(
                        "output '{name}' must be of type Tensor or List[str], not {}",
                        describe(other)
                    )))
                }
            }
        }
        drop(args);
        Ok([converted.as_nanos() as u64, ran.elapsed().as_nanos() as u64])
    }
}

impl TorchInstance {
    /// The values to call `forward()` with. Tensors may view `inputs`' bytes.
    fn arguments(&self, inputs: &[View]) -> Result<Vec<IValue>> {
        let value = |t: &View| -> Result<IValue> {
            if t.datatype == DataType::Bytes {
                Ok(IValue::StringList(to_strings(t)?))
            } else if self.device == tch::Device::Cpu {
                Ok(IValue::Tensor(to_tch(t)?))
            } else {
                // Copied to the instance's GPU; outputs come back to the
                // CPU in `write_output`.
                let on_device = to_tch(t)?
                    .f_to_device(self.device)
                    .map_err(|e| Error::internal(format!("input '{}': {e}", t.name)))?;
                Ok(IValue::Tensor(on_device))
            }
        };
        match &self.binding.inputs {
            Inputs::Dict { .. } => {
                let entries = inputs
                    .iter()
                    .map(|t| Ok((IValue::String(t.name.to_string()), value(t)?)))
                    .collect::<Result<Vec<_>>>()?;
                Ok(vec![IValue::GenericDict(entries)])
            }
            Inputs::Positional { slots, arguments } => {
                let mut args: Vec<Option<IValue>> = (0..*arguments).map(|_| None).collect();
                for t in inputs {
                    let slot = slots.iter().find(|s| s.name == t.name).ok_or_else(|| {
                        Error::invalid_arg(format!("unexpected inference input '{}'", t.name))
                    })?;
                    args[slot.position] = Some(value(t)?);
                }
                args.into_iter()
                    .enumerate()
                    .map(|(i, a)| {
                        a.ok_or_else(|| {
                            let name = slots
                                .iter()
                                .find(|s| s.position == i)
                                .map(|s| s.name.as_str())
                                .unwrap_or("?");
                            Error::invalid_arg(format!(
                                "expected input '{name}' (forward() argument {i}) is missing"
                            ))
                        })
                    })
                    .collect()
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The C ABI (trtis::core::backend::pytorch::abi).

fn report(err: *const ErrorSink, e: &Error) {
    // SAFETY: the server passes a live sink for the call.
    if let Some(sink) = unsafe { err.as_ref() } {
        (sink.report)(sink.ctx, abi::kind_code(e.kind), Str::of(&e.message));
    }
}

/// Runs `f`, turning a panic into an error (a panic must not cross the C
/// boundary).
fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        Err(Error::internal(format!("PyTorch backend failure: {why}")))
    })
}

// The exports have the ABI's types.
const _: abi::InitFn = trtis_torch_init;
const _: abi::LoadFn = trtis_torch_load;
const _: abi::ExecuteFn = trtis_torch_execute;
const _: abi::UnloadFn = trtis_torch_unload;

/// # Safety
/// Called once by the server before any other call.
#[no_mangle]
pub unsafe extern "C" fn trtis_torch_init(abi_version: u32, log_fn: LogFn) -> u32 {
    if abi_version != abi::ABI_VERSION {
        return abi::ABI_VERSION;
    }
    let _ = LOG.set(log_fn);
    0
}

/// # Safety
/// `config` holds `config_len` bytes of an encoded ModelConfig; the strings
/// and `err` are live for the call.
#[no_mangle]
pub unsafe extern "C" fn trtis_torch_load(
    config: *const u8,
    config_len: usize,
    version_dir: Str,
    instance: Str,
    device: i32,
    err: *const ErrorSink,
) -> *mut c_void {
    let loaded = guarded(|| {
        let bytes = if config_len == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(config, config_len)
        };
        let config = ModelConfig::decode(bytes).map_err(|e| {
            Error::internal(format!("PyTorch backend: bad model configuration: {e}"))
        })?;
        let device = if device < 0 {
            tch::Device::Cpu
        } else {
            tch::Device::Cuda(device as usize)
        };
        Instance::load(
            &config,
            Path::new(version_dir.as_str()),
            instance.as_str(),
            device,
        )
    });
    match loaded {
        Ok(instance) => Box::into_raw(Box::new(instance)) as *mut c_void,
        Err(e) => {
            report(err, &e);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// `instance` came from `trtis_torch_load`; the arrays, sinks and
/// `timing_ns` (two values) are live for the call.
#[no_mangle]
pub unsafe extern "C" fn trtis_torch_execute(
    instance: *mut c_void,
    inputs: *const TensorIn,
    n_inputs: usize,
    outputs: *const Str,
    n_outputs: usize,
    out: *const OutputSink,
    err: *const ErrorSink,
    timing_ns: *mut u64,
) -> i32 {
    let ran = guarded(|| {
        let instance = &*(instance as *const Instance);
        let inputs = if n_inputs == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(inputs, n_inputs)
        };
        let views = inputs
            .iter()
            .map(|t| {
                let datatype = abi::datatype_of(t.datatype)
                    .ok_or_else(|| Error::internal("PyTorch backend: unknown datatype"))?;
                Ok(View {
                    name: t.name.as_str(),
                    datatype,
                    shape: if t.rank == 0 {
                        &[]
                    } else {
                        std::slice::from_raw_parts(t.shape, t.rank)
                    },
                    data: if t.len == 0 {
                        &[]
                    } else {
                        std::slice::from_raw_parts(t.data, t.len)
                    },
                })
            })
            .collect::<Result<Vec<View>>>()?;
        let outputs = if n_outputs == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(outputs, n_outputs)
        };
        let names: Vec<&str> = outputs.iter().map(|s| s.as_str()).collect();
        instance.execute(&views, &names, &*out)
    });
    match ran {
        Ok(timing) => {
            if !timing_ns.is_null() {
                *timing_ns = timing[0];
                *timing_ns.add(1) = timing[1];
            }
            0
        }
        Err(e) => {
            report(err, &e);
            -1
        }
    }
}

/// # Safety
/// `instance` came from `trtis_torch_load` and is not used after.
#[no_mangle]
pub unsafe extern "C" fn trtis_torch_unload(instance: *mut c_void) {
    if !instance.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            drop(Box::from_raw(instance as *mut Instance))
        }));
    }
}
