//! What compute devices this machine has (the CUDA driver, loaded at run
//! time through cudarc, so a machine without one runs the same binary), which
//! of them this server may use, and where each model instance goes.

use std::path::Path;
use std::sync::OnceLock;

pub mod cuda_ipc;

/// One GPU as the CUDA driver reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// The CUDA device ordinal (after `CUDA_VISIBLE_DEVICES`), the id
    /// configs use in `instance_group.gpus`.
    pub id: i32,
    pub name: String,
    /// `GPU-xxxxxxxx-...`, as nvidia-smi and the `nv_gpu_*` metrics label it.
    pub uuid: String,
    /// Bytes.
    pub memory_total: u64,
    /// (major, minor).
    pub compute_capability: (i32, i32),
}

impl Gpu {
    /// Triton places instances only on GPUs of compute capability `min`
    /// ([`MIN_COMPUTE_CAPABILITY`], or `--min-supported-compute-capability`)
    /// or more; the others are found but not used.
    pub fn usable(&self, min: (i32, i32)) -> bool {
        self.compute_capability >= min
    }
}

/// Triton 2.51's minimum CUDA compute capability.
pub const MIN_COMPUTE_CAPABILITY: (i32, i32) = (6, 0);

/// A compute capability given as Triton's flag gives it (`X.Y`):
/// 7.5 is (7, 5); 8.65 rounds to (8, 7), capabilities having one digit.
pub fn capability_from_flag(cc: f64) -> (i32, i32) {
    let major = cc.trunc() as i32;
    let minor = ((cc - cc.trunc()) * 10.0).round() as i32;
    (major, minor.min(9))
}

/// A compute capability as Triton prints it (6.000000 with `{:.6}`).
pub fn capability_value((major, minor): (i32, i32)) -> f64 {
    major as f64 + minor as f64 / 10.0
}

/// What discovery found: the GPUs, and when there are none, why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovery {
    pub gpus: Vec<Gpu>,
    /// Why no GPU was found (no driver library, no device, a driver
    /// error); None when GPUs were found.
    pub none_because: Option<String>,
}

/// The GPUs of this machine, discovered once. `TRTIS_GPU_COUNT=N`
/// simulates N GPUs (named "simulated GPU", capability 8.0, no memory),
/// for tests of the GPU rules on a machine without one; no backend can run
/// on them.
pub fn discovery() -> &'static Discovery {
    static FOUND: OnceLock<Discovery> = OnceLock::new();
    FOUND.get_or_init(|| {
        if let Some(n) = std::env::var("TRTIS_GPU_COUNT")
            .ok()
            .and_then(|v| v.parse::<i32>().ok())
        {
            return simulated(n);
        }
        match std::panic::catch_unwind(discover_cuda) {
            Ok(Ok(gpus)) if gpus.is_empty() => Discovery {
                gpus,
                none_because: Some("the CUDA driver reports no device".into()),
            },
            Ok(Ok(gpus)) => Discovery {
                gpus,
                none_because: None,
            },
            Ok(Err(why)) => Discovery {
                gpus: Vec::new(),
                none_because: Some(why),
            },
            // cudarc panics when a driver entry point is missing.
            Err(_) => Discovery {
                gpus: Vec::new(),
                none_because: Some("the CUDA driver library could not be used".into()),
            },
        }
    })
}

fn simulated(n: i32) -> Discovery {
    Discovery {
        gpus: (0..n.max(0))
            .map(|id| Gpu {
                id,
                name: "simulated GPU".into(),
                uuid: format!("GPU-simulated-{id}"),
                memory_total: 0,
                compute_capability: (8, 0),
            })
            .collect(),
        none_because: (n <= 0).then(|| "TRTIS_GPU_COUNT=0".into()),
    }
}

