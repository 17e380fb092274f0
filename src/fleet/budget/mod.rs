//! Where retry-budget counts are *kept* (what a budget allows is decided in
//! `core::budget`): one table per replica, counted locally, shared through
//! the store when it shares (Redis).
//!
//! Each scope (catalog + dependency, or + tenant) has three bucketed
//! windows:
//! - `own`: every count this replica made (the Redis-down fallback);
//! - `fleet`: the fleet's totals as last read back from the store;
//! - `pending` + `inflight`: this replica's counts not yet acknowledged by
//!   the store (`inflight`: the flush on its way).
//!
//! A decision reads `fleet + pending + inflight` — the latest fleet totals
//! plus what this replica added since — without any round trip. A flush
//! (every `--budget-flush-ms`, [`flush`]) moves `pending` to `inflight`,
//! sends it with one pipelined round trip that also reads the totals back,
//! and on the answer replaces `fleet` and clears `inflight`. When the store
//! has not answered for a while (Redis down), a decision reads `own ×` the
//! last known replica count instead: never "no budget", never "everything
//! spent".
//!
//! Bounded: at most `max_scopes` scopes, new ones limited per caller, the
//! scopes with the fewest first attempts dropped first at the cap
//! ([`table`]), counted in [`BUDGET_SCOPES_EVICTED_TOTAL`] and
//! [`BUDGET_SCOPES_REFUSED_TOTAL`]. Tenants appear only hashed (keyed) in
//! what leaves the table: scope keys shown, logs, Redis keys.

pub mod flush;
mod judge;
mod lease;
mod list;
pub mod reported;
mod table;

pub use table::{BUDGET_SCOPES_REFUSED_TOTAL, DEFAULT_SCOPES_PER_SEC_PER_CALLER};
use table::{Entry, Newcomer, Table};

use judge::{stand, totals};
pub use list::utilization;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use crate::core::budget::{BudgetRule, BudgetScope, Counts, Standing};
use crate::core::hold::{HoldScope, storage_key, storage_key_into};
use crate::core::time::UnixMillis;

/// Counter of deferred retries, labelled `catalog`.
pub const BUDGET_EXHAUSTED_TOTAL: &str = "retryd_budget_exhausted_total";
/// Gauge: the busiest scope's retries / allowed, labelled `catalog` and `scope` (`dependency`, `tenant`).
pub const BUDGET_UTILIZATION: &str = "retryd_budget_utilization";
/// Counter of budget scopes dropped at `--max-budget-scopes`.
pub const BUDGET_SCOPES_EVICTED_TOTAL: &str = "retryd_budget_scopes_evicted_total";
/// Counter of round trips to the shared store for leases of budget room
/// near exhaustion, besides the periodic flush.
pub const BUDGET_LEASE_FLUSHES_TOTAL: &str = "retryd_budget_lease_flushes_total";
/// Gauge: 1 while budgets are judged from this replica's counts scaled by
/// the replica count (the shared store is not answering), else 0.
pub const BUDGET_FALLBACK: &str = "retryd_budget_fallback";

/// Registers the HELP texts of the budget metrics.
pub fn describe_metrics() {
    metrics::describe_counter!(
        BUDGET_EXHAUSTED_TOTAL,
        "Retries deferred because the fleet retry budget of their scope was spent, by catalog."
    );
    metrics::describe_gauge!(
        BUDGET_UTILIZATION,
        "Retries / allowed retries of the busiest budget scope, by catalog and scope kind."
    );
    metrics::describe_counter!(
        BUDGET_SCOPES_EVICTED_TOTAL,
        "Budget scopes dropped at --max-budget-scopes (fewest first attempts in the window first)."
    );
    metrics::describe_counter!(
        BUDGET_SCOPES_REFUSED_TOTAL,
        "New budget scopes not added: the caller over --budget-scopes-per-sec-per-caller, or a full table whose every scope has more first attempts."
    );
    metrics::describe_counter!(
        reported::REPORTED_REQUESTS_CLAMPED_TOTAL,
        "Reported first attempts (ReportOutcomes) cut by --max-reported-requests-per-sec per caller per scope."
    );
    metrics::describe_counter!(
        BUDGET_LEASE_FLUSHES_TOTAL,
        "Round trips to the shared store asking for leases of budget room near exhaustion (besides the periodic flush)."
    );
    metrics::describe_gauge!(
        BUDGET_FALLBACK,
        "1 while budgets use this replica's counts scaled by the last known replica count (shared store unreachable)."
    );
}

