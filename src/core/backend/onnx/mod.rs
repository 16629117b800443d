//! The ONNX Runtime backend (`platform: "onnxruntime_onnx"`, `backend:
//! "onnxruntime"`, file `model.onnx`) through `ort` with `load-dynamic`: the
//! shared library comes from the `onnxruntime` PyPI wheel and is found at run
//! time (see [`find_library`]). One `Session` per instance, owned by that
//! instance's thread (`Session::run` takes `&mut self`).
//!
//! The settings a config asks for are read in [`settings`] (pure, shared
//! with `disabled.rs`, which stands in for this file in a build without the
//! `onnx` feature).

pub mod settings;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use half::f16;
use ort::environment::Environment;
use ort::ep;
use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{IoBinding, RunOptions, Session};
use ort::value::{
    DynValue, PrimitiveTensorElementType, Tensor as OrtTensor, TensorElementType, ValueType,
};

use crate::core::config::autocomplete::ModelTensor;
use crate::core::config::ModelConfig;
use crate::core::device::Device;
use crate::core::error::{Error, Result};
use crate::core::types::element::{decode, encode, Element};
use crate::core::types::{element_count, DataType, Tensor};

use super::LoadContext;
use settings::{GraphLevel, OrtSettings, Spinning};

/// What to install when the library cannot be found.
pub const INSTALL_HINT: &str =
    "install it with `pip install onnxruntime==1.31.1` (scripts/setup.sh does, into .venv) \
     or set ORT_DYLIB_PATH to libonnxruntime.so";

/// Locates `libonnxruntime.so`: `ORT_DYLIB_PATH`; then a project-local
/// `.venv` (beside the working directory or any ancestor of the trtis
/// executable); then the `onnxruntime` package of the active `python3`.
pub fn find_library() -> Result<PathBuf> {
    if let Some(named) = super::library_from_env("ORT_DYLIB_PATH", INSTALL_HINT) {
        return named;
    }
    for root in super::project_roots() {
        if let Some(lib) = lib_in_venv(&root.join(".venv")) {
            return Ok(lib);
        }
    }
    if let Some(lib) = lib_from_python() {
        return Ok(lib);
    }
    Err(Error::unavailable(format!(
        "ONNX Runtime library not found; {INSTALL_HINT}"
    )))
}

fn lib_in_venv(venv: &Path) -> Option<PathBuf> {
    let lib = venv.join("lib");
    for entry in std::fs::read_dir(lib).ok()?.flatten() {
        let capi = entry.path().join("site-packages/onnxruntime/capi");
        if let Some(so) = lib_in_dir(&capi) {
            return Some(so);
        }
    }
    None
}

fn lib_in_dir(dir: &Path) -> Option<PathBuf> {
    let mut libs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libonnxruntime.so"))
        })
        .collect();
    libs.sort();
    libs.pop()
}

fn lib_from_python() -> Option<PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import onnxruntime, os; print(os.path.dirname(onnxruntime.__file__))",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = String::from_utf8(out.stdout).ok()?;
    lib_in_dir(&Path::new(dir.trim()).join("capi"))
}

/// The process-wide ONNX Runtime environment, created on first use.
pub fn environment() -> Result<&'static Environment> {
    static ENV: OnceLock<std::result::Result<Environment, String>> = OnceLock::new();
    ENV.get_or_init(|| {
        let path = find_library().map_err(|e| e.message)?;
        let builder = ort::init_from(&path)
            .map_err(|e| format!("failed to load ONNX Runtime from {}: {e}", path.display()))?;
        builder
            .with_name("trtis")
            .build()
            .map_err(|e| format!("failed to create the ONNX Runtime environment: {e}"))
    })
    .as_ref()
    .map_err(|e| Error::unavailable(e.clone()))
}

/// Opens a session on `path` with the model's settings (`OrtSettings`:
/// threads, execution mode, memory arena and pattern, graph optimization
/// level, `session.*` config entries).
pub fn open_session(path: &Path, config: &ModelConfig) -> Result<Session> {
    let settings = OrtSettings::from_config(config)?;
    open_with(path, &settings, Device::Cpu)
}

/// Whether the ONNX Runtime library (found and loaded now) has the CUDA
/// execution provider: false for the `onnxruntime` wheel, the CPU build.
pub fn cuda_provider_available() -> bool {
    environment().is_ok() && <ep::CUDA as ep::ExecutionProvider>::is_available().unwrap_or(false)
}

