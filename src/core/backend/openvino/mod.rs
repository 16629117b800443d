//! The OpenVINO backend (`backend: "openvino"`; an IR `model.xml` with its
//! `model.bin`, or through `default_model_filename` an ONNX model or a
//! TensorFlow SavedModel directory), run on the CPU by OpenVINO's C API
//! through the `openvino` crate (runtime linking: the library is loaded
//! when the first OpenVINO model loads, from the `openvino` wheel's files
//! that scripts/setup.sh unpacks into `.tools/openvino`, or
//! `TRTIS_OPENVINO_LIB`).
//!
//! As Triton's OpenVINO backend: one compiled model and one infer request
//! per instance, CPU properties from the parameters ([`settings`]), the
//! config's names, count and dims checked against the model's ports with
//! Triton's messages. Unlike Triton, the batch dimension stays dynamic (1 to
//! `max_batch_size`), so the dynamic batcher's batches of any size run
//! without padding (with `ENABLE_BATCH_PADDING`, Triton's static batch and
//! zero padding). A config datatype other than the model's is converted
//! both ways by trtis (`types::element::cast`), where Triton inserts a
//! pre/post-processing step (the crate's has no input element type setter).

pub mod complete;
pub mod ir;
mod plan;
pub mod settings;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use openvino::{
    CompiledModel, Core, DeviceType, Dimension, ElementType, InferRequest, Model, PartialShape,
    RwPropertyKey, Shape, Tensor as OvTensor,
};

use self::settings::OvSettings;
use super::LoadContext;
use crate::core::config::autocomplete::DEFAULT_MAX_BATCH_SIZE;
use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::types::{DataType, Tensor};
pub use plan::check;
use plan::plan;

/// What to do when the library is missing.
pub const INSTALL_HINT: &str =
    "scripts/setup.sh unpacks it from the openvino==2026.4.1 wheel into .tools/openvino; \
     or set TRTIS_OPENVINO_LIB to its libopenvino_c.so.<version>";

/// Locates `libopenvino_c.so.<version>`: `TRTIS_OPENVINO_LIB`; then the
/// project's `.tools/openvino` (beside the working directory or any
/// ancestor of the trtis executable).
pub fn find_library() -> Result<PathBuf> {
    if let Some(named) = super::library_from_env("TRTIS_OPENVINO_LIB", INSTALL_HINT) {
        return named;
    }
    for root in &super::project_roots() {
        let dir = root.join(".tools/openvino");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libopenvino_c.so."))
            })
            .collect();
        found.sort();
        if let Some(lib) = found.pop() {
            return Ok(lib);
        }
    }
    Err(Error::unavailable(format!(
        "OpenVINO library (libopenvino_c.so.<version>) not found; {INSTALL_HINT}"
    )))
}

/// Loads the C API once per process.
fn ensure_loaded() -> Result<()> {
    static LOADED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let path = find_library().map_err(|e| e.message)?;
            openvino_sys::library::load_from(&path)
                .map_err(|e| format!("failed to load OpenVINO from {}: {e}", path.display()))
        })
        .clone()
        .map_err(Error::unavailable)
}

/// OpenVINO's element type of ours (every numeric type; not BYTES).
pub fn ov_type(d: DataType) -> Option<ElementType> {
    Some(match d {
        DataType::Bool => ElementType::Boolean,
        DataType::Uint8 => ElementType::U8,
        DataType::Uint16 => ElementType::U16,
        DataType::Uint32 => ElementType::U32,
        DataType::Uint64 => ElementType::U64,
        DataType::Int8 => ElementType::I8,
        DataType::Int16 => ElementType::I16,
        DataType::Int32 => ElementType::I32,
        DataType::Int64 => ElementType::I64,
        DataType::Fp16 => ElementType::F16,
        DataType::Bf16 => ElementType::Bf16,
        DataType::Fp32 => ElementType::F32,
        DataType::Fp64 => ElementType::F64,
        DataType::Bytes => return None,
    })
}

/// Ours of an OpenVINO element type (None: a type the protocol lacks).
pub fn data_type_of(e: ElementType) -> Option<DataType> {
    DataType::ALL.into_iter().find(|d| ov_type(*d) == Some(e))
}

fn type_name(e: ElementType) -> String {
    data_type_of(e).map_or_else(|| format!("{e:?}"), |d| format!("TYPE_{}", d.name()))
}

