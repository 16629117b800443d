//! The `custom` backend: a model that is a shared library implementing
//! TRTIS's custom backend C API (`custom.h`; platform `custom`,
//! `libcustom.so` or `default_model_filename` in the version directory).
//!
//! Each instance `dlopen`s the library (`libloading`; the same file loaded
//! twice is one copy, as with `dlopen`), resolves `CustomInitialize`,
//! `CustomFinalize`, `CustomErrorString` and `CustomExecute`, and calls
//! `CustomInitialize` once with the model config serialized as binary
//! protobuf (our schema has Triton's field numbers, so these are the bytes a
//! library built for TRTIS parses) and `CUSTOM_NO_GPU_DEVICE`. Each batch
//! the scheduler forms is one `CustomExecute` call with one `CustomPayload`
//! per request (the backend takes request lists, as the Python backend
//! does: the sequence batcher's control inputs come as inputs of each
//! payload, and a payload's index is its sequence's batch slot, unless a
//! request of the batch was cancelled before it ran and left out); a payload's
//! `error_code` fails only its request, with the library's
//! `CustomErrorString`; a non-zero return fails the batch.
//! `CustomFinalize` runs when the instance is dropped (unload).
//!
//! The API form: the seed's (TRTIS 0.12) `CustomInitialize(config, size,
//! gpu_device_id, context)` by default; the model parameter
//! `custom_api_version: "1"` selects TRTIS 1.x's
//! `CustomInitialize(const CustomInitializeData*, context)`, with
//! `CustomVersion()` 2 meaning `CustomExecuteV2`. The two forms cannot be
//! told apart from the library, and calling one as the other crashes; a
//! library exporting `CustomVersion` or `CustomExecuteV2` (1.x only) is
//! refused in the seed's form.
//!
//! The library runs in the server's process, as in TRTIS: a library that
//! crashes takes the server down. The callbacks (`callbacks`) are the
//! boundary on our side: nothing the library hands back is trusted.

mod abi;
mod callbacks;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

use prost::Message;

use crate::core::config::{Issue, ModelConfig};
use crate::core::error::{Error, Result};
use crate::core::responder::BackendRequest;
use crate::core::types::{element_count, DataType, Tensor};

use super::{Instance, ListExec, LoadContext};
use callbacks::{InputSlot, OutputSlot, PayloadIo, Registration};

pub use abi::REQUIRED_SYMBOLS;

/// The library's default file name.
pub const DEFAULT_FILENAME: &str = "libcustom.so";

/// The model parameter that selects the API form.
pub const API_PARAMETER: &str = "custom_api_version";

/// Which `custom.h` the library was built against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiForm {
    /// TRTIS 0.12, the seed: `CustomInitialize(config, size, device, ctx)`.
    Seed,
    /// TRTIS 1.0–1.12: `CustomInitialize(const CustomInitializeData*, ctx)`.
    OneX,
}

impl ApiForm {
    /// The form the config's `custom_api_version` parameter names.
    pub fn from_config(config: &ModelConfig) -> Result<ApiForm> {
        match config.parameters.get(API_PARAMETER).map(|p| p.string_value.trim()) {
            None | Some("") | Some("0.12") => Ok(ApiForm::Seed),
            Some("1") | Some("1.x") => Ok(ApiForm::OneX),
            Some(other) => Err(Error::invalid_arg(format!(
                "parameter '{API_PARAMETER}' is '{other}': use \"0.12\" (the default: CustomInitialize(serialized_config, size, gpu_device_id, context)) or \"1\" (TRTIS 1.x: CustomInitialize(const CustomInitializeData*, context))"
            ))),
        }
    }
}

/// The library file of a version directory.
pub fn library_path(config: &ModelConfig, version_dir: &Path) -> PathBuf {
    let file = if config.default_model_filename.is_empty() {
        DEFAULT_FILENAME
    } else {
        config.default_model_filename.as_str()
    };
    version_dir.join(file)
}