/// What to install for GPU instances when the library has no CUDA provider.
pub const GPU_INSTALL_HINT: &str =
    "install the GPU build in its place (`pip uninstall onnxruntime && pip install onnxruntime-gpu==1.31.1`) \
     or set ORT_DYLIB_PATH to the libonnxruntime.so of an ONNX Runtime built with CUDA";

/// Fails with the reason when the loaded ONNX Runtime library lacks the
/// execution provider `P` (`what`: how a user names it).
fn require_provider<P: ep::ExecutionProvider>(what: &str, device: i32) -> Result<()> {
    let available = P::is_available().map_err(ort_err)?;
    if available {
        return Ok(());
    }
    let library = find_library()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "in use".into());
    Err(Error::unavailable(format!(
        "the instance is placed on GPU {device} (KIND_GPU), but the ONNX Runtime library {library} has no {what} \
         execution provider (the 'onnxruntime' package is the CPU build); {GPU_INSTALL_HINT}"
    )))
}

/// The execution providers of a session on `device`, in order of
/// preference: for a GPU, TensorRT when asked for, then CUDA, each on the
/// instance's device and failing the load if it cannot be registered
/// (never a silent fall back to the CPU); then the CPU provider, which runs
/// what the others do not.
fn providers(s: &OrtSettings, device: Device) -> Result<Vec<ep::ExecutionProviderDispatch>> {
    use ep::ArbitrarilyConfigurableExecutionProvider;
    let mut out = Vec::new();
    if let Device::Gpu(id) = device {
        require_provider::<ep::CUDA>("CUDA", id)?;
        if let Some(options) = &s.gpu.tensorrt {
            require_provider::<ep::TensorRT>("TensorRT", id)?;
            let mut trt = ep::TensorRT::default().with_device_id(id);
            for (k, v) in options {
                trt = trt.with_arbitrary_config(k, v);
            }
            out.push(trt.build().error_on_failure());
        }
        let mut cuda = ep::CUDA::default().with_device_id(id);
        for (k, v) in &s.gpu.cuda {
            cuda = cuda.with_arbitrary_config(k, v);
        }
        out.push(cuda.build().error_on_failure());
    }
    out.push(ep::CPU::default().with_arena_allocator(s.mem_arena).build());
    Ok(out)
}

fn open_with(path: &Path, s: &OrtSettings, device: Device) -> Result<Session> {
    let env = environment()?;
    let providers = providers(s, device)?;
    let level = match s.level {
        GraphLevel::Disabled => GraphOptimizationLevel::Disable,
        GraphLevel::Basic => GraphOptimizationLevel::Level1,
        GraphLevel::Extended => GraphOptimizationLevel::Level2,
        GraphLevel::All => GraphOptimizationLevel::All,
    };
    let session = (|| -> ort::Result<Session> {
        let mut builder = Session::builder(env)?
            .with_intra_threads(s.intra_threads)?
            .with_inter_threads(s.inter_threads)?
            .with_intra_op_spinning(s.spinning != Spinning::Off)?
            .with_parallel_execution(s.parallel)?
            .with_memory_pattern(s.mem_pattern)?
            .with_optimization_level(level)?
            .with_execution_providers(providers)?;
        // The threads stop spinning when a run ends, unless the config
        // says otherwise with the entry itself.
        let stop = "session.force_spinning_stop";
        if s.spinning == Spinning::DuringRuns && !s.session_entries.iter().any(|(k, _)| k == stop) {
            builder = builder.with_config_entry(stop, "1")?;
        }
        for (key, value) in &s.session_entries {
            builder = builder.with_config_entry(key, value)?;
        }
        builder.commit_from_file(path)
    })();
    session.map_err(|e| {
        let mut message = format!("failed to load '{}': {e}", path.display());
        if matches!(device, Device::Gpu(_)) && message.contains("Failed to load library") {
            message.push_str(
                " (ONNX Runtime's CUDA provider needs the CUDA and cuDNN libraries its build names: \
                 `pip install 'onnxruntime-gpu[cuda,cudnn]==1.31.1'` brings them as nvidia-* wheels, \
                 whose lib directories go on LD_LIBRARY_PATH; scripts/test-gpu.sh does both)",
            );
        }
        Error::internal(message)
    })
}

