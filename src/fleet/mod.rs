//! Fleet memory, the layer above the core (see `docs/architecture.md`):
//! where holds and budget counts are *stored* and shared (what a hold is and
//! when it applies is decided in `core::hold`; how it changes a decision, in
//! `crate::service::decide`). Every replica keeps a
//! [`Mirror`] that calls read without waiting; a [`SharedStore`] (in memory,
//! or Redis) carries changes between replicas off the call path.

pub mod budget;
pub mod caller;
pub mod memory;
pub mod mirror;
pub mod redis;
pub mod scope_holds;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

pub use caller::{PlacementLimiter, PlacementLimits};
pub use memory::MemoryStore;
pub use mirror::{HoldEvent, HoldEventKind, Mirror, Placed, Redeemed};
pub use scope_holds::ScopeHolds;
pub use store::{SharedStore, Take};

use crate::core::budget::BudgetRule;
use crate::core::hold::{self, Admission, Hold, HoldKind, HoldPlan, HoldScope, Standing};
use crate::core::time::UnixMillis;

/// Gauge of holds in force, labelled `kind` and `scope`.
pub const HOLDS: &str = "retryd_holds";
/// Counter of Admit answers, labelled `result` (`admitted`, `refused`, `probe`).
pub const ADMIT_TOTAL: &str = "retryd_admit_total";
/// Counter of holds placed, labelled `kind`.
pub const HOLDS_PLACED_TOTAL: &str = "retryd_holds_placed_total";
/// Counter of holds not placed because their caller was over its rate, labelled `scope`.
pub const HOLDS_RATE_LIMITED_TOTAL: &str = "retryd_holds_rate_limited_total";
/// Counter of holds dropped at the hold cap.
pub const HOLDS_EVICTED_TOTAL: &str = "retryd_holds_evicted_total";
/// Counter of probe tokens whose report changed nothing, labelled `reason`
/// (`forged`, `reused`, `superseded`, `not_in_force`).
pub const PROBE_TOKENS_REJECTED_TOTAL: &str = "retryd_probe_tokens_rejected_total";

/// How the fleet memory is bounded.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// Most holds kept (`--max-holds`).
    pub max_holds: usize,
    /// Per-caller placement rates.
    pub limits: PlacementLimits,
    /// Key of the hash that stands in for tenant names shown to non-operators.
    pub tenant_hash_key: Vec<u8>,
    /// Most retry-budget scopes kept (`--max-budget-scopes`).
    pub max_budget_scopes: usize,
    /// How often budget counts are flushed to a shared store (`--budget-flush-ms`).
    pub budget_flush_every: Duration,
    /// Reported first attempts per caller per budget scope per second
    /// (`--max-reported-requests-per-sec`).
    pub max_reported_per_sec: f64,
    /// New budget scopes per caller per second (`--budget-scopes-per-sec-per-caller`).
    pub budget_scopes_per_sec_per_caller: f64,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            max_holds: 100_000,
            limits: PlacementLimits::default(),
            tenant_hash_key: Vec::new(),
            max_budget_scopes: DEFAULT_MAX_BUDGET_SCOPES,
            budget_flush_every: Duration::from_millis(100),
            max_reported_per_sec: budget::DEFAULT_REPORTED_PER_SEC,
            budget_scopes_per_sec_per_caller: budget::DEFAULT_SCOPES_PER_SEC_PER_CALLER,
        }
    }
}

/// What placing a decision's hold did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaceOutcome {
    /// Placed, extended, or already covered.
    Held(Box<Placed>),
    /// The caller is over its placement rate: not placed.
    RateLimited,
}

/// Admit's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmitOutcome {
    /// The call may go ahead.
    pub admitted: bool,
    /// The covering hold that ends last (shared with the mirror).
    pub hold: Option<Arc<Hold>>,
    /// When refused: when to ask again.
    pub retry_at: Option<UnixMillis>,
    /// When admitted as a circuit's probe: its token.
    pub probe_token: Option<String>,
}

