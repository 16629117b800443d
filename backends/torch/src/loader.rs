//! An AOTInductor package loaded by libtorch's `AOTIModelPackageLoader`
//! through the C++ shim (src/shim.cpp): load, call spec, run. Used by the
//! backend (aoti.rs) and by the benchmark's in-process reference
//! (examples/torch_direct.rs, which includes this file).

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;

use trtis::core::backend::pytorch::pt2;
use trtis::core::error::{Error, Result};

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
pub struct Loader(*mut c_void);

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
    pub fn load(path: &Path, runners: usize, device: i32, libtorch: &str) -> Result<Loader> {
        ensure_libtorch_name()?;
        let c_path = CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| Error::invalid_arg("the model path holds a NUL byte"))?;
        let name = CString::new(pt2::MODEL_NAME).expect("no NUL");
        let mut err = std::ptr::null_mut();
        // libtorch's package loader is not safe to construct on two threads
        // at once: it parses each JSON file of the package into one
        // function-local static object (`load_json_file`), so models
        // loading in parallel read each other's metadata ("No device
        // information found."). Constructions take turns; running does not.
        static CONSTRUCTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let turn = CONSTRUCTING
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // SAFETY: live C strings; the shim catches libtorch's exceptions.
        let handle =
            unsafe { trtis_aoti_load(c_path.as_ptr(), name.as_ptr(), runners, device, &mut err) };
        drop(turn);
        if handle.is_null() {
            let message = take_string(err).unwrap_or_else(|| "unknown error".into());
            return Err(Error::internal(pt2::explain_load_error(
                path, &message, libtorch,
            )));
        }
        Ok(Loader(handle))
    }

    pub fn call_spec(&self) -> Result<(String, String)> {
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

    pub fn run(&self, inputs: &[tch::Tensor]) -> Result<Vec<tch::Tensor>> {
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
