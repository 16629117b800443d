//! `instance_group`: what of a group is a TensorRT feature or not built.

use crate::core::config::ModelConfig;

use super::Findings;

pub(super) fn check(config: &ModelConfig, out: &mut Findings) {
    for (i, group) in config.instance_group.iter().enumerate() {
        let field = format!("instance_group[{i}]");
        if !group.secondary_devices.is_empty() {
            out.refuse(
                format!("{field}.secondary_devices"),
                "secondary devices (NVDLA) are a TensorRT feature",
            );
        }
        if !group.profile.is_empty() {
            out.refuse(
                format!("{field}.profile"),
                "optimization profiles are a TensorRT feature",
            );
        }
        if group.passive {
            out.refuse(
                format!("{field}.passive"),
                "passive instances are not built yet",
            );
        }
        if !group.host_policy.is_empty() {
            out.refuse(
                format!("{field}.host_policy"),
                "host policies (--host-policy) are not supported",
            );
        }
    }
}
