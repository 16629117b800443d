//! `addsub` as a custom backend written in Rust: the seed's custom.h C API
//! (`CustomInitialize(serialized_config, size, gpu_device_id, context)`,
//! `CustomFinalize`, `CustomErrorString`, `CustomExecute`) exported from a
//! `cdylib`, with nothing but `std`. Two inputs INPUT0 and INPUT1, both
//! INT32 or both FP32 of one shape; OUTPUT0 is their sum, OUTPUT1 their
//! difference. It behaves as `examples/custom_backends/addsub.c` does, so
//! the same tests run against both.
//!
//! Build: `cargo build -p trtis-custom-addsub` (the workspace build does),
//! which makes `libtrtis_custom_addsub.so`; put it in a version directory
//! as `libcustom.so`, or name it with `default_model_filename`.

use std::ffi::{c_char, c_int, c_void, CStr};

/// `CUSTOM_NO_GPU_DEVICE`.
const NO_GPU_DEVICE: c_int = -1;
const TYPE_INT32: u64 = 8;
const TYPE_FP32: u64 = 11;

/// `CustomPayload`, laid out as C lays out the seed's struct.
#[repr(C)]
pub struct CustomPayload {
    batch_size: u32,
    input_cnt: u32,
    input_names: *const *const c_char,
    input_shape_dim_cnts: *const usize,
    input_shape_dims: *const *const i64,
    output_cnt: u32,
    required_output_names: *const *const c_char,
    input_context: *mut c_void,
    output_context: *mut c_void,
    error_code: c_int,
}

type GetNextInputFn =
    unsafe extern "C" fn(*mut c_void, *const c_char, *mut *const c_void, *mut u64) -> bool;
type GetOutputFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    usize,
    *mut i64,
    u64,
    *mut *mut c_void,
) -> bool;

/// The error codes, and their text for `CustomErrorString` (NUL-ended).
const MESSAGES: [&[u8]; 8] = [
    b"success\0",
    b"addsub (Rust): the model config must have two inputs and two outputs\0",
    b"addsub (Rust): inputs and outputs must all be TYPE_INT32 or all TYPE_FP32\0",
    b"addsub (Rust): a request lacks INPUT0 or INPUT1\0",
    b"addsub (Rust): INPUT0 and INPUT1 must have the same shape\0",
    b"addsub (Rust): the server could not hand over an input\0",
    b"addsub (Rust): the server refused an output buffer\0",
    b"addsub (Rust): runs on the CPU only\0",
];
const BAD_CONFIG: c_int = 1;
const BAD_TYPE: c_int = 2;
const NO_INPUT: c_int = 3;
const BAD_SHAPE: c_int = 4;
const INPUT_READ: c_int = 5;
const OUTPUT_BUFFER: c_int = 6;
const GPU: c_int = 7;

struct Context {
    int32: bool,
    batching: bool,
}

/// A protobuf varint at `*at`.
fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// A field of a protobuf message: its number, its varint value (None for
/// a length-delimited field), its length-delimited bytes (else empty).
type Field<'a> = (u64, Option<u64>, &'a [u8]);

/// Of a message, each varint or length-delimited field; skips the rest.
fn fields(bytes: &[u8]) -> Option<Vec<Field<'_>>> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < bytes.len() {
        let key = varint(bytes, &mut at)?;
        match key & 7 {
            0 => out.push((key >> 3, Some(varint(bytes, &mut at)?), &[][..])),
            1 => at += 8,
            2 => {
                let len = usize::try_from(varint(bytes, &mut at)?).ok()?;
                let body = bytes.get(at..at.checked_add(len)?)?;
                at += len;
                out.push((key >> 3, None, body));
            }
            5 => at += 4,
            _ => return None,
        }
    }
    Some(out)
}

/// (max_batch_size, input data types, output data types) of a serialized
/// ModelConfig (fields 4, 5 and 6; a tensor's data_type is its field 2).
fn read_config(bytes: &[u8]) -> Option<(u64, Vec<u64>, Vec<u64>)> {
    let (mut max_batch, mut inputs, mut outputs) = (0, Vec::new(), Vec::new());
    for (field, value, body) in fields(bytes)? {
        match field {
            4 => max_batch = value?,
            5 | 6 => {
                let dtype = fields(body)?
                    .into_iter()
                    .find(|f| f.0 == 2)
                    .and_then(|f| f.1)
                    .unwrap_or(0);
                if field == 5 {
                    &mut inputs
                } else {
                    &mut outputs
                }
                .push(dtype);
            }
            _ => {}
        }
    }
    Some((max_batch, inputs, outputs))
}

/// # Safety
/// The seed's `CustomInitialize`: `config` holds `size` bytes and `context`
/// is writable.
#[no_mangle]
pub unsafe extern "C" fn CustomInitialize(
    config: *const c_char,
    size: usize,
    gpu_device_id: c_int,
    context: *mut *mut c_void,
) -> c_int {
    *context = std::ptr::null_mut();
    if gpu_device_id != NO_GPU_DEVICE {
        return GPU;
    }
    let bytes = std::slice::from_raw_parts(config.cast::<u8>(), size);
    let Some((max_batch, inputs, outputs)) = read_config(bytes) else {
        return BAD_CONFIG;
    };
    if inputs.len() != 2 || outputs.len() != 2 {
        return BAD_CONFIG;
    }
    let dtype = inputs[0];
    if (dtype != TYPE_INT32 && dtype != TYPE_FP32)
        || inputs.iter().chain(&outputs).any(|&t| t != dtype)
    {
        return BAD_TYPE;
    }
    let ctx = Box::new(Context {
        int32: dtype == TYPE_INT32,
        batching: max_batch > 0,
    });
    *context = Box::into_raw(ctx).cast();
    0
}

