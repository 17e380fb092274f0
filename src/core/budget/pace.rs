//! Deferrals paced at the budget's rate: when a spent budget tells a retry
//! to come back. A deferral withdraws nothing (only an approved retry
//! does); it is advice about when room is likely, and the retry is judged
//! again when it returns. Telling every deferred retry the same instant
//! (the window's next room) would bring them back in one burst, so the
//! k-th deferral of a window is told to return about `k / r` from now,
//! where `r` is the budget's rate of retries per second shared by the
//! replicas that judge the scope.

use super::{BUCKETS, BudgetRule, Standing};

/// Jitter of a paced deferral: ±20 %.
pub const PACE_JITTER: f64 = 0.2;
/// Jitter of a deferral when the budget allows no retry at all: ±50 % of a window.
pub const EMPTY_JITTER: f64 = 0.5;

/// How long the `k`-th deferral (1-based) of `s`'s window waits, ms: `k /
/// (r / replicas)` with `r = allowed / window` retries per second, jittered
/// ±20 % by `u` (uniform in [0, 1)); when nothing is allowed, one window
/// jittered ±50 %. Beyond `cap_ms` (the catalog's `max_delay_ms`) the wait
/// is spread over the cap's last half by `u2` instead of stacked on it.
pub fn pace_ms(rule: &BudgetRule, s: &Standing, k: u64, replicas: u64, cap_ms: u64, u: f64, u2: f64) -> u64 {
    let window_s = rule.window_ms as f64 / 1_000.0;
    let rate = s.allowed as f64 / window_s / replicas.max(1) as f64;
    let wait = if rate <= 0.0 {
        rule.window_ms as f64 * (1.0 + EMPTY_JITTER * (2.0 * u - 1.0))
    } else {
        k.max(1) as f64 / rate * 1_000.0 * (1.0 + PACE_JITTER * (2.0 * u - 1.0))
    };
    let wait = wait.max(1.0) as u64;
    if cap_ms > 0 && wait > cap_ms {
        let half = cap_ms / 2;
        half + ((cap_ms - half) as f64 * u2) as u64
    } else {
        wait
    }
}

/// A number uniform in [0, 1) drawn from `seed` (splitmix64): the jitter is
/// a function of the deferral, so a replay decides it again exactly.
pub fn unit_of(seed: u64) -> f64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A per-bucket count of one kind (the deferrals a replica gave), in 48
/// bytes: the newest bucket and one counter per bucket of its window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    newest: i64,
    slots: [u32; BUCKETS],
}

impl Tally {
    fn slot(bucket: i64) -> usize {
        bucket.rem_euclid(BUCKETS as i64) as usize
    }

    /// Counts one in `bucket` (older than the window of the newest bucket: dropped).
    pub fn add(&mut self, bucket: i64) {
        if bucket > self.newest {
            let stale = (bucket - self.newest).min(BUCKETS as i64);
            for b in (bucket - stale + 1)..=bucket {
                self.slots[Self::slot(b)] = 0;
            }
            self.newest = bucket;
        }
        if bucket > self.newest - BUCKETS as i64 {
            let s = &mut self.slots[Self::slot(bucket)];
            *s = s.saturating_add(1);
        }
    }

    /// The count over the window ending with `bucket`.
    pub fn total(&self, bucket: i64) -> u64 {
        let lo = (bucket - (BUCKETS as i64 - 1)).max(self.newest - (BUCKETS as i64 - 1));
        let hi = bucket.min(self.newest);
        (lo..=hi).map(|b| u64::from(self.slots[Self::slot(b)])).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::budget::BudgetScope;
    use crate::core::time::UnixMillis;

    fn spent(allowed: u64) -> Standing {
        Standing {
            requests: 1_000,
            retries: allowed,
            allowed,
            window_start: UnixMillis(0),
            exhausted: true,
            room_at: UnixMillis(9_700),
            deferred: 0,
        }
    }

    fn finagle() -> BudgetRule {
        BudgetRule {
            scope: BudgetScope::Dependency,
            window_ms: 10_000,
            retry_percent: 20,
            min_retries_per_sec: 10,
            requests: None,
        }
    }

    #[test]
    fn the_kth_deferral_waits_k_over_the_rate_jittered() {
        let r = finagle();
        // 300 allowed over 10 s: 30/s; the 30th deferral about 1 s on.
        assert_eq!(pace_ms(&r, &spent(300), 30, 1, 60_000, 0.5, 0.0), 1_000);
        assert_eq!(pace_ms(&r, &spent(300), 30, 1, 60_000, 0.0, 0.0), 800);
        assert!(pace_ms(&r, &spent(300), 30, 1, 60_000, 0.999_999, 0.0) <= 1_200);
        // Two replicas share the rate: each paces at 15/s.
        assert_eq!(pace_ms(&r, &spent(300), 30, 2, 60_000, 0.5, 0.0), 2_000);
        // Nothing allowed: one window ±50 %.
        assert_eq!(pace_ms(&r, &spent(0), 7, 1, 60_000, 0.0, 0.0), 5_000);
        // Beyond the cap: spread over its last half, never stacked on it.
        let w = pace_ms(&r, &spent(300), 3_000, 1, 10_000, 0.5, 0.25);
        assert_eq!(w, 6_250);
        assert_eq!(pace_ms(&r, &spent(300), 3_000, 1, 10_000, 0.5, 0.0), 5_000);
    }

    #[test]
    fn unit_is_uniform_enough_and_in_range() {
        let xs: Vec<f64> = (0..10_000).map(unit_of).collect();
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let low = xs.iter().filter(|x| **x < 0.5).count();
        assert!((4_700..5_300).contains(&low), "{low}");
    }

    #[test]
    fn a_tally_counts_the_window_and_forgets_what_left_it() {
        let mut t = Tally::default();
        for _ in 0..3 {
            t.add(100);
        }
        t.add(105);
        assert_eq!(t.total(105), 4);
        assert_eq!(t.total(109), 4);
        assert_eq!(t.total(110), 1, "bucket 100 left the window");
        t.add(112);
        assert_eq!(t.total(112), 2);
        t.add(90);
        assert_eq!(t.total(112), 2, "too old: dropped");
        t.add(200);
        assert_eq!(t.total(200), 1);
        assert_eq!(std::mem::size_of::<Tally>(), 48);
    }
}