fn ov_error(step: &str) -> impl Fn(openvino::InferenceError) -> Error + '_ {
    move |e| Error::internal(format!("openvino error in {step} : {e}"))
}

/// One dimension of a model port, read out of OpenVINO (so that the checks
/// below are plain code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dim {
    dynamic: bool,
    min: i64,
    /// Negative or huge: unbounded.
    max: i64,
}

impl Dim {
    fn of(d: &Dimension) -> Dim {
        Dim {
            dynamic: d.is_dynamic(),
            min: d.get_min(),
            max: d.get_max(),
        }
    }

    /// A config's (or an IR's) dimension: -1 is unbounded dynamic.
    fn from_config(d: i64) -> Dim {
        if d < 0 {
            Dim {
                dynamic: true,
                min: 0,
                max: -1,
            }
        } else {
            Dim {
                dynamic: false,
                min: d,
                max: d,
            }
        }
    }

    /// As a config writes it: -1 for any dynamic dimension.
    fn to_config(self) -> i64 {
        if self.dynamic {
            -1
        } else {
            self.min
        }
    }

    fn unbounded(self) -> bool {
        self.max < 0 || self.max >= i64::from(u32::MAX)
    }

    fn to_ov(self) -> Dimension {
        // The C API's unbounded dimension is {-1, -1}; it refuses {0, -1}.
        if self.dynamic && self.unbounded() {
            Dimension::new(-1, -1)
        } else {
            Dimension::new(self.min, self.max)
        }
    }
}

/// A port of a model as openvino 0.11 hands it out (`Node`, an
/// `ov_output_const_port_t`), freed when dropped. The crate's `Node` has no
/// `Drop`: a port never freed holds its node, and through it the whole
/// graph and its weights, so every load of a model kept the model after
/// its unload (tens of MiB and an open `model.bin` per cycle). Its
/// `get_name` leaks the name's string too; `name` frees it.
struct OwnedPort(Option<openvino::Node>);

// `Node` is one raw pointer to the port (checked here, at compile time,
// before OwnedPort reads it out).
const _: () = assert!(
    std::mem::size_of::<openvino::Node>()
        == std::mem::size_of::<*mut openvino_sys::ov_output_const_port_t>()
);

impl OwnedPort {
    fn raw(&self) -> Option<*mut openvino_sys::ov_output_const_port_t> {
        // SAFETY: Node is a struct of the one pointer (size asserted
        // above), so its bytes are that pointer.
        self.0.as_ref().map(|n| unsafe {
            std::mem::transmute_copy::<openvino::Node, *mut openvino_sys::ov_output_const_port_t>(n)
        })
    }

    /// The port's tensor name (None when OpenVINO has none to give).
    fn name(&self) -> Option<String> {
        let raw = self.raw()?;
        let mut name: *mut std::os::raw::c_char = std::ptr::null_mut();
        // SAFETY: a live port; OpenVINO allocates the name, ov_free frees it.
        unsafe {
            if openvino_sys::ov_port_get_any_name(raw, &mut name) != openvino_sys::ov_status_e::OK
                || name.is_null()
            {
                return None;
            }
            let text = std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned();
            openvino_sys::ov_free(name);
            Some(text)
        }
    }
}

impl Drop for OwnedPort {
    fn drop(&mut self) {
        if let Some(raw) = self.raw() {
            // Forgotten, not dropped: should a later openvino give `Node` a
            // `Drop`, the port is still freed once.
            #[allow(clippy::forget_non_drop)]
            std::mem::forget(self.0.take());
            // SAFETY: a port OpenVINO handed out and nobody else frees.
            unsafe { openvino_sys::ov_output_const_port_free(raw) };
        }
    }
}

/// A model port: its name, element type and (partial) shape.
struct Port {
    name: String,
    element: ElementType,
    dims: Vec<Dim>,
}

fn ports(model: &Model, inputs: bool) -> Result<Vec<Port>> {
    let step = "reading model";
    let count = if inputs {
        model.get_inputs_len()
    } else {
        model.get_outputs_len()
    }
    .map_err(ov_error(step))?;
    (0..count)
        .map(|i| {
            let node = OwnedPort(Some(
                if inputs {
                    model.get_input_by_index(i)
                } else {
                    model.get_output_by_index(i)
                }
                .map_err(ov_error(step))?,
            ));
            let name = node.name().ok_or_else(|| {
                Error::internal(format!("{step}: OpenVINO gave a port without a name"))
            })?;
            let node = node.0.as_ref().expect("held until dropped");
            Ok(Port {
                name,
                element: node.get_element_type().map_err(ov_error(step))?,
                dims: node
                    .get_partial_shape()
                    .map_err(ov_error(step))?
                    .get_dimensions()
                    .iter()
                    .map(Dim::of)
                    .collect(),
            })
        })
        .collect()
}

