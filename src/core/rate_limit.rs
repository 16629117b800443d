//! Triton's rate limiter (`--rate-limit=execution_count`): an instance runs
//! a request only when the resources its instance group names
//! (`rate_limiter { resources [...] }`) are free, and holds them while it
//! runs. Resource counts come from `--rate-limit-resource=NAME:COUNT`, else
//! (as in Triton) the largest count any one instance asks for, so every
//! instance can run alone.
//!
//! Among instances waiting at once, `priority` weighs who goes first: an
//! instance of priority 2 gets half the turns of one of priority 1 (stride
//! scheduling: each grant moves an instance's pass on by its priority, and
//! the lowest pass whose resources fit goes next). Every machine here has
//! one device (the CPU), so `global` and per-device resources are the same
//! pool.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};

use crate::core::error::{Error, Result};

/// `--rate-limit` and `--rate-limit-resource`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimitSettings {
    /// Resource name → count, from `--rate-limit-resource`.
    pub resources: HashMap<String, u32>,
}

impl RateLimitSettings {
    /// Reads `--rate-limit` (`off` or `execution_count`) and every
    /// `--rate-limit-resource=NAME:COUNT[:DEVICE]`; `None` when off.
    pub fn from_flags(mode: &str, resources: &[String]) -> Result<Option<RateLimitSettings>> {
        match mode {
            "off" => {
                if !resources.is_empty() {
                    return Err(Error::invalid_arg(
                        "--rate-limit-resource needs --rate-limit=execution_count",
                    ));
                }
                return Ok(None);
            }
            "execution_count" => {}
            other => {
                return Err(Error::invalid_arg(format!(
                    "--rate-limit={other}: expected off or execution_count"
                )))
            }
        }
        let mut settings = RateLimitSettings::default();
        for r in resources {
            let parts: Vec<&str> = r.split(':').collect();
            let count = match parts.as_slice() {
                [name, count] | [name, count, _] if !name.is_empty() => count.parse::<u32>().ok(),
                _ => None,
            };
            let Some(count) = count else {
                return Err(Error::invalid_arg(format!(
                    "--rate-limit-resource={r}: expected NAME:COUNT or NAME:COUNT:DEVICE"
                )));
            };
            *settings.resources.entry(parts[0].to_string()).or_default() = count;
        }
        Ok(Some(settings))
    }
}

struct Waiter {
    id: u64,
    pass: u64,
    needs: Vec<(String, u32)>,
}

struct State {
    /// Resource → (capacity, in use).
    resources: HashMap<String, (u32, u32)>,
    /// Resources whose capacity came from a flag (not raised by needs).
    fixed: Vec<String>,
    waiting: Vec<Waiter>,
    /// Each claim's pass (stride scheduling).
    passes: HashMap<u64, u64>,
    next_id: u64,
}

/// The server's rate limiter, shared by every instance.
pub struct RateLimiter {
    state: Mutex<State>,
    cv: Condvar,
}

/// What one instance needs to run, and its weight.
pub struct Claim {
    limiter: Arc<RateLimiter>,
    id: u64,
    needs: Vec<(String, u32)>,
    priority: u64,
}

/// Resources held while an instance runs; given back when dropped.
pub struct Permit<'a> {
    claim: &'a Claim,
}

impl RateLimiter {
    pub fn new(settings: &RateLimitSettings) -> Arc<RateLimiter> {
        Arc::new(RateLimiter {
            state: Mutex::new(State {
                resources: settings
                    .resources
                    .iter()
                    .map(|(k, &v)| (k.clone(), (v, 0)))
                    .collect(),
                fixed: settings.resources.keys().cloned().collect(),
                waiting: Vec::new(),
                passes: HashMap::new(),
                next_id: 0,
            }),
            cv: Condvar::new(),
        })
    }

    /// Registers an instance that needs `needs` (resource, count) to run,
    /// with `priority` (0 counts as 1). A need larger than a resource's
    /// flag-given count can never be met: refused with the reason.
    pub fn claim(self: &Arc<Self>, needs: Vec<(String, u32)>, priority: u32) -> Result<Claim> {
        let mut s = self.state.lock().unwrap();
        for (name, count) in &needs {
            let fixed = s.fixed.contains(name);
            let entry = s.resources.entry(name.clone()).or_insert((0, 0));
            if fixed && *count > entry.0 {
                return Err(Error::invalid_arg(format!(
                    "rate limiter resource '{name}' has {} (--rate-limit-resource), but an instance needs {count}",
                    entry.0
                )));
            }
            entry.0 = entry.0.max(*count);
        }
        let id = s.next_id;
        s.next_id += 1;
        let floor = s.passes.values().copied().min().unwrap_or(0);
        s.passes.insert(id, floor);
        Ok(Claim {
            limiter: Arc::clone(self),
            id,
            needs,
            priority: u64::from(priority.max(1)),
        })
    }
}

