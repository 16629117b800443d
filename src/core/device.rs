//! What compute devices this machine has, without loading any GPU library.

use std::path::Path;

/// The number of NVIDIA GPUs the kernel driver exposes (0 when there is no
/// driver). `TRTIS_GPU_COUNT` overrides it, for tests of the GPU rules.
pub fn gpu_count() -> usize {
    if let Some(n) = std::env::var("TRTIS_GPU_COUNT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    let dir = Path::new("/proc/driver/nvidia/gpus");
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}
