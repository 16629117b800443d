//! Triton's rate limiter (`--rate-limit=execution_count`): an instance runs
//! a request only when the resources its instance group names
//! (`rate_limiter { resources [...] }`) are free, and holds them while it
//! runs. Resource counts come from `--rate-limit-resource=NAME:COUNT`, else
//! (as in Triton) the largest count any live instance asks for, so every
//! instance can run alone.
//!
//! Among instances waiting at once, `priority` weighs who goes first: an
//! instance of priority 2 gets half the turns of one of priority 1 (stride
//! scheduling: each grant moves an instance's pass on by its priority; the
//! lowest pass goes next, and nobody passes it while its resources are
//! taken, so none is starved). Every machine here has one device (the
//! CPU), so `global` and per-device resources are the same pool.

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

/// How many of its own turns an instance may be behind the latest grant.
const CREDIT: u64 = 8;

struct Waiter {
    id: u64,
    pass: u64,
}

struct State {
    /// Resource → (capacity, in use).
    resources: HashMap<String, (u64, u64)>,
    /// Resources whose capacity came from a flag (not derived from needs).
    fixed: Vec<String>,
    /// The needs of every live claim (a derived capacity is the largest).
    claims: HashMap<u64, Vec<(String, u32)>>,
    /// Waiting instances, in arrival order.
    waiting: Vec<Waiter>,
    /// Each claim's pass (stride scheduling).
    passes: HashMap<u64, u64>,
    /// The pass of the latest grant: a waiter joins no further behind.
    virtual_time: u64,
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
                    .map(|(k, &v)| (k.clone(), (u64::from(v), 0)))
                    .collect(),
                fixed: settings.resources.keys().cloned().collect(),
                claims: HashMap::new(),
                waiting: Vec::new(),
                passes: HashMap::new(),
                virtual_time: 0,
                next_id: 0,
            }),
            cv: Condvar::new(),
        })
    }

    /// The state, also after a panic elsewhere held the lock (the
    /// bookkeeping stays consistent: every change is made in one step).
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers an instance that needs `needs` (resource, count) to run,
    /// with `priority` (0 counts as 1). A need larger than a resource's
    /// flag-given count can never be met: refused with the reason, and
    /// nothing changes.
    pub fn claim(self: &Arc<Self>, needs: Vec<(String, u32)>, priority: u32) -> Result<Claim> {
        let mut s = self.state();
        for (name, count) in &needs {
            if let (true, Some((capacity, _))) = (s.fixed.contains(name), s.resources.get(name)) {
                if u64::from(*count) > *capacity {
                    return Err(Error::invalid_arg(format!(
                        "rate limiter resource '{name}' has {capacity} (--rate-limit-resource), but an instance needs {count}"
                    )));
                }
            }
        }
        let id = s.next_id;
        s.next_id += 1;
        s.claims.insert(id, needs.clone());
        s.derive_capacities();
        let now = s.virtual_time;
        s.passes.insert(id, now);
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
                .is_some_and(|(cap, used)| used + u64::from(*count) <= *cap)
        })
    }

    /// `claim` starts waiting. Credit for turns missed while briefly not
    /// waiting is kept, up to `CREDIT` turns; an instance idle for long
    /// starts near the others.
    fn join(&mut self, claim: &Claim) {
        let own = self.passes.get(&claim.id).copied().unwrap_or(0);
        let pass = own.max(self.virtual_time.saturating_sub(CREDIT * claim.priority));
        self.waiting.push(Waiter { id: claim.id, pass });
    }

    /// Whether it is `claim`'s turn (the lowest pass, ties by arrival) and
    /// its resources are free.
    fn may_go(&self, claim: &Claim) -> bool {
        let head = self
            .waiting
            .iter()
            .enumerate()
            .min_by_key(|(i, w)| (w.pass, *i))
            .map(|(_, w)| w.id);
        head == Some(claim.id) && self.fits(&claim.needs)
    }

    /// `claim` takes its resources; its pass moves on by its priority.
    fn grant(&mut self, claim: &Claim) {
        let Some(i) = self.waiting.iter().position(|w| w.id == claim.id) else {
            return;
        };
        let pass = self.waiting.remove(i).pass;
        for (name, count) in &claim.needs {
            if let Some(r) = self.resources.get_mut(name) {
                r.1 += u64::from(*count);
            }
        }
        self.virtual_time = self.virtual_time.max(pass);
        self.passes.insert(claim.id, pass + claim.priority);
    }

    /// A resource without a flag holds as much as the largest need of any
    /// live claim (so every instance can run alone), as in Triton; it
    /// shrinks again when the claims that needed more go.
    fn derive_capacities(&mut self) {
        let mut largest: HashMap<&str, u64> = HashMap::new();
        for needs in self.claims.values() {
            for (name, count) in needs {
                let l = largest.entry(name.as_str()).or_default();
                *l = (*l).max(u64::from(*count));
            }
        }
        let derived: Vec<(String, u64)> = largest
            .into_iter()
            .filter(|(name, _)| !self.fixed.iter().any(|f| f == name))
            .map(|(name, l)| (name.to_string(), l))
            .collect();
        for (name, capacity) in derived {
            self.resources.entry(name).or_insert((0, 0)).0 = capacity;
        }
    }
}

