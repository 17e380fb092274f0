//! A scope judged: where it stands for a decision (the fleet totals plus
//! this replica's unacknowledged counts, or the Redis-down fallback), and
//! the deferrals a replica gives, which withdraw nothing.

use super::lease::gated;
use super::table::Newcomer;
use super::{Budgets, Entry, Judged, ScopeOf};
use crate::core::budget::{BUCKETS, BudgetRule, Counts, SEEN_WINDOWS, Standing, judge};
use crate::core::time::UnixMillis;

impl Budgets {
    /// The budgets of the call's scopes that count it (scopes with recorded
    /// first attempts), the most constraining first: a spent one before one
    /// with room, the latest room first, then the most used.
    pub fn judge(
        &self,
        rules: &[BudgetRule],
        scope: ScopeOf<'_>,
        now: UnixMillis,
        caller: Option<&dyn Fn() -> String>,
        hash: &dyn Fn(&str) -> String,
    ) -> Vec<Judged> {
        if rules.is_empty() || scope.dependency.is_empty() {
            return Vec::new();
        }
        let fallback = self.in_fallback(now);
        self.note_fallback(fallback);
        let k = self.replicas();
        let mut t = self.lock();
        let mut out = Vec::new();
        // Near exhaustion approvals come from the lease only (`super::lease`).
        let gating = self.shared && !fallback;
        let (mut wake, mut spent, mut leased) = (false, false, Vec::new());
        super::with_key_buffer(|key| {
            for rule in rules {
                if !scope.key_into(rule, key) {
                    continue;
                }
                if !self.shared && !t.map.contains_key(key.as_str()) {
                    // One replica: no count, nothing to learn.
                    continue;
                }
                // Shared: a scope first seen here is added so the next flush
                // reads the fleet's totals for it.
                let who = Newcomer {
                    requests: 0,
                    caller,
                    now,
                };
                let Some(e) = self.entry(&mut t, key, rule, scope, hash, who) else {
                    continue;
                };
                if let Some(mut standing) = stand(e, now, self.shared, fallback, k) {
                    // A failure judged keeps the scope budgeted.
                    e.seen_ms = e.seen_ms.max(now.0);
                    if gating {
                        let room = standing.allowed.saturating_sub(standing.retries);
                        let gate = e.lease.gate(room, k, &mut wake);
                        if gated(&mut standing, gate, now, self.flush_ms) {
                            leased.push(*rule);
                        }
                    }
                    spent |= standing.exhausted;
                    out.push(Judged {
                        rule: *rule,
                        shown: e.shown.clone(),
                        standing,
                        replicas: if self.shared { k } else { 1 },
                    });
                }
            }
        });
        if !spent {
            // Approved (step 5 approves a retry no budget defers): one from
            // each lease it was judged on.
            for rule in &leased {
                if let Some(e) = scope.key(rule).and_then(|key| t.map.get_mut(&key)) {
                    e.lease.take();
                }
            }
        }
        if wake {
            self.wake.notify_one();
        }
        super::list::most_constraining_first(&mut out);
        out
    }

    /// Records a deferral given on `rule`'s scope of the call (it withdraws
    /// nothing: it paces the next deferral and is shown in ListBudgets).
    pub fn defer(&self, rule: &BudgetRule, scope: ScopeOf<'_>, now: UnixMillis) {
        let Some(key) = scope.key(rule) else { return };
        let mut t = self.lock();
        if let Some(e) = t.map.get_mut(&key) {
            e.deferred.add(rule.bucket_of(now));
        }
    }
}

/// Where `e` stands at `now` (`None`: not budgeted), its deferrals included.
pub(super) fn stand(e: &Entry, now: UnixMillis, shared: bool, fallback: bool, replicas: u64) -> Option<Standing> {
    let bucket = e.rule.bucket_of(now);
    let window = i64::try_from(e.rule.window_ms.saturating_mul(SEEN_WINDOWS)).unwrap_or(i64::MAX);
    let seen = e.seen_ms > 0 && now.0.saturating_sub(e.seen_ms) <= window;
    let mut s = judge(&e.rule, &totals(e, bucket, shared, fallback, replicas), now, seen)?;
    s.deferred = e.deferred.total(bucket);
    Some(s)
}

/// The counts a decision reads for `e` in the window ending with `bucket`.
pub(super) fn totals(e: &Entry, bucket: i64, shared: bool, fallback: bool, replicas: u64) -> [Counts; BUCKETS] {
    let own = e.own.buckets(bucket);
    if !shared {
        return own;
    }
    if fallback {
        return own.map(|c| c.times(replicas));
    }
    let (fleet, pending, inflight) = (
        e.fleet.buckets(bucket),
        e.pending.buckets(bucket),
        e.inflight.buckets(bucket),
    );
    std::array::from_fn(|i| fleet[i].plus(pending[i]).plus(inflight[i]))
}
