//! Fleet retry budgets, decided: how many retries a scope may make in its
//! window, and how long a retry must wait when the budget is spent. Pure
//! arithmetic over counts (no I/O, no clock); where the counts are *kept*
//! and shared is `crate::fleet::budget`.
//!
//! A budget (Finagle's `RetryBudget`, tower's `Budget`) lets retries be at
//! most `retry_percent` of the first attempts of the last `window`, plus a
//! reserve of `min_retries_per_sec × window` for quiet scopes. An
//! allowance budget (`requests = N`: a tenant's daily allowance) lets
//! retries spend at most `retry_percent` of the allowance instead.
//!
//! ## The window: bucketed, aligned to absolute time
//! A window is [`BUCKETS`] buckets of `window / BUCKETS`, numbered from the
//! Unix epoch, so every replica and Redis agree on which bucket a count
//! falls in without exchanging clocks beyond NTP. The counts "in the last
//! window" are the current bucket and the `BUCKETS − 1` before it: the
//! effective window slides by one bucket at a time and spans between 90 %
//! and 100 % of `window` (Finagle's `WindowedAdder` does the same with 10
//! slices). Why not an exact sliding log: that costs memory per event; a
//! bucket array costs 10 counters per scope and its Redis form is one hash
//! per scope with a field per bucket, trimmed as buckets age out.

use serde::Serialize;

use super::time::UnixMillis;

/// Buckets per window.
pub const BUCKETS: usize = 10;

/// Shortest window a catalog may declare (1 s). Budgets are meant for
/// windows of 10 s (Finagle's) to 1 day (an allowance); shorter ones are
/// accepted so a test or a very bursty dependency can use them.
pub const MIN_WINDOW_MS: u64 = 1_000;
/// Longest window a catalog may declare (1 day).
pub const MAX_WINDOW_MS: u64 = 86_400_000;

/// What a budget is counted per.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BudgetScope {
    /// Every tenant of one dependency instance (catalog + dependency).
    Dependency,
    /// One tenant of one dependency (catalog + dependency + tenant).
    Tenant,
}

// The catalog word, also the `scope` label of the metrics.
crate::words!(BudgetScope { Dependency => "dependency", Tenant => "tenant" });

/// One `[[budgets]]` entry of a catalog, compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BudgetRule {
    /// What it is counted per.
    pub scope: BudgetScope,
    /// The window, ms (whole seconds, between 1 s and 1 day).
    pub window_ms: u64,
    /// Share of the window's first attempts (or of the allowance) retries may be, in percent.
    pub retry_percent: u32,
    /// The reserve for quiet scopes: this many retries per second of window.
    pub min_retries_per_sec: u32,
    /// An allowance budget: first attempts allowed per window (retries may
    /// spend `retry_percent` of it); `None` for a traffic budget.
    pub requests: Option<u64>,
}

impl BudgetRule {
    /// Length of one bucket, ms.
    pub fn bucket_ms(&self) -> u64 {
        (self.window_ms / BUCKETS as u64).max(1)
    }

    /// The bucket `now` falls in.
    pub fn bucket_of(&self, now: UnixMillis) -> i64 {
        now.0.div_euclid(self.bucket_ms() as i64)
    }

    /// The first bucket of the window ending in `bucket`.
    pub fn first_bucket(&self, bucket: i64) -> i64 {
        bucket - (BUCKETS as i64 - 1)
    }

    /// When the window that ends with `now`'s bucket starts.
    pub fn window_start(&self, now: UnixMillis) -> UnixMillis {
        UnixMillis(
            self.first_bucket(self.bucket_of(now))
                .saturating_mul(self.bucket_ms() as i64),
        )
    }

    /// The reserve: `min_retries_per_sec × window` (100 for 10/s over 10 s).
    pub fn floor(&self) -> u64 {
        u64::from(self.min_retries_per_sec).saturating_mul(self.window_ms / 1_000)
    }

    /// Retries allowed in a window that saw `requests` first attempts.
    pub fn allowed(&self, requests: u64) -> u64 {
        let base = self.requests.unwrap_or(requests);
        let share = u128::from(base) * u128::from(self.retry_percent) / 100;
        u64::try_from(share).unwrap_or(u64::MAX).saturating_add(self.floor())
    }