/// The key parts of a call, borrowed from the request.
#[derive(Debug, Clone, Copy)]
pub struct ScopeOf<'a> {
    /// The catalog (resolved).
    pub catalog: &'a str,
    /// The dependency instance.
    pub dependency: &'a str,
    /// The tenant.
    pub tenant: &'a str,
}

impl ScopeOf<'_> {
    /// The storage key of `rule`'s scope, or `None` when the call does not
    /// name what that scope needs (a dependency; for tenant budgets also a tenant).
    fn key(&self, rule: &BudgetRule) -> Option<String> {
        if self.dependency.is_empty() {
            return None;
        }
        match rule.scope {
            BudgetScope::Dependency => Some(storage_key(HoldScope::Dependency, self.catalog, self.dependency, "")),
            BudgetScope::Tenant if self.tenant.is_empty() => None,
            BudgetScope::Tenant => Some(storage_key(
                HoldScope::Tenant,
                self.catalog,
                self.dependency,
                self.tenant,
            )),
        }
    }

    /// [`Self::key`] written over `buf`; `false` (and `buf` untouched) when
    /// the call does not name that scope. The hot paths (every budgeted
    /// decision and Admit) look a scope up without allocating its key.
    fn key_into(&self, rule: &BudgetRule, buf: &mut String) -> bool {
        if self.dependency.is_empty() {
            return false;
        }
        match rule.scope {
            BudgetScope::Dependency => storage_key_into(buf, HoldScope::Dependency, self.catalog, self.dependency, ""),
            BudgetScope::Tenant if self.tenant.is_empty() => return false,
            BudgetScope::Tenant => storage_key_into(buf, HoldScope::Tenant, self.catalog, self.dependency, self.tenant),
        }
        true
    }
}

/// Runs `f` with a per-thread buffer for scope keys (a fresh one if it is
/// in use already), so looking a scope up allocates nothing.
fn with_key_buffer<R>(f: impl FnOnce(&mut String) -> R) -> R {
    thread_local! {
        static KEY: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    KEY.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => f(&mut buf),
        Err(_) => f(&mut String::new()),
    })
}

/// One scope judged for a decision.
#[derive(Debug, Clone)]
pub struct Judged {
    /// The budget.
    pub rule: BudgetRule,
    /// The scope key shown (tenant hashed).
    pub shown: String,
    /// Where it stands.
    pub standing: Standing,
    /// Replicas judging the scope (from the flush heartbeats; 1 alone): a
    /// replica paces its deferrals at the budget's rate / replicas.
    pub replicas: u64,
}

/// The budget table of one replica.
#[derive(Debug)]
pub struct Budgets {
    table: Mutex<Table>,
    max_scopes: usize,
    /// Counts are shared through the store (Redis).
    shared: bool,
    /// Replicas seen alive at the last flush (≥ 1).
    replicas: AtomicU64,
    /// When the store last answered a flush (ms).
    fleet_ok_ms: AtomicI64,
    /// After this long without an answer, decisions use the fallback.
    stale_after_ms: i64,
    fallback: AtomicBool,
    evicted: AtomicU64,
    refused: AtomicU64,
    /// Reported first attempts per caller per scope.
    reported: reported::Reported,
    /// New scopes per caller.
    new_scopes: reported::RateTable,
    /// The flush period, ms.
    flush_ms: u64,
    /// Wakes the flush task for a lease (a scope near exhaustion ran low).
    wake: std::sync::Arc<tokio::sync::Notify>,
}

