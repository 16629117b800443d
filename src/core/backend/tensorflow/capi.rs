//! Our binding of the TensorFlow C API (`tensorflow/c/c_api.h` and its
//! companions), the few functions the backend calls, resolved at run time
//! from `libtensorflow_cc.so.2` of the `tensorflow-cpu` wheel (its
//! `libtensorflow_framework.so.2` beside it is found through the library's
//! `$ORIGIN` RUNPATH; symbols of both resolve through the one handle).
//!
//! Hand-written: no crate binds the C API without downloading TensorFlow
//! from outside the package registries (`tensorflow-sys` does), and the
//! backend needs about forty functions. Each wrapper owns what the C API
//! says the caller owns and frees it on drop.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::core::error::{Error, Result};

/// `TF_Output`: an operation's output.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Output {
    pub oper: *mut c_void,
    pub index: c_int,
}

/// `TF_Buffer`.
#[repr(C)]
struct RawBuffer {
    data: *const c_void,
    length: usize,
    dealloc: Option<unsafe extern "C" fn(*mut c_void, usize)>,
}

/// `TF_TString`: 24 bytes, handled only through the library's functions.
#[repr(C, align(8))]
pub struct TString([u8; 24]);

pub const TSTRING_SIZE: usize = 24;

/// `TF_DataType` values (the `DataType` proto enum).
pub mod dt {
    pub const FLOAT: i32 = 1;
    pub const DOUBLE: i32 = 2;
    pub const INT32: i32 = 3;
    pub const UINT8: i32 = 4;
    pub const INT16: i32 = 5;
    pub const INT8: i32 = 6;
    pub const STRING: i32 = 7;
    pub const INT64: i32 = 9;
    pub const BOOL: i32 = 10;
    pub const BFLOAT16: i32 = 14;
    pub const UINT16: i32 = 17;
    pub const HALF: i32 = 19;
    pub const UINT32: i32 = 22;
    pub const UINT64: i32 = 23;
}

type P = *mut c_void;