    /// The short form of a warning: `20 % + 10/s`, `20 % of 500 requests`.
    pub fn short(&self) -> String {
        let floor = match self.min_retries_per_sec {
            0 => String::new(),
            n => format!(" + {n}/s"),
        };
        match self.requests {
            Some(n) => format!("{} % of {n} requests{floor}", self.retry_percent),
            None => format!("{} %{floor}", self.retry_percent),
        }
    }

    /// People's words: `20 % + 10/s over 10 s`, `20 % of 500 requests per 1 d`.
    pub fn describe(&self) -> String {
        let window = describe_window(self.window_ms);
        let floor = match self.min_retries_per_sec {
            0 => String::new(),
            n => format!(" + {n}/s"),
        };
        match self.requests {
            Some(n) => format!("{} % of {n} requests per {window}{floor}", self.retry_percent),
            None => format!("{} %{floor} over {window}", self.retry_percent),
        }
    }
}

/// `10 s`, `2 min`, `1 h`, `1 d`, or ms when it is none of these exactly.
pub fn describe_window(ms: u64) -> String {
    for (unit, name) in [(86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1_000, "s")] {
        if ms.is_multiple_of(unit) {
            return format!("{} {name}", ms / unit);
        }
    }
    format!("{ms} ms")
}

/// Counts of one bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// First attempts (deposits).
    pub requests: u64,
    /// Retries (withdrawals).
    pub retries: u64,
}

impl Counts {
    /// Both counts added.
    pub fn plus(self, o: Counts) -> Counts {
        Counts {
            requests: self.requests.saturating_add(o.requests),
            retries: self.retries.saturating_add(o.retries),
        }
    }

    /// Both counts multiplied by `k` (the Redis-down fallback's scaling).
    pub fn times(self, k: u64) -> Counts {
        Counts {
            requests: self.requests.saturating_mul(k),
            retries: self.retries.saturating_mul(k),
        }
    }
}

/// The counts of one scope, bucket by bucket: the newest bucket held and
/// one slot per bucket of its window (168 bytes; buckets older than the
/// newest one's window read as empty and are dropped when added).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    newest: i64,
    slots: [Counts; BUCKETS],
}

impl Window {
    fn slot(bucket: i64) -> usize {
        bucket.rem_euclid(BUCKETS as i64) as usize
    }

    /// Whether `bucket` is in the window of the newest bucket held.
    fn holds(&self, bucket: i64) -> bool {
        bucket <= self.newest && bucket > self.newest.saturating_sub(BUCKETS as i64)
    }

    /// Makes `bucket` the newest if it is newer, emptying the slots of the
    /// buckets that left the window.
    fn advance(&mut self, bucket: i64) {
        if bucket > self.newest {
            let stale = bucket.saturating_sub(self.newest).min(BUCKETS as i64);
            for b in (bucket - stale + 1)..=bucket {
                self.slots[Self::slot(b)] = Counts::default();
            }
            self.newest = bucket;
        }
    }

    /// Adds `c` to `bucket` (a count for a bucket older than the newest
    /// one's window is dropped: it is out of every window still served).
    pub fn add(&mut self, bucket: i64, c: Counts) {
        self.advance(bucket);
        if self.holds(bucket) {
            let s = &mut self.slots[Self::slot(bucket)];
            *s = s.plus(c);
        }
    }

    /// Replaces `bucket`'s counts (a fleet total read back from Redis).
    pub fn set(&mut self, bucket: i64, c: Counts) {
        self.advance(bucket);
        if self.holds(bucket) {
            self.slots[Self::slot(bucket)] = c;
        }
    }

    /// The counts of `bucket`, if held.
    pub fn get(&self, bucket: i64) -> Counts {
        if self.holds(bucket) {
            self.slots[Self::slot(bucket)]
        } else {
            Counts::default()
        }
    }

    /// The totals over the window ending with `bucket`.
    pub fn total(&self, bucket: i64) -> Counts {
        self.buckets(bucket)
            .iter()
            .fold(Counts::default(), |acc, c| acc.plus(*c))
    }

