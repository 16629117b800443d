//! The two functions a custom library calls back during `CustomExecute`
//! (`CustomGetNextInputFn_t`, `CustomGetOutputFn_t`, and their 1.x V2
//! forms), and the safety boundary they keep.
//!
//! A payload's `input_context` and `output_context` are not pointers: they
//! are a token, a number registered here for the length of one
//! `CustomExecute` call and looked up on every callback. So a callback with
//! a token that is not live (a call after the execute returned, from a
//! thread the library left running, or a context the library made up) finds
//! nothing and answers false, never touching freed memory. Every pointer and
//! size the library hands in is checked: null pointers, unknown names, an
//! output asked for twice, an output whose shape does not fit its config or
//! whose byte size does not match its shape; each refusal answers false and
//! is remembered, so the request fails with the reason even when the
//! library ignores the false. A panic never crosses back into C.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use crate::core::types::{element_count, DataType};

use super::abi::MEMORY_CPU;

/// One input of a payload: the request's bytes (owned by the request,
/// which outlives the registration) and how far the library has read.
pub(super) struct InputSlot {
    pub name: CString,
    pub data: *const u8,
    pub len: usize,
    pub offset: usize,
}

/// One output of the model's config, as the library must produce it.
pub(super) struct OutputSlot {
    pub name: CString,
    pub datatype: DataType,
    /// The config's dims as the model produces them (its `reshape` when it
    /// has one), without the batch dimension.
    pub dims: Vec<i64>,
    /// The request asked for it (else the library is told to skip it).
    pub required: bool,
    /// The shape the library reported and the buffer it wrote.
    pub produced: Option<(Vec<i64>, Vec<u8>)>,
}

/// What one payload's callbacks work on.
pub(super) struct PayloadIo {
    pub inputs: Vec<InputSlot>,
    pub outputs: Vec<OutputSlot>,
    /// The payload's batch size when the model batches (outputs then lead
    /// with it); None when it does not.
    pub batch: Option<u32>,
    /// Why callbacks answered false, in order.
    pub errors: Vec<String>,
    /// The execute returned: every callback answers false from now on
    /// (one that found the payload just before may be waiting for its lock).
    pub closed: bool,
}

// SAFETY: `InputSlot::data` points into a request's tensor, which the
// executing instance keeps alive and unchanged while the payload is
// registered, and which is only read through it.
unsafe impl Send for InputSlot {}

type Live = HashMap<usize, Arc<Mutex<PayloadIo>>>;

static LIVE: LazyLock<Mutex<Live>> = LazyLock::new(Default::default);
static NEXT_TOKEN: AtomicUsize = AtomicUsize::new(1);

fn live() -> MutexGuard<'static, Live> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

fn lock(io: &Mutex<PayloadIo>) -> MutexGuard<'_, PayloadIo> {
    io.lock().unwrap_or_else(|p| p.into_inner())
}

/// Payloads registered for one `CustomExecute` call; dropping it ends
/// their callbacks.
pub(super) struct Registration {
    tokens: Vec<usize>,
    ios: Vec<Arc<Mutex<PayloadIo>>>,
}

impl Registration {
    pub fn new(ios: Vec<PayloadIo>) -> Registration {
        let ios: Vec<_> = ios.into_iter().map(|io| Arc::new(Mutex::new(io))).collect();
        let mut map = live();
        let tokens = ios
            .iter()
            .map(|io| {
                let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
                map.insert(token, Arc::clone(io));
                token
            })
            .collect();
        Registration { tokens, ios }
    }

    /// The context pointer the library gets for payload `i`.
    pub fn context(&self, i: usize) -> *mut c_void {
        self.tokens[i] as *mut c_void
    }

    /// Ends the callbacks and hands back what they produced. Each payload
    /// is closed under its lock first, so a callback that looked it up
    /// before the tokens went away (a thread of the library racing the
    /// return) finds it closed and lends nothing.
    pub fn finish(mut self) -> Vec<PayloadIo> {
        self.unregister();
        std::mem::take(&mut self.ios)
            .into_iter()
            .map(|io| {
                let mut guard = lock(&io);
                guard.closed = true;
                PayloadIo {
                    inputs: std::mem::take(&mut guard.inputs),
                    outputs: std::mem::take(&mut guard.outputs),
                    batch: guard.batch,
                    errors: std::mem::take(&mut guard.errors),
                    closed: true,
                }
            })
            .collect()
    }