/// The model file the config names (`model.xml` by default).
pub fn model_file(config: &ModelConfig) -> &str {
    if config.default_model_filename.is_empty() {
        "model.xml"
    } else {
        &config.default_model_filename
    }
}

/// The model's inputs and outputs as auto-complete and the config checks
/// see them: an IR's from its XML, without OpenVINO (layouts included);
/// any other format (ONNX, a SavedModel) as OpenVINO reads it, which needs
/// the library (and gives no layouts: such a model does not batch by
/// auto-complete, as in Triton).
pub fn model_ports(path: &Path) -> Result<(Vec<ir::IrPort>, Vec<ir::IrPort>)> {
    if path.extension().is_some_and(|e| e == "xml") {
        let xml = crate::core::fsutil::read_regular_to_string(path)
            .map_err(|e| Error::invalid_arg(format!("{}: {e}", path.display())))?;
        return ir::read(&xml);
    }
    ensure_loaded()?;
    let mut core = Core::new()
        .map_err(|e| Error::unavailable(format!("openvino error in creating core : {e}")))?;
    let model = core
        .read_model_from_file(&path.to_string_lossy(), "")
        .map_err(ov_error("reading model"))?;
    let as_ir = |ports: Vec<Port>| -> Vec<ir::IrPort> {
        ports
            .into_iter()
            .map(|p| ir::IrPort {
                name: p.name,
                element: Some(p.element),
                dims: p.dims.iter().map(|d| d.to_config()).collect(),
                layout: None,
            })
            .collect()
    };
    Ok((as_ir(ports(&model, true)?), as_ir(ports(&model, false)?)))
}

/// Auto-complete of an OpenVINO model's config (Triton's rules,
/// [`complete`]; a batching model without max_batch_size gets
/// `max_batch_size`), its notes logged as Triton logs them.
pub fn auto_complete(
    mut config: ModelConfig,
    version_dir: &Path,
    max_batch_size: i32,
) -> Result<ModelConfig> {
    let path = version_dir.join(model_file(&config));
    // Only an IR carries layouts; another format's ports matter only when
    // the config leaves inputs or outputs to fill (the load reads it anyway).
    let needs_ports = path.extension().is_some_and(|e| e == "xml")
        || config.input.is_empty()
        || config.output.is_empty();
    let (inputs, outputs) = if needs_ports {
        model_ports(&path)?
    } else {
        Default::default()
    };
    for (level, note) in complete::complete(&mut config, &inputs, &outputs, max_batch_size)? {
        crate::core::logging::log(level, &note);
    }
    Ok(config)
}

/// An ONNX Runtime model with `cpu_execution_accelerator { name:
/// "openvino" }` as this backend runs it: OpenVINO reads its ONNX file,
/// ONNX Runtime's parameters do not apply, and the precision is f32, as
/// ONNX Runtime's OpenVINO execution provider runs a CPU (`CPU_FP32`, its
/// default precision there), not OpenVINO's own default (bf16 on a CPU
/// with native bf16).
pub fn onnx_as_openvino(config: &ModelConfig) -> ModelConfig {
    let mut config = config.clone();
    config.backend = "openvino".into();
    config.platform.clear();
    config.parameters.clear();
    config.parameters.insert(
        "INFERENCE_PRECISION_HINT".into(),
        crate::core::config::pb::ModelParameter {
            string_value: "f32".into(),
        },
    );
    if config.default_model_filename.is_empty() {
        config.default_model_filename = "model.onnx".into();
    }
    config
}

/// Whether an ONNX Runtime model asks for `cpu_execution_accelerator {
/// name: "openvino" }` (Triton's OpenVINO execution provider).
pub fn wanted_by_onnx(config: &ModelConfig) -> bool {
    config
        .optimization
        .as_ref()
        .and_then(|o| o.execution_accelerators.as_ref())
        .is_some_and(|a| {
            a.cpu_execution_accelerator
                .iter()
                .any(|c| c.name == "openvino")
        })
}