macro_rules! api {
    ($($name:ident : fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        /// The C API's functions, resolved once.
        #[allow(non_snake_case)]
        pub struct Api {
            _lib: libloading::Library,
            $($name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }

        impl Api {
            fn open(path: &Path) -> std::result::Result<Api, String> {
                // SAFETY: loading TensorFlow runs its static initializers,
                // which have no preconditions; the handle lives in a static
                // (`api`) for the rest of the process.
                let lib = unsafe { libloading::Library::new(path) }
                    .map_err(|e| format!("failed to load the TensorFlow library {}: {e}", path.display()))?;
                Ok(Api {
                    $($name: {
                        // SAFETY: the symbol is the C API function of that
                        // name; its type is the one c_api.h declares.
                        let f = unsafe { lib.get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(concat!(stringify!($name), "\0").as_bytes()) }
                            .map_err(|e| format!("the TensorFlow library {} has no {}: {e}", path.display(), stringify!($name)))?;
                        *f
                    },)*
                    _lib: lib,
                })
            }
        }
    };
}

api! {
    TF_Version: fn() -> *const c_char;
    TF_NewStatus: fn() -> P;
    TF_DeleteStatus: fn(P);
    TF_GetCode: fn(P) -> c_int;
    TF_Message: fn(P) -> *const c_char;
    TF_NewSessionOptions: fn() -> P;
    TF_SetConfig: fn(P, *const c_void, usize, P);
    TF_DeleteSessionOptions: fn(P);
    TF_NewGraph: fn() -> P;
    TF_DeleteGraph: fn(P);
    TF_NewBuffer: fn() -> *mut RawBuffer;
    TF_NewBufferFromString: fn(*const c_void, usize) -> *mut RawBuffer;
    TF_DeleteBuffer: fn(*mut RawBuffer);
    TF_LoadSessionFromSavedModel: fn(P, *const RawBuffer, *const c_char, *const *const c_char, c_int, P, *mut RawBuffer, P) -> P;
    TF_NewImportGraphDefOptions: fn() -> P;
    TF_ImportGraphDefOptionsSetDefaultDevice: fn(P, *const c_char);
    TF_DeleteImportGraphDefOptions: fn(P);
    TF_GraphImportGraphDef: fn(P, *const RawBuffer, P, P);
    TF_NewSession: fn(P, P, P) -> P;
    TF_CloseSession: fn(P, P);
    TF_DeleteSession: fn(P, P);
    TF_GraphOperationByName: fn(P, *const c_char) -> P;
    TF_OperationNumOutputs: fn(P) -> c_int;
    TF_OperationOutputType: fn(Output) -> c_int;
    TF_GraphGetTensorNumDims: fn(P, Output, P) -> c_int;
    TF_GraphGetTensorShape: fn(P, Output, *mut i64, c_int, P);
    TF_AllocateTensor: fn(c_int, *const i64, c_int, usize) -> P;
    TF_DeleteTensor: fn(P);
    TF_TensorMaybeMove: fn(P) -> P;
    TF_TensorData: fn(P) -> *mut c_void;
    TF_TensorByteSize: fn(P) -> usize;
    TF_NumDims: fn(P) -> c_int;
    TF_Dim: fn(P, c_int) -> i64;
    TF_TensorType: fn(P) -> c_int;
    TF_SessionRun: fn(P, *const RawBuffer, *const Output, *const P, c_int, *const Output, *mut P, c_int, *const P, c_int, *mut RawBuffer, P);
    TF_StringInit: fn(*mut TString);
    TF_StringCopy: fn(*mut TString, *const c_char, usize);
    TF_StringGetDataPointer: fn(*const TString) -> *const c_char;
    TF_StringGetSize: fn(*const TString) -> usize;
}

/// What to do when the library is missing.
pub const INSTALL_HINT: &str = "scripts/setup.sh unpacks it from the tensorflow-cpu==2.21.0 wheel into .tools/tensorflow; or set TRTIS_TENSORFLOW_LIB to a libtensorflow_cc.so.2";

const LIB_NAME: &str = "libtensorflow_cc.so.2";

/// Locates `libtensorflow_cc.so.2`: `TRTIS_TENSORFLOW_LIB`; then the
/// project's `.tools/tensorflow` (beside the working directory or any
/// ancestor of the trtis executable); then the `tensorflow` package of a
/// project `.venv` there.
pub fn find_library() -> Result<PathBuf> {
    if let Some(named) =
        crate::core::backend::library_from_env("TRTIS_TENSORFLOW_LIB", INSTALL_HINT)
    {
        return named;
    }
    for root in &crate::core::backend::project_roots() {
        let lib = root.join(".tools/tensorflow").join(LIB_NAME);
        if lib.is_file() {
            return Ok(lib);
        }
        if let Ok(entries) = std::fs::read_dir(root.join(".venv/lib")) {
            for entry in entries.flatten() {
                let lib = entry.path().join("site-packages/tensorflow").join(LIB_NAME);
                if lib.is_file() {
                    return Ok(lib);
                }
            }
        }
    }
    Err(Error::unavailable(format!(
        "TensorFlow library ({LIB_NAME}) not found; {INSTALL_HINT}"
    )))
}

/// The C API, loaded on first use.
pub fn api() -> Result<&'static Api> {
    static API: OnceLock<std::result::Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| {
        let path = find_library().map_err(|e| e.message)?;
        Api::open(&path)
    })
    .as_ref()
    .map_err(|e| Error::unavailable(e.clone()))
}

/// The library's version (`TF_Version`).
pub fn version() -> Result<String> {
    let api = api()?;
    // SAFETY: TF_Version returns a static NUL-terminated string.
    Ok(unsafe { CStr::from_ptr((api.TF_Version)()) }
        .to_string_lossy()
        .into_owned())
}

/// A `TF_Status`.
pub struct Status<'a> {
    api: &'a Api,
    raw: P,
}

impl<'a> Status<'a> {
    pub fn new(api: &'a Api) -> Self {
        // SAFETY: no preconditions; freed on drop.
        Status {
            api,
            raw: unsafe { (api.TF_NewStatus)() },
        }
    }

    pub fn raw(&self) -> P {
        self.raw
    }

    /// Ok, or the status's code and message as an error: TensorFlow's
    /// codes are gRPC's.
    pub fn check(&self) -> std::result::Result<(), (i32, String)> {
        // SAFETY: a live status; its message is valid until it changes,
        // and is copied here.
        let code = unsafe { (self.api.TF_GetCode)(self.raw) };
        if code == 0 {
            return Ok(());
        }
        let message = unsafe { CStr::from_ptr((self.api.TF_Message)(self.raw)) }
            .to_string_lossy()
            .into_owned();
        Err((code, message))
    }
}

impl Drop for Status<'_> {
    fn drop(&mut self) {
        // SAFETY: created by TF_NewStatus, freed once.
        unsafe { (self.api.TF_DeleteStatus)(self.raw) }
    }
}