    fn unregister(&mut self) {
        let mut map = live();
        for token in self.tokens.drain(..) {
            map.remove(&token);
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.unregister();
    }
}

fn lookup(context: *mut c_void) -> Option<Arc<Mutex<PayloadIo>>> {
    live().get(&(context as usize)).cloned()
}

/// `name` as text for messages.
fn shown(name: &CStr) -> String {
    name.to_string_lossy().into_owned()
}

/// `CustomGetNextInputFn_t`: the next block of input `name`, at most
/// `*content_byte_size` bytes (TRTIS: a maximum of 0 gets no block); a
/// null block once the input is all handed out.
pub(super) unsafe extern "C" fn get_next_input(
    input_context: *mut c_void,
    name: *const c_char,
    content: *mut *const c_void,
    content_byte_size: *mut u64,
) -> bool {
    catch_unwind(AssertUnwindSafe(|| {
        if content.is_null() || content_byte_size.is_null() || name.is_null() {
            return false;
        }
        // SAFETY: checked non-null; the library passes writable pointers
        // and a NUL-terminated name, as the API requires.
        let (name, max) = unsafe {
            *content = std::ptr::null();
            (CStr::from_ptr(name), *content_byte_size)
        };
        let Some(io) = lookup(input_context) else {
            return false;
        };
        let mut io = lock(&io);
        if io.closed {
            return false;
        }
        let Some(slot) = io.inputs.iter_mut().find(|s| s.name.as_c_str() == name) else {
            let message = format!(
                "the custom library asked for input '{}', which the request does not have",
                shown(name)
            );
            io.errors.push(message);
            return false;
        };
        let remaining = slot.len - slot.offset;
        let n = remaining.min(usize::try_from(max).unwrap_or(usize::MAX));
        // SAFETY: `data` holds `len` bytes while registered; `offset + n`
        // stays within them. The pointers were checked above.
        unsafe {
            *content_byte_size = n as u64;
            if n > 0 {
                *content = slot.data.add(slot.offset).cast();
            }
        }
        slot.offset += n;
        true
    }))
    .unwrap_or(false)
}

/// `CustomGetOutputFn_t`: a buffer for output `name` of the reported shape
/// and byte size, or true with no buffer when the request did not ask for
/// it.
pub(super) unsafe extern "C" fn get_output(
    output_context: *mut c_void,
    name: *const c_char,
    shape_dim_cnt: usize,
    shape_dims: *mut i64,
    content_byte_size: u64,
    content: *mut *mut c_void,
) -> bool {
    catch_unwind(AssertUnwindSafe(|| {
        if content.is_null() || name.is_null() {
            return false;
        }
        // SAFETY: checked non-null; a NUL-terminated name as the API requires.
        let name = unsafe {
            *content = std::ptr::null_mut();
            CStr::from_ptr(name)
        };
        let Some(io) = lookup(output_context) else {
            return false;
        };
        let mut io = lock(&io);
        if io.closed {
            return false;
        }
        let io = &mut *io;
        let fail = |errors: &mut Vec<String>, message: String| {
            errors.push(message);
            false
        };
        let Some(slot) = io.outputs.iter_mut().find(|s| s.name.as_c_str() == name) else {
            return fail(
                &mut io.errors,
                format!("the custom library asked for a buffer for output '{}', which the model's config does not declare", shown(name)),
            );
        };
        if !slot.required {
            return true;
        }
        if slot.produced.is_some() {
            return fail(
                &mut io.errors,
                format!("the custom library asked for a buffer for output '{}' twice", shown(name)),
            );
        }
        if shape_dim_cnt > 64 || (shape_dim_cnt > 0 && shape_dims.is_null()) {
            return fail(
                &mut io.errors,
                format!("the custom library reported no valid shape for output '{}'", shown(name)),
            );
        }
        let shape = if shape_dim_cnt == 0 {
            Vec::new()
        } else {
            // SAFETY: non-null, `shape_dim_cnt` dims as the API requires.
            unsafe { std::slice::from_raw_parts(shape_dims, shape_dim_cnt) }.to_vec()
        };
        if let Err(why) = check_shape(&shape, &slot.dims, io.batch) {
            return fail(
                &mut io.errors,
                format!("the custom library reported shape {shape:?} for output '{}', {why}", shown(name)),
            );
        }
        let Ok(size) = usize::try_from(content_byte_size) else {
            return fail(&mut io.errors, format!("output '{}' is too large", shown(name)));
        };
        if let Some(element) = slot.datatype.size() {
            let expected = element_count(&shape).and_then(|n| n.checked_mul(element));
            if expected != Some(size) {
                return fail(
                    &mut io.errors,
                    format!(
                        "the custom library asked for {size} bytes for output '{}' of shape {shape:?}, which holds {} bytes of {}",
                        shown(name),
                        expected.map_or("too many".to_string(), |n| n.to_string()),
                        slot.datatype.name()
                    ),
                );
            }
        }
        let mut buffer = Vec::new();
        if buffer.try_reserve_exact(size).is_err() {
            return fail(
                &mut io.errors,
                format!("no memory for the {size} bytes of output '{}'", shown(name)),
            );
        }
        buffer.resize(size, 0); // zeroed: the library may leave bytes unwritten
        // SAFETY: checked non-null above.
        unsafe { *content = buffer.as_mut_ptr().cast() };
        // The buffer's heap block stays where it is from here on: it is
        // only moved as a whole (never grown) until the execute returned.
        slot.produced = Some((shape, buffer));
        true
    }))
    .unwrap_or(false)
}

/// Whether a reported output shape fits the config's dims (`-1` any
/// size), with the payload's batch size first when the model batches.
fn check_shape(shape: &[i64], dims: &[i64], batch: Option<u32>) -> Result<(), String> {
    let rest = match batch {
        Some(b) => {
            if shape.first() != Some(&i64::from(b)) {
                return Err(format!(
                    "which does not start with the request's batch size {b}"
                ));
            }
            &shape[1..]
        }
        None => shape,
    };
    let fits = rest.len() == dims.len()
        && rest
            .iter()
            .zip(dims)
            .all(|(&got, &want)| got >= 0 && (want == -1 || got == want));
    if fits {
        Ok(())
    } else {
        Err(format!("which does not match the config's dims {dims:?}"))
    }
}

fn cpu_memory(memory_type: *mut c_int, memory_type_id: *mut i64) {
    // SAFETY: written only when non-null, as the API allows.
    unsafe {
        if !memory_type.is_null() {
            *memory_type = MEMORY_CPU;
        }
        if !memory_type_id.is_null() {
            *memory_type_id = 0;
        }
    }
}

/// `CustomGetNextInputV2Fn_t`: the blocks are always in CPU memory.
pub(super) unsafe extern "C" fn get_next_input_v2(
    input_context: *mut c_void,
    name: *const c_char,
    content: *mut *const c_void,
    content_byte_size: *mut u64,
    memory_type: *mut c_int,
    memory_type_id: *mut i64,
) -> bool {
    cpu_memory(memory_type, memory_type_id);
    // SAFETY: the same contract as the V1 callback.
    unsafe { get_next_input(input_context, name, content, content_byte_size) }
}

/// `CustomGetOutputV2Fn_t`: buffers are always in CPU memory (whatever
/// the library preferred; it reads where they are from `memory_type`).
#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn get_output_v2(
    output_context: *mut c_void,
    name: *const c_char,
    shape_dim_cnt: usize,
    shape_dims: *mut i64,
    content_byte_size: u64,
    content: *mut *mut c_void,
    memory_type: *mut c_int,
    memory_type_id: *mut i64,
) -> bool {
    cpu_memory(memory_type, memory_type_id);
    // SAFETY: the same contract as the V1 callback.
    unsafe {
        get_output(
            output_context,
            name,
            shape_dim_cnt,
            shape_dims,
            content_byte_size,
            content,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(data: &[u8]) -> PayloadIo {
        PayloadIo {
            inputs: vec![InputSlot {
                name: CString::new("IN").unwrap(),
                data: data.as_ptr(),
                len: data.len(),
                offset: 0,
            }],
            outputs: vec![OutputSlot {
                name: CString::new("OUT").unwrap(),
                datatype: DataType::Fp32,
                dims: vec![2],
                required: true,
                produced: None,
            }],
            batch: Some(1),
            errors: Vec::new(),
            closed: false,
        }
    }

    #[test]
    fn inputs_come_in_blocks_and_outputs_are_checked() {
        let data = [1u8, 2, 3, 4, 5];
        let reg = Registration::new(vec![io(&data)]);
        let ctx = reg.context(0);
        let name = CString::new("IN").unwrap();
        let mut content: *const c_void = std::ptr::null();
        let mut size = 3u64;
        unsafe {
            assert!(get_next_input(ctx, name.as_ptr(), &mut content, &mut size));
            assert_eq!((size, *(content as *const u8)), (3, 1));
            size = 10;
            assert!(get_next_input(ctx, name.as_ptr(), &mut content, &mut size));
            assert_eq!((size, *(content as *const u8)), (2, 4));
            assert!(get_next_input(ctx, name.as_ptr(), &mut content, &mut size));
            assert!(content.is_null());
            let unknown = CString::new("NOPE").unwrap();
            assert!(!get_next_input(
                ctx,
                unknown.as_ptr(),
                &mut content,
                &mut size
            ));
        }
        let out = CString::new("OUT").unwrap();
        let mut buffer: *mut c_void = std::ptr::null_mut();
        let mut shape = [1i64, 2];
        unsafe {
            // 9 bytes for [1, 2] FP32 (8 bytes): refused.
            assert!(!get_output(
                ctx,
                out.as_ptr(),
                2,
                shape.as_mut_ptr(),
                9,
                &mut buffer
            ));
            assert!(buffer.is_null());
            let mut wrong = [2i64, 2];
            assert!(!get_output(
                ctx,
                out.as_ptr(),
                2,
                wrong.as_mut_ptr(),
                16,
                &mut buffer
            ));
            assert!(get_output(
                ctx,
                out.as_ptr(),
                2,
                shape.as_mut_ptr(),
                8,
                &mut buffer
            ));
            assert!(!buffer.is_null());
            *(buffer as *mut u8) = 7;
            // Twice: refused.
            assert!(!get_output(
                ctx,
                out.as_ptr(),
                2,
                shape.as_mut_ptr(),
                8,
                &mut buffer
            ));
        }
        let done = reg.finish();
        assert_eq!(done[0].errors.len(), 4, "{:?}", done[0].errors);
        assert_eq!(done[0].outputs[0].produced.as_ref().unwrap().1[0], 7);
        // After the execute: the context is dead.
        let mut size = 3u64;
        unsafe {
            assert!(!get_next_input(ctx, name.as_ptr(), &mut content, &mut size));
            assert!(!get_output(
                ctx,
                out.as_ptr(),
                2,
                shape.as_mut_ptr(),
                8,
                &mut buffer
            ));
            assert!(!get_output(
                std::ptr::null_mut(),
                out.as_ptr(),
                2,
                shape.as_mut_ptr(),
                8,
                &mut buffer
            ));
        }
    }

    #[test]
    fn a_maximum_of_zero_gets_no_block() {
        let data = [1u8; 4];
        let reg = Registration::new(vec![io(&data)]);
        let name = CString::new("IN").unwrap();
        let mut content: *const c_void = std::ptr::null();
        let mut size = 0u64;
        unsafe {
            assert!(get_next_input(
                reg.context(0),
                name.as_ptr(),
                &mut content,
                &mut size
            ));
        }
        assert!(content.is_null());
        assert_eq!(size, 0);
    }
}
