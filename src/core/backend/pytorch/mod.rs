//! The PyTorch backend as the server sees it: `libtrtis_torch.so` (the
//! `trtis-torch` crate, `backends/torch`), loaded with `libloading` the
//! first time a PyTorch model loads, and called through the C ABI of
//! [`abi`]. The library links libtorch; keeping it out of the
//! executable keeps every other command and every server without a PyTorch
//! model as quick to start and as small as before (linking libtorch into the
//! executable cost 0.3 s and 110 MB of RSS before `main`).
//!
//! The library is found at `TRTIS_TORCH_BACKEND` (a path), else beside the
//! executable (where cargo builds it), else in the executable's parent
//! folder.
//!
//! Its pure neighbours, which need no libtorch (so `validate-config` and
//! `gen-config` use them in every build, and the library too): [`torchscript`]
//! reads `forward()`'s signature from the `.pt` file, [`binding`] binds the
//! config's tensors to it, [`settings`] reads the config's `parameters`.

pub mod abi;
pub mod binding;
pub mod gen_config;
pub mod pt2;
pub mod settings;
pub mod torchscript;

use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use prost::Message;

use crate::core::error::{Error, Result};
use crate::core::types::Tensor;

use super::LoadContext;
use crate::core::config::Issue;
use abi::{ErrorSink, OutputSink, Str, TensorIn};

/// What a load would refuse of a `torch_aoti` config, known from the
/// package in each of `version_dirs` without libtorch (`validate-config`
/// and `serve` report the same): the package's model, device and CPU ISA,
/// and the config's names, types and shapes against its call spec and
/// input checks. The torch version is checked at load (it needs the
/// backend library's libtorch).
pub fn check_package_config(
    config: &crate::core::config::ModelConfig,
    version_dirs: &[PathBuf],
) -> Vec<crate::core::config::diagnostic::Issue> {
    use crate::core::config::diagnostic::Issue;
    let mut out: Vec<Issue> = Vec::new();
    for key in [
        "DISABLE_OPTIMIZED_EXECUTION",
        "ENABLE_JIT_EXECUTOR",
        "ENABLE_JIT_PROFILING",
        "ENABLE_TENSOR_FUSER",
    ] {
        if config.parameters.contains_key(key) {
            out.push(Issue::warning(
                "parameters",
                format!("parameter '{key}' applies to TorchScript's JIT and has no effect on an AOTInductor package"),
            ));
        }
    }
    let file = if config.default_model_filename.is_empty() {
        "model.pt2"
    } else {
        config.default_model_filename.as_str()
    };
    use crate::core::config::pb::model_instance_group::Kind;
    let gpu = config
        .instance_group
        .iter()
        .any(|g| g.kind == Kind::Gpu as i32);
    let instance = format!("{}_0", config.name);
    for path in version_dirs
        .iter()
        .map(|d| d.join(file))
        .filter(|p| p.is_file())
    {
        let shown: Vec<_> = path.iter().rev().take(2).collect();
        let shown = format!(
            "{}/{}",
            shown[1].to_string_lossy(),
            shown[0].to_string_lossy()
        );
        let relative = |m: &str| m.replace(&path.display().to_string(), &shown);
        let issue = match pt2::bind_package(config, &path, &instance, gpu, None) {
            Ok((_, Some(_))) => continue,
            Ok((_, None)) => Issue::warning(
                "default_model_filename",
                format!(
                    "{shown} carries no wrapper source: its call spec is read at load, and neither the config's types and \
                     shapes nor requests' are checked against the compiled code"
                ),
            ),
            Err(e) => {
                let field = if e.message.contains("input") || e.message.contains("Input") {
                    "input"
                } else if e.message.contains("output") || e.message.contains("Output") {
                    "output"
                } else {
                    "default_model_filename"
                };
                Issue::error(field, relative(&e.message))
            }
        };
        if !out.contains(&issue) {
            out.push(issue);
        }
    }
    out
}

/// The library's file name.
pub const LIBRARY: &str = "libtrtis_torch.so";