impl State {
    fn fits(&self, needs: &[(String, u32)]) -> bool {
        needs.iter().all(|(name, count)| {
            self.resources
                .get(name)
                .is_some_and(|(cap, used)| used + count <= *cap)
        })
    }
}

impl Claim {
    /// Waits until this instance's resources are free and it is its turn;
    /// holds them until the permit is dropped.
    pub fn acquire(&self) -> Permit<'_> {
        if self.needs.is_empty() {
            return Permit { claim: self };
        }
        let limiter = &self.limiter;
        let mut s = limiter.state.lock().unwrap();
        let pass = s.passes.get(&self.id).copied().unwrap_or(0);
        s.waiting.push(Waiter {
            id: self.id,
            pass,
            needs: self.needs.clone(),
        });
        loop {
            // The waiter with the lowest pass among those whose resources
            // fit goes next (ties: the longest waiting).
            let next = s
                .waiting
                .iter()
                .enumerate()
                .filter(|(_, w)| s.fits(&w.needs))
                .min_by_key(|(i, w)| (w.pass, *i))
                .map(|(_, w)| w.id);
            if next == Some(self.id) && s.fits(&self.needs) {
                break;
            }
            s = limiter.cv.wait(s).unwrap();
        }
        s.waiting.retain(|w| w.id != self.id);
        for (name, count) in &self.needs {
            if let Some(r) = s.resources.get_mut(name) {
                r.1 += count;
            }
        }
        let p = s.passes.entry(self.id).or_insert(0);
        *p += self.priority;
        drop(s);
        limiter.cv.notify_all();
        Permit { claim: self }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let claim = self.claim;
        if claim.needs.is_empty() {
            return;
        }
        let limiter = &claim.limiter;
        if let Ok(mut s) = limiter.state.lock() {
            for (name, count) in &claim.needs {
                if let Some(r) = s.resources.get_mut(name) {
                    r.1 = r.1.saturating_sub(*count);
                }
            }
        }
        limiter.cv.notify_all();
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Ok(mut s) = self.limiter.state.lock() {
            s.passes.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn settings(r: &[&str]) -> Option<RateLimitSettings> {
        let r: Vec<String> = r.iter().map(|s| s.to_string()).collect();
        RateLimitSettings::from_flags("execution_count", &r).unwrap()
    }

    #[test]
    fn flags() {
        assert_eq!(RateLimitSettings::from_flags("off", &[]).unwrap(), None);
        assert!(RateLimitSettings::from_flags("off", &["R:1".into()]).is_err());
        assert!(RateLimitSettings::from_flags("sometimes", &[]).is_err());
        let s = settings(&["R:2", "G:1:0"]).unwrap();
        assert_eq!(s.resources["R"], 2);
        assert_eq!(s.resources["G"], 1);
        assert!(RateLimitSettings::from_flags("execution_count", &["R".into()]).is_err());
        assert!(RateLimitSettings::from_flags("execution_count", &["R:x".into()]).is_err());
    }

    #[test]
    fn a_need_above_a_flag_given_count_is_refused() {
        let l = RateLimiter::new(&settings(&["R:1"]).unwrap());
        assert!(l.claim(vec![("R".into(), 2)], 1).is_err());
        // Without a flag, the count grows to the largest need.
        let l = RateLimiter::new(&RateLimitSettings::default());
        assert!(l.claim(vec![("R".into(), 2)], 1).is_ok());
    }

    #[test]
    fn two_instances_sharing_a_resource_of_one_never_run_together() {
        let l = RateLimiter::new(&settings(&["R:1"]).unwrap());
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let claim = l.claim(vec![("R".into(), 1)], 1).unwrap();
                let (running, most) = (Arc::clone(&running), Arc::clone(&most));
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let _permit = claim.acquire();
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_micros(200));
                        running.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn priority_weighs_turns() {
        // One resource, two instances always waiting: priority 1 gets
        // about twice the turns of priority 2.
        let l = RateLimiter::new(&settings(&["R:1"]).unwrap());
        let turns = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads: Vec<_> = [(1u32, 'a'), (2, 'b')]
            .into_iter()
            .map(|(priority, tag)| {
                let claim = l.claim(vec![("R".into(), 1)], priority).unwrap();
                let (turns, stop) = (Arc::clone(&turns), Arc::clone(&stop));
                std::thread::spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let _permit = claim.acquire();
                        turns.lock().unwrap().push(tag);
                        std::thread::sleep(Duration::from_millis(2));
                    }
                })
            })
            .collect();
        while turns.lock().unwrap().len() < 90 {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::SeqCst);
        for t in threads {
            t.join().unwrap();
        }
        let turns = turns.lock().unwrap();
        let a = turns.iter().filter(|&&t| t == 'a').count() as f64;
        let b = turns.iter().filter(|&&t| t == 'b').count() as f64;
        assert!(a > 1.5 * b && a < 2.5 * b, "a {a} b {b}");
    }
}
