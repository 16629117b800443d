//! Triton's test-only environment hooks, read as Triton reads them
//! (`atoi`), so Triton's own QA tests run unchanged: the schedulers'
//! `TRITONSERVER_DELAY_SCHEDULER` / `TRITONSERVER_BACKLOG_DELAY_SCHEDULER`
//! (hold requests until that many are queued) and the gRPC frontend's
//! `TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC`. Documented in
//! docs/flags.md as test-only.

/// The number in environment variable `var`, read as C's `atoi` reads it:
/// leading blanks, an optional sign, the digits up to the first
/// non-digit. Unset, unparsable or negative: 0 (the hook is off).
pub fn env_count(var: &str) -> u64 {
    std::env::var(var).map_or(0, |v| atoi(&v))
}

fn atoi(v: &str) -> u64 {
    let v = v.trim_start();
    let (negative, digits) = match v.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, v.strip_prefix('+').unwrap_or(v)),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    match digits[..end].parse::<u64>() {
        Ok(n) if !negative => n,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_atoi_reads_them() {
        assert_eq!(atoi("2"), 2);
        assert_eq!(atoi(" 12 requests"), 12);
        assert_eq!(atoi("+1"), 1);
        for none in ["", "x", "-2", "0"] {
            assert_eq!(atoi(none), 0, "{none:?}");
        }
    }
}
