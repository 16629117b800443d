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
/// GPU ids this server may use. Refused as Triton refuses (the message is
/// the reason, without the model's name): a KIND_GPU group without a GPU or
/// listing one that is not visible, a KIND_CPU or KIND_MODEL group listing
/// GPUs, KIND_AUTO left unresolved.
pub fn place(
    config: &crate::core::config::pb::ModelConfig,
    visible: &[i32],
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
                        "instance group {} of model {} specifies invalid or unsupported gpu id {bad}. GPUs with at least the minimum required CUDA compute compatibility of 6.000000 are: {}",
                        group.name,
                        config.name,
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
            let p = place(&c, visible).unwrap();
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
            layout(&place(&c, &[0]).unwrap()),
            named(&[("m_0_0", Gpu(0)), ("m_0_1", Gpu(0))])
        );
        // Two GPUs listed, count 2: index by index, each on both.
        let c = config(vec![group("m_0", Kind::Gpu, 2, &[0, 1])]);
        assert_eq!(
            layout(&place(&c, &[0, 1]).unwrap()),
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
            layout(&place(&c, &[0, 1, 2, 3]).unwrap()),
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
        let p = place(&c, &[0, 1, 2, 3]).unwrap();
        assert_eq!(
            p.iter().map(|p| p.device).collect::<Vec<_>>(),
            (0..4).map(Device::Gpu).collect::<Vec<_>>()
        );
        assert!(p.iter().all(|p| p.name == "m_0_0" && p.group == 0));
    }

    #[test]
    fn what_triton_refuses_is_refused() {
        let no_gpu = place(&config(vec![group("g", Kind::Gpu, 1, &[0])]), &[]).unwrap_err();
        assert!(
            no_gpu.contains("has kind KIND_GPU but no GPUs are available"),
            "{no_gpu}"
        );
        let bad = place(&config(vec![group("g", Kind::Gpu, 1, &[0, 2])]), &[0, 1]).unwrap_err();
        assert!(
            bad.contains("specifies invalid or unsupported gpu id 2") && bad.ends_with("are: 0, 1"),
            "{bad}"
        );
        let cpu = place(&config(vec![group("c", Kind::Cpu, 1, &[0])]), &[0]).unwrap_err();
        assert!(
            cpu.contains("has kind KIND_CPU but specifies one or more GPUs"),
            "{cpu}"
        );
        let model = place(&config(vec![group("x", Kind::Model, 1, &[0])]), &[0]).unwrap_err();
        assert!(model.contains("KIND_MODEL"), "{model}");
        let auto = place(&config(vec![group("a", Kind::Auto, 1, &[])]), &[0]).unwrap_err();
        assert!(auto.contains("KIND_AUTO"), "{auto}");
    }
}