/// The protocol type of an ONNX element type (None for unsupported types).
pub fn data_type_of(ty: TensorElementType) -> Option<DataType> {
    Some(match ty {
        TensorElementType::Bool => DataType::Bool,
        TensorElementType::Uint8 => DataType::Uint8,
        TensorElementType::Uint16 => DataType::Uint16,
        TensorElementType::Uint32 => DataType::Uint32,
        TensorElementType::Uint64 => DataType::Uint64,
        TensorElementType::Int8 => DataType::Int8,
        TensorElementType::Int16 => DataType::Int16,
        TensorElementType::Int32 => DataType::Int32,
        TensorElementType::Int64 => DataType::Int64,
        TensorElementType::Float16 => DataType::Fp16,
        TensorElementType::Float32 => DataType::Fp32,
        TensorElementType::Float64 => DataType::Fp64,
        TensorElementType::String => DataType::Bytes,
        _ => return None,
    })
}

/// The inputs and outputs of the model file at `path`.
pub fn model_io(path: &Path) -> Result<(Vec<ModelTensor>, Vec<ModelTensor>)> {
    let session = open_session(path, &ModelConfig::default())?;
    Ok(session_io(&session))
}

/// A session's inputs and outputs.
fn session_io(session: &Session) -> (Vec<ModelTensor>, Vec<ModelTensor>) {
    let info = |outlets: &[ort::value::Outlet]| -> Vec<ModelTensor> {
        outlets
            .iter()
            .map(|o| {
                let (datatype, shape) = match o.dtype() {
                    ValueType::Tensor { ty, shape, .. } => {
                        (data_type_of(*ty), shape.iter().copied().collect())
                    }
                    _ => (None, Vec::new()),
                };
                ModelTensor {
                    name: o.name().to_string(),
                    datatype,
                    shape,
                }
            })
            .collect()
    };
    (info(session.inputs()), info(session.outputs()))
}

pub struct OnnxInstance {
    session: Session,
    /// For an instance on a GPU: ONNX Runtime's I/O binding, through which
    /// ONNX Runtime copies the inputs to the device and the outputs back to
    /// host memory (bound to the CPU), none of it by hand. A CPU instance
    /// runs `Session::run`, which has no copies to make.
    binding: Option<IoBinding>,
    /// Run options, when the config sets one
    /// (`memory.enable_memory_arena_shrinkage`).
    run_options: Option<RunOptions>,
    /// The last execution's input and output conversion times.
    timing: (std::time::Duration, std::time::Duration),
}

impl OnnxInstance {
    pub fn load(ctx: &LoadContext) -> Result<Self> {
        let file = super::model_file(ctx.config, "model.onnx");
        let settings = OrtSettings::from_config(ctx.config)?;
        let session = open_with(&ctx.version_dir.join(file), &settings, ctx.device)?;
        let (inputs, outputs) = session_io(&session);
        crate::core::config::autocomplete::check_scalars(ctx.config, &inputs, &outputs)?;
        let binding = match ctx.device {
            Device::Gpu(_) => Some(session.create_binding().map_err(ort_err)?),
            _ => None,
        };
        let run_options = match &settings.arena_shrinkage {
            None => None,
            Some(devices) => {
                let mut options = RunOptions::new().map_err(ort_err)?;
                options
                    .set("memory.enable_memory_arena_shrinkage", devices)
                    .map_err(ort_err)?;
                Some(options)
            }
        };
        Ok(OnnxInstance {
            session,
            binding,
            run_options,
            timing: Default::default(),
        })
    }
}

fn ort_err(e: ort::Error) -> Error {
    Error::internal(format!("onnxruntime: {e}"))
}

/// A computation over elements that ONNX Runtime takes as plain arrays,
/// run for a datatype known at run time by [`with_ort_element`].
trait OrtElementFn {
    type Output;
    fn call<T: Element + PrimitiveTensorElementType>(self) -> Self::Output;
}

/// Runs `f` with the element type of `datatype`; None for BYTES (strings)
/// and BF16 (not taken by this backend).
fn with_ort_element<F: OrtElementFn>(datatype: DataType, f: F) -> Option<F::Output> {
    Some(match datatype {
        DataType::Bool => f.call::<bool>(),
        DataType::Uint8 => f.call::<u8>(),
        DataType::Uint16 => f.call::<u16>(),
        DataType::Uint32 => f.call::<u32>(),
        DataType::Uint64 => f.call::<u64>(),
        DataType::Int8 => f.call::<i8>(),
        DataType::Int16 => f.call::<i16>(),
        DataType::Int32 => f.call::<i32>(),
        DataType::Int64 => f.call::<i64>(),
        DataType::Fp16 => f.call::<f16>(),
        DataType::Fp32 => f.call::<f32>(),
        DataType::Fp64 => f.call::<f64>(),
        DataType::Bytes | DataType::Bf16 => return None,
    })
}