/// A `TF_Graph`.
pub struct Graph {
    api: &'static Api,
    raw: P,
}

impl Graph {
    pub fn new(api: &'static Api) -> Self {
        // SAFETY: no preconditions; freed on drop.
        Graph {
            api,
            raw: unsafe { (api.TF_NewGraph)() },
        }
    }

    pub fn raw(&self) -> P {
        self.raw
    }

    /// Imports a serialized `GraphDef`, its nodes on the CPU.
    pub fn import(&self, graph_def: &[u8]) -> std::result::Result<(), (i32, String)> {
        let api = self.api;
        let status = Status::new(api);
        // SAFETY: the buffer copies `graph_def`; options and buffer are
        // freed after the import, which does not keep them.
        unsafe {
            let buffer = (api.TF_NewBufferFromString)(graph_def.as_ptr().cast(), graph_def.len());
            let options = (api.TF_NewImportGraphDefOptions)();
            (api.TF_ImportGraphDefOptionsSetDefaultDevice)(options, c"/cpu:0".as_ptr());
            (api.TF_GraphImportGraphDef)(self.raw, buffer, options, status.raw());
            (api.TF_DeleteImportGraphDefOptions)(options);
            (api.TF_DeleteBuffer)(buffer);
        }
        status.check()
    }

    /// The output `index` of operation `name`, if the graph has it.
    pub fn output(&self, name: &str, index: i32) -> Option<Output> {
        let name = CString::new(name).ok()?;
        // SAFETY: a NUL-terminated name; the operation is the graph's.
        let oper = unsafe { (self.api.TF_GraphOperationByName)(self.raw, name.as_ptr()) };
        if oper.is_null() {
            return None;
        }
        // SAFETY: a live operation of this graph.
        let outputs = unsafe { (self.api.TF_OperationNumOutputs)(oper) };
        (index >= 0 && index < outputs).then_some(Output { oper, index })
    }

    /// The type of an output.
    pub fn output_type(&self, output: Output) -> i32 {
        // SAFETY: an output of this graph's operation.
        unsafe { (self.api.TF_OperationOutputType)(output) }
    }

    /// An output's shape as the graph knows it (-1 for an unknown
    /// dimension); None for an unknown rank.
    pub fn shape(&self, output: Output) -> Option<Vec<i64>> {
        let status = Status::new(self.api);
        // SAFETY: an output of this graph; `dims` has room for `n`.
        let n = unsafe { (self.api.TF_GraphGetTensorNumDims)(self.raw, output, status.raw()) };
        if status.check().is_err() || n < 0 {
            return None;
        }
        let mut dims = vec![0i64; n as usize];
        unsafe {
            (self.api.TF_GraphGetTensorShape)(self.raw, output, dims.as_mut_ptr(), n, status.raw())
        };
        status.check().ok().map(|_| dims)
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: created by TF_NewGraph; TensorFlow keeps it alive while a
        // session still refers to it.
        unsafe { (self.api.TF_DeleteGraph)(self.raw) }
    }
}

/// Session options with a serialized `ConfigProto`.
fn session_options(
    api: &'static Api,
    config_proto: &[u8],
) -> std::result::Result<P, (i32, String)> {
    let status = Status::new(api);
    // SAFETY: the options copy the config bytes.
    let options = unsafe { (api.TF_NewSessionOptions)() };
    unsafe {
        (api.TF_SetConfig)(
            options,
            config_proto.as_ptr().cast(),
            config_proto.len(),
            status.raw(),
        )
    };
    if let Err(e) = status.check() {
        unsafe { (api.TF_DeleteSessionOptions)(options) };
        return Err(e);
    }
    Ok(options)
}

/// A `TF_Session` over its graph.
pub struct Session {
    api: &'static Api,
    raw: P,
    pub graph: Graph,
}

// SAFETY: a TensorFlow session may be used from any thread (and run
// concurrently); the graph is only read once the session exists.
unsafe impl Send for Session {}
unsafe impl Sync for Session {}

impl Session {
    /// A session over an imported graph.
    pub fn new(graph: Graph, config_proto: &[u8]) -> std::result::Result<Session, (i32, String)> {
        let api = graph.api;
        let options = session_options(api, config_proto)?;
        let status = Status::new(api);
        // SAFETY: graph and options are live; the session does not keep
        // the options.
        let raw = unsafe { (api.TF_NewSession)(graph.raw, options, status.raw()) };
        unsafe { (api.TF_DeleteSessionOptions)(options) };
        status.check()?;
        Ok(Session { api, raw, graph })
    }