pub struct OvInstance {
    request: InferRequest,
    _compiled: CompiledModel,
    /// The model's inputs (name, element type, as ours).
    inputs: Vec<(String, ElementType, DataType)>,
    /// The config's type of each output (and state output): the model's
    /// output is converted to it.
    output_types: Vec<(String, DataType)>,
    /// ENABLE_BATCH_PADDING: every batch is padded to this size.
    pad_to: Option<i64>,
    timing: (Duration, Duration),
}

impl OvInstance {
    pub fn load(ctx: &LoadContext) -> Result<Self> {
        let config = ctx.config;
        let model_name = &config.name;
        let settings = OvSettings::from_config(config)?;
        let file = model_file(config);
        let path = ctx.version_dir.join(file);
        if !path.exists() {
            return Err(Error::unavailable(format!(
                "unable to find '{}' for model '{model_name}'",
                path.display()
            )));
        }
        let weights = if file.ends_with(".xml") {
            let bin = path.with_extension("bin");
            if !bin.is_file() {
                return Err(Error::unavailable(format!(
                    "unable to find the weights '{}' of model '{model_name}' (an IR model.xml needs its model.bin beside it)",
                    bin.display()
                )));
            }
            bin.to_string_lossy().into_owned()
        } else {
            String::new()
        };
        ensure_loaded()?;
        let mut core = Core::new()
            .map_err(|e| Error::unavailable(format!("openvino error in creating core : {e}")))?;
        for (key, value) in &settings.properties {
            core.set_property(
                &DeviceType::CPU,
                &RwPropertyKey::Other((*key).into()),
                value,
            )
            .map_err(ov_error("setting properties"))?;
        }
        let mut model = core
            .read_model_from_file(&path.to_string_lossy(), &weights)
            .map_err(ov_error("reading model"))?;
        let inputs = ports(&model, true)?;
        let reshapes = plan(config, &settings, &inputs, &ports(&model, false)?)?;
        let batching = config.max_batch_size > 0;
        if batching || settings.reshape_io_layers {
            let reshapes = reshapes
                .into_iter()
                .map(|(name, dims)| {
                    let dims: Vec<Dimension> = dims.iter().map(|d| d.to_ov()).collect();
                    Ok((name, partial(&dims)?))
                })
                .collect::<Result<Vec<(String, PartialShape)>>>()?;
            let pairs: Vec<(&str, &PartialShape)> =
                reshapes.iter().map(|(n, s)| (n.as_str(), s)).collect();
            model.reshape(&pairs).map_err(ov_error("reshaping model"))?;
        }
        let mut output_types: Vec<(String, DataType)> = config
            .output
            .iter()
            .filter_map(|o| Some((o.name.clone(), DataType::from_config(o.data_type)?)))
            .collect();
        if let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice {
            for st in &sb.state {
                if let Some(d) = DataType::from_config(st.data_type) {
                    output_types.push((st.output_name.clone(), d));
                }
            }
        }
        if let Some((name, _)) = output_types.iter().find(|(_, d)| *d == DataType::Bytes) {
            return Err(Error::invalid_arg(format!(
                "unsupported datatype TYPE_STRING for output '{name}' for model '{model_name}'"
            )));
        }
        let mut compiled = core
            .compile_model(&model, DeviceType::CPU)
            .map_err(ov_error("loading model"))?;
        let request = compiled
            .create_infer_request()
            .map_err(ov_error("creating infer request"))?;
        Ok(OvInstance {
            request,
            _compiled: compiled,
            inputs: inputs
                .into_iter()
                .filter_map(|p| Some((p.name, p.element, data_type_of(p.element)?)))
                .collect(),
            output_types,
            pad_to: (settings.batch_padding && config.max_batch_size > 0)
                .then_some(i64::from(config.max_batch_size)),
            timing: Default::default(),
        })
    }
}

impl OvInstance {
    /// An ONNX Runtime model with the OpenVINO CPU accelerator: the ONNX
    /// Runtime library from PyPI has no OpenVINO execution provider, so
    /// this backend runs its ONNX file (said in the log, once per
    /// instance). ONNX Runtime's parameters do not apply (`validate-config`
    /// warns of each).
    pub fn load_for_onnx(ctx: &LoadContext) -> Result<Self> {
        tracing::info!(
            "model '{}': cpu_execution_accelerator 'openvino': this build's ONNX Runtime has no OpenVINO execution \
             provider, so instance '{}' runs on trtis's OpenVINO backend (OpenVINO reads the ONNX file)",
            ctx.config.name,
            ctx.instance_name
        );
        let config = onnx_as_openvino(ctx.config);
        OvInstance::load(&LoadContext {
            config: &config,
            ..ctx.clone()
        })
    }
}