fn scope_rate(per_sec: f64) -> reported::RateTable {
    reported::RateTable::new(per_sec, per_sec * 2.0, table::MAX_SCOPE_CALLERS)
}

/// Default of `--max-reported-requests-per-sec`.
pub const DEFAULT_REPORTED_PER_SEC: f64 = 50_000.0;

/// A scope's fleet totals are read back while it was used within this many
/// flushes (2 s at the default 100 ms): a scope in use stays current, an
/// idle one costs no Redis command.
pub const READ_BACK_ROUNDS: u64 = 20;

impl Budgets {
    /// A table of at most `max_scopes` scopes; `shared` when a store shares
    /// counts, flushed every `flush_every_ms`.
    pub fn new(max_scopes: usize, shared: bool, flush_every_ms: u64) -> Self {
        Budgets {
            table: Mutex::new(Table::default()),
            max_scopes: max_scopes.max(1),
            shared,
            replicas: AtomicU64::new(1),
            // Not in fallback at start: nothing is known yet, and nothing is missed.
            fleet_ok_ms: AtomicI64::new(UnixMillis::now().0),
            // A few missed flushes, at least a second: one slow answer is not an outage.
            stale_after_ms: i64::try_from(flush_every_ms.saturating_mul(5).max(1_000)).unwrap_or(i64::MAX),
            fallback: AtomicBool::new(false),
            evicted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            reported: reported::Reported::new(DEFAULT_REPORTED_PER_SEC),
            new_scopes: scope_rate(DEFAULT_SCOPES_PER_SEC_PER_CALLER),
            flush_ms: flush_every_ms,
            wake: std::sync::Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// The same table with at most `per_sec` new scopes per caller per
    /// second, burst twice that (`--budget-scopes-per-sec-per-caller`).
    pub fn with_scopes_per_sec_per_caller(mut self, per_sec: f64) -> Self {
        self.new_scopes = scope_rate(per_sec);
        self
    }

    /// New scopes not added so far (caller over its rate, or a full table).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Scopes held.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether no scope is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same table with reported first attempts limited to `per_sec`
    /// per caller per scope (`--max-reported-requests-per-sec`).
    pub fn with_reported_per_sec(mut self, per_sec: f64) -> Self {
        self.reported = reported::Reported::new(per_sec);
        self
    }

    /// The reported-requests limits.
    pub fn reported(&self) -> &reported::Reported {
        &self.reported
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Scopes dropped at the cap so far.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// The replica count the fallback scales by.
    pub fn replicas(&self) -> u64 {
        self.replicas.load(Ordering::Relaxed).max(1)
    }

    /// Whether decisions now use the fallback (shared store not answering).
    pub fn in_fallback(&self, now: UnixMillis) -> bool {
        self.shared && now.0.saturating_sub(self.fleet_ok_ms.load(Ordering::Relaxed)) > self.stale_after_ms
    }

    /// Records `n` first attempts (deposits) on every budget of the call's scopes.
    pub fn deposit(
        &self,
        rules: &[BudgetRule],
        scope: ScopeOf<'_>,
        n: u64,
        now: UnixMillis,
        hash: &dyn Fn(&str) -> String,
    ) {
        self.deposit_from(rules, scope, n, None, now, hash);
    }

    /// [`Budgets::deposit`] by `caller` (Admit), held to the caller's
    /// new-scope rate like Classify and ReportOutcomes: a scope the caller
    /// may not add now is not budgeted (counted refused).
    pub fn deposit_from(
        &self,
        rules: &[BudgetRule],
        scope: ScopeOf<'_>,
        n: u64,
        caller: Option<&dyn Fn() -> String>,
        now: UnixMillis,
        hash: &dyn Fn(&str) -> String,
    ) {
        let c = Counts {
            requests: n,
            retries: 0,
        };
        self.record(rules, scope, c, caller, now, hash);
    }

    /// Records `n` first attempts reported by `caller` (ReportOutcomes, the
    /// report's counts for this scope already summed): on each budget, at
    /// most what the caller's bucket for that scope grants ([`reported`]).
    pub fn deposit_reported(
        &self,
        rules: &[BudgetRule],
        scope: ScopeOf<'_>,
        n: u64,
        caller: &str,
        now: UnixMillis,
        hash: &dyn Fn(&str) -> String,
    ) {
        if n == 0 {
            return;
        }
        for rule in rules {
            let Some(key) = scope.key(rule) else { continue };
            let granted = self.reported.take(caller, &key, n, now);
            if granted > 0 {
                let mut t = self.lock();
                let c = Counts {
                    requests: granted,
                    retries: 0,
                };
                let who = Newcomer {
                    requests: granted,
                    caller: Some(&|| caller.to_owned()),
                    now,
                };
                self.record_one(&mut t, rule, &key, scope, c, who, hash);
            }
        }
    }

    /// Records one retry (a withdrawal) on every budget of the call's scopes.
    pub fn withdraw(&self, rules: &[BudgetRule], scope: ScopeOf<'_>, now: UnixMillis, hash: &dyn Fn(&str) -> String) {
        let c = Counts {
            requests: 0,
            retries: 1,
        };
        self.record(rules, scope, c, None, now, hash);
    }

    fn record(
        &self,
        rules: &[BudgetRule],
        scope: ScopeOf<'_>,
        c: Counts,
        caller: Option<&dyn Fn() -> String>,
        now: UnixMillis,
        hash: &dyn Fn(&str) -> String,
    ) {
        if rules.is_empty() || c == Counts::default() {
            return;
        }
        let mut t = self.lock();
        let who = Newcomer {
            requests: c.requests,
            caller,
            now,
        };
        with_key_buffer(|key| {
            for rule in rules {
                if scope.key_into(rule, key) {
                    self.record_one(&mut t, rule, key, scope, c, who, hash);
                }
            }
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn record_one(
        &self,
        t: &mut Table,
        rule: &BudgetRule,
        key: &str,
        scope: ScopeOf<'_>,
        c: Counts,
        who: Newcomer<'_>,
        hash: &dyn Fn(&str) -> String,
    ) {
        if !self.shared && c.requests == 0 && !t.map.contains_key(key) {
            // One replica, a retry of a scope with no first attempt ever
            // recorded: nothing to budget, nothing worth a table slot.
            return;
        }
        let now = who.now;
        let Some(e) = self.entry(t, key, rule, scope, hash, who) else {
            return;
        };
        let b = rule.bucket_of(now);
        if c.requests > 0 {
            e.seen_ms = e.seen_ms.max(now.0);
        }
        e.own.add(b, c);
        if self.shared {
            let mut c = c;
            if c.retries > 0 {
                e.lease.approved = e.lease.approved.saturating_add(1);
                if e.lease.taken > 0 {
                    // Approved from the lease: the store counted it when it
                    // granted the lease.
                    e.lease.taken -= 1;
                    c.retries = 0;
                }
            }
            if c != Counts::default() {
                e.pending.add(b, c);
                e.dirty = true;
            }
        }
    }

    fn note_fallback(&self, fallback: bool) {
        if self.fallback.swap(fallback, Ordering::Relaxed) != fallback {
            metrics::gauge!(BUDGET_FALLBACK).set(if fallback { 1.0 } else { 0.0 });
            if fallback {
                tracing::warn!(
                    replicas = self.replicas(),
                    "retry budgets: the shared store is not answering; judging from this replica's counts × the last known replica count"
                );
            } else {
                tracing::info!("retry budgets: fleet totals are current again");
            }
        }
    }
}

/// `d:<catalog>:<dependency>` or `t:<catalog>:<dependency>:<hashed tenant>`.
fn shown_key(scope_kind: BudgetScope, scope: ScopeOf<'_>, hash: &dyn Fn(&str) -> String) -> String {
    match scope_kind {
        BudgetScope::Dependency => format!("d:{}:{}", scope.catalog, scope.dependency),
        BudgetScope::Tenant => format!("t:{}:{}:{}", scope.catalog, scope.dependency, hash(scope.tenant)),
    }
}

#[cfg(test)]
mod tests;
