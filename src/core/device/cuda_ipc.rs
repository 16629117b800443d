//! Device memory another process shares by CUDA IPC (Triton's
//! `cuda_shared_memory` extension): opened from the 64-byte handle the
//! client made with `cudaIpcGetMemHandle`, on the device it names, through
//! the CUDA driver loaded at run time (cudarc); copied in and out with
//! synchronous copies; closed when dropped. Every copy is bounds-checked
//! against the size the client registered, and that size against the
//! allocation the handle opens (so a client cannot make the server read or
//! write past its own allocation).

use cudarc::driver::{result, sys};

/// The size of a `cudaIpcMemHandle_t` (`CUDA_IPC_HANDLE_SIZE`).
pub const HANDLE_SIZE: usize = 64;

/// One opened IPC allocation.
pub struct IpcMemory {
    device: sys::CUdevice,
    ctx: sys::CUcontext,
    ptr: sys::CUdeviceptr,
    byte_size: usize,
}

// SAFETY: the CUDA driver API is thread-safe; every use makes the primary
// context current on the calling thread first, and `ptr` is only a device
// address.
unsafe impl Send for IpcMemory {}
unsafe impl Sync for IpcMemory {}

fn driver_error(what: &str, e: result::DriverError) -> String {
    format!("{what}: {e}")
}

/// Runs a driver call sequence, turning a panic of cudarc's loader (a
/// missing entry point) into an error.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err("the CUDA driver library could not be used".into()))
}

impl IpcMemory {
    /// Opens `handle` on GPU `device` for `byte_size` bytes.
    pub fn open(handle: &[u8], device: i32, byte_size: usize) -> Result<IpcMemory, String> {
        if handle.len() != HANDLE_SIZE {
            return Err(format!(
                "a CUDA IPC handle is {HANDLE_SIZE} bytes, this one is {}",
                handle.len()
            ));
        }
        // SAFETY: only tries to dlopen libcuda.
        if !unsafe { sys::is_culib_present() } {
            return Err("no CUDA driver (libcuda.so.1 not found)".into());
        }
        guarded(|| {
            result::init().map_err(|e| driver_error("cuInit", e))?;
            let dev = result::device::get(device).map_err(|e| driver_error("cuDeviceGet", e))?;
            // SAFETY: `dev` came from cuDeviceGet; the context is released
            // on every path that does not keep it.
            let ctx = unsafe { result::primary_ctx::retain(dev) }
                .map_err(|e| driver_error("cuDevicePrimaryCtxRetain", e))?;
            let opened = (|| {
                // SAFETY: `ctx` is the retained primary context.
                unsafe { result::ctx::set_current(ctx) }
                    .map_err(|e| driver_error("cuCtxSetCurrent", e))?;
                let mut raw = sys::CUipcMemHandle {
                    reserved: [0; HANDLE_SIZE],
                };
                for (to, from) in raw.reserved.iter_mut().zip(handle) {
                    *to = *from as _;
                }
                let mut ptr: sys::CUdeviceptr = 0;
                // SAFETY: out-pointer to a local; the handle is passed by value.
                unsafe {
                    sys::cuIpcOpenMemHandle_v2(
                        &mut ptr,
                        raw,
                        sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
                    )
                    .result()
                }
                .map_err(|e| driver_error("cuIpcOpenMemHandle", e))?;
                let (mut base, mut size): (sys::CUdeviceptr, usize) = (0, 0);
                // SAFETY: out-pointers to locals; `ptr` was just opened.
                let range =
                    unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr).result() };
                // The bytes from `ptr` to the allocation's end.
                let room = ptr
                    .checked_sub(base)
                    .and_then(|into| (size as u64).checked_sub(into));
                let fits = range.is_ok() && room.is_some_and(|room| byte_size as u64 <= room);
                if !fits {
                    // SAFETY: `ptr` was opened above and is not used again.
                    let _ = unsafe { sys::cuIpcCloseMemHandle(ptr).result() };
                    return Err(match range {
                        Err(e) => driver_error("cuMemGetAddressRange", e),
                        Ok(()) => format!(
                            "the allocation the handle opens holds {} bytes, fewer than the {byte_size} registered",
                            room.unwrap_or(0)
                        ),
                    });
                }
                Ok(ptr)
            })();
            match opened {
                Ok(ptr) => Ok(IpcMemory {
                    device: dev,
                    ctx,
                    ptr,
                    byte_size,
                }),
                Err(e) => {
                    // SAFETY: retained above, not kept.
                    let _ = unsafe { result::primary_ctx::release(dev) };
                    Err(e)
                }
            }
        })
    }

    pub fn byte_size(&self) -> usize {
        self.byte_size
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), String> {
        match offset.checked_add(len) {
            Some(end) if end <= self.byte_size => Ok(()),
            _ => Err(format!(
                "{len} bytes at offset {offset} are past the region's {} bytes",
                self.byte_size
            )),
        }
    }

    /// Copies `out.len()` bytes from `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), String> {
        self.check(offset, out.len())?;
        guarded(|| {
            // SAFETY: the context is retained for our lifetime; the range
            // was checked against the registered size, itself checked
            // against the allocation at open.
            unsafe {
                result::ctx::set_current(self.ctx)
                    .map_err(|e| driver_error("cuCtxSetCurrent", e))?;
                result::memcpy_dtoh_sync(out, self.ptr + offset as u64)
                    .map_err(|e| driver_error("cuMemcpyDtoH", e))
            }
        })
    }

    /// Copies `data` to `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), String> {
        self.check(offset, data.len())?;
        guarded(|| {
            // SAFETY: as in `read`.
            unsafe {
                result::ctx::set_current(self.ctx)
                    .map_err(|e| driver_error("cuCtxSetCurrent", e))?;
                result::memcpy_htod_sync(self.ptr + offset as u64, data)
                    .map_err(|e| driver_error("cuMemcpyHtoD", e))?;
                // From pageable memory the copy may still be on its way to
                // the device when cuMemcpyHtoD returns; the client reads the
                // region as soon as it has the response.
                result::ctx::synchronize().map_err(|e| driver_error("cuCtxSynchronize", e))
            }
        })
    }
}

impl Drop for IpcMemory {
    fn drop(&mut self) {
        let _ = guarded(|| {
            // SAFETY: `ptr` was opened in `open` and is not used after this;
            // the context was retained there.
            unsafe {
                let _ = result::ctx::set_current(self.ctx);
                let _ = sys::cuIpcCloseMemHandle(self.ptr).result();
                let _ = result::primary_ctx::release(self.device);
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_of_the_wrong_size_or_without_a_driver_is_an_error() {
        let e = IpcMemory::open(&[0; 10], 0, 16).err().unwrap();
        assert!(
            e.contains("a CUDA IPC handle is 64 bytes, this one is 10"),
            "{e}"
        );
        // SAFETY: only tries to dlopen libcuda.
        if !unsafe { sys::is_culib_present() } {
            let e = IpcMemory::open(&[0; HANDLE_SIZE], 0, 16).err().unwrap();
            assert!(e.contains("no CUDA driver"), "{e}");
        }
    }
}