fn partial(dims: &[Dimension]) -> Result<PartialShape> {
    PartialShape::new(dims.len() as i64, dims).map_err(ov_error("reshaping model"))
}

impl super::BatchExec for OvInstance {
    fn execute(&mut self, inputs: Vec<Tensor>, outputs: &[String]) -> Result<Vec<Tensor>> {
        let start = Instant::now();
        // The batch of this execution (dimension 0), for batch padding.
        let batch = inputs.first().and_then(|t| t.shape.first().copied());
        for t in &inputs {
            let (element, model_type) = self
                .inputs
                .iter()
                .find(|(n, _, _)| *n == t.name)
                .map(|(_, e, d)| (*e, *d))
                .ok_or_else(|| {
                    Error::invalid_arg(format!("unexpected inference input '{}'", t.name))
                })?;
            let cast;
            let data: &[u8] = if t.datatype == model_type {
                &t.data
            } else {
                cast = crate::core::types::element::cast(&t.data, t.datatype, model_type)
                    .ok_or_else(|| {
                        Error::invalid_arg(format!(
                            "input '{}' of type {} cannot be converted to the model's {}",
                            t.name,
                            t.datatype.name(),
                            type_name(element)
                        ))
                    })?;
                &cast
            };
            let padded;
            let (data, dims): (&[u8], std::borrow::Cow<[i64]>) =
                match (self.pad_to, t.shape.first()) {
                    (Some(max), Some(&batch)) if batch < max && batch > 0 => {
                        // Zeros after the batch's items, up to max_batch_size.
                        let item = data.len() / batch as usize;
                        let mut bytes = data.to_vec();
                        bytes.resize(item * max as usize, 0);
                        padded = bytes;
                        let mut dims = t.shape.clone();
                        dims[0] = max;
                        (&padded, dims.into())
                    }
                    (Some(max), Some(&batch)) if batch > max => {
                        return Err(Error::invalid_arg(format!(
                            "batch size {batch} for input '{}', max allowed is {max}",
                            t.name
                        )))
                    }
                    _ => (data, t.shape.as_slice().into()),
                };
            let shape = Shape::new(&dims).map_err(ov_error("setting tensor data"))?;
            let mut tensor =
                OvTensor::new(element, &shape).map_err(ov_error("setting tensor data"))?;
            let buffer = tensor
                .get_raw_data_mut()
                .map_err(ov_error("setting tensor data"))?;
            if buffer.len() != data.len() {
                return Err(Error::invalid_arg(format!(
                    "expected {} bytes of data in input buffer, got {} bytes.",
                    buffer.len(),
                    data.len()
                )));
            }
            buffer.copy_from_slice(data);
            self.request
                .set_tensor(&t.name, &tensor)
                .map_err(ov_error("setting tensor data"))?;
        }
        let converted = start.elapsed();
        self.request
            .infer()
            .map_err(ov_error("running inference"))?;
        let ran = Instant::now();
        let mut out = Vec::with_capacity(outputs.len());
        for name in outputs {
            let tensor = self
                .request
                .get_tensor(name)
                .map_err(ov_error("reading output"))?;
            let element = tensor
                .get_element_type()
                .map_err(ov_error("reading output"))?;
            let datatype = data_type_of(element).ok_or_else(|| {
                Error::internal(format!(
                    "output '{name}' has OpenVINO type {element:?}, which the protocol has no type for"
                ))
            })?;
            let mut shape = tensor
                .get_shape()
                .map_err(ov_error("reading output"))?
                .get_dimensions()
                .to_vec();
            let mut raw = tensor.get_raw_data().map_err(ov_error("reading output"))?;
            if let (Some(max), Some(batch)) = (self.pad_to, batch) {
                // The padded items' results are cut off.
                if shape.first() != Some(&max) {
                    return Err(Error::internal(format!(
                        "expected the batch size of openvino model output to be {max}, got {}",
                        shape.first().copied().unwrap_or(0)
                    )));
                }
                if batch < max {
                    raw = &raw[..raw.len() / max as usize * batch as usize];
                    shape[0] = batch;
                }
            }
            let want = self
                .output_types
                .iter()
                .find(|(n, _)| n == name)
                .map_or(datatype, |(_, d)| *d);
            let data = if want == datatype {
                raw.to_vec()
            } else {
                crate::core::types::element::cast(raw, datatype, want).ok_or_else(|| {
                    Error::internal(format!(
                        "output '{name}' of type {} cannot be converted to the configuration's {}",
                        datatype.name(),
                        want.name()
                    ))
                })?
            };
            out.push(Tensor {
                name: name.clone(),
                datatype: want,
                shape,
                data,
            });
        }
        drop(inputs);
        self.timing = (converted, ran.elapsed());
        Ok(out)
    }