/// Asks the CUDA driver (libcuda.so.1, loaded now if present) for its
/// devices.
fn discover_cuda() -> Result<Vec<Gpu>, String> {
    use cudarc::driver::{result, sys};
    // SAFETY: only tries to dlopen the library; without this check the
    // first driver call panics when there is none.
    if !unsafe { sys::is_culib_present() } {
        return Err(
            "no CUDA driver: libcuda.so.1 not found; install the NVIDIA driver to use GPUs".into(),
        );
    }
    let err = |what: &str, e: result::DriverError| format!("CUDA driver: {what}: {e}");
    result::init().map_err(|e| err("cuInit", e))?;
    let count = result::device::get_count().map_err(|e| err("cuDeviceGetCount", e))?;
    let mut gpus = Vec::new();
    for id in 0..count {
        let dev = result::device::get(id).map_err(|e| err("cuDeviceGet", e))?;
        let name = result::device::get_name(dev).map_err(|e| err("cuDeviceGetName", e))?;
        // SAFETY: `dev` came from cuDeviceGet above.
        let (memory_total, major, minor) = unsafe {
            (
                result::device::total_mem(dev).map_err(|e| err("cuDeviceTotalMem", e))?,
                result::device::get_attribute(
                    dev,
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                )
                .map_err(|e| err("cuDeviceGetAttribute", e))?,
                result::device::get_attribute(
                    dev,
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                )
                .map_err(|e| err("cuDeviceGetAttribute", e))?,
            )
        };
        let uuid = result::device::get_uuid(dev)
            .map(|u| uuid_text(&u.bytes.map(|b| b as u8)))
            .unwrap_or_default();
        gpus.push(Gpu {
            id,
            name,
            uuid,
            memory_total: memory_total as u64,
            compute_capability: (major, minor),
        });
    }
    Ok(gpus)
}

/// `GPU-` and the 16 bytes as 8-4-4-4-12 hex digits, as nvidia-smi prints.
fn uuid_text(b: &[u8; 16]) -> String {
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Which GPUs `--gpus` lets this server use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GpuSelection {
    /// Every usable GPU (the default).
    #[default]
    All,
    None,
    /// These ids (CUDA ordinals).
    Ids(Vec<i32>),
}

impl std::str::FromStr for GpuSelection {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "all" => Ok(GpuSelection::All),
            "none" => Ok(GpuSelection::None),
            list => list
                .split(',')
                .map(|id| {
                    id.trim()
                        .parse::<i32>()
                        .ok()
                        .filter(|id| *id >= 0)
                        .ok_or_else(|| {
                            format!("'{s}' is not 'all', 'none' or a list of GPU ids such as 0,1")
                        })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(GpuSelection::Ids),
        }
    }
}

/// The ids of the GPUs the selection lets this server use, from what
/// discovery found: only usable GPUs (compute capability `min` or more).
/// An id that names no GPU, or one below the minimum capability, is refused
/// with the reason.
pub fn select(
    found: &Discovery,
    selection: &GpuSelection,
    min: (i32, i32),
) -> Result<Vec<i32>, String> {
    let usable: Vec<i32> = found
        .gpus
        .iter()
        .filter(|g| g.usable(min))
        .map(|g| g.id)
        .collect();
    match selection {
        GpuSelection::All => Ok(usable),
        GpuSelection::None => Ok(Vec::new()),
        GpuSelection::Ids(ids) => {
            let mut out: Vec<i32> = Vec::new();
            for &id in ids {
                match found.gpus.iter().find(|g| g.id == id) {
                    None => {
                        let why = match &found.none_because {
                            Some(why) => format!("this machine has no GPU: {why}"),
                            None => format!(
                                "the GPUs are: {}",
                                found.gpus.iter().map(|g| g.id.to_string()).collect::<Vec<_>>().join(", ")
                            ),
                        };
                        return Err(format!("--gpus: there is no GPU {id}; {why}"));
                    }
                    Some(g) if !g.usable(min) => {
                        return Err(format!(
                            "--gpus: GPU {id} ({}) has compute capability {}.{}, below the {}.{} trtis and Triton need",
                            g.name,
                            g.compute_capability.0,
                            g.compute_capability.1,
                            min.0,
                            min.1
                        ))
                    }
                    Some(_) if !out.contains(&id) => out.push(id),
                    Some(_) => {}
                }
            }
            Ok(out)
        }
    }
}

/// The GPU ids this process uses: set once by [`restrict_gpus`] (`serve
/// --gpus`), else every GPU discovered of Triton's minimum capability.
pub fn visible_gpus() -> &'static [i32] {
    VISIBLE.get_or_init(|| {
        select(discovery(), &GpuSelection::All, MIN_COMPUTE_CAPABILITY).unwrap_or_default()
    })
}

static VISIBLE: OnceLock<Vec<i32>> = OnceLock::new();