    /// Loads a SavedModel's MetaGraph of `tags`: the session and the
    /// serialized `MetaGraphDef`.
    pub fn load_saved_model(
        api: &'static Api,
        dir: &Path,
        tags: &[&str],
        config_proto: &[u8],
    ) -> std::result::Result<(Session, Vec<u8>), (i32, String)> {
        let bad = |what: &str| (3, format!("{what} holds a NUL byte"));
        let dir = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|_| bad("the path"))?;
        let tags: Vec<CString> = tags
            .iter()
            .map(|t| CString::new(*t).map_err(|_| bad("a tag")))
            .collect::<std::result::Result<_, _>>()?;
        let tag_ptrs: Vec<*const c_char> = tags.iter().map(|t| t.as_ptr()).collect();
        let graph = Graph::new(api);
        let options = session_options(api, config_proto)?;
        let status = Status::new(api);
        // SAFETY: every pointer is live for the call; the meta graph buffer
        // is ours to read and free; the session does not keep the options.
        let (raw, meta) = unsafe {
            let meta = (api.TF_NewBuffer)();
            let raw = (api.TF_LoadSessionFromSavedModel)(
                options,
                std::ptr::null(),
                dir.as_ptr(),
                tag_ptrs.as_ptr(),
                tag_ptrs.len() as c_int,
                graph.raw,
                meta,
                status.raw(),
            );
            (api.TF_DeleteSessionOptions)(options);
            let bytes = if (*meta).data.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts((*meta).data.cast::<u8>(), (*meta).length).to_vec()
            };
            (api.TF_DeleteBuffer)(meta);
            (raw, bytes)
        };
        status.check()?;
        Ok((Session { api, raw, graph }, meta))
    }

    /// Runs the graph: feeds `inputs`, fetches `outputs` (owned by the
    /// caller), runs `targets`.
    pub fn run(
        &self,
        inputs: &[(Output, &TfTensor)],
        outputs: &[Output],
        targets: &[P],
    ) -> std::result::Result<Vec<TfTensor>, (i32, String)> {
        let status = Status::new(self.api);
        let feeds: Vec<Output> = inputs.iter().map(|(o, _)| *o).collect();
        let values: Vec<P> = inputs.iter().map(|(_, t)| t.raw).collect();
        let mut fetched: Vec<P> = vec![std::ptr::null_mut(); outputs.len()];
        // SAFETY: all arrays are live and of the lengths given; the input
        // tensors stay ours, the fetched ones become ours.
        unsafe {
            (self.api.TF_SessionRun)(
                self.raw,
                std::ptr::null(),
                feeds.as_ptr(),
                values.as_ptr(),
                feeds.len() as c_int,
                outputs.as_ptr(),
                fetched.as_mut_ptr(),
                outputs.len() as c_int,
                targets.as_ptr(),
                targets.len() as c_int,
                std::ptr::null_mut(),
                status.raw(),
            )
        };
        let tensors: Vec<TfTensor> = fetched
            .into_iter()
            .filter(|p| !p.is_null())
            .map(|raw| TfTensor { api: self.api, raw })
            .collect();
        status.check()?;
        if tensors.len() != outputs.len() {
            return Err((13, "TensorFlow returned fewer outputs than fetched".into()));
        }
        Ok(tensors)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let status = Status::new(self.api);
        // SAFETY: no run is in flight (runs borrow the session); closed,
        // then freed once.
        unsafe {
            (self.api.TF_CloseSession)(self.raw, status.raw());
            (self.api.TF_DeleteSession)(self.raw, status.raw());
        }
    }
}

/// A `TF_Tensor` the backend owns.
pub struct TfTensor {
    api: &'static Api,
    raw: P,
}

impl TfTensor {
    /// An uninitialised tensor of `bytes` bytes (strings: elements × 24,
    /// each initialised by `set_strings`).
    pub fn allocate(api: &'static Api, dtype: i32, dims: &[i64], bytes: usize) -> TfTensor {
        // SAFETY: dims is live for the call; TensorFlow owns the memory
        // until TF_DeleteTensor.
        let raw =
            unsafe { (api.TF_AllocateTensor)(dtype, dims.as_ptr(), dims.len() as c_int, bytes) };
        TfTensor { api, raw }
    }