/// What a probe token's report did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeReport {
    /// The token was valid and its report counted.
    pub accepted: bool,
    /// Why it did not count, or `Accepted`.
    pub redeemed: Redeemed,
    /// The hold it names, as it is after the report (lifted on a success).
    pub hold: Option<Hold>,
}

/// A probe token that is not one (`INVALID_ARGUMENT` for the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("probe_token: not a token Admit gives (<hold id>.<slot>.<32 hex digits>)")]
pub struct MalformedToken;

/// The fleet memory of one replica.
#[derive(Debug)]
pub struct Fleet {
    mirror: Arc<Mirror>,
    store: Arc<dyn SharedStore>,
    limiter: PlacementLimiter,
    /// `--tenant-hash-key-file`'s key; else the store's shared key once
    /// known, else this random one.
    tenant_hash_key: Vec<u8>,
    own_key: bool,
    budgets: Arc<budget::Budgets>,
}

/// How the doors name an operator caller (`op:<who>`): its holds rank
/// above everyone's at the hold cap.
pub const OPERATOR_PREFIX: &str = "op:";

/// A caller's standing, from the name the doors gave it: an operator
/// (`op:…`), a client certificate (`cert:…`), or only an address.
pub fn standing_of(caller: &str) -> Standing {
    if caller.starts_with(OPERATOR_PREFIX) {
        Standing::Operator
    } else if caller.starts_with("cert:") {
        Standing::Identified
    } else {
        Standing::Anonymous
    }
}

/// Default of `--max-budget-scopes`: the budget table's share of the
/// memory the Helm chart allows (docs/limits-and-hostile-surroundings.md).
pub const DEFAULT_MAX_BUDGET_SCOPES: usize = 20_000;

impl Fleet {
    /// A fleet memory over `store` (started here).
    pub fn new(config: FleetConfig, store: Arc<dyn SharedStore>) -> Arc<Fleet> {
        let mirror = Arc::new(Mirror::new(config.max_holds));
        Arc::clone(&store).start(Arc::clone(&mirror));
        let every = config.budget_flush_every.max(Duration::from_millis(1));
        let shared = store.shares_budgets();
        let budgets = Arc::new(
            budget::Budgets::new(
                config.max_budget_scopes,
                shared,
                u64::try_from(every.as_millis()).unwrap_or(u64::MAX),
            )
            .with_reported_per_sec(config.max_reported_per_sec)
            .with_scopes_per_sec_per_caller(config.budget_scopes_per_sec_per_caller),
        );
        if tokio::runtime::Handle::try_current().is_ok() {
            if shared {
                budget::flush::spawn(Arc::downgrade(&budgets), Arc::downgrade(&store), every);
            } else {
                budget::flush::spawn_gauges(Arc::downgrade(&budgets));
            }
        }
        let own_key = !config.tenant_hash_key.is_empty();
        let tenant_hash_key = if own_key {
            config.tenant_hash_key
        } else {
            rand::random::<[u8; 32]>().to_vec()
        };
        Arc::new(Fleet {
            mirror,
            store,
            limiter: PlacementLimiter::new(config.limits),
            tenant_hash_key,
            own_key,
            budgets,
        })
    }

    /// The replica's retry-budget counts.
    pub fn budgets(&self) -> &budget::Budgets {
        &self.budgets
    }

    /// Records `n` first attempts of a call's scopes on `rules`.
    pub fn budget_deposit(&self, rules: &[BudgetRule], scope: budget::ScopeOf<'_>, n: u64, now: UnixMillis) {
        self.budgets.deposit(rules, scope, n, now, &|t| self.hash_tenant(t));
    }

    /// [`Fleet::budget_deposit`] by `caller` (Admit), who is held to its
    /// new-scope rate (`--budget-scopes-per-sec-per-caller`).
    pub fn budget_deposit_from(
        &self,
        rules: &[BudgetRule],
        scope: budget::ScopeOf<'_>,
        n: u64,
        caller: &dyn Fn() -> String,
        now: UnixMillis,
    ) {
        self.budgets
            .deposit_from(rules, scope, n, Some(caller), now, &|t| self.hash_tenant(t));
    }

