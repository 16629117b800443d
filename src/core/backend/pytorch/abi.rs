//! The C ABI between trtis and its PyTorch backend library
//! (`libtrtis_torch.so`, the `trtis-torch` crate in `backends/torch`), which
//! the server loads the first time a PyTorch model loads. libtorch is big
//! (linking it into the executable cost every command 0.3 s and 110 MB
//! before doing anything), so like Triton's backends it lives in its own
//! shared library. Both sides compile this file, so the types agree; the
//! library refuses to start when its `ABI_VERSION` is not the server's.
//!
//! Calls, all from the instance's own thread except `init`:
//! - `trtis_torch_init(abi, log)` → 0, or the library's ABI version;
//! - `trtis_torch_load(config, version_dir, instance, err)` → instance or
//!   null (the reason through `err`);
//! - `trtis_torch_execute(instance, inputs, outputs, out, err, timing)` →
//!   0 or -1; outputs are written into buffers `out.alloc` hands out, so
//!   the result is copied once, from libtorch into the response;
//! - `trtis_torch_unload(instance)`.

use std::ffi::c_void;

use crate::core::error::{Error, ErrorKind};
use crate::core::types::DataType;

/// Bumped on any change of the types or calls below.
pub const ABI_VERSION: u32 = 2;

/// Borrowed UTF-8 text.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Str {
    pub ptr: *const u8,
    pub len: usize,
}

impl Str {
    pub fn of(s: &str) -> Str {
        Str {
            ptr: s.as_ptr(),
            len: s.len(),
        }
    }

    /// # Safety
    /// `ptr` must point at `len` bytes of UTF-8 that outlive the result.
    pub unsafe fn as_str<'a>(self) -> &'a str {
        if self.len == 0 {
            return "";
        }
        std::str::from_utf8_unchecked(std::slice::from_raw_parts(self.ptr, self.len))
    }
}

/// A borrowed input tensor.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TensorIn {
    pub name: Str,
    pub datatype: u32,
    pub shape: *const i64,
    pub rank: usize,
    pub data: *const u8,
    pub len: usize,
}

/// Where errors go: `report(ctx, kind, message)`.
#[repr(C)]
pub struct ErrorSink {
    pub ctx: *mut c_void,
    pub report: extern "C" fn(ctx: *mut c_void, kind: u32, message: Str),
}

/// Where outputs go: `alloc(ctx, index of the requested output, datatype,
/// shape, rank, bytes)` returns a buffer of `bytes` bytes to fill (null:
/// refused).
#[repr(C)]
pub struct OutputSink {
    pub ctx: *mut c_void,
    pub alloc: extern "C" fn(
        ctx: *mut c_void,
        index: usize,
        datatype: u32,
        shape: *const i64,
        rank: usize,
        bytes: usize,
    ) -> *mut u8,
}

/// The server's log: level 0 error, 1 warning, 2 info.
pub type LogFn = extern "C" fn(level: u32, message: Str);

pub type InitFn = unsafe extern "C" fn(abi: u32, log: LogFn) -> u32;
/// `device`: -1 for the CPU, else the CUDA device the instance is placed
/// on (KIND_GPU).
pub type LoadFn = unsafe extern "C" fn(
    config: *const u8,
    config_len: usize,
    version_dir: Str,
    instance: Str,
    device: i32,
    err: *const ErrorSink,
) -> *mut c_void;
pub type ExecuteFn = unsafe extern "C" fn(
    instance: *mut c_void,
    inputs: *const TensorIn,
    n_inputs: usize,
    outputs: *const Str,
    n_outputs: usize,
    out: *const OutputSink,
    err: *const ErrorSink,
    timing_ns: *mut u64,
) -> i32;
pub type UnloadFn = unsafe extern "C" fn(instance: *mut c_void);

/// A datatype's number between the two: the model config's `TYPE_*` value
/// (fixed by the schema; TYPE_STRING for BYTES).
pub fn datatype_code(t: DataType) -> u32 {
    use crate::core::config::pb::DataType as C;
    (match t {
        DataType::Bool => C::TypeBool,
        DataType::Uint8 => C::TypeUint8,
        DataType::Uint16 => C::TypeUint16,
        DataType::Uint32 => C::TypeUint32,
        DataType::Uint64 => C::TypeUint64,
        DataType::Int8 => C::TypeInt8,
        DataType::Int16 => C::TypeInt16,
        DataType::Int32 => C::TypeInt32,
        DataType::Int64 => C::TypeInt64,
        DataType::Fp16 => C::TypeFp16,
        DataType::Fp32 => C::TypeFp32,
        DataType::Fp64 => C::TypeFp64,
        DataType::Bytes => C::TypeString,
        DataType::Bf16 => C::TypeBf16,
    }) as u32
}

pub fn datatype_of(code: u32) -> Option<DataType> {
    DataType::from_config(i32::try_from(code).ok()?)
}

const KINDS: [ErrorKind; 8] = [
    ErrorKind::Unknown,
    ErrorKind::Internal,
    ErrorKind::NotFound,
    ErrorKind::InvalidArg,
    ErrorKind::Unavailable,
    ErrorKind::Unsupported,
    ErrorKind::AlreadyExists,
    ErrorKind::Cancelled,
];

pub fn kind_code(k: ErrorKind) -> u32 {
    KINDS.iter().position(|x| *x == k).unwrap_or(1) as u32
}

pub fn error_of(code: u32, message: &str) -> Error {
    Error::new(
        KINDS
            .get(code as usize)
            .copied()
            .unwrap_or(ErrorKind::Internal),
        message,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for t in DataType::ALL {
            assert_eq!(datatype_of(datatype_code(t)), Some(t));
        }
        // Fixed numbers, whatever the order of DataType::ALL.
        assert_eq!(datatype_code(DataType::Fp32), 11);
        assert_eq!(datatype_code(DataType::Bytes), 13);
        assert_eq!(datatype_of(0), None);
        for k in KINDS {
            assert_eq!(error_of(kind_code(k), "m").kind, k);
        }
    }
}