/// What `validate-config` and `serve` refuse before loading: the API form
/// parameter, and a library in a version directory that is not a shared
/// library or lacks one of the entry points. The library's symbol table is
/// read from the file; nothing in it runs.
pub fn check(config: &ModelConfig, version_dirs: &[PathBuf]) -> Vec<Issue> {
    let mut out = Vec::new();
    let form = ApiForm::from_config(config).unwrap_or_else(|e| {
        out.push(Issue::error(
            format!("parameters[\"{API_PARAMETER}\"]"),
            e.message,
        ));
        ApiForm::Seed
    });
    for dir in version_dirs {
        let path = library_path(config, dir);
        let Ok(bytes) = crate::core::fsutil::read_regular(&path) else {
            continue; // a missing file is reported with the other files
        };
        let shown = shown_path(&path);
        match exported_symbols(&bytes) {
            Err(why) => out.push(Issue::error(
                "default_model_filename",
                format!("'{shown}' is not a shared library this system can load: {why}"),
            )),
            Ok(symbols) => {
                let has = |name: &str| symbols.iter().any(|s| s == name);
                for symbol in REQUIRED_SYMBOLS {
                    // A 1.x library may have CustomExecuteV2 instead.
                    let v2 = symbol == "CustomExecute"
                        && form == ApiForm::OneX
                        && has("CustomExecuteV2");
                    if !has(symbol) && !v2 {
                        out.push(Issue::error(
                            "default_model_filename",
                            missing_symbol(symbol, &shown),
                        ));
                    }
                }
                if form == ApiForm::Seed {
                    if let Some(symbol) = abi::ONE_X_SYMBOLS.iter().find(|s| has(s)) {
                        out.push(Issue::error(
                            "default_model_filename",
                            one_x_library(symbol, &shown),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// `<version>/<file>`, as findings name model files.
fn shown_path(path: &Path) -> String {
    let parts: Vec<_> = path.iter().rev().take(2).collect();
    match parts.as_slice() {
        [file, version] => format!("{}/{}", version.to_string_lossy(), file.to_string_lossy()),
        _ => path.display().to_string(),
    }
}

fn one_x_library(symbol: &str, path: &str) -> String {
    format!(
        "custom library {path} exports {symbol}, so it was built for TRTIS 1.x, whose CustomInitialize takes a CustomInitializeData: say so with parameters {{ key: \"{API_PARAMETER}\" value {{ string_value: \"1\" }} }} (calling it in the seed's form would crash the server)"
    )
}

fn missing_symbol(symbol: &str, path: &str) -> String {
    format!("unable to find '{symbol}' entrypoint in custom library: {path}")
}

/// The names a shared library exports (its dynamic symbol table); an
/// error when it is not a shared library for this machine.
fn exported_symbols(bytes: &[u8]) -> std::result::Result<Vec<String>, String> {
    use object::{Architecture, Object, ObjectKind, ObjectSymbol};
    let file = object::File::parse(bytes).map_err(|e| e.to_string())?;
    if file.kind() != ObjectKind::Dynamic {
        return Err(format!(
            "it is a {:?} object file, not a shared library",
            file.kind()
        ));
    }
    let host = if cfg!(target_arch = "x86_64") {
        Some(Architecture::X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(Architecture::Aarch64)
    } else {
        None
    };
    if host.is_some_and(|h| h != file.architecture()) {
        return Err(format!("it is built for {:?}", file.architecture()));
    }
    Ok(file
        .dynamic_symbols()
        .filter(|s| s.is_definition() && s.is_global())
        .filter_map(|s| s.name().ok().map(str::to_string))
        .collect())
}

enum Execute {
    V1(abi::ExecuteFn),
    V2(abi::ExecuteV2Fn),
}

/// One instance: the library's context and entry points.
pub struct CustomInstance {
    context: *mut c_void,
    finalize: abi::FinalizeFn,
    error_string: abi::ErrorStringFn,
    execute: Execute,
    outputs: Vec<(CString, DataType, Vec<i64>)>,
    batching: bool,
    instance: String,
    /// Last: the entry points above are only valid while it is loaded.
    _lib: libloading::Library,
}

// SAFETY: the context is only used from the instance's own thread, one call
// at a time (the server's instance thread, as TRTIS's runner thread); the
// library's entry points are plain C functions.
unsafe impl Send for CustomInstance {}

fn symbol<T: Copy>(lib: &libloading::Library, name: &str, path: &Path) -> Result<T> {
    // SAFETY: the type is the one custom.h gives the entry point.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|_| Error::invalid_arg(missing_symbol(name, &path.display().to_string())))
}

impl CustomInstance {
    pub fn load(ctx: &LoadContext) -> Result<CustomInstance> {
        let config = ctx.config;
        let form = ApiForm::from_config(config)?;
        let outputs = config
            .output
            .iter()
            .map(|o| {
                let datatype = DataType::from_config(o.data_type).ok_or_else(|| {
                    Error::invalid_arg(format!("output '{}' has no data type", o.name))
                })?;
                let dims = o
                    .reshape
                    .as_ref()
                    .map_or(o.dims.clone(), |r| r.shape.clone());
                Ok((
                    CString::new(o.name.as_str()).unwrap_or_default(),
                    datatype,
                    dims,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let path = library_path(config, &ctx.version_dir);
        // SAFETY: loading runs the library's initializers: the model is
        // code the user chose to run, as in TRTIS.
        let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| {
            Error::invalid_arg(format!(
                "unable to load custom library '{}': {e}",
                path.display()
            ))
        })?;
        let finalize: abi::FinalizeFn = symbol(&lib, "CustomFinalize", &path)?;
        let error_string: abi::ErrorStringFn = symbol(&lib, "CustomErrorString", &path)?;
        let serialized = config.encode_to_vec();
        let mut context: *mut c_void = std::ptr::null_mut();
        let (code, execute) = match form {
            ApiForm::Seed => {
                for name in abi::ONE_X_SYMBOLS {
                    // SAFETY: only looked up, never called.
                    if unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_ok() {
                        return Err(Error::invalid_arg(one_x_library(
                            name,
                            &path.display().to_string(),
                        )));
                    }
                }
                let execute = Execute::V1(symbol(&lib, "CustomExecute", &path)?);
                let init: abi::InitializeFn = symbol(&lib, "CustomInitialize", &path)?;
                // SAFETY: the seed's signature; the bytes live for the call.
                let code = unsafe {
                    init(
                        serialized.as_ptr().cast(),
                        serialized.len(),
                        abi::NO_GPU_DEVICE,
                        &mut context,
                    )
                };
                (code, execute)
            }
            ApiForm::OneX => {
                let version = match symbol::<abi::VersionFn>(&lib, "CustomVersion", &path) {
                    // SAFETY: `uint32_t CustomVersion(void)`.
                    Ok(f) => unsafe { f() },
                    Err(_) => 1,
                };
                let execute = match version {
                    1 => Execute::V1(symbol(&lib, "CustomExecute", &path)?),
                    2 => Execute::V2(symbol(&lib, "CustomExecuteV2", &path)?),
                    n => {
                        return Err(Error::invalid_arg(format!(
                            "custom library '{}' reports CustomVersion() {n}; trtis runs versions 1 and 2",
                            path.display()
                        )))
                    }
                };
                let init: abi::InitializeDataFn = symbol(&lib, "CustomInitialize", &path)?;
                let text = |s: &str| CString::new(s.replace('\0', "")).unwrap_or_default();
                let name = text(&ctx.instance_name);
                let repository = ctx.model_dir.parent().unwrap_or(ctx.model_dir);
                let parameters = [
                    text(env!("CARGO_PKG_VERSION")),
                    text(&repository.display().to_string()),
                ];
                let pointers: [*const c_char; abi::SERVER_PARAMETER_COUNT] =
                    [parameters[0].as_ptr(), parameters[1].as_ptr()];
                let data = abi::CustomInitializeData {
                    instance_name: name.as_ptr(),
                    serialized_model_config: serialized.as_ptr().cast(),
                    serialized_model_config_size: serialized.len(),
                    gpu_device_id: abi::NO_GPU_DEVICE,
                    server_parameter_cnt: abi::SERVER_PARAMETER_COUNT,
                    server_parameters: pointers.as_ptr(),
                };
                // SAFETY: the 1.x signature; everything lives for the call.
                let code = unsafe { init(&data, &mut context) };
                (code, execute)
            }
        };
        if code != 0 {
            let message = library_error(error_string, context, code);
            // As TRTIS: the context is finalized whatever initialize said.
            // SAFETY: the context the library gave (maybe null).
            unsafe { finalize(context) };
            return Err(Error::internal(format!(
                "failed to initialize custom library '{}' for instance '{}': {message}",
                path.display(),
                ctx.instance_name
            )));
        }

        Ok(CustomInstance {
            context,
            finalize,
            error_string,
            execute,
            outputs,
            batching: config.max_batch_size > 0,
            instance: ctx.instance_name.clone(),
            _lib: lib,
        })
    }

    fn prepare(&self, r: &BackendRequest) -> Result<Prepared> {
        let batch = if self.batching {
            let b = r
                .inputs
                .first()
                .and_then(|t| t.shape.first())
                .copied()
                .unwrap_or(1);
            Some(u32::try_from(b).map_err(|_| Error::invalid_arg("batch size out of range"))?)
        } else {
            None
        };
        let skip = usize::from(self.batching);
        let mut names = Vec::with_capacity(r.inputs.len());
        let mut dims: Vec<Vec<i64>> = Vec::with_capacity(r.inputs.len());
        let mut inputs = Vec::with_capacity(r.inputs.len());
        for t in &r.inputs {
            let name = CString::new(t.name.as_str())
                .map_err(|_| Error::invalid_arg("input name with a NUL byte"))?;
            inputs.push(InputSlot {
                name: name.clone(),
                data: t.data.as_ptr(),
                len: t.data.len(),
                offset: 0,
            });
            names.push(name);
            dims.push(t.shape.iter().skip(skip).copied().collect());
        }
        // Each output once, however often the request names it.
        let mut required: Vec<CString> = Vec::with_capacity(r.outputs.len());
        for o in &r.outputs {
            let name = CString::new(o.as_str()).unwrap_or_default();
            if !required.contains(&name) {
                required.push(name);
            }
        }
        let outputs = self
            .outputs
            .iter()
            .map(|(name, datatype, dims)| OutputSlot {
                name: name.clone(),
                datatype: *datatype,
                dims: dims.clone(),
                required: required.contains(name),
                produced: None,
            })
            .collect();
        let name_ptrs = names.iter().map(|n| n.as_ptr()).collect();
        let dim_cnts = dims.iter().map(Vec::len).collect();
        let dim_ptrs = dims.iter().map(|d| d.as_ptr()).collect();
        let required_ptrs = required.iter().map(|n| n.as_ptr()).collect();
        Ok(Prepared {
            batch_size: batch.unwrap_or(1),
            io: Some(PayloadIo {
                inputs,
                outputs,
                batch,
                errors: Vec::new(),
                closed: false,
            }),
            _names: names,
            name_ptrs,
            dim_cnts,
            _dims: dims,
            dim_ptrs,
            _required: required,
            required_ptrs,
        })
    }

    /// One request's answer from its payload's result.
    fn answer(&self, r: &BackendRequest, code: c_int, io: PayloadIo) -> Result<Vec<Tensor>> {
        if code != 0 {
            let mut message = library_error(self.error_string, self.context, code);
            if !io.errors.is_empty() {
                message = format!("{message} ({})", io.errors.join("; "));
            }
            return Err(Error::internal(message));
        }
        if !io.errors.is_empty() {
            return Err(Error::internal(io.errors.join("; ")));
        }
        let mut produced = io.outputs;
        let mut tensors = Vec::with_capacity(r.outputs.len());
        for name in &r.outputs {
            if let Some(earlier) = tensors.iter().find(|t: &&Tensor| &t.name == name) {
                let copy = earlier.clone();
                tensors.push(copy);
                continue;
            }
            let slot = produced
                .iter_mut()
                .find(|s| s.name.as_bytes() == name.as_bytes())
                .ok_or_else(|| Error::internal(format!("unknown output '{name}'")))?;
            let Some((shape, data)) = slot.produced.take() else {
                return Err(Error::internal(format!(
                    "the custom library of instance '{}' produced no value for output '{name}'",
                    self.instance
                )));
            };
            if slot.datatype == DataType::Bytes {
                let count = Tensor::bytes_elements(&data).map(|e| e.len()).ok();
                if count != element_count(&shape) {
                    return Err(Error::internal(format!(
                        "the custom library wrote output '{name}' as {} BYTES elements, but its shape {shape:?} holds {}",
                        count.map_or("malformed".to_string(), |n| n.to_string()),
                        element_count(&shape).unwrap_or(0)
                    )));
                }
            }
            tensors.push(Tensor {
                name: name.clone(),
                datatype: slot.datatype,
                shape,
                data,
            });
        }
        Ok(tensors)
    }
}

/// The `CustomPayload` arrays of one request, kept alive for the call.
struct Prepared {
    batch_size: u32,
    io: Option<PayloadIo>,
    _names: Vec<CString>,
    name_ptrs: Vec<*const c_char>,
    dim_cnts: Vec<usize>,
    _dims: Vec<Vec<i64>>,
    dim_ptrs: Vec<*const i64>,
    _required: Vec<CString>,
    required_ptrs: Vec<*const c_char>,
}

/// The library's text for `code`, or the code.
fn library_error(error_string: abi::ErrorStringFn, context: *mut c_void, code: c_int) -> String {
    // SAFETY: the library's CustomErrorString with its own context.
    let text = unsafe { error_string(context, code) };
    if text.is_null() {
        format!("custom library error {code}")
    } else {
        // SAFETY: a NUL-terminated string the library owns.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }
}

impl ListExec for CustomInstance {
    fn execute_requests(&mut self, requests: Vec<BackendRequest>) -> Result<()> {
        let mut ready = Vec::with_capacity(requests.len());
        for r in requests {
            match self.prepare(&r) {
                Ok(p) => ready.push((r, p)),
                Err(e) => r.respond.fail(e),
            }
        }
        if ready.is_empty() {
            return Ok(());
        }
        let count = u32::try_from(ready.len()).map_err(|_| Error::internal("batch too large"))?;
        let registration =
            Registration::new(ready.iter_mut().filter_map(|(_, p)| p.io.take()).collect());
        let mut payloads: Vec<abi::CustomPayload> = ready
            .iter()
            .enumerate()
            .map(|(i, (_, p))| abi::CustomPayload {
                batch_size: p.batch_size,
                input_cnt: p.name_ptrs.len() as u32,
                input_names: p.name_ptrs.as_ptr(),
                input_shape_dim_cnts: p.dim_cnts.as_ptr(),
                input_shape_dims: p.dim_ptrs.as_ptr(),
                output_cnt: p.required_ptrs.len() as u32,
                required_output_names: p.required_ptrs.as_ptr(),
                input_context: registration.context(i),
                output_context: registration.context(i),
                error_code: 0,
            })
            .collect();
        // SAFETY: the payloads, their arrays and the requests' input bytes
        // live until the call returns; the callbacks check everything else.
        let code = unsafe {
            match self.execute {
                Execute::V1(f) => f(
                    self.context,
                    count,
                    payloads.as_mut_ptr(),
                    callbacks::get_next_input,
                    callbacks::get_output,
                ),
                Execute::V2(f) => f(
                    self.context,
                    count,
                    payloads.as_mut_ptr(),
                    callbacks::get_next_input_v2,
                    callbacks::get_output_v2,
                ),
            }
        };
        let ios = registration.finish();
        if code != 0 {
            return Err(Error::internal(library_error(
                self.error_string,
                self.context,
                code,
            )));
        }
        for (((r, _), payload), io) in ready.into_iter().zip(&payloads).zip(ios) {
            let result = self.answer(&r, payload.error_code, io);
            r.respond.respond(result, true);
        }
        Ok(())
    }
}

impl Drop for CustomInstance {
    fn drop(&mut self) {
        // SAFETY: the context CustomInitialize gave, finalized once.
        let code = unsafe { (self.finalize)(self.context) };
        if code != 0 {
            // The context is gone: CustomErrorString gets none (allowed).
            tracing::warn!(
                "CustomFinalize of instance '{}' failed: {}",
                self.instance,
                library_error(self.error_string, std::ptr::null_mut(), code)
            );
        }
    }
}

/// The custom backend (TRTIS's custom.h libraries) in the registry.
pub struct Custom;

impl super::Backend for Custom {
    fn name(&self) -> &'static str {
        "custom"
    }

    fn load(&self, ctx: &LoadContext) -> Result<Instance> {
        Ok(Instance::Lists(Box::new(CustomInstance::load(ctx)?)))
    }

    fn check(&self, config: &ModelConfig, version_dirs: &[PathBuf], _: bool) -> Vec<Issue> {
        check(config, version_dirs)
    }
}