/// A tensor of numbers → an ORT value.
struct ToValue<'a>(&'a Tensor);

impl OrtElementFn for ToValue<'_> {
    type Output = ort::Result<DynValue>;
    fn call<T: Element + PrimitiveTensorElementType>(self) -> Self::Output {
        let data = decode::<T>(&self.0.data);
        OrtTensor::from_array((self.0.shape.clone(), data)).map(|v| v.into_dyn())
    }
}

/// An ORT value of numbers → its shape and little-endian data.
struct FromValue<'a>(&'a DynValue);

impl OrtElementFn for FromValue<'_> {
    type Output = ort::Result<(Vec<i64>, Vec<u8>)>;
    fn call<T: Element + PrimitiveTensorElementType>(self) -> Self::Output {
        let (shape, data) = self.0.try_extract_tensor::<T>()?;
        Ok((shape.iter().copied().collect(), encode(data)))
    }
}

/// Our tensor → an ORT value.
fn to_value(t: &Tensor) -> Result<DynValue> {
    if let Some(value) = with_ort_element(t.datatype, ToValue(t)) {
        return value.map_err(ort_err);
    }
    if t.datatype == DataType::Bf16 {
        return Err(Error::unsupported(format!(
            "input '{}': BF16 is not supported by the ONNX Runtime backend",
            t.name
        )));
    }
    // BYTES: UTF-8 strings.
    let strings = Tensor::bytes_elements(&t.data)?
        .into_iter()
        .map(|e| {
            String::from_utf8(e.to_vec()).map_err(|_| {
                Error::invalid_arg(format!(
                    "input '{}': ONNX Runtime string tensors must be valid UTF-8",
                    t.name
                ))
            })
        })
        .collect::<Result<Vec<String>>>()?;
    let count = strings.len();
    let shape_len = element_count(&t.shape).unwrap_or(usize::MAX);
    if count != shape_len {
        return Err(Error::invalid_arg(format!(
            "input '{}' has {count} BYTES elements, its shape needs {shape_len}",
            t.name
        )));
    }
    OrtTensor::from_string_array((t.shape.clone(), strings.as_slice()))
        .map(|v| v.into_dyn())
        .map_err(ort_err)
}

/// An ORT output value → our tensor.
fn from_value(name: &str, value: &DynValue) -> Result<Tensor> {
    let ty = match value.dtype() {
        ValueType::Tensor { ty, .. } => *ty,
        other => {
            return Err(Error::unsupported(format!(
                "output '{name}' is not a tensor: {other:?}"
            )))
        }
    };
    let datatype = data_type_of(ty).ok_or_else(|| {
        Error::unsupported(format!("output '{name}' has unsupported type {ty:?}"))
    })?;
    let (shape, data) = match with_ort_element(datatype, FromValue(value)) {
        Some(numbers) => numbers.map_err(ort_err)?,
        // BYTES (`data_type_of` never yields BF16).
        None => {
            let (shape, strings) = value.try_extract_strings().map_err(ort_err)?;
            (
                shape.iter().copied().collect(),
                Tensor::serialize_bytes(strings.iter().map(|s| s.as_bytes())),
            )
        }
    };
    Ok(Tensor {
        name: name.to_string(),
        datatype,
        shape,
        data,
    })
}

/// Binds one execution's inputs (ONNX Runtime queues their copies to the
/// session's device) and its requested outputs, to host memory: ONNX
/// Runtime copies them back from the device. The binding keeps nothing of
/// the execution before.
fn bind(
    binding: &mut IoBinding,
    inputs: Vec<(&str, DynValue)>,
    outputs: &[String],
) -> ort::Result<()> {
    binding.clear();
    for (name, value) in &inputs {
        binding.bind_input(*name, value)?;
    }
    let host = MemoryInfo::new(
        AllocationDevice::CPU,
        0,
        AllocatorType::Device,
        MemoryType::Default,
    )?;
    for name in outputs {
        binding.bind_output_to_device(name.as_str(), &host)?;
    }
    Ok(())
}