    /// Records `n` first attempts reported by `caller` (one report's count
    /// for the scope), limited per caller per scope.
    pub fn budget_deposit_reported(
        &self,
        rules: &[BudgetRule],
        scope: budget::ScopeOf<'_>,
        n: u64,
        caller: &str,
        now: UnixMillis,
    ) {
        self.budgets
            .deposit_reported(rules, scope, n, caller, now, &|t| self.hash_tenant(t));
    }

    /// Where the budgets of a call's scopes stand, the most constraining
    /// first; `caller` (asked only for a new scope) is held to its new-scope rate.
    pub fn budget_judge(
        &self,
        rules: &[BudgetRule],
        scope: budget::ScopeOf<'_>,
        now: UnixMillis,
        caller: &dyn Fn() -> String,
    ) -> Vec<budget::Judged> {
        self.budgets
            .judge(rules, scope, now, Some(caller), &|t| self.hash_tenant(t))
    }

    /// Where a call's budgeted scopes stand, read-only (explain).
    pub fn budget_peek(
        &self,
        rules: &[BudgetRule],
        scope: budget::ScopeOf<'_>,
        now: UnixMillis,
    ) -> Vec<budget::Judged> {
        self.budgets.peek(rules, scope, now)
    }

    /// Records one retry of a call's scopes on `rules`.
    pub fn budget_withdraw(&self, rules: &[BudgetRule], scope: budget::ScopeOf<'_>, now: UnixMillis) {
        self.budgets.withdraw(rules, scope, now, &|t| self.hash_tenant(t));
    }

    /// One replica's memory, nothing shared (`--state memory`).
    pub fn in_memory(config: FleetConfig) -> Arc<Fleet> {
        Fleet::new(config, Arc::new(MemoryStore::default()))
    }

    /// The replica's holds.
    pub fn mirror(&self) -> &Arc<Mirror> {
        &self.mirror
    }

    /// The shared store.
    pub fn store(&self) -> &Arc<dyn SharedStore> {
        &self.store
    }

    /// Places the hold a decision asks for, on behalf of `caller` (its mTLS
    /// identity or peer address), within the caller's placement rate.
    pub fn place(&self, plan: &HoldPlan<'_>, caller: &str, now: UnixMillis) -> PlaceOutcome {
        // Only a new hold spends the caller's placement rate; extending or
        // confirming one in force does not.
        if self.mirror.preview(plan, now) == hold::Merge::Place
            && !self.limiter.allow(caller, plan.scope != HoldScope::Tenant, now)
        {
            metrics::counter!(HOLDS_RATE_LIMITED_TOTAL, "scope" => plan.scope.as_str()).increment(1);
            return PlaceOutcome::RateLimited;
        }
        let standing = standing_of(caller);
        let placed = self.mirror.place_by(plan, caller_hash(caller), standing, now, new_id);
        // Evictions are written as tombstones, so every replica drops them too.
        for evicted in self.mirror.drain_evicted() {
            tracing::info!(hold = %evicted.id, caller, "hold evicted to make room for this caller's hold");
            self.store.lift(&evicted);
        }
        match placed {
            Placed::New(ref h) => {
                tracing::info!(
                    hold = %h.id,
                    kind = h.kind.as_str(),
                    scope = h.key.scope.as_str(),
                    catalog = %h.key.catalog,
                    dependency = %h.key.dependency,
                    tenant = %self.hash_tenant(h.key.tenant()),
                    code = %h.code,
                    rule = %h.rule,
                    caller,
                    until = %h.until.to_rfc3339(),
                    "hold placed"
                );
                metrics::counter!(HOLDS_PLACED_TOTAL, "kind" => h.kind.as_str()).increment(1);
                self.store.put(h);
                PlaceOutcome::Held(Box::new(placed))
            }
            Placed::Extended(ref h) => {
                self.store.put(h);
                PlaceOutcome::Held(Box::new(placed))
            }
            Placed::Kept(_) | Placed::Full => PlaceOutcome::Held(Box::new(placed)),
        }
    }

