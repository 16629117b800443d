//! Rules 28–29: instance groups (kind, GPU ids against this machine,
//! TensorRT profiles).

use crate::core::config::diagnostic::Issue;
use crate::core::config::pb::model_instance_group::Kind as GroupKind;

use super::{ValidateContext, Validator};

impl Validator<'_> {
    /// Rules 28–29 (after normalization resolved KIND_AUTO and counts).
    pub(super) fn instance_groups(&mut self, ctx: &ValidateContext) {
        let c = self.config;
        let name = self.name;
        if c.instance_group.is_empty() {
            self.error(
                "instance_group",
                format!("must specify one or more 'instance group's for {name}"),
            );
        }
        for (i, g) in c.instance_group.iter().enumerate() {
            let field = format!("instance_group[{i}]");
            let group = &g.name;
            match GroupKind::try_from(g.kind) {
                Ok(GroupKind::Model) if !g.gpus.is_empty() => self.error(
                    format!("{field}.gpus"),
                    format!("instance group {group} of model {name} has kind KIND_MODEL but specifies one or more GPUs"),
                ),
                Ok(GroupKind::Cpu) if !g.gpus.is_empty() => self.error(
                    format!("{field}.gpus"),
                    format!("instance group {group} of model {name} has kind KIND_CPU but specifies one or more GPUs"),
                ),
                Ok(GroupKind::Gpu) => {
                    if ctx.gpus.is_empty() {
                        self.issues.push(Issue {
                            severity: ctx.missing_gpu,
                            field: format!("{field}.kind"),
                            message: format!(
                                "instance group {group} of model {name} has kind KIND_GPU but no GPUs are available"
                            ),
                        });
                    } else {
                        if crate::core::config::catalog::cpu_only(&c.backend) {
                            // Placed on a GPU, which this backend does not
                            // run on: refused rather than run on the CPU.
                            self.issues.push(Issue {
                                severity: ctx.missing_gpu,
                                field: format!("{field}.kind"),
                                message: format!(
                                    "instance group {group} of model {name} has kind KIND_GPU, but the '{}' backend of this trtis build runs on the CPU only; use KIND_CPU",
                                    c.backend
                                ),
                            });
                        }
                        for (j, &gpu) in g.gpus.iter().enumerate() {
                            if !ctx.gpus.contains(&gpu) {
                                let ids: Vec<String> = ctx.gpus.iter().map(|d| d.to_string()).collect();
                                self.issues.push(Issue {
                                    severity: ctx.missing_gpu,
                                    field: format!("{field}.gpus[{j}]"),
                                    message: format!(
                                        "instance group {group} of model {name} specifies invalid or unsupported gpu id {gpu}. \
                                         GPUs with at least the minimum required CUDA compute compatibility of {:.6} are: {}",
                                        ctx.min_compute_capability,
                                        ids.join(", ")
                                    ),
                                });
                            }
                        }
                    }
                }
                Ok(GroupKind::Auto) => self.error(
                    format!("{field}.kind"),
                    format!("instance group {group} of model {name} has unexpected kind KIND_AUTO"),
                ),
                _ => {}
            }
            if !g.profile.is_empty() && c.platform != "tensorrt_plan" {
                self.error(
                    format!("{field}.profile"),
                    format!(
                        "instance group {group} of model {name} and platform {}specifies profile field which is only supported for TensorRT models",
                        c.platform
                    ),
                );
            } else {
                for (j, profile) in g.profile.iter().enumerate() {
                    let pfield = format!("{field}.profile[{j}]");
                    if profile.is_empty() {
                        self.error(pfield, "profile name must not be empty");
                    } else {
                        match leading_integer(profile) {
                            None => self.error(pfield, format!("unable to parse '{profile}': stoi")),
                            Some(n) if n < 0 => self.error(
                                pfield,
                                format!(
                                    "instance group {group} of model {name} and platform {} specifies invalid profile {profile}. \
                                     The field should contain the string representation of a non-negative integer.",
                                    c.platform
                                ),
                            ),
                            Some(_) => {}
                        }
                    }
                }
            }
        }
    }
}

/// The integer at the start of `s`, as C++ `std::stoi` reads it (leading
/// white space, an optional sign, then digits; the rest is ignored).
fn leading_integer(s: &str) -> Option<i64> {
    let t = s.trim_start();
    let (sign, digits) = match t.as_bytes().first() {
        Some(b'-') => (-1, &t[1..]),
        Some(b'+') => (1, &t[1..]),
        _ => (1, t),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse::<i64>().ok().map(|n| sign * n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::pb::{ModelConfig, ModelInstanceGroup};
    use crate::core::config::validate::tests::CTX;
    use crate::core::config::validate::validate;
    use crate::core::config::Severity;

    #[test]
    fn missing_gpu_severity_is_the_callers_choice() {
        let config = ModelConfig {
            name: "m".into(),
            backend: "identity".into(),
            instance_group: vec![ModelInstanceGroup {
                name: "g".into(),
                kind: GroupKind::Gpu as i32,
                count: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        let issues = validate(&config, &CTX);
        let gpu = issues
            .iter()
            .find(|i| i.message.contains("KIND_GPU"))
            .unwrap();
        assert_eq!(gpu.severity, Severity::Error);
        let warn = ValidateContext {
            missing_gpu: Severity::Warning,
            ..CTX
        };
        let issues = validate(&config, &warn);
        assert_eq!(
            issues
                .iter()
                .find(|i| i.message.contains("KIND_GPU"))
                .unwrap()
                .severity,
            Severity::Warning
        );
        // With GPUs present, an id past the last one is reported instead.
        let two = ValidateContext {
            gpus: &[0, 1],
            ..CTX
        };
        let mut config = config;
        config.instance_group[0].gpus = vec![0, 2];
        let m: Vec<String> = validate(&config, &two)
            .into_iter()
            .map(|i| i.message)
            .collect();
        assert!(
            m.iter()
                .any(|s| s.contains("specifies invalid or unsupported gpu id 2")
                    && s.ends_with("are: 0, 1")),
            "{m:?}"
        );
    }

    #[test]
    fn with_a_gpu_only_backends_that_run_on_one_take_kind_gpu() {
        let one = ValidateContext { gpus: &[0], ..CTX };
        for (backend, refused) in [
            ("onnxruntime", false),
            ("python", false),
            ("pytorch", false),
            ("identity", true),
            ("custom", true),
        ] {
            let config = ModelConfig {
                name: "m".into(),
                backend: backend.into(),
                instance_group: vec![ModelInstanceGroup {
                    name: "g".into(),
                    kind: GroupKind::Gpu as i32,
                    count: 1,
                    gpus: vec![0],
                    ..Default::default()
                }],
                ..Default::default()
            };
            let m: Vec<String> = validate(&config, &one)
                .into_iter()
                .map(|i| i.message)
                .collect();
            let cpu_only = format!("but the '{backend}' backend of this trtis build runs on the CPU only; use KIND_CPU");
            assert_eq!(
                m.iter().any(|s| s.contains(&cpu_only)),
                refused,
                "{backend}: {m:?}"
            );
        }
    }

    #[test]
    fn stoi_reads_a_leading_integer() {
        assert_eq!(leading_integer("12abc"), Some(12));
        assert_eq!(leading_integer(" -3"), Some(-3));
        assert_eq!(leading_integer("x1"), None);
        assert_eq!(leading_integer(""), None);
    }
}