/// The requested outputs of a run, in request order.
fn outputs_of(results: &ort::session::SessionOutputs, outputs: &[String]) -> Result<Vec<Tensor>> {
    outputs
        .iter()
        .map(|name| {
            let value = results.get(name).ok_or_else(|| {
                Error::internal(format!("onnxruntime did not produce output '{name}'"))
            })?;
            from_value(name, value)
        })
        .collect()
}

impl super::BatchExec for OnnxInstance {
    fn execute(&mut self, inputs: Vec<Tensor>, outputs: &[String]) -> Result<Vec<Tensor>> {
        let start = std::time::Instant::now();
        let values = inputs
            .iter()
            .map(|t| Ok((t.name.as_str(), to_value(t)?)))
            .collect::<Result<Vec<(&str, DynValue)>>>()?;
        let converted = start.elapsed();
        let (tensors, ran) = match &mut self.binding {
            None => {
                let results = match &self.run_options {
                    None => self.session.run(values),
                    Some(options) => self.session.run_with_options(values, options),
                }
                .map_err(ort_err)?;
                let ran = std::time::Instant::now();
                (outputs_of(&results, outputs), ran)
            }
            Some(binding) => {
                bind(binding, values, outputs).map_err(ort_err)?;
                let results = match &self.run_options {
                    None => self.session.run_binding(binding),
                    Some(options) => self.session.run_binding_with_options(binding, options),
                }
                .map_err(ort_err)?;
                binding.synchronize_outputs().map_err(ort_err)?;
                let ran = std::time::Instant::now();
                (outputs_of(&results, outputs), ran)
            }
        };
        self.timing = (converted, ran.elapsed());
        tensors
    }

    fn timing(&self) -> (std::time::Duration, std::time::Duration) {
        self.timing
    }
}

/// The ONNX Runtime backend in the registry.
pub struct Onnx;