/// How to get the library when it is missing.
pub const INSTALL_HINT: &str = "build it with `cargo build --release -p trtis-torch` (it needs libtorch: \
     scripts/setup.sh installs it into .venv-torch; scripts/examples.sh and scripts/test.sh build both), \
     or set TRTIS_TORCH_BACKEND to its path";

/// The loaded library's entry points.
struct Library {
    load: abi::LoadFn,
    execute: abi::ExecuteFn,
    unload: abi::UnloadFn,
    /// Kept loaded for the life of the process.
    _lib: libloading::Library,
}

fn find_library() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TRTIS_TORCH_BACKEND") {
        return Some(PathBuf::from(path));
    }
    crate::core::fsutil::beside_executable(LIBRARY)
}

extern "C" fn log(level: u32, message: Str) {
    // SAFETY: the library passes text it owns for the call.
    let message = unsafe { message.as_str() };
    match level {
        0 => tracing::error!("{message}"),
        1 => tracing::warn!("{message}"),
        _ => tracing::info!("{message}"),
    }
}

/// Whether the PyTorch backend library is linked with libtorch_cuda (built
/// with `TRTIS_TORCH_CUDA=1`), read from its ELF `DT_NEEDED` entries without
/// loading it. Without libtorch_cuda, libtorch sees no CUDA device.
pub fn links_cuda() -> bool {
    let Some(bytes) = find_library().and_then(|p| std::fs::read(p).ok()) else {
        return false;
    };
    needs(&bytes, b"libtorch_cuda")
}

/// Whether the ELF shared object or executable `bytes` names a library
/// starting with `prefix` among its `DT_NEEDED` entries.
fn needs(bytes: &[u8], prefix: &[u8]) -> bool {
    use object::read::elf::{Dyn, ElfFile64};
    let Ok(file) = ElfFile64::<object::Endianness>::parse(bytes) else {
        return false;
    };
    let endian = file.endian();
    let table = file.elf_section_table();
    // The entries and the index of their string table.
    let Ok(Some((entries, strings))) = table.dynamic(endian, bytes) else {
        return false;
    };
    let Ok(strings) = table.strings(endian, bytes, strings) else {
        return false;
    };
    entries.iter().any(|d| {
        d.tag32(endian) == Some(object::elf::DT_NEEDED)
            && d.string(endian, strings)
                .is_ok_and(|name| name.starts_with(prefix))
    })
}

fn library() -> Result<&'static Library> {
    static LIB: OnceLock<std::result::Result<Library, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let path = find_library()
            .ok_or_else(|| format!("the PyTorch backend library ({LIBRARY}) was not found: {INSTALL_HINT}"))?;
        // SAFETY: loading our own backend library; its initializers are
        // libtorch's.
        unsafe {
            let lib = libloading::Library::new(&path)
                .map_err(|e| format!("failed to load the PyTorch backend {}: {e}", path.display()))?;
            let symbol_err = |e: libloading::Error| {
                format!("{} is not a trtis PyTorch backend: {e}", path.display())
            };
            let init: abi::InitFn = *lib.get(b"trtis_torch_init\0").map_err(symbol_err)?;
            let load: abi::LoadFn = *lib.get(b"trtis_torch_load\0").map_err(symbol_err)?;
            let execute: abi::ExecuteFn = *lib.get(b"trtis_torch_execute\0").map_err(symbol_err)?;
            let unload: abi::UnloadFn = *lib.get(b"trtis_torch_unload\0").map_err(symbol_err)?;
            let theirs = init(abi::ABI_VERSION, log);
            if theirs != 0 {
                return Err(format!(
                    "the PyTorch backend {} speaks ABI {theirs}, this trtis {}: rebuild it with this trtis",
                    path.display(),
                    abi::ABI_VERSION
                ));
            }
            Ok(Library {
                load,
                execute,
                unload,
                _lib: lib,
            })
        }
    })
    .as_ref()
    .map_err(|e| Error::unavailable(e.clone()))
}

/// Collects the library's error of a call.
#[derive(Default)]
struct Failure(Option<Error>);