/// # Safety
/// A context `CustomInitialize` returned, finalized once.
#[no_mangle]
pub unsafe extern "C" fn CustomFinalize(context: *mut c_void) -> c_int {
    if !context.is_null() {
        drop(Box::from_raw(context.cast::<Context>()));
    }
    0
}

/// The text of an error code; null for an unknown one.
#[no_mangle]
pub extern "C" fn CustomErrorString(_context: *mut c_void, code: c_int) -> *const c_char {
    usize::try_from(code)
        .ok()
        .and_then(|i| MESSAGES.get(i))
        .map_or(std::ptr::null(), |m| m.as_ptr().cast())
}

/// # Safety
/// The seed's `CustomExecute`: `payloads` holds `count` payloads whose
/// arrays are valid for the call.
#[no_mangle]
pub unsafe extern "C" fn CustomExecute(
    context: *mut c_void,
    count: u32,
    payloads: *mut CustomPayload,
    input_fn: GetNextInputFn,
    output_fn: GetOutputFn,
) -> c_int {
    let ctx = &*context.cast::<Context>();
    if payloads.is_null() {
        return 0;
    }
    let payloads = std::slice::from_raw_parts_mut(payloads, count as usize);
    for payload in payloads {
        payload.error_code = match run(ctx, payload, input_fn, output_fn) {
            Ok(()) => 0,
            Err(code) => code,
        };
    }
    0
}

/// The whole of input `name`, `size` bytes, block by block.
unsafe fn read_input(
    payload: &CustomPayload,
    input_fn: GetNextInputFn,
    name: &CStr,
    size: usize,
) -> Result<Vec<u8>, c_int> {
    let mut out = Vec::with_capacity(size);
    while out.len() < size {
        let mut block: *const c_void = std::ptr::null();
        let mut block_size = (size - out.len()) as u64;
        if !input_fn(
            payload.input_context,
            name.as_ptr(),
            &mut block,
            &mut block_size,
        ) || block.is_null()
            || block_size as usize > size - out.len()
        {
            return Err(INPUT_READ);
        }
        out.extend_from_slice(std::slice::from_raw_parts(
            block.cast::<u8>(),
            block_size as usize,
        ));
    }
    Ok(out)
}

/// `n` elements at `p`; empty when `n` is 0 or `p` is null (a C caller
/// may pass a null pointer for an empty array).
unsafe fn slice<'a, T>(p: *const T, n: usize) -> &'a [T] {
    if n == 0 || p.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(p, n)
    }
}

unsafe fn run(
    ctx: &Context,
    payload: &CustomPayload,
    input_fn: GetNextInputFn,
    output_fn: GetOutputFn,
) -> Result<(), c_int> {
    let n = payload.input_cnt as usize;
    let names = slice(payload.input_names, n);
    let counts = slice(payload.input_shape_dim_cnts, n);
    let dims = slice(payload.input_shape_dims, n);
    let find = |want: &CStr| names.iter().position(|&p| CStr::from_ptr(p) == want);
    let (Some(a), Some(b)) = (find(c"INPUT0"), find(c"INPUT1")) else {
        return Err(NO_INPUT);
    };
    let shape_a = slice(dims[a], counts[a]);
    let shape_b = slice(dims[b], counts[b]);
    if shape_a != shape_b || shape_a.iter().any(|&d| d < 0) {
        return Err(BAD_SHAPE);
    }
    let mut shape: Vec<i64> = Vec::with_capacity(shape_a.len() + 1);
    if ctx.batching {
        shape.push(i64::from(payload.batch_size));
    }
    shape.extend_from_slice(shape_a);
    let bytes = shape_a
        .iter()
        .try_fold(payload.batch_size as usize * 4, |n, &d| {
            n.checked_mul(d as usize)
        })
        .ok_or(BAD_SHAPE)?;
    let x = read_input(payload, input_fn, c"INPUT0", bytes)?;
    let y = read_input(payload, input_fn, c"INPUT1", bytes)?;
    let wanted =
        std::slice::from_raw_parts(payload.required_output_names, payload.output_cnt as usize);
    for &name in wanted {
        let sum = match CStr::from_ptr(name).to_bytes() {
            b"OUTPUT0" => true,
            b"OUTPUT1" => false,
            _ => continue,
        };
        let mut out: *mut c_void = std::ptr::null_mut();
        if !output_fn(
            payload.output_context,
            name,
            shape.len(),
            shape.as_mut_ptr(),
            bytes as u64,
            &mut out,
        ) {
            return Err(OUTPUT_BUFFER);
        }
        if out.is_null() {
            continue; // not wanted
        }
        let out = std::slice::from_raw_parts_mut(out.cast::<u8>(), bytes);
        for ((z, a), b) in out
            .chunks_exact_mut(4)
            .zip(x.chunks_exact(4))
            .zip(y.chunks_exact(4))
        {
            let (a, b) = (a.try_into().unwrap(), b.try_into().unwrap());
            let value = if ctx.int32 {
                let (a, b) = (i32::from_ne_bytes(a), i32::from_ne_bytes(b));
                (if sum {
                    a.wrapping_add(b)
                } else {
                    a.wrapping_sub(b)
                })
                .to_ne_bytes()
            } else {
                let (a, b) = (f32::from_ne_bytes(a), f32::from_ne_bytes(b));
                (if sum { a + b } else { a - b }).to_ne_bytes()
            };
            z.copy_from_slice(&value);
        }
    }
    Ok(())
}