    /// The hold in force on a call's scopes that ends last.
    pub fn in_force(
        &self,
        catalog: &str,
        dependency: &str,
        tenant: &str,
        method: &str,
        now: UnixMillis,
    ) -> Option<Arc<Hold>> {
        if self.mirror.is_empty() {
            return None;
        }
        self.mirror.ending_last(catalog, dependency, tenant, method, now)
    }

    /// The earliest time a retry under `hold` can go ahead: its end, or for an
    /// open circuit its next probe slot.
    pub fn retry_floor(hold: &Hold, now: UnixMillis) -> UnixMillis {
        hold.retry_floor(now)
    }

    /// "May I call now?" for `method` of `dependency` for `tenant`.
    pub async fn admit(
        &self,
        catalog: &str,
        dependency: &str,
        tenant: &str,
        method: &str,
        now: UnixMillis,
    ) -> AdmitOutcome {
        let covering = self.mirror.covering(catalog, dependency, tenant, method, now);
        if covering.is_empty() {
            admit_counter(0).increment(1);
            return AdmitOutcome {
                admitted: true,
                hold: None,
                retry_at: None,
                probe_token: None,
            };
        }
        // Boxed: the future of a call under no hold (nearly every call)
        // stays a few words, not the size of the probe-taking one.
        Box::pin(self.admit_covered(covering, now)).await
    }

    /// Admit under the holds `covering` a call: refused, or admitted as a
    /// probe when one is due and this replica takes its slot.
    async fn admit_covered(&self, covering: Vec<Arc<Hold>>, now: UnixMillis) -> AdmitOutcome {
        let refs: Vec<&Hold> = covering.iter().map(|h| &**h).collect();
        let last = hold::ending_last(refs.iter().copied(), now)
            .and_then(|l| covering.iter().find(|h| std::ptr::eq(Arc::as_ptr(h), l)).cloned());
        // Refused callers in a probe phase poll at 1 s ± 20 %, so they do not return as one.
        let poll = (hold::PROBE_POLL_MS as f64 * rand::random_range(0.8..1.2)) as u64;
        let admission = hold::admit(&refs, now, poll, |i, n| self.mirror.probe_taken(&refs[i].id, n));
        let (admitted, retry_at, probe_token) = match admission {
            Admission::Admitted => (true, None, None),
            Admission::Refused { retry_at } => (false, Some(retry_at), None),
            Admission::ProbeDue { hold, slot } => {
                let probed = refs[hold];
                // A take of this slot left unanswered is asked again with
                // its nonce (by one caller): the store may have given it the
                // slot meanwhile.
                let nonce: u128 = self
                    .mirror
                    .take_unanswered(&probed.id, slot)
                    .unwrap_or_else(rand::random);
                let nonce_hex = format!("{nonce:032x}");
                match self.store.take_probe_slot(probed, slot, &nonce_hex).await {
                    Take::Taken => {
                        self.mirror.mark_probe_taken(&probed.id, slot, Some(&nonce_hex));
                        (true, None, Some(hold::probe_token(&probed.id, slot, nonce)))
                    }
                    taken => {
                        if taken == Take::Unanswered {
                            self.mirror.note_unanswered_take(&probed.id, slot, nonce);
                        } else {
                            self.mirror.mark_probe_taken(&probed.id, slot, None);
                        }
                        let next = if probed.probing(now) || taken == Take::Unanswered {
                            now.plus_ms(poll).min(probed.end())
                        } else {
                            probed.probe_slot_at(slot + 1).min(probed.until)
                        };
                        (false, Some(next), None)
                    }
                }
            }
        };
        let result = match (admitted, &probe_token) {
            (true, Some(_)) => 2,
            (true, None) => 0,
            (false, _) => 1,
        };
        admit_counter(result).increment(1);
        AdmitOutcome {
            admitted,
            hold: last,
            retry_at,
            probe_token,
        }
    }

