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

/// One GPU's readings for the `nv_gpu_*` metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuReading {
    pub uuid: String,
    /// In [0, 1].
    pub utilization: f64,
    pub memory_total: u64,
    pub memory_used: u64,
    /// Watts.
    pub power_usage: f64,
    pub power_limit: f64,
    /// Joules since the driver loaded.
    pub energy: f64,
}

/// NVML, initialized once; `None` without an NVIDIA driver (no error).
fn nvml() -> Option<&'static nvml_wrapper::Nvml> {
    static NVML: std::sync::OnceLock<Option<nvml_wrapper::Nvml>> = std::sync::OnceLock::new();
    NVML.get_or_init(|| {
        if !Path::new("/proc/driver/nvidia").exists() {
            return None;
        }
        nvml_wrapper::Nvml::init().ok()
    })
    .as_ref()
}

/// The readings of every GPU NVML sees; empty on a machine without one.
pub fn gpu_readings() -> Vec<GpuReading> {
    let Some(nvml) = nvml() else {
        return Vec::new();
    };
    let count = nvml.device_count().unwrap_or(0);
    (0..count)
        .filter_map(|i| {
            let d = nvml.device_by_index(i).ok()?;
            let memory = d.memory_info().ok();
            Some(GpuReading {
                uuid: d.uuid().ok()?,
                utilization: d
                    .utilization_rates()
                    .map(|u| u.gpu as f64 / 100.0)
                    .unwrap_or(0.0),
                memory_total: memory.as_ref().map(|m| m.total).unwrap_or(0),
                memory_used: memory.as_ref().map(|m| m.used).unwrap_or(0),
                power_usage: d.power_usage().map(|mw| mw as f64 / 1000.0).unwrap_or(0.0),
                power_limit: d
                    .enforced_power_limit()
                    .map(|mw| mw as f64 / 1000.0)
                    .unwrap_or(0.0),
                energy: d
                    .total_energy_consumption()
                    .map(|mj| mj as f64 / 1000.0)
                    .unwrap_or(0.0),
            })
        })
        .collect()
}
