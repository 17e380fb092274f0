//! What one caller may do to the fleet: a bounded rate of hold placements,
//! and a lower one for dependency-wide holds (they stop every tenant). The
//! failure is still decided when a caller is over its rate; only the hold
//! is not placed.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::core::time::UnixMillis;

/// Most callers tracked; beyond it the idlest are forgotten (a forgotten
/// caller starts again with a full bucket, which only errs towards placing).
const MAX_CALLERS: usize = 10_000;

/// Per-caller placement rates (token buckets: rate per second, burst).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlacementLimits {
    /// New holds of any scope per second per caller (`--hold-placements-per-sec`).
    pub per_sec: f64,
    /// New dependency-wide or method holds per second per caller (`--dependency-holds-per-sec`).
    pub dependency_per_sec: f64,
}

impl Default for PlacementLimits {
    fn default() -> Self {
        PlacementLimits {
            per_sec: 50.0,
            dependency_per_sec: 5.0,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: UnixMillis,
}

impl Bucket {
    fn take(&mut self, rate: f64, now: UnixMillis) -> bool {
        let burst = (rate * 2.0).max(1.0);
        let elapsed = self.at.ms_until(now) as f64 / 1000.0;
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.at = now.max(self.at);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The placement rates of every caller.
#[derive(Debug)]
pub struct PlacementLimiter {
    limits: PlacementLimits,
    callers: Mutex<HashMap<String, (Bucket, Bucket)>>,
}

impl PlacementLimiter {
    /// Limits per caller.
    pub fn new(limits: PlacementLimits) -> Self {
        PlacementLimiter {
            limits,
            callers: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `caller` may place one more hold now (`dependency_wide` for
    /// dependency and method scopes), spending a token if so.
    pub fn allow(&self, caller: &str, dependency_wide: bool, now: UnixMillis) -> bool {
        let mut callers = self.callers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if callers.len() >= MAX_CALLERS && !callers.contains_key(caller) {
            if let Some(idlest) = callers.iter().min_by_key(|(_, (b, _))| b.at).map(|(k, _)| k.clone()) {
                callers.remove(&idlest);
            }
        }
        let full = |rate: f64| Bucket {
            tokens: (rate * 2.0).max(1.0),
            at: now,
        };
        let (any, dep) = callers
            .entry(caller.to_owned())
            .or_insert_with(|| (full(self.limits.per_sec), full(self.limits.dependency_per_sec)));
        if dependency_wide {
            // Both buckets must allow it; check the scarcer first so a refusal spends nothing.
            let mut probe = *dep;
            if !probe.take(self.limits.dependency_per_sec, now) {
                *dep = probe;
                return false;
            }
            if !any.take(self.limits.per_sec, now) {
                return false;
            }
            *dep = probe;
            true
        } else {
            any.take(self.limits.per_sec, now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_over_its_rate_is_refused_and_others_are_not() {
        let l = PlacementLimiter::new(PlacementLimits {
            per_sec: 10.0,
            dependency_per_sec: 1.0,
        });
        let t = UnixMillis(1_000_000);
        // Burst of 2 dependency-wide holds, then refused.
        assert!(l.allow("a", true, t));
        assert!(l.allow("a", true, t));
        assert!(!l.allow("a", true, t));
        // Tenant holds still have their own room (20 burst, 2 spent).
        assert_eq!((0..30).filter(|_| l.allow("a", false, t)).count(), 18);
        assert!(l.allow("b", true, t), "another caller is unaffected");
        // A second later the dependency bucket has one token again.
        assert!(l.allow("a", true, t.plus_ms(1_000)));
    }
}