    /// A tensor holding a copy of `data`.
    pub fn from_bytes(api: &'static Api, dtype: i32, dims: &[i64], data: &[u8]) -> TfTensor {
        let t = TfTensor::allocate(api, dtype, dims, data.len());
        if !data.is_empty() {
            // SAFETY: the tensor's buffer has exactly data.len() bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), t.data_ptr().cast::<u8>(), data.len())
            };
        }
        t
    }

    /// A string tensor of `elements`.
    pub fn from_strings(api: &'static Api, dims: &[i64], elements: &[&[u8]]) -> TfTensor {
        let t = TfTensor::allocate(api, dt::STRING, dims, elements.len() * TSTRING_SIZE);
        let base = t.data_ptr().cast::<TString>();
        for (i, e) in elements.iter().enumerate() {
            // SAFETY: element i of the tensor's array of TF_TStrings: each
            // is initialised before it is assigned (the memory comes
            // uninitialised); TF_DeleteTensor frees what the copies hold.
            unsafe {
                let s = base.add(i);
                (api.TF_StringInit)(s);
                (api.TF_StringCopy)(s, e.as_ptr().cast(), e.len());
            }
        }
        t
    }

    /// Whether the backend holds the only reference to the tensor's buffer
    /// (`TF_TensorMaybeMove`: TensorFlow kept none after a run, and no
    /// output aliases it), so that it may be written again.
    pub fn is_sole_owner(&self) -> bool {
        // SAFETY: a live tensor; the call only checks reference counts and
        // returns the same tensor or null, moving nothing.
        !unsafe { (self.api.TF_TensorMaybeMove)(self.raw) }.is_null()
    }

    /// Overwrites a non-string tensor's bytes with `data`, which has the
    /// tensor's byte size: for a buffer only the backend holds.
    pub fn overwrite(&mut self, data: &[u8]) {
        // SAFETY: the buffer has TF_TensorByteSize bytes; &mut self and a
        // sole owner (the caller's check) mean nothing reads it meanwhile.
        let len = unsafe { (self.api.TF_TensorByteSize)(self.raw) };
        assert_eq!(len, data.len(), "overwrite with another byte size");
        if len > 0 {
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), self.data_ptr().cast::<u8>(), len)
            };
        }
    }

    fn data_ptr(&self) -> *mut c_void {
        // SAFETY: a live tensor.
        unsafe { (self.api.TF_TensorData)(self.raw) }
    }

    pub fn dtype(&self) -> i32 {
        // SAFETY: a live tensor.
        unsafe { (self.api.TF_TensorType)(self.raw) }
    }

    pub fn dims(&self) -> Vec<i64> {
        // SAFETY: a live tensor; indices below its rank.
        let n = unsafe { (self.api.TF_NumDims)(self.raw) };
        (0..n)
            .map(|i| unsafe { (self.api.TF_Dim)(self.raw, i) })
            .collect()
    }

    /// The tensor's bytes (not for strings).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the buffer has TF_TensorByteSize bytes and lives as long
        // as the tensor.
        let len = unsafe { (self.api.TF_TensorByteSize)(self.raw) };
        if len == 0 {
            return &[];
        }
        unsafe { std::slice::from_raw_parts(self.data_ptr().cast::<u8>(), len) }
    }

    /// A string tensor's elements, each with its 4-byte length prefix
    /// (Triton's BYTES serialization).
    pub fn serialized_strings(&self) -> Vec<u8> {
        // SAFETY: a string tensor's buffer is an array of TF_TStrings.
        let len = unsafe { (self.api.TF_TensorByteSize)(self.raw) } / TSTRING_SIZE;
        let base = self.data_ptr().cast::<TString>();
        let mut out = Vec::new();
        for i in 0..len {
            // SAFETY: element i is an initialised TF_TString of the tensor.
            let bytes = unsafe {
                let s = base.add(i);
                let p = (self.api.TF_StringGetDataPointer)(s);
                let n = (self.api.TF_StringGetSize)(s);
                if n == 0 {
                    &[][..]
                } else {
                    std::slice::from_raw_parts(p.cast::<u8>(), n)
                }
            };
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        out
    }
}

impl Drop for TfTensor {
    fn drop(&mut self) {
        // SAFETY: owned; for string tensors made by TF_AllocateTensor,
        // TensorFlow frees each element's storage too.
        unsafe { (self.api.TF_DeleteTensor)(self.raw) }
    }
}

// SAFETY: a tensor is plain memory TensorFlow owns; nothing ties it to a
// thread.
unsafe impl Send for TfTensor {}
