//! The C interface of a custom backend library (TRTIS's `custom.h`), as
//! Rust types: the seed's (TRTIS 0.12) `CustomInitialize`, the 1.x form
//! with `CustomInitializeData` (and `CustomVersion` / `CustomExecuteV2`),
//! the per-request `CustomPayload` and the two callbacks. Layouts are C's
//! (`#[repr(C)]`); the unit tests pin the payload to the 72 bytes and the
//! field offsets the seed's header gives on x86-64. The library's own
//! entry points are `extern "C-unwind"`: a C++ library's exception that
//! escapes one aborts the process in a defined way instead of being
//! undefined behaviour.

use std::ffi::{c_char, c_int, c_void};

/// `CUSTOM_NO_GPU_DEVICE`: the device id of a CPU instance.
pub const NO_GPU_DEVICE: c_int = -1;

/// `CustomMemoryType` (1.x, V2 callbacks): where a buffer lives.
pub const MEMORY_CPU: c_int = 0;

/// `CustomServerParameter` indexes (1.x `CustomInitializeData`).
pub const SERVER_PARAMETER_COUNT: usize = 2;

/// `CustomPayload`: one request of the batch handed to `CustomExecute`.
/// Input shapes leave out the batch dimension; `error_code` is the
/// library's answer for this request (0: success).
#[repr(C)]
pub struct CustomPayload {
    pub batch_size: u32,
    pub input_cnt: u32,
    pub input_names: *const *const c_char,
    pub input_shape_dim_cnts: *const usize,
    pub input_shape_dims: *const *const i64,
    pub output_cnt: u32,
    pub required_output_names: *const *const c_char,
    pub input_context: *mut c_void,
    pub output_context: *mut c_void,
    pub error_code: c_int,
}

/// `CustomInitializeData` (TRTIS 1.0–1.12).
#[repr(C)]
pub struct CustomInitializeData {
    pub instance_name: *const c_char,
    pub serialized_model_config: *const c_char,
    pub serialized_model_config_size: usize,
    pub gpu_device_id: c_int,
    pub server_parameter_cnt: usize,
    pub server_parameters: *const *const c_char,
}

/// `CustomGetNextInputFn_t`.
pub type GetNextInputFn = unsafe extern "C" fn(
    input_context: *mut c_void,
    name: *const c_char,
    content: *mut *const c_void,
    content_byte_size: *mut u64,
) -> bool;

/// `CustomGetOutputFn_t`.
pub type GetOutputFn = unsafe extern "C" fn(
    output_context: *mut c_void,
    name: *const c_char,
    shape_dim_cnt: usize,
    shape_dims: *mut i64,
    content_byte_size: u64,
    content: *mut *mut c_void,
) -> bool;

/// `CustomGetNextInputV2Fn_t` (1.x): also where the block lives.
pub type GetNextInputV2Fn = unsafe extern "C" fn(
    input_context: *mut c_void,
    name: *const c_char,
    content: *mut *const c_void,
    content_byte_size: *mut u64,
    memory_type: *mut c_int,
    memory_type_id: *mut i64,
) -> bool;

/// `CustomGetOutputV2Fn_t` (1.x): also where the buffer lives.
pub type GetOutputV2Fn = unsafe extern "C" fn(
    output_context: *mut c_void,
    name: *const c_char,
    shape_dim_cnt: usize,
    shape_dims: *mut i64,
    content_byte_size: u64,
    content: *mut *mut c_void,
    memory_type: *mut c_int,
    memory_type_id: *mut i64,
) -> bool;

/// The seed's `CustomInitializeFn_t`.
pub type InitializeFn = unsafe extern "C-unwind" fn(
    serialized_model_config: *const c_char,
    serialized_model_config_size: usize,
    gpu_device_id: c_int,
    custom_context: *mut *mut c_void,
) -> c_int;

/// The 1.x `CustomInitializeFn_t`.
pub type InitializeDataFn = unsafe extern "C-unwind" fn(
    data: *const CustomInitializeData,
    custom_context: *mut *mut c_void,
) -> c_int;

/// `CustomFinalizeFn_t`.
pub type FinalizeFn = unsafe extern "C-unwind" fn(custom_context: *mut c_void) -> c_int;

/// `CustomErrorStringFn_t`.
pub type ErrorStringFn =
    unsafe extern "C-unwind" fn(custom_context: *mut c_void, errcode: c_int) -> *const c_char;

/// `CustomExecuteFn_t`.
pub type ExecuteFn = unsafe extern "C-unwind" fn(
    custom_context: *mut c_void,
    payload_cnt: u32,
    payloads: *mut CustomPayload,
    input_fn: GetNextInputFn,
    output_fn: GetOutputFn,
) -> c_int;

/// `CustomExecuteV2Fn_t` (1.x, `CustomVersion()` 2).
pub type ExecuteV2Fn = unsafe extern "C-unwind" fn(
    custom_context: *mut c_void,
    payload_cnt: u32,
    payloads: *mut CustomPayload,
    input_fn: GetNextInputV2Fn,
    output_fn: GetOutputV2Fn,
) -> c_int;

/// `CustomVersionFn_t` (1.x, optional; absent means 1).
pub type VersionFn = unsafe extern "C-unwind" fn() -> u32;

/// The entry points every custom library exports (a 1.x library with
/// `CustomVersion()` 2 exports `CustomExecuteV2` in place of
/// `CustomExecute`).
pub const REQUIRED_SYMBOLS: [&str; 4] = [
    "CustomInitialize",
    "CustomFinalize",
    "CustomErrorString",
    "CustomExecute",
];

/// Entry points only a TRTIS 1.x library has: the seed's form refuses a
/// library that exports one (its `CustomInitialize` takes other arguments).
pub const ONE_X_SYMBOLS: [&str; 2] = ["CustomVersion", "CustomExecuteV2"];

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The seed's `custom_payload_struct` on x86-64 (and any LP64 target).
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn the_payload_has_the_seeds_layout() {
        assert_eq!(size_of::<CustomPayload>(), 72);
        assert_eq!(offset_of!(CustomPayload, batch_size), 0);
        assert_eq!(offset_of!(CustomPayload, input_cnt), 4);
        assert_eq!(offset_of!(CustomPayload, input_names), 8);
        assert_eq!(offset_of!(CustomPayload, input_shape_dim_cnts), 16);
        assert_eq!(offset_of!(CustomPayload, input_shape_dims), 24);
        assert_eq!(offset_of!(CustomPayload, output_cnt), 32);
        assert_eq!(offset_of!(CustomPayload, required_output_names), 40);
        assert_eq!(offset_of!(CustomPayload, input_context), 48);
        assert_eq!(offset_of!(CustomPayload, output_context), 56);
        assert_eq!(offset_of!(CustomPayload, error_code), 64);
        assert_eq!(size_of::<CustomInitializeData>(), 48);
    }
}