    fn timing(&self) -> (Duration, Duration) {
        self.timing
    }
}

/// What the server's auto-complete makes of an OpenVINO IR (its ports
/// read from its XML, Triton's OpenVINO rules: batching only when every
/// port's layout has a batch dimension); its warnings go above the config.
pub fn gen_config(
    file: &Path,
    req: &crate::core::backend::generate::GenRequest,
    config: &mut ModelConfig,
) -> Result<crate::core::backend::generate::Generated, String> {
    let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", file.display());
    let (inputs, outputs) = model_ports(file).map_err(|e| fail(&e))?;
    config.max_batch_size = req.max_batch_size.unwrap_or(0);
    let notes = complete::complete(config, &inputs, &outputs, DEFAULT_MAX_BATCH_SIZE)
        .map_err(|e| fail(&e))?;
    match req.dynamic_batching {
        Some(true) => config.scheduling_choice = crate::core::backend::generate::dynamic_batching(),
        Some(false) => config.scheduling_choice = None,
        None => {}
    }
    let mut header: Vec<String> = notes
        .into_iter()
        .filter(|(level, _)| *level == 'W')
        .map(|(_, note)| note)
        .collect();
    if config.max_batch_size == 0 {
        header.push(
            "no batching: not every input and output has a layout with a batch dimension N (Triton's \
             OpenVINO rule); --max-batch-size N makes dimension 0 the batch"
                .into(),
        );
    }
    Ok(crate::core::backend::generate::Generated {
        header,
        notes: Vec::new(),
    })
}

/// The OpenVINO backend in the registry.
pub struct OpenVino;

impl super::Backend for OpenVino {
    fn name(&self) -> &'static str {
        "openvino"
    }

    fn load(&self, ctx: &LoadContext) -> Result<super::Instance> {
        Ok(super::Instance::Batches(Box::new(OvInstance::load(ctx)?)))
    }

    fn check(
        &self,
        config: &ModelConfig,
        version_dirs: &[PathBuf],
        _: bool,
    ) -> Vec<crate::core::config::Issue> {
        check(config, version_dirs)
    }

    /// As Triton's OpenVINO backend: from its ports and their layouts,
    /// even when inputs and outputs are given (max_batch_size and
    /// batching).
    fn auto_complete(
        &self,
        config: &ModelConfig,
        ctx: &super::CompleteContext,
    ) -> Option<Result<ModelConfig>> {
        Some(
            auto_complete(
                config.clone(),
                ctx.version_dir,
                ctx.options.default_max_batch_size,
            )
            .map_err(|e| super::load_failed(config, e.message)),
        )
    }

    fn gen_config(
        &self,
        file: &Path,
        req: &super::generate::GenRequest,
        config: &mut ModelConfig,
    ) -> std::result::Result<super::generate::Generated, String> {
        gen_config(file, req, config)
    }
}

#[cfg(test)]
mod tests {
    use super::plan::{dims_text, fits};
    use super::*;

    #[test]
    fn every_numeric_type_maps_both_ways() {
        for d in DataType::ALL {
            match ov_type(d) {
                Some(e) => assert_eq!(data_type_of(e), Some(d)),
                None => assert_eq!(d, DataType::Bytes),
            }
        }
    }

    #[test]
    fn config_dims_fit_static_and_dynamic_model_dims() {
        let d = |dynamic, min, max| Dim { dynamic, min, max };
        assert!(fits(4, &d(false, 4, 4)));
        assert!(!fits(-1, &d(false, 4, 4)));
        assert!(fits(-1, &d(true, 0, -1)));
        assert!(fits(7, &d(true, 0, -1)));
        assert!(fits(3, &d(true, 1, 8)) && !fits(9, &d(true, 1, 8)));
        assert_eq!(
            dims_text(&[d(true, 0, -1), d(false, 4, 4), d(true, 1, 8)]),
            "[-1,4,1..8]"
        );
    }
}
