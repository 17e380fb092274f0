//! The scopes of one replica's budget table, and who may add one.
//!
//! A scope costs about 0.9 KiB (measured: `tests/budget_memory.rs`): two
//! whole windows (`own`, `fleet`, 168 bytes each), the few buckets not yet
//! acknowledged by the store as a short list, this replica's deferrals
//! (48 bytes), its lease (48 bytes), and its names. The table is bounded by `--max-budget-scopes`
//! and a flood cannot reset real scopes:
//! - a caller adds at most `--budget-scopes-per-sec-per-caller` new scopes
//!   per second (burst twice that), when the door knows the caller
//!   (Classify, ReportOutcomes, Admit);
//! - at the cap, the scopes with the fewest first attempts in their window
//!   go first (the least recently used among equals), an eighth at most at
//!   once; a new scope whose first attempts are fewer than every scope's in
//!   the table is not added (not budgeted), and counted.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use super::{BUDGET_SCOPES_EVICTED_TOTAL, Budgets, ScopeOf, shown_key, totals};
use crate::core::budget::{BUCKETS, BudgetRule, Counts, Tally, Window};
use crate::core::time::UnixMillis;

/// Counter of new scopes not added (caller over its new-scope rate, or a
/// full table whose every scope has more first attempts).
pub const BUDGET_SCOPES_REFUSED_TOTAL: &str = "retryd_budget_scopes_refused_total";
/// Callers whose new-scope rate is tracked.
pub const MAX_SCOPE_CALLERS: usize = 10_000;
/// Default of `--budget-scopes-per-sec-per-caller`.
pub const DEFAULT_SCOPES_PER_SEC_PER_CALLER: f64 = 100.0;

/// The counts of a few buckets (those not yet acknowledged by the store:
/// one or two at a time), as a short list instead of a whole window.
#[derive(Debug, Clone, Default)]
pub(super) struct Few(Vec<(i64, Counts)>);

impl Few {
    pub(super) fn add(&mut self, bucket: i64, c: Counts) {
        if c == Counts::default() {
            return;
        }
        // What left every window still served goes (the list stays short).
        self.0.retain(|(b, _)| *b > bucket - BUCKETS as i64);
        match self.0.iter_mut().find(|(b, _)| *b == bucket) {
            Some((_, have)) => *have = have.plus(c),
            None => self.0.push((bucket, c)),
        }
    }

    pub(super) fn get(&self, bucket: i64) -> Counts {
        self.0
            .iter()
            .find(|(b, _)| *b == bucket)
            .map_or_else(Counts::default, |(_, c)| *c)
    }

    pub(super) fn buckets(&self, bucket: i64) -> [Counts; BUCKETS] {
        let first = bucket - (BUCKETS as i64 - 1);
        std::array::from_fn(|i| self.get(first + i as i64))
    }

    pub(super) fn clear(&mut self) {
        self.0 = Vec::new();
    }
}

/// One scope's counts.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) rule: BudgetRule,
    /// Shown instead of the storage key: `d:<catalog>:<dependency>` or
    /// `t:<catalog>:<dependency>:h:<hex>`.
    pub(super) shown: String,
    pub(super) catalog: Box<str>,
    pub(super) dependency: Box<str>,
    pub(super) own: Window,
    pub(super) fleet: Window,
    pub(super) pending: Few,
    pub(super) inflight: Few,
    /// Deferrals this replica gave (advice, withdrawn from nothing; they pace the next).
    pub(super) deferred: Tally,
    /// When the scope was last active (ms; 0: no first attempt ever seen):
    /// a first attempt recorded here or seen in the fleet totals, or a
    /// failure judged against its budget. It stays budgeted
    /// [`crate::core::budget::SEEN_WINDOWS`] windows on, so a scope that
    /// keeps failing after its first attempts stopped keeps (the reserve
    /// of) its budget.
    pub(super) seen_ms: i64,
    /// Counts not yet flushed.
    pub(super) dirty: bool,
    /// The flush round it was last used in (its totals are read back
    /// while it was used in the last [`super::READ_BACK_ROUNDS`] rounds).
    pub(super) touched: u64,
    pub(super) last_used: u64,
    /// Near exhaustion: the slice of the room leased from the store.
    pub(super) lease: super::lease::Lease,
}

#[derive(Debug, Default)]
pub(super) struct Table {
    /// Looked up on every budgeted decision and Admit: foldhash, seeded
    /// per process (keys carry client-chosen tenants), as the holds' map.
    pub(super) map: HashMap<String, Box<Entry>, foldhash::fast::RandomState>,
    pub(super) tick: u64,
    /// Flushes taken so far.
    pub(super) round: u64,
    /// After a sweep found no scope to drop: the fewest first attempts in
    /// the table, and until when (ms) that answer is reused.
    refuse_below: Option<(u64, i64)>,
}