    /// The counts of the window ending with `bucket`, oldest first.
    pub fn buckets(&self, bucket: i64) -> [Counts; BUCKETS] {
        let first = bucket - (BUCKETS as i64 - 1);
        std::array::from_fn(|i| self.get(first + i as i64))
    }

    /// Clears every slot.
    pub fn clear(&mut self) {
        *self = Window::default();
    }

    /// Whether it holds no count in the window ending with `bucket`.
    pub fn is_empty_at(&self, bucket: i64) -> bool {
        self.total(bucket) == Counts::default()
    }
}

/// Where a scope stands against its budget at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Standing {
    /// First attempts in the window.
    pub requests: u64,
    /// Approved retries in the window (withdrawals).
    pub retries: u64,
    /// Retries the budget allows in the window.
    pub allowed: u64,
    /// When the window starts.
    pub window_start: UnixMillis,
    /// Spent: a retry now must wait until `room_at`.
    pub exhausted: bool,
    /// When the window has room again (equal to `now` when it has room now).
    pub room_at: UnixMillis,
    /// Deferrals this replica gave in the window (advice, not withdrawals:
    /// they count against nothing; they pace the next deferral).
    pub deferred: u64,
}

/// A scope's standing as a decision reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetView {
    /// `d:<catalog>:<dependency>` or `t:<catalog>:<dependency>:h:<hex>` (tenant hashed).
    pub scope_key: String,
    /// First attempts in the window.
    pub requests: u64,
    /// Approved retries in the window, this decision's included if approved.
    pub retries: u64,
    /// Retries allowed in the window.
    pub allowed: u64,
    /// When the window starts.
    pub window_start: UnixMillis,
    /// Deferrals given in the window (this replica's), this decision's included.
    pub deferred: u64,
    /// When the next retry would be approved at the current rates.
    pub next_room_at: UnixMillis,
}

/// Judges a scope whose window (ending with `now`'s bucket) holds
/// `buckets` (oldest first). `seen`: the scope has recorded a first attempt,
/// and was active (a first attempt, a failure judged) within
/// [`SEEN_WINDOWS`] windows. `None` (not budgeted) only for a scope
/// with no first attempt in the window that was not `seen` either: retryd
/// does not know its traffic (a Classify-only caller). A scope that was
/// seen but whose window emptied of first attempts keeps its budget, which
/// is then the reserve alone: a batch that submits its work at once and
/// then only retries does not escape its budget after one window.
pub fn judge(rule: &BudgetRule, buckets: &[Counts; BUCKETS], now: UnixMillis, seen: bool) -> Option<Standing> {
    let total = buckets.iter().fold(Counts::default(), |a, c| a.plus(*c));
    if total.requests == 0 && !seen {
        return None;
    }
    let allowed = rule.allowed(total.requests);
    let exhausted = total.retries >= allowed;
    let bucket = rule.bucket_of(now);
    let first = rule.first_bucket(bucket);
    let bucket_ms = rule.bucket_ms() as i64;
    let room_at = if !exhausted {
        now
    } else {
        // The window slides a bucket at a time: find the first boundary at
        // which the buckets left behind make room. The oldest bucket `first`
        // leaves the window when bucket `first + BUCKETS` begins. A window
        // left with no first attempt allows the reserve alone.
        let mut left = total;
        let mut at = None;
        for (i, c) in buckets.iter().enumerate() {
            left = Counts {
                requests: left.requests.saturating_sub(c.requests),
                retries: left.retries.saturating_sub(c.retries),
            };
            if left.retries < rule.allowed(left.requests) {
                at = Some((first + BUCKETS as i64 + i as i64).saturating_mul(bucket_ms));
                break;
            }
        }
        UnixMillis(at.unwrap_or_else(|| (bucket + BUCKETS as i64).saturating_mul(bucket_ms)))
    };
    Some(Standing {
        requests: total.requests,
        retries: total.retries,
        allowed,
        window_start: rule.window_start(now),
        exhausted,
        room_at,
        deferred: 0,
    })
}

/// A scope stays budgeted this many windows after it was last active (a
/// first attempt or a failure judged); then it is forgotten like a new one.
pub const SEEN_WINDOWS: u64 = 10;

mod pace;

pub use pace::{Tally, pace_ms, unit_of};

#[cfg(test)]
mod tests;