extern "C" fn report(ctx: *mut c_void, kind: u32, message: Str) {
    // SAFETY: ctx is the `Failure` of the call; the message is live.
    let failure = unsafe { &mut *(ctx as *mut Failure) };
    failure.0 = Some(abi::error_of(kind, unsafe { message.as_str() }));
}

/// The outputs of a call, built as the library asks for buffers.
struct Outputs<'a> {
    names: &'a [String],
    tensors: Vec<Tensor>,
}

extern "C" fn alloc(
    ctx: *mut c_void,
    index: usize,
    datatype: u32,
    shape: *const i64,
    rank: usize,
    bytes: usize,
) -> *mut u8 {
    // SAFETY: ctx is the `Outputs` of the call; shape holds rank values.
    let out = unsafe { &mut *(ctx as *mut Outputs) };
    let (Some(name), Some(datatype)) = (out.names.get(index), abi::datatype_of(datatype)) else {
        return std::ptr::null_mut();
    };
    let shape = if rank == 0 {
        Vec::new()
    } else {
        unsafe { std::slice::from_raw_parts(shape, rank) }.to_vec()
    };
    // A numeric output's size follows from its shape.
    if let Some(size) = datatype.size() {
        let fits = crate::core::types::element_count(&shape)
            .and_then(|n| n.checked_mul(size))
            .is_some_and(|n| n == bytes);
        if !fits {
            return std::ptr::null_mut();
        }
    }
    out.tensors.push(Tensor {
        name: name.clone(),
        datatype,
        shape,
        data: vec![0; bytes],
    });
    out.tensors.last_mut().expect("pushed").data.as_mut_ptr()
}

/// One instance inside the library.
pub struct TorchInstance {
    lib: &'static Library,
    handle: *mut c_void,
    timing: (Duration, Duration),
}

// SAFETY: the library's instance is used by one thread at a time (the
// instance thread) and holds nothing tied to the thread that made it.
unsafe impl Send for TorchInstance {}

impl TorchInstance {
    pub fn load(ctx: &LoadContext) -> Result<Self> {
        let lib = library()?;
        let config = ctx.config.encode_to_vec();
        let version_dir = ctx.version_dir.to_string_lossy();
        let mut failure = Failure::default();
        let sink = ErrorSink {
            ctx: &mut failure as *mut Failure as *mut c_void,
            report,
        };
        // SAFETY: every pointer is live for the call.
        let handle = unsafe {
            (lib.load)(
                config.as_ptr(),
                config.len(),
                Str::of(&version_dir),
                Str::of(&ctx.instance_name),
                match ctx.device {
                    crate::core::device::Device::Gpu(id) => id,
                    _ => -1,
                },
                &sink,
            )
        };
        if handle.is_null() {
            return Err(failure.0.unwrap_or_else(|| {
                Error::internal("the PyTorch backend failed to load the model")
            }));
        }
        Ok(TorchInstance {
            lib,
            handle,
            timing: Default::default(),
        })
    }
}

impl super::BatchExec for TorchInstance {
    fn execute(&mut self, inputs: Vec<Tensor>, outputs: &[String]) -> Result<Vec<Tensor>> {
        let views: Vec<TensorIn> = inputs
            .iter()
            .map(|t| TensorIn {
                name: Str::of(&t.name),
                datatype: abi::datatype_code(t.datatype),
                shape: t.shape.as_ptr(),
                rank: t.shape.len(),
                data: t.data.as_ptr(),
                len: t.data.len(),
            })
            .collect();
        let names: Vec<Str> = outputs.iter().map(|n| Str::of(n)).collect();
        let mut out = Outputs {
            names: outputs,
            tensors: Vec::with_capacity(outputs.len()),
        };
        let sink = OutputSink {
            ctx: &mut out as *mut Outputs as *mut c_void,
            alloc,
        };
        let mut failure = Failure::default();
        let err = ErrorSink {
            ctx: &mut failure as *mut Failure as *mut c_void,
            report,
        };
        let mut timing = [0u64; 2];
        // SAFETY: `inputs` (which the views borrow), the names and the sinks
        // outlive the call.
        let status = unsafe {
            (self.lib.execute)(
                self.handle,
                views.as_ptr(),
                views.len(),
                names.as_ptr(),
                names.len(),
                &sink,
                &err,
                timing.as_mut_ptr(),
            )
        };
        drop(views);
        drop(inputs);
        if status != 0 {
            return Err(failure
                .0
                .unwrap_or_else(|| Error::internal("PyTorch execute failure")));
        }
        self.timing = (
            Duration::from_nanos(timing[0]),
            Duration::from_nanos(timing[1]),
        );
        // Each output asked for, once, in that order.
        let tensors = out.tensors;
        let complete = tensors.len() == outputs.len()
            && tensors.iter().zip(outputs).all(|(t, name)| t.name == *name);
        if !complete {
            return Err(Error::internal(
                "the PyTorch backend did not produce the outputs asked for",
            ));
        }
        Ok(tensors)
    }