impl Claim {
    /// Waits until it is this instance's turn and its resources are free;
    /// holds them until the permit is dropped.
    ///
    /// The turn is the waiter with the lowest pass (ties: the longest
    /// waiting); nobody passes it while its resources are taken, so an
    /// instance needing more units than others is never starved (Triton's
    /// rate limiter also serves its queue's head first). A waiter joins no
    /// further behind than a few turns (`CREDIT`) before the latest grant,
    /// so an instance that was idle long does not take every turn after.
    pub fn acquire(&self) -> Permit<'_> {
        if self.needs.is_empty() {
            return Permit { claim: self };
        }
        let limiter = &self.limiter;
        let mut s = limiter.state();
        s.join(self);
        while !s.may_go(self) {
            s = limiter.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.grant(self);
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
        {
            let mut s = limiter.state();
            for (name, count) in &claim.needs {
                if let Some(r) = s.resources.get_mut(name) {
                    r.1 = r.1.saturating_sub(u64::from(*count));
                }
            }
        }
        limiter.cv.notify_all();
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        {
            let mut s = self.limiter.state();
            s.passes.remove(&self.id);
            s.claims.remove(&self.id);
            s.derive_capacities();
        }
        self.limiter.cv.notify_all();
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
    fn an_instance_needing_more_units_is_not_starved() {
        // R holds 2; A and B need 1 each and always have work; C needs 2.
        let l = RateLimiter::new(&RateLimitSettings::default());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let busy: Vec<_> = (0..2)
            .map(|_| {
                let claim = l.claim(vec![("R".into(), 1)], 1).unwrap();
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let _permit = claim.acquire();
                        std::thread::sleep(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        let big = l.claim(vec![("R".into(), 2)], 1).unwrap();
        for _ in 0..5 {
            let _permit = big.acquire();
        }
        stop.store(true, Ordering::SeqCst);
        for t in busy {
            t.join().unwrap();
        }
    }

    #[test]
    fn a_derived_capacity_shrinks_when_the_claim_that_needed_it_goes() {
        let l = RateLimiter::new(&RateLimitSettings::default());
        let small = l.claim(vec![("R".into(), 1)], 1).unwrap();
        let big = l.claim(vec![("R".into(), 4)], 1).unwrap();
        assert_eq!(l.state().resources["R"].0, 4);
        drop(big);
        assert_eq!(l.state().resources["R"].0, 1);
        drop(small);
    }

    #[test]
    fn priority_weighs_turns() {
        // Two instances always waiting for one resource: priority 1 gets
        // twice the turns of priority 2 (the same join/turn/grant steps
        // `acquire` takes, driven one at a time).
        let l = RateLimiter::new(&settings(&["R:1"]).unwrap());
        let a = l.claim(vec![("R".into(), 1)], 1).unwrap();
        let b = l.claim(vec![("R".into(), 1)], 2).unwrap();
        let mut s = l.state();
        s.join(&a);
        s.join(&b);
        let mut turns = String::new();
        for _ in 0..30 {
            let next = if s.may_go(&a) { &a } else { &b };
            assert!(s.may_go(next), "one of them may always go");
            s.grant(next);
            turns.push(if std::ptr::eq(next, &a) { 'a' } else { 'b' });
            // It runs, gives the resource back and waits again.
            s.resources.get_mut("R").unwrap().1 -= 1;
            s.join(next);
        }
        let (na, nb) = (turns.matches('a').count(), turns.matches('b').count());
        assert_eq!((na, nb), (20, 10), "{turns}");
    }

    #[test]
    fn an_instance_idle_for_long_does_not_take_every_turn() {
        let l = RateLimiter::new(&settings(&["R:1"]).unwrap());
        let busy = l.claim(vec![("R".into(), 1)], 1).unwrap();
        let idle = l.claim(vec![("R".into(), 1)], 1).unwrap();
        let mut s = l.state();
        for _ in 0..1000 {
            s.join(&busy);
            s.grant(&busy);
            s.resources.get_mut("R").unwrap().1 -= 1;
        }
        s.join(&busy);
        s.join(&idle);
        let mut idle_first = 0;
        while s.may_go(&idle) {
            s.grant(&idle);
            s.resources.get_mut("R").unwrap().1 -= 1;
            s.join(&idle);
            idle_first += 1;
        }
        assert!(
            idle_first <= CREDIT as usize + 1,
            "{idle_first} turns in a row"
        );
    }
}