/// Restricts this process to the selected GPUs; call before anything asks
/// for [`visible_gpus`] (serve does, first), using only GPUs of compute
/// capability `min` or more. Returns the ids.
pub fn restrict_gpus(selection: &GpuSelection, min: (i32, i32)) -> Result<&'static [i32], String> {
    let ids = select(discovery(), selection, min)?;
    if VISIBLE.set(ids.clone()).is_err() && visible_gpus() != ids.as_slice() {
        return Err("--gpus: the GPUs were chosen already".into());
    }
    Ok(visible_gpus())
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

/// The readings of the GPUs this server uses ([`visible_gpus`]), matched
/// to NVML's devices by UUID (NVML numbers every GPU in PCI order, whatever
/// `CUDA_VISIBLE_DEVICES` says); empty on a machine without one.
pub fn gpu_readings() -> Vec<GpuReading> {
    let Some(nvml) = nvml() else {
        return Vec::new();
    };
    let used: Vec<&str> = discovery()
        .gpus
        .iter()
        .filter(|g| visible_gpus().contains(&g.id))
        .map(|g| g.uuid.as_str())
        .collect();
    let count = nvml.device_count().unwrap_or(0);
    (0..count)
        .filter_map(|i| {
            let d = nvml.device_by_index(i).ok()?;
            let uuid = d.uuid().ok()?;
            if !used.contains(&uuid.as_str()) {
                return None;
            }
            let memory = d.memory_info().ok();
            Some(GpuReading {
                uuid,
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

/// Where one model instance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    /// The GPU with this id (as `nvidia-smi` and `CUDA_VISIBLE_DEVICES`
    /// number the visible ones).
    Gpu(i32),
    /// KIND_MODEL: the backend decides.
    Model,
}

/// One instance a config's instance groups expand to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// `<group name>_<index in its group>`, as Triton 2.51 names it; the
    /// same name on each GPU a KIND_GPU group lists.
    pub name: String,
    /// The group's position in `instance_group`.
    pub group: usize,
    pub device: Device,
}

/// The instances of a normalized config (KIND_AUTO resolved, KIND_GPU's
/// `gpus` filled in), in Triton's order: group by group, then instance
/// index by index, then, for KIND_GPU, one per listed GPU. `visible` are the
/// GPU ids this server may use, those of compute capability `min` or more.
/// Refused as Triton refuses (the message is
/// the reason, without the model's name): a KIND_GPU group without a GPU or
/// listing one that is not visible, a KIND_CPU or KIND_MODEL group listing
/// GPUs, KIND_AUTO left unresolved.
pub fn place(
    config: &crate::core::config::pb::ModelConfig,
    visible: &[i32],
    min: (i32, i32),
) -> Result<Vec<Placement>, String> {
    use crate::core::config::pb::model_instance_group::Kind;
    let mut out = Vec::new();
    for (index, group) in config.instance_group.iter().enumerate() {
        let kind = Kind::try_from(group.kind).unwrap_or(Kind::Auto);
        let devices: Vec<Device> = match kind {
            Kind::Cpu | Kind::Model if !group.gpus.is_empty() => {
                return Err(format!(
                    "instance group {} of model {} has kind {} but specifies one or more GPUs",
                    group.name,
                    config.name,
                    kind.as_str_name()
                ));
            }
            Kind::Cpu => vec![Device::Cpu],
            Kind::Model => vec![Device::Model],
            Kind::Gpu => {
                if visible.is_empty() {
                    return Err(format!(
                        "instance group {} of model {} has kind KIND_GPU but no GPUs are available",
                        group.name, config.name
                    ));
                }
                if group.gpus.is_empty() {
                    return Err(format!(
                        "instance group {} of model {} has kind KIND_GPU but lists no GPU (normalization gives it every one)",
                        group.name, config.name
                    ));
                }
                if let Some(bad) = group.gpus.iter().find(|g| !visible.contains(g)) {
                    let mut ids: Vec<String> = visible.iter().map(i32::to_string).collect();
                    ids.sort();
                    // Validation's words for the same (rule 28).
                    return Err(format!(
                        "instance group {} of model {} specifies invalid or unsupported gpu id {bad}. GPUs with at least the minimum required CUDA compute compatibility of {:.6} are: {}",
                        group.name,
                        config.name,
                        capability_value(min),
                        ids.join(", ")
                    ));
                }
                group.gpus.iter().map(|&g| Device::Gpu(g)).collect()
            }
            Kind::Auto => {
                return Err(format!(
                    "instance group {} of model {} has kind KIND_AUTO left unresolved",
                    group.name, config.name
                ))
            }
        };
        for i in 0..group.count.max(1) {
            for &device in &devices {
                out.push(Placement {
                    name: format!("{}_{}", group.name, i),
                    group: index,
                    device,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::pb::model_instance_group::Kind;
    use crate::core::config::pb::{ModelConfig, ModelInstanceGroup};

    const MIN: (i32, i32) = MIN_COMPUTE_CAPABILITY;

    fn group(name: &str, kind: Kind, count: i32, gpus: &[i32]) -> ModelInstanceGroup {
        ModelInstanceGroup {
            name: name.to_string(),
            kind: kind as i32,
            count,
            gpus: gpus.to_vec(),
            ..Default::default()
        }
    }

    fn config(groups: Vec<ModelInstanceGroup>) -> ModelConfig {
        ModelConfig {
            name: "m".to_string(),
            instance_group: groups,
            ..Default::default()
        }
    }

    fn layout(p: &[Placement]) -> Vec<(String, Device)> {
        p.iter().map(|p| (p.name.clone(), p.device)).collect()
    }

    fn named(items: &[(&str, Device)]) -> Vec<(String, Device)> {
        items.iter().map(|(n, d)| (n.to_string(), *d)).collect()
    }

    #[test]
    fn cpu_groups_give_count_instances_named_by_index() {
        let c = config(vec![
            group("m_0", Kind::Cpu, 2, &[]),
            group("m_1", Kind::Model, 1, &[]),
        ]);
        for visible in [&[][..], &[0], &[0, 1, 2, 3]] {
            let p = place(&c, visible, MIN).unwrap();
            assert_eq!(
                layout(&p),
                named(&[
                    ("m_0_0", Device::Cpu),
                    ("m_0_1", Device::Cpu),
                    ("m_1_0", Device::Model)
                ])
            );
            assert_eq!(p[2].group, 1);
        }
    }

    #[test]
    fn gpu_groups_give_count_instances_on_each_listed_gpu() {
        use Device::Gpu;
        // One GPU, count 2.
        let c = config(vec![group("m_0", Kind::Gpu, 2, &[0])]);
        assert_eq!(
            layout(&place(&c, &[0], MIN).unwrap()),
            named(&[("m_0_0", Gpu(0)), ("m_0_1", Gpu(0))])
        );
        // Two GPUs listed, count 2: index by index, each on both.
        let c = config(vec![group("m_0", Kind::Gpu, 2, &[0, 1])]);
        assert_eq!(
            layout(&place(&c, &[0, 1], MIN).unwrap()),
            named(&[
                ("m_0_0", Gpu(0)),
                ("m_0_0", Gpu(1)),
                ("m_0_1", Gpu(0)),
                ("m_0_1", Gpu(1))
            ])
        );
        // Four visible, two groups on some of them, and a CPU group.
        let c = config(vec![
            group("a", Kind::Gpu, 1, &[3, 1]),
            group("b", Kind::Cpu, 1, &[]),
            group("c", Kind::Gpu, 1, &[2]),
        ]);
        assert_eq!(
            layout(&place(&c, &[0, 1, 2, 3], MIN).unwrap()),
            named(&[
                ("a_0", Gpu(3)),
                ("a_0", Gpu(1)),
                ("b_0", Device::Cpu),
                ("c_0", Gpu(2))
            ])
        );
    }

    #[test]
    fn a_group_normalized_to_every_gpu_has_an_instance_on_each() {
        // Normalization gives a KIND_GPU group without ids every visible
        // GPU (config::normalize's tests); with four:
        let c = config(vec![group("m_0", Kind::Gpu, 1, &[0, 1, 2, 3])]);
        let p = place(&c, &[0, 1, 2, 3], MIN).unwrap();
        assert_eq!(
            p.iter().map(|p| p.device).collect::<Vec<_>>(),
            (0..4).map(Device::Gpu).collect::<Vec<_>>()
        );
        assert!(p.iter().all(|p| p.name == "m_0_0" && p.group == 0));
    }

    fn found(caps: &[(i32, i32)]) -> Discovery {
        Discovery {
            gpus: caps
                .iter()
                .enumerate()
                .map(|(id, &compute_capability)| Gpu {
                    id: id as i32,
                    name: format!("gpu{id}"),
                    uuid: String::new(),
                    memory_total: 1 << 34,
                    compute_capability,
                })
                .collect(),
            none_because: None,
        }
    }

    #[test]
    fn gpus_flag_parses_all_none_and_ids() {
        assert_eq!("all".parse(), Ok(GpuSelection::All));
        assert_eq!("none".parse(), Ok(GpuSelection::None));
        assert_eq!(" 0, 2".parse(), Ok(GpuSelection::Ids(vec![0, 2])));
        for bad in ["", "x", "-1", "0,,1", "1.5"] {
            assert!(bad.parse::<GpuSelection>().is_err(), "{bad}");
        }
    }

    #[test]
    fn selection_keeps_usable_gpus_and_refuses_what_is_not_there() {
        // Four GPUs, GPU 2 below compute capability 6.0.
        let four = found(&[(8, 0), (7, 5), (5, 2), (9, 0)]);
        assert_eq!(select(&four, &GpuSelection::All, MIN), Ok(vec![0, 1, 3]));
        assert_eq!(select(&four, &GpuSelection::None, MIN), Ok(vec![]));
        // Ids keep CUDA's numbers (not renumbered), each once.
        assert_eq!(
            select(&four, &GpuSelection::Ids(vec![3, 1, 3]), MIN),
            Ok(vec![3, 1])
        );
        let old = select(&four, &GpuSelection::Ids(vec![2]), MIN).unwrap_err();
        assert!(
            old.contains("compute capability 5.2, below the 6.0"),
            "{old}"
        );
        let missing = select(&four, &GpuSelection::Ids(vec![4]), MIN).unwrap_err();
        assert!(
            missing.contains("there is no GPU 4; the GPUs are: 0, 1, 2, 3"),
            "{missing}"
        );
        // One GPU; none.
        assert_eq!(
            select(&found(&[(6, 0)]), &GpuSelection::All, MIN),
            Ok(vec![0])
        );
        let none = Discovery {
            gpus: vec![],
            none_because: Some("no CUDA driver".into()),
        };
        assert_eq!(select(&none, &GpuSelection::All, MIN), Ok(vec![]));
        let e = select(&none, &GpuSelection::Ids(vec![0]), MIN).unwrap_err();
        assert!(
            e.ends_with("this machine has no GPU: no CUDA driver"),
            "{e}"
        );
    }

    #[test]
    fn simulated_gpus_and_uuid_text() {
        let two = simulated(2);
        assert_eq!(two.gpus.len(), 2);
        assert!(two.none_because.is_none() && two.gpus.iter().all(|g| g.usable(MIN)));
        assert!(simulated(0).none_because.is_some());
        let bytes: [u8; 16] = std::array::from_fn(|i| i as u8 * 17);
        assert_eq!(
            uuid_text(&bytes),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }

    /// On this machine, whatever it has: discovery never panics, and says
    /// why when it finds nothing.
    #[test]
    fn discovery_answers_with_gpus_or_a_reason() {
        let d = match std::env::var("TRTIS_GPU_COUNT") {
            Ok(_) => return,
            Err(_) => discovery(),
        };
        assert_eq!(d.gpus.is_empty(), d.none_because.is_some(), "{d:?}");
    }

    #[test]
    fn what_triton_refuses_is_refused() {
        let no_gpu = place(&config(vec![group("g", Kind::Gpu, 1, &[0])]), &[], MIN).unwrap_err();
        assert!(
            no_gpu.contains("has kind KIND_GPU but no GPUs are available"),
            "{no_gpu}"
        );
        let bad = place(
            &config(vec![group("g", Kind::Gpu, 1, &[0, 2])]),
            &[0, 1],
            MIN,
        )
        .unwrap_err();
        assert!(
            bad.contains("specifies invalid or unsupported gpu id 2") && bad.ends_with("are: 0, 1"),
            "{bad}"
        );
        let cpu = place(&config(vec![group("c", Kind::Cpu, 1, &[0])]), &[0], MIN).unwrap_err();
        assert!(
            cpu.contains("has kind KIND_CPU but specifies one or more GPUs"),
            "{cpu}"
        );
        let model = place(&config(vec![group("x", Kind::Model, 1, &[0])]), &[0], MIN).unwrap_err();
        assert!(model.contains("KIND_MODEL"), "{model}");
        let auto = place(&config(vec![group("a", Kind::Auto, 1, &[])]), &[0], MIN).unwrap_err();
        assert!(auto.contains("KIND_AUTO"), "{auto}");
    }
}