    fn timing(&self) -> (Duration, Duration) {
        self.timing
    }
}

impl Drop for TorchInstance {
    fn drop(&mut self) {
        // SAFETY: made by this library's load; not used after.
        unsafe { (self.lib.unload)(self.handle) }
    }
}

/// The PyTorch backend in the registry.
pub struct PyTorch;

impl super::Backend for PyTorch {
    fn name(&self) -> &'static str {
        "pytorch"
    }

    fn load(&self, ctx: &LoadContext) -> Result<super::Instance> {
        Ok(super::Instance::Batches(Box::new(TorchInstance::load(
            ctx,
        )?)))
    }

    /// Its parameters, and how the config binds to `forward()`: each
    /// version's file is checked as its load checks it (`bind_file`);
    /// without a file, by the config's own rules. The same finding from
    /// several versions is reported once. An AOTInductor package is
    /// checked against its config (`check_package_config`).
    fn check(
        &self,
        config: &crate::core::config::ModelConfig,
        version_dirs: &[PathBuf],
        _: bool,
    ) -> Vec<Issue> {
        let mut out = Vec::new();
        if let Err(e) = settings::TorchSettings::from_config(config) {
            out.push(Issue::error("parameters", e.message));
        }
        if config.platform == "torch_aoti" {
            out.extend(check_package_config(config, version_dirs));
            return out;
        }
        let file = super::model_file(config, "model.pt");
        let mut files = version_dirs
            .iter()
            .map(|d| d.join(file))
            .filter(|p| p.is_file())
            .peekable();
        if files.peek().is_none() {
            if let Err(e) = binding::bind(config, None) {
                out.push(Issue::error("input", e.message));
            }
        }
        for path in files {
            // Named from the model directory, as the finding's place is.
            let shown: Vec<_> = path.iter().rev().take(2).collect();
            let shown = format!(
                "{}/{}",
                shown[1].to_string_lossy(),
                shown[0].to_string_lossy()
            );
            let relative = |m: &str| m.replacen(&path.display().to_string(), &shown, 1);
            let issue = match binding::bind_file(config, &path) {
                Ok((_, None)) => continue,
                Ok((_, Some(why))) => Issue::warning(
                    "default_model_filename",
                    format!(
                        "forward()'s signature not read ({}): inputs bind by <name>__<index> or config order, unchecked",
                        relative(&why)
                    ),
                ),
                Err((field, e)) => Issue::error(field, relative(&e.message)),
            };
            if !out.contains(&issue) {
                out.push(issue);
            }
        }
        out
    }

    /// With libtorch linked against CUDA.
    fn gpu_ready(&self) -> bool {
        links_cuda()
    }

    fn gen_config(
        &self,
        file: &std::path::Path,
        req: &super::generate::GenRequest,
        config: &mut crate::core::config::ModelConfig,
    ) -> std::result::Result<super::generate::Generated, String> {
        gen_config::gen_config(file, req, config)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dt_needed_entries_are_read() {
        // This test executable needs libc and not libtorch_cuda.
        let exe = std::fs::read("/proc/self/exe").unwrap();
        assert!(super::needs(&exe, b"libc.so"));
        assert!(!super::needs(&exe, b"libtorch_cuda"));
        assert!(!super::needs(b"not an ELF file", b"libc.so"));
    }
}