impl super::Backend for Onnx {
    fn name(&self) -> &'static str {
        "onnxruntime"
    }

    fn load(&self, ctx: &LoadContext) -> Result<super::Instance> {
        // Triton's OpenVINO accelerator: trtis's OpenVINO backend runs the
        // ONNX file.
        #[cfg(feature = "openvino")]
        if super::openvino::wanted_by_onnx(ctx.config) {
            return Ok(super::Instance::Batches(Box::new(
                super::openvino::OvInstance::load_for_onnx(ctx)?,
            )));
        }
        Ok(super::Instance::Batches(Box::new(OnnxInstance::load(ctx)?)))
    }

    /// Its parameters; with `model_files`, what loading the file checks of
    /// its scalars (a file ONNX Runtime cannot open is the load's to
    /// report); with the OpenVINO accelerator, OpenVINO's checks.
    fn check(
        &self,
        config: &ModelConfig,
        version_dirs: &[PathBuf],
        model_files: bool,
    ) -> Vec<crate::core::config::Issue> {
        use crate::core::config::Issue;
        let mut out = Vec::new();
        if let Err(e) = OrtSettings::from_config(config) {
            out.push(Issue::error("parameters", e.message));
        }
        if model_files {
            let file = super::model_file(config, "model.onnx");
            let found = version_dirs
                .iter()
                .map(|d| d.join(file))
                .filter(|p| p.is_file())
                .filter_map(|p| model_io(&p).ok())
                .find_map(|(i, o)| {
                    crate::core::config::autocomplete::check_scalars(config, &i, &o).err()
                });
            if let Some(e) = found {
                out.push(Issue::error("input", e.message));
            }
        }
        #[cfg(feature = "openvino")]
        if super::openvino::wanted_by_onnx(config) {
            out.extend(super::openvino::check(
                &super::openvino::onnx_as_openvino(config),
                version_dirs,
            ));
        }
        out
    }

    /// Inputs, outputs and batching from the file when the config leaves
    /// inputs or outputs out.
    fn auto_complete(
        &self,
        config: &ModelConfig,
        ctx: &super::CompleteContext,
    ) -> Option<Result<ModelConfig>> {
        if !config.input.is_empty() && !config.output.is_empty() {
            return None;
        }
        let file = ctx.version_dir.join(&config.default_model_filename);
        Some(super::completed_from(config, model_io(&file), ctx))
    }

    /// With the CUDA provider in its library.
    fn gpu_ready(&self) -> bool {
        cuda_provider_available()
    }

    /// What auto-complete makes of the model's inputs and outputs.
    fn gen_config(
        &self,
        file: &Path,
        req: &super::generate::GenRequest,
        config: &mut ModelConfig,
    ) -> std::result::Result<super::generate::Generated, String> {
        super::generate::from_tensors(file, req, config, model_io(file))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::backend::{BackendOptions, BatchExec};

    /// An instance of the example repository's model `name` on the CPU,
    /// None when no ONNX Runtime library is installed.
    fn instance(name: &str, bound: bool) -> Option<(ModelConfig, OnnxInstance)> {
        find_library().ok()?;
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/model_repository")
            .join(name);
        let text = std::fs::read_to_string(dir.join("config.pbtxt")).unwrap();
        let config = crate::core::config::parse_config(text.as_bytes())
            .unwrap()
            .config;
        let options = BackendOptions::default();
        let ctx = LoadContext {
            config: &config,
            model_dir: &dir,
            version_dir: dir.join("1"),
            instance_name: format!("{name}_0"),
            instance_index: 0,
            device: Device::Cpu,
            options: &options,
        };
        let mut instance = OnnxInstance::load(&ctx).unwrap();
        assert!(instance.binding.is_none(), "a CPU instance runs unbound");
        if bound {
            instance.binding = Some(instance.session.create_binding().unwrap());
        }
        Some((config, instance))
    }

    fn int32s(name: &str, values: &[i32]) -> Tensor {
        Tensor {
            name: name.into(),
            datatype: DataType::Int32,
            shape: vec![1, values.len() as i64],
            data: encode(values),
        }
    }

    /// The I/O binding path GPU instances take, run here on the CPU
    /// provider: the same outputs as `Session::run`, only those requested,
    /// in request order, and nothing kept from one execution to the next.
    #[test]
    fn bound_runs_match_plain_runs() {
        let Some((_, mut plain)) = instance("simple", false) else {
            return;
        };
        let (_, mut bound) = instance("simple", true).unwrap();
        let a: Vec<i32> = (0..16).collect();
        let b: Vec<i32> = (0..16).map(|i| 100 - 3 * i).collect();
        let both = ["OUTPUT1".to_string(), "OUTPUT0".to_string()];
        let inputs = vec![int32s("INPUT0", &a), int32s("INPUT1", &b)];
        let want = plain.execute(inputs.clone(), &both).unwrap();
        let got = bound.execute(inputs, &both).unwrap();
        assert_eq!(got, want);
        assert_eq!(got[0].name, "OUTPUT1");
        let diff: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
        assert_eq!(got[0].data, encode(&diff));

        // Another execution, other inputs, one output.
        let c: Vec<i32> = vec![7; 16];
        let one = ["OUTPUT0".to_string()];
        let got = bound
            .execute(vec![int32s("INPUT0", &c), int32s("INPUT1", &c)], &one)
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].data, encode(&[14; 16]));
        assert_eq!(got[0].shape, vec![1, 16]);

        // A batch of 3.
        let batch = Tensor {
            name: "INPUT0".into(),
            datatype: DataType::Int32,
            shape: vec![3, 16],
            data: encode(&[1i32; 48]),
        };
        let mut other = batch.clone();
        other.name = "INPUT1".into();
        let got = bound.execute(vec![batch, other], &one).unwrap();
        assert_eq!(got[0].shape, vec![3, 16]);
        assert_eq!(got[0].data, encode(&[2i32; 48]));
    }

    /// The classifier through the binding: the same scores as unbound.
    #[test]
    fn bound_classifier_matches_plain() {
        let Some((config, mut plain)) = instance("efficientnet_lite0", false) else {
            return;
        };
        let (_, mut bound) = instance("efficientnet_lite0", true).unwrap();
        let input = &config.input[0];
        let mut shape: Vec<i64> = vec![1];
        shape.extend(&input.dims);
        let count = element_count(&shape).unwrap();
        let pixels: Vec<f32> = (0..count)
            .map(|i| ((i * 7919) % 255) as f32 / 255.0)
            .collect();
        let tensor = Tensor {
            name: input.name.clone(),
            datatype: DataType::Fp32,
            shape,
            data: encode(&pixels),
        };
        let outputs = [config.output[0].name.clone()];
        let want = plain.execute(vec![tensor.clone()], &outputs).unwrap();
        let got = bound.execute(vec![tensor], &outputs).unwrap();
        assert_eq!(got, want);
    }
}
