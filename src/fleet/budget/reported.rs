//! Reported first attempts, limited per caller per scope: a token bucket
//! of `--max-reported-requests-per-sec` (burst: one report interval's
//! worth, [`REPORT_INTERVAL_MS`]). A buggy or hostile `ReportOutcomes`
//! (one entry of 2⁶⁴−1, or a thousand of them for one scope) raises a
//! scope's deposits by at most that, and what it raised leaves with the
//! window; it can no longer switch a budget off. What is cut is counted in
//! [`REPORTED_REQUESTS_CLAMPED_TOTAL`] and warned about at most every 10 s.
//! Admit's deposits are not limited: each is one real call about to be made.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::core::time::UnixMillis;

/// Counter of reported first attempts cut by the per-caller limit.
pub const REPORTED_REQUESTS_CLAMPED_TOTAL: &str = "retryd_reported_requests_clamped_total";
/// The report interval the burst is sized for: one second's worth.
pub const REPORT_INTERVAL_MS: u64 = 1_000;
/// Most (caller, scope) buckets tracked. At the cap the full ones (idle
/// for a report interval: forgetting them changes nothing) are dropped; if
/// none is, a report for a new pair deposits nothing (counted as cut):
/// a flood of pairs makes budgets stricter, never switches one off.
pub const MAX_REPORTERS: usize = 50_000;
/// At most one warning per this long.
const WARN_EVERY_MS: i64 = 10_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: i64,
}

/// Token buckets per id (a caller, or a caller and a scope), at most `cap`
/// of them. At the cap the full ones are dropped (idle long enough to have
/// refilled: forgetting them changes nothing); if none is, a new id is
/// granted nothing: a flood of ids makes limits stricter, never lifts one.
#[derive(Debug)]
pub struct RateTable {
    per_sec: f64,
    burst: f64,
    cap: usize,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateTable {
    /// `per_sec` per id with a burst of `burst`, at most `cap` ids.
    pub fn new(per_sec: f64, burst: f64, cap: usize) -> Self {
        let per_sec = if per_sec.is_finite() && per_sec > 0.0 {
            per_sec
        } else {
            1.0
        };
        RateTable {
            per_sec,
            burst: burst.max(1.0),
            cap: cap.max(1),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// The rate per id.
    pub fn per_sec(&self) -> f64 {
        self.per_sec
    }

    /// Ids tracked.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no id is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bucket>> {
        self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many of `n` the bucket of `id` grants now (spent from it).
    pub fn grant(&self, id: &str, n: u64, now: UnixMillis) -> u64 {
        let (rate, burst) = (self.per_sec, self.burst);
        let refill = |b: &Bucket| (b.tokens + now.0.saturating_sub(b.at).max(0) as f64 / 1_000.0 * rate).min(burst);
        let mut map = self.lock();
        if !map.contains_key(id) && map.len() >= self.cap {
            map.retain(|_, b| refill(b) < burst);
            if map.len() >= self.cap {
                return 0;
            }
        }
        let b = map.entry(id.to_owned()).or_insert(Bucket {
            tokens: burst,
            at: now.0,
        });
        b.tokens = refill(b);
        b.at = b.at.max(now.0);
        let granted = (n as f64).min(b.tokens.floor()).max(0.0);
        b.tokens -= granted;
        granted as u64
    }
}

/// The reported-requests buckets of one replica.
#[derive(Debug)]
pub struct Reported {
    table: RateTable,
    clamped: AtomicU64,
    warned_ms: AtomicI64,
}

impl Reported {
    /// `per_sec` first attempts per caller per scope (burst: [`REPORT_INTERVAL_MS`] of it).
    pub fn new(per_sec: f64) -> Self {
        Reported {
            table: RateTable::new(per_sec, per_sec * REPORT_INTERVAL_MS as f64 / 1_000.0, MAX_REPORTERS),
            clamped: AtomicU64::new(0),
            warned_ms: AtomicI64::new(i64::MIN / 2),
        }
    }

    /// Reported first attempts cut so far.
    pub fn clamped(&self) -> u64 {
        self.clamped.load(Ordering::Relaxed)
    }

    /// (caller, scope) pairs tracked.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no pair is tracked.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// How many of `n` reported first attempts of `caller` on the scope
    /// `key` are deposited now; the rest is counted as cut.
    pub fn take(&self, caller: &str, key: &str, n: u64, now: UnixMillis) -> u64 {
        if n == 0 {
            return 0;
        }
        let granted = self.table.grant(&format!("{caller}\u{0}{key}"), n, now);
        self.cut(caller, n, granted, now);
        granted
    }

    /// Counts (and warns about, at most every 10 s) `n - granted` cut.
    pub fn cut(&self, caller: &str, n: u64, granted: u64, now: UnixMillis) {
        let cut = n.saturating_sub(granted);
        if cut == 0 {
            return;
        }
        let _ = self
            .clamped
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| Some(c.saturating_add(cut)));
        metrics::counter!(REPORTED_REQUESTS_CLAMPED_TOTAL).increment(cut);
        let last = self.warned_ms.load(Ordering::Relaxed);
        if now.0.saturating_sub(last) >= WARN_EVERY_MS
            && self
                .warned_ms
                .compare_exchange(last, now.0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                caller,
                reported = n,
                deposited = granted,
                limit_per_sec = self.table.per_sec(),
                "ReportOutcomes: reported first attempts over --max-reported-requests-per-sec for one scope were cut (retryd_reported_requests_clamped_total)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: UnixMillis = UnixMillis(1_786_190_700_000);

    #[test]
    fn a_caller_deposits_at_most_its_rate_per_scope() {
        let r = Reported::new(50_000.0);
        assert_eq!(r.take("a", "s", u64::MAX, T0), 50_000);
        assert_eq!(r.take("a", "s", u64::MAX, T0), 0);
        assert_eq!(r.clamped(), u64::MAX, "counted, saturating");
        // Another scope, another caller: their own buckets.
        assert_eq!(r.take("a", "t", 7, T0), 7);
        assert_eq!(r.take("b", "s", 70_000, T0), 50_000);
        // Refilled at the rate: 0.1 s later, 5 000 more.
        assert_eq!(r.take("a", "s", u64::MAX, T0.plus_ms(100)), 5_000);
    }

    #[test]
    fn the_table_is_bounded_and_a_flood_deposits_nothing_new() {
        let r = Reported::new(10.0);
        for i in 0..MAX_REPORTERS {
            assert_eq!(r.take(&format!("c{i}"), "s", 11, T0), 10);
        }
        assert_eq!(r.len(), MAX_REPORTERS);
        // Full of busy pairs: a new one deposits nothing.
        assert_eq!(r.take("new", "s", 5, T0), 0);
        assert_eq!(r.len(), MAX_REPORTERS);
        // A report interval on, every bucket is full again: forgotten, room.
        assert_eq!(r.take("new", "s", 5, T0.plus_ms(1_000)), 5);
        assert_eq!(r.len(), 1);
    }
}