    /// The outcome of a probe, reported with its token. A valid token's
    /// success closes the circuit or lifts the stop for every replica; its
    /// failure leaves a circuit open until its next slot and re-places a
    /// stop in its probe phase for as long as it last lasted. A forged,
    /// reused or superseded token changes nothing (counted).
    pub async fn report_probe(
        &self,
        token: &str,
        succeeded: bool,
        now: UnixMillis,
    ) -> Result<ProbeReport, MalformedToken> {
        let t = hold::parse_probe_token(token).ok_or(MalformedToken)?;
        let probed = self
            .mirror
            .get(t.hold, now)
            .filter(|h| h.kind == HoldKind::CircuitOpen || h.probe_window_ms > 0);
        let redeemed = match &probed {
            Some(h) => self.store.redeem_probe(h, t.slot, t.nonce).await,
            None => Redeemed::NotInForce,
        };
        let rejected = |redeemed: Redeemed, hold: Option<Hold>| {
            metrics::counter!(PROBE_TOKENS_REJECTED_TOTAL, "reason" => redeemed.as_str()).increment(1);
            tracing::debug!(hold = %t.hold, slot = t.slot, reason = redeemed.as_str(), "probe token rejected");
            Ok(ProbeReport {
                accepted: false,
                redeemed,
                hold,
            })
        };
        let Some(h) = probed else {
            return rejected(redeemed, None);
        };
        if redeemed != Redeemed::Accepted {
            return rejected(redeemed, Some(h));
        }
        let after = if succeeded {
            match self.mirror.lift(&h.id) {
                Some(lifted) => {
                    tracing::info!(hold = %h.id, kind = h.kind.as_str(), dependency = %lifted.key.dependency, "hold lifted by its probe's success");
                    self.store.lift(&lifted);
                    lifted
                }
                None => h,
            }
        } else if h.probing(now) {
            self.replace_after_probe(&h, now)
        } else {
            h
        };
        Ok(ProbeReport {
            accepted: true,
            redeemed,
            hold: Some(after),
        })
    }

    /// A probe failed, reported with a failure (Classify): its token is
    /// spent, off the call path, so it cannot later report a success. The
    /// decision itself re-places the hold.
    pub fn probe_failed(&self, token: &str, now: UnixMillis) {
        let Some(t) = hold::parse_probe_token(token) else {
            return;
        };
        let Some(h) = self.mirror.get(t.hold, now) else { return };
        let (store, slot, nonce) = (Arc::clone(&self.store), t.slot, t.nonce.to_owned());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let r = store.redeem_probe(&h, slot, &nonce).await;
                if r != Redeemed::Accepted {
                    metrics::counter!(PROBE_TOKENS_REJECTED_TOTAL, "reason" => r.as_str()).increment(1);
                }
            });
        }
    }

    /// A stop whose probe failed without a Classify (which would know the
    /// next reset): placed again for as long as it last lasted.
    fn replace_after_probe(&self, h: &Hold, now: UnixMillis) -> Hold {
        let length = h.since.ms_until(h.until).max(h.probe_window_ms).max(1_000);
        let plan = HoldPlan {
            scope: h.key.scope,
            kind: h.kind,
            catalog: &h.key.catalog,
            dependency: &h.key.dependency,
            subject: &h.key.subject,
            until: now.plus_ms(length),
            probe_every_ms: h.probe_every_ms,
            probe_window_ms: h.probe_window_ms,
            code: &h.code,
            rule: &h.rule,
            reason: &h.reason,
        };
        match self.mirror.place(&plan, now, new_id) {
            Placed::New(placed) | Placed::Extended(placed) => {
                self.store.put(&placed);
                Arc::unwrap_or_clone(placed)
            }
            Placed::Kept(kept) => Arc::unwrap_or_clone(kept),
            Placed::Full => h.clone(),
        }
    }

    /// Lifts the hold `id` now (an operator's release).
    pub fn release(&self, id: &str, now: UnixMillis) -> Option<Hold> {
        self.mirror.get(id, now)?;
        let lifted = self.mirror.lift(id)?;
        self.store.lift(&lifted);
        Some(lifted)
    }

    /// What non-operators see instead of a tenant's name: `h:` and 16 hex
    /// digits of a keyed SHA-256 (empty stays empty).
    pub fn hash_tenant(&self, tenant: &str) -> String {
        if tenant.is_empty() {
            return String::new();
        }
        let shared = (!self.own_key).then(|| self.store.tenant_hash_key()).flatten();
        let key: &[u8] = shared.as_deref().map_or(&self.tenant_hash_key, |k| k.as_slice());
        let mut h = Sha256::new();
        h.update((key.len() as u64).to_be_bytes());
        h.update(key);
        h.update(tenant.as_bytes());
        let digest = h.finalize();
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(18);
        out.push_str("h:");
        // Sent with every hold a non-operator sees: no formatter, no allocation per byte.
        for b in &digest[..8] {
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        out
    }

    /// Drops expired holds every `every` and keeps the hold gauges current,
    /// until the runtime ends.
    pub fn spawn_upkeep(self: &Arc<Self>, every: Duration) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut evicted = 0;
            loop {
                tick.tick().await;
                let Some(fleet) = weak.upgrade() else { return };
                let now = UnixMillis::now();
                fleet.mirror.sweep(now);
                // Counted as holds come and go: no walk over the holds here.
                let counts = fleet.mirror.counts();
                for kind in HoldKind::ALL {
                    for scope in [HoldScope::Tenant, HoldScope::Dependency, HoldScope::Method] {
                        metrics::gauge!(HOLDS, "kind" => kind.as_str(), "scope" => scope.as_str())
                            .set(counts[kind.index()][scope as usize] as f64);
                    }
                }
                let now_evicted = fleet.mirror.evicted();
                metrics::counter!(HOLDS_EVICTED_TOTAL).increment(now_evicted - evicted);
                evicted = now_evicted;
            }
        });
    }
}