/// Who adds a scope, and with how many first attempts.
#[derive(Clone, Copy)]
pub(super) struct Newcomer<'c> {
    /// First attempts it arrives with (0 for a failure judged).
    pub(super) requests: u64,
    /// Its caller's name, asked for only when a scope is new; `None` when
    /// the door does not say (Admit).
    pub(super) caller: Option<&'c dyn Fn() -> String>,
    pub(super) now: UnixMillis,
}

impl Budgets {
    /// The entry of `key`, created if new and allowed (see the module
    /// docs); `None`: not added, so the call is not budgeted on it.
    pub(super) fn entry<'t>(
        &self,
        t: &'t mut Table,
        key: &str,
        rule: &BudgetRule,
        scope: ScopeOf<'_>,
        hash: &dyn Fn(&str) -> String,
        who: Newcomer<'_>,
    ) -> Option<&'t mut Entry> {
        t.tick += 1;
        let (tick, round) = (t.tick, t.round);
        // The key is copied only for a scope new to the table.
        if !t.map.contains_key(key) {
            let over_rate = who
                .caller
                .is_some_and(|caller| self.new_scopes.grant(&caller(), 1, who.now) == 0);
            if over_rate || (t.map.len() >= self.max_scopes && !self.make_room(t, who.requests, who.now)) {
                self.refused.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(BUDGET_SCOPES_REFUSED_TOTAL).increment(1);
                return None;
            }
            t.map.insert(
                key.to_owned(),
                Box::new(Entry {
                    rule: *rule,
                    shown: shown_key(rule.scope, scope, hash),
                    catalog: scope.catalog.into(),
                    dependency: scope.dependency.into(),
                    own: Window::default(),
                    fleet: Window::default(),
                    pending: Few::default(),
                    inflight: Few::default(),
                    deferred: Tally::default(),
                    seen_ms: 0,
                    dirty: false,
                    touched: 0,
                    last_used: tick,
                    lease: super::lease::Lease::default(),
                }),
            );
        }
        let e = t.map.get_mut(key)?;
        if e.rule.window_ms != rule.window_ms {
            // A reloaded policy changed the window: the old buckets mean nothing.
            e.own.clear();
            e.fleet.clear();
            e.pending.clear();
            e.inflight.clear();
            e.deferred = Tally::default();
            e.lease = super::lease::Lease::default();
        }
        e.rule = *rule;
        e.last_used = tick;
        e.touched = round;
        Some(e)
    }

    /// At the cap: drops up to an eighth of the table, the scopes with the
    /// fewest first attempts in their window first (least recently used
    /// among equals), none with more than `requests`. `false`: none could go.
    fn make_room(&self, t: &mut Table, requests: u64, now: UnixMillis) -> bool {
        if let Some((fewest, until)) = t.refuse_below {
            if now.0 < until && requests < fewest {
                return false;
            }
        }
        let shared = self.shared;
        let mut ranked: Vec<(u64, u64, &String)> = t
            .map
            .iter()
            .map(|(k, e)| (requests_in_window(e, now, shared), e.last_used, k))
            .collect();
        let fewest = ranked.iter().map(|r| r.0).min().unwrap_or(0);
        ranked.retain(|r| r.0 <= requests);
        if ranked.is_empty() {
            // Reused for a second: a flood of newcomers costs no rescan each.
            t.refuse_below = Some((fewest, now.0.saturating_add(1_000)));
            return false;
        }
        let n = (t.map.len() / 8).clamp(1, ranked.len());
        if n < ranked.len() {
            ranked.select_nth_unstable_by_key(n - 1, |r| (r.0, r.1));
        }
        let gone: Vec<String> = ranked[..n].iter().map(|r| r.2.clone()).collect();
        for k in &gone {
            t.map.remove(k);
        }
        t.refuse_below = None;
        self.evicted.fetch_add(n as u64, Ordering::Relaxed);
        metrics::counter!(BUDGET_SCOPES_EVICTED_TOTAL).increment(n as u64);
        true
    }
}

/// First attempts in `e`'s window at `now`, as a decision reads them.
fn requests_in_window(e: &Entry, now: UnixMillis, shared: bool) -> u64 {
    totals(e, e.rule.bucket_of(now), shared, false, 1)
        .iter()
        .fold(0u64, |a, c| a.saturating_add(c.requests))
}
