//! Memory readings of processes, for the statistics' `memory_usage`.

/// Memory of one kind on one device that a model version holds (Triton's
/// `MemoryUsage`): `kind` is "CPU", "CPU_PINNED" or "GPU".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUsage {
    pub kind: &'static str,
    pub id: i64,
    pub byte_size: u64,
}

impl MemoryUsage {
    /// `usages` with those of the same kind and device summed (as Triton
    /// sums a model's and its instances' reports), zero sizes left out.
    pub fn summed(usages: impl IntoIterator<Item = MemoryUsage>) -> Vec<MemoryUsage> {
        let mut out: Vec<MemoryUsage> = Vec::new();
        for u in usages {
            match out.iter_mut().find(|o| o.kind == u.kind && o.id == u.id) {
                Some(o) => o.byte_size += u.byte_size,
                None => out.push(u),
            }
        }
        out.retain(|u| u.byte_size > 0);
        out
    }
}

/// The resident set size (`VmRSS` of `/proc/<pid>/status`) of process
/// `pid` in bytes; None where it cannot be read (not Linux, or gone).
pub fn process_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    rss_of_status(&status)
}

fn rss_of_status(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line.split_whitespace().skip(1);
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") | None => Some(value * 1024),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_usage_sums_per_kind_and_device_and_drops_zeros() {
        let u = |kind, id, byte_size| MemoryUsage {
            kind,
            id,
            byte_size,
        };
        assert_eq!(
            MemoryUsage::summed([
                u("CPU", 0, 10),
                u("GPU", 0, 5),
                u("CPU", 0, 7),
                u("GPU", 1, 0)
            ]),
            vec![u("CPU", 0, 17), u("GPU", 0, 5)]
        );
        assert!(MemoryUsage::summed([]).is_empty());
    }

    #[test]
    fn vmrss_is_read_in_bytes() {
        let status = "Name:\tpython3\nVmPeak:\t  20000 kB\nVmRSS:\t   12345 kB\nThreads:\t1\n";
        assert_eq!(rss_of_status(status), Some(12345 * 1024));
        assert_eq!(
            rss_of_status("Name:\tkthreadd\n"),
            None,
            "kernel threads have none"
        );
    }

    #[test]
    fn this_process_has_a_resident_set() {
        if cfg!(target_os = "linux") {
            assert!(process_rss(std::process::id()).unwrap() > 0);
        }
    }
}
