//! The loads to sweep ([`plan`]) from perf_client's load flags, and the
//! runtime's [`worker_threads`] for them.

use crate::perf::load::Plan;

/// The load flags as given: perf_client's `-t`, `-d` with `-c`,
/// `--concurrency-range` and `--request-rate-range`.
#[derive(Debug, Clone, Default)]
pub struct LoadFlags<'a> {
    pub concurrency: Option<usize>,
    pub dynamic: bool,
    pub max_concurrency: usize,
    pub concurrency_range: Option<&'a str>,
    pub rate_range: Option<&'a str>,
}

/// `a:b:c` → up to three numbers.
fn range(spec: &str, flag: &str) -> Result<Vec<f64>, String> {
    let parts: Result<Vec<f64>, _> = spec.split(':').map(|p| p.trim().parse::<f64>()).collect();
    match parts {
        Ok(p) if !p.is_empty() && p.len() <= 3 && p.iter().all(|v| *v >= 0.0) => Ok(p),
        _ => Err(format!("{flag} expects start[:end[:step]], got '{spec}'")),
    }
}

/// The loads to sweep: a request-rate range, else a concurrency range,
/// else `-d` (1 up to `-c`, 0: no end), else the one concurrency of `-t`.
pub fn plan(flags: &LoadFlags) -> Result<Plan, String> {
    if let Some(spec) = flags.rate_range {
        let p = range(spec, "--request-rate-range")?;
        let start = p[0];
        if start <= 0.0 {
            return Err("--request-rate-range must start above 0".into());
        }
        let end = p.get(1).copied().unwrap_or(start);
        if end < start {
            return Err(format!(
                "--request-rate-range ends ({end}) below where it starts ({start})"
            ));
        }
        return Ok(Plan::Rate {
            start,
            end,
            step: p.get(2).copied().unwrap_or(1.0),
        });
    }
    if let Some(spec) = flags.concurrency_range {
        let p = range(spec, "--concurrency-range")?;
        let start = (p[0] as usize).max(1);
        let end = p.get(1).map(|&e| e as usize).unwrap_or(start);
        if end != 0 && end < start {
            return Err(format!(
                "--concurrency-range ends ({end}) below where it starts ({start}); 0 means no end"
            ));
        }
        return Ok(Plan::Concurrency {
            start,
            end,
            step: p.get(2).map(|&s| s as usize).unwrap_or(1).max(1),
        });
    }
    if flags.dynamic {
        return Ok(Plan::Concurrency {
            start: 1,
            end: flags.max_concurrency,
            step: 1,
        });
    }
    let n = flags.concurrency.unwrap_or(1).max(1);
    Ok(Plan::Concurrency {
        start: n,
        end: n,
        step: 1,
    })
}

/// The async runtime's worker threads on a machine of `cores`: no more
/// than requests outstanding (idle workers cost CPU in wake-ups; a
/// concurrency-1 run on one thread is the cheapest), at most 4.
pub fn worker_threads(plan: &Plan, cores: usize) -> usize {
    let most = match *plan {
        Plan::Concurrency { start, end, .. } if end != 0 => start.max(end),
        _ => cores,
    };
    most.clamp(1, cores.min(4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_from_the_load_flags() {
        let flags = |f: fn(&mut LoadFlags<'static>)| {
            let mut flags = LoadFlags::default();
            f(&mut flags);
            plan(&flags)
        };
        let one = |n| Plan::Concurrency {
            start: n,
            end: n,
            step: 1,
        };
        assert_eq!(flags(|_| {}), Ok(one(1)));
        assert_eq!(flags(|f| f.concurrency = Some(4)), Ok(one(4)));
        assert_eq!(
            flags(|f| {
                f.dynamic = true;
                f.max_concurrency = 3
            }),
            Ok(Plan::Concurrency {
                start: 1,
                end: 3,
                step: 1
            })
        );
        assert_eq!(
            flags(|f| f.concurrency_range = Some("2:10:4")),
            Ok(Plan::Concurrency {
                start: 2,
                end: 10,
                step: 4
            })
        );
        assert_eq!(
            flags(|f| f.concurrency_range = Some("0:0")),
            Ok(Plan::Concurrency {
                start: 1,
                end: 0,
                step: 1
            })
        );
        assert_eq!(
            flags(|f| f.concurrency_range = Some("8:4")),
            Err("--concurrency-range ends (4) below where it starts (8); 0 means no end".into())
        );
        assert_eq!(
            flags(|f| f.concurrency_range = Some("1:2:3:4")),
            Err("--concurrency-range expects start[:end[:step]], got '1:2:3:4'".into())
        );
        // A rate range wins over the concurrency flags.
        assert_eq!(
            flags(|f| {
                f.rate_range = Some("100:300:50");
                f.concurrency = Some(2)
            }),
            Ok(Plan::Rate {
                start: 100.0,
                end: 300.0,
                step: 50.0
            })
        );
        assert_eq!(
            flags(|f| f.rate_range = Some("0")),
            Err("--request-rate-range must start above 0".into())
        );
        assert_eq!(
            flags(|f| f.rate_range = Some("5:2")),
            Err("--request-rate-range ends (2) below where it starts (5)".into())
        );
        assert_eq!(
            flags(|f| f.rate_range = Some("-1")),
            Err("--request-rate-range expects start[:end[:step]], got '-1'".into())
        );
    }

    #[test]
    fn no_more_worker_threads_than_requests_outstanding() {
        assert_eq!(worker_threads(&plan(&LoadFlags::default()).unwrap(), 8), 1);
        let range = |start, end| Plan::Concurrency {
            start,
            end,
            step: 1,
        };
        assert_eq!(worker_threads(&range(1, 3), 8), 3);
        assert_eq!(worker_threads(&range(1, 64), 8), 4);
        assert_eq!(worker_threads(&range(1, 64), 2), 2);
        // Open-ended sweeps and rates: every core, at most 4.
        assert_eq!(worker_threads(&range(1, 0), 2), 2);
        let rate = Plan::Rate {
            start: 10.0,
            end: 10.0,
            step: 1.0,
        };
        assert_eq!(worker_threads(&rate, 16), 4);
    }
}