/// The `retryd_admit_total` handles (`admitted`, `refused`, `probe`), looked
/// up in the registry once rather than on every Admit (the lookup costs more
/// than the rest of an Admit with no hold in force).
fn admit_counter(i: usize) -> &'static metrics::Counter {
    static COUNTERS: std::sync::OnceLock<[metrics::Counter; 3]> = std::sync::OnceLock::new();
    let all = COUNTERS
        .get_or_init(|| ["admitted", "refused", "probe"].map(|r| metrics::counter!(ADMIT_TOTAL, "result" => r)));
    &all[i.min(2)]
}

/// HELP texts of the fleet's metrics.
pub fn describe_metrics() {
    metrics::describe_gauge!(HOLDS, "Holds in force, by kind and scope.");
    metrics::describe_counter!(ADMIT_TOTAL, "Admit answers, by result (admitted, refused, probe).");
    metrics::describe_counter!(HOLDS_PLACED_TOTAL, "Holds placed, by kind.");
    metrics::describe_counter!(
        HOLDS_RATE_LIMITED_TOTAL,
        "Holds not placed because their caller was over its placement rate, by scope."
    );
    metrics::describe_counter!(HOLDS_EVICTED_TOTAL, "Holds dropped at --max-holds.");
    metrics::describe_counter!(
        PROBE_TOKENS_REJECTED_TOTAL,
        "Probe-token reports that changed nothing, by reason (forged, reused, superseded, not_in_force)."
    );
    budget::describe_metrics();
}

/// Whether `h` passes List/Watch filters (empty matches all).
pub fn matches(h: &Hold, catalog: &str, dependency: &str, tenant: &str) -> bool {
    (catalog.is_empty() || h.key.catalog == catalog)
        && (dependency.is_empty() || h.key.dependency == dependency)
        && (tenant.is_empty() || h.key.tenant() == tenant)
}

/// A caller's name as the mirror counts it (never 0, which means unnamed).
fn caller_hash(caller: &str) -> u32 {
    let digest = Sha256::digest(caller.as_bytes());
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]).max(1)
}

/// A new hold id: 16 random hex digits.
fn new_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests;
