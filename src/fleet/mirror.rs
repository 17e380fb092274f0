//! The replica's in-process copy of the holds in force: what every decision
//! and every Admit reads, without waiting on a shared store. In memory mode
//! it is the whole truth; with Redis it is a mirror kept current by the
//! store's subscription and rebuilt on (re)connect.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use tokio::sync::broadcast;

use crate::core::hold::{self, Hold, HoldKind, HoldPlan, HoldScope, Merge, Rank, Standing};
use crate::core::time::UnixMillis;

mod index;
use index::{Id, Scope, State, bucket_key};

/// What happened to a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEventKind {
    /// Placed (or, at the start of a watch, in force).
    Placed,
    /// Its end moved later.
    Extended,
    /// Expired, released, evicted, or closed or lifted by a probe.
    Lifted,
    /// Reached its end and entered its probe phase: one call may go.
    Probing,
    /// A watch's snapshot is complete: every hold in force was sent.
    Synced,
}

crate::words!(HoldEventKind {
    Placed => "placed",
    Extended => "extended",
    Lifted => "lifted",
    Probing => "probing",
    Synced => "synced",
});

/// What this replica knows of a hold's latest probe slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ProbeRecord {
    /// The highest slot known to be taken.
    slot: u64,
    /// The nonce, when this replica issued that slot's token.
    nonce: Option<String>,
    /// That token was reported (accepted once).
    redeemed: bool,
}

/// Whether a probe token's report is taken, and if not why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redeemed {
    /// The token's first report, for the latest slot issued: it counts.
    Accepted,
    /// No such token was issued (a wrong nonce, or a slot never issued).
    Forged,
    /// The token was already reported.
    Reused,
    /// A newer slot's token has been issued since.
    Superseded,
    /// The hold it names is no longer in force.
    NotInForce,
}

crate::words!(Redeemed {
    Accepted => "accepted",
    Forged => "forged",
    Reused => "reused",
    Superseded => "superseded",
    NotInForce => "not_in_force",
});

/// A change to the holds in force, for watchers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldEvent {
    /// What happened.
    pub kind: HoldEventKind,
    /// The hold after it happened.
    pub hold: Hold,
}

/// The outcome of placing a plan locally. The holds are the mirror's own
/// (shared, not copied: most placements meet a hold in force and keep it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// A new hold.
    New(Arc<Hold>),
    /// The hold in force, extended.
    Extended(Arc<Hold>),
    /// The hold in force, unchanged (it ends later, or barely earlier).
    Kept(Arc<Hold>),
    /// Not placed: the hold cap is reached and nothing may be evicted for it.
    Full,
}

/// The holds of one replica.
#[derive(Debug)]
pub struct Mirror {
    state: RwLock<State>,
    len: AtomicUsize,
    max_holds: usize,
    evicted: AtomicU64,
    /// Evicted holds waiting in `evicted_out`: asking costs no lock when none are.
    evicted_pending: AtomicUsize,
    events: broadcast::Sender<HoldEvent>,
    /// Whether the mirror holds what the fleet knows: at once in memory
    /// mode; under a shared store, once its holds were first read in. A
    /// watch's `synced` waits for it, so it never vouches for a replica
    /// just restarted and still empty.
    loaded: tokio::sync::watch::Sender<bool>,
    /// Bumped before and after every write: a reader that sees the same
    /// value before and after its reads saw no write (see [`Self::changes`]);
    /// a batch's memo of holds per scope ([`super::ScopeHolds`]) and a
    /// watch's resume digests check it.
    changes: AtomicU64,
}

/// The write lock, bumping [`Mirror::changes`] again when released.
struct WriteGuard<'a> {
    guard: std::sync::RwLockWriteGuard<'a, State>,
    changes: &'a AtomicU64,
}

impl std::ops::Deref for WriteGuard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.guard
    }
}

impl std::ops::DerefMut for WriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        self.changes.fetch_add(1, Ordering::Release);
    }
}

impl Mirror {
    /// An empty mirror holding at most `max_holds` holds.
    pub fn new(max_holds: usize) -> Self {
        Mirror {
            state: RwLock::new(State::default()),
            len: AtomicUsize::new(0),
            max_holds: max_holds.max(1),
            evicted: AtomicU64::new(0),
            evicted_pending: AtomicUsize::new(0),
            events: broadcast::channel(4096).0,
            loaded: tokio::sync::watch::Sender::new(true),
            changes: AtomicU64::new(0),
        }
    }

    /// A count that moves whenever the holds may have changed: what a
    /// caller computed from the holds between two equal readings of it is
    /// still true (a watch's resume digests are cached by it).
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// A shared store will load the fleet's holds: the mirror is not
    /// loaded until [`Self::mark_loaded`].
    pub fn expect_load(&self) {
        self.loaded.send_replace(false);
    }

    /// The shared store's holds were read in.
    pub fn mark_loaded(&self) {
        self.loaded.send_if_modified(|l| !std::mem::replace(l, true));
    }

    /// Whether the mirror is loaded, and when it becomes so.
    pub fn loaded(&self) -> tokio::sync::watch::Receiver<bool> {
        self.loaded.subscribe()
    }

    /// Watches changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<HoldEvent> {
        self.events.subscribe()
    }

    /// Holds dropped at the cap so far.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Holds in the mirror (expired ones until the next sweep included).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// No holds at all: the fast path of every call.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> WriteGuard<'_> {
        self.changes.fetch_add(1, Ordering::Release);
        WriteGuard {
            guard: self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner),
            changes: &self.changes,
        }
    }

    fn emit(&self, kind: HoldEventKind, hold: &Hold) {
        // No receiver is not an error: nobody is watching.
        let _ = self.events.send(HoldEvent {
            kind,
            hold: hold.clone(),
        });
    }

    fn settle_len(&self, state: &State) {
        self.len.store(state.len(), Ordering::Relaxed);
    }

    /// The active holds covering a call to `method` of `dependency` for
    /// `tenant` under `catalog`: its tenant, dependency and method holds.
    pub fn covering(
        &self,
        catalog: &str,
        dependency: &str,
        tenant: &str,
        method: &str,
        now: UnixMillis,
    ) -> Vec<Arc<Hold>> {
        let mut out = Vec::new();
        self.each_covering(catalog, dependency, tenant, method, now, |h| out.push(Arc::clone(h)));
        out
    }

    /// The active hold covering a call that ends last, if any: the one
    /// [`Self::covering`] lookup a decision needs, sharing the winner.
    pub fn ending_last(
        &self,
        catalog: &str,
        dependency: &str,
        tenant: &str,
        method: &str,
        now: UnixMillis,
    ) -> Option<Arc<Hold>> {
        let mut best: Option<Arc<Hold>> = None;
        self.each_covering(catalog, dependency, tenant, method, now, |h| {
            if best.as_ref().is_none_or(|b| b.until < h.until) {
                best = Some(Arc::clone(h));
            }
        });
        best
    }

    /// Calls `f` with each active hold covering a call, tenant's first, then
    /// the dependency's, then the method's: up to three lookups by a scope's
    /// borrowed parts (this runs on every decision while any hold is in force).
    fn each_covering(
        &self,
        catalog: &str,
        dependency: &str,
        tenant: &str,
        method: &str,
        now: UnixMillis,
        mut f: impl FnMut(&Arc<Hold>),
    ) {
        if self.is_empty() {
            return;
        }
        let scopes = [
            (!tenant.is_empty()).then_some((HoldScope::Tenant, tenant)),
            (!dependency.is_empty()).then_some((HoldScope::Dependency, "")),
            (!dependency.is_empty() && !method.is_empty()).then_some((HoldScope::Method, method)),
        ];
        let state = self.read();
        for (scope, subject) in scopes.into_iter().flatten() {
            let scope = Scope {
                scope,
                catalog,
                dependency,
                subject,
            };
            for h in state.at(scope) {
                if h.active(now) {
                    f(h);
                }
            }
        }
    }

    /// The hold with `id`, if in force.
    pub fn get(&self, id: &str, now: UnixMillis) -> Option<Hold> {
        let state = self.read();
        state.by_id(id).filter(|h| h.active(now)).map(|h| Hold::clone(h))
    }

    /// Every active hold, ending soonest first.
    pub fn snapshot(&self, now: UnixMillis) -> Vec<Hold> {
        let state = self.read();
        let mut all: Vec<Hold> = state.all().filter(|h| h.active(now)).map(|h| Hold::clone(h)).collect();
        all.sort_by(|a, b| a.until.cmp(&b.until).then_with(|| a.id.cmp(&b.id)));
        all
    }

    /// Up to `limit` active holds passing `keep`, in id order, after the id
    /// `after` (empty: from the first). The cursor of ListHolds and of a
    /// watch's snapshot: a page costs its own size plus the holds skipped by
    /// `keep`, never a copy of every hold.
    pub fn page(&self, after: &str, limit: usize, now: UnixMillis, keep: impl Fn(&Hold) -> bool) -> Vec<Hold> {
        use std::ops::Bound;
        let state = self.read();
        let start = if after.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(after)
        };
        let mut out = Vec::with_capacity(limit.min(1024));
        for (id, hash) in state.by_id.range::<str, _>((start, Bound::Unbounded)) {
            if out.len() >= limit {
                break;
            }
            let found = state.in_bucket(*hash, id);
            if let Some(h) = found.filter(|h| h.active(now) && keep(h)) {
                out.push(Hold::clone(h));
            }
        }
        out
    }

    /// [`Self::page`] over one dependency's holds only (its index): a
    /// filter by dependency costs that dependency's holds, not every hold.
    pub fn page_of(
        &self,
        dependency: &str,
        after: &str,
        limit: usize,
        now: UnixMillis,
        keep: impl Fn(&Hold) -> bool,
    ) -> Vec<Hold> {
        use std::ops::Bound;
        let state = self.read();
        let Some(ids) = state.by_dep.get(dependency) else {
            return Vec::new();
        };
        let start = if after.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(after)
        };
        let mut out = Vec::with_capacity(limit.min(1024));
        for id in ids.range::<str, _>((start, Bound::Unbounded)) {
            if out.len() >= limit {
                break;
            }
            let found = state.by_id(id);
            if let Some(h) = found.filter(|h| h.active(now) && keep(h)) {
                out.push(Hold::clone(h));
            }
        }
        out
    }

    /// Visits up to `limit` holds in force, in id order after `after`
    /// (empty: from the first), of `dependency` only (its index) or of all;
    /// returns the last id visited, `None` when none was left. Nothing is
    /// copied: a watch's resume digests walk the holds this way, a chunk
    /// per read lock.
    pub fn visit(
        &self,
        dependency: Option<&str>,
        after: &str,
        limit: usize,
        now: UnixMillis,
        mut f: impl FnMut(&Hold),
    ) -> Option<String> {
        use std::ops::Bound;
        let state = self.read();
        let start = if after.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(after)
        };
        let hold = |id: &Id| state.by_id(id);
        let mut last = None;
        let mut visit = |id: &Id| {
            if let Some(h) = hold(id).filter(|h| h.active(now)) {
                f(h);
            }
            last = Some(id.to_string());
        };
        match dependency {
            Some(d) => {
                for id in state
                    .by_dep
                    .get(d)?
                    .range::<str, _>((start, Bound::Unbounded))
                    .take(limit)
                {
                    visit(id);
                }
            }
            None => {
                for id in state
                    .by_id
                    .range::<str, _>((start, Bound::Unbounded))
                    .map(|(id, _)| id)
                    .take(limit)
                {
                    visit(id);
                }
            }
        }
        last
    }

    /// Holds in the mirror by kind and scope (`[kind][scope]`), kept as
    /// holds come and go: the gauges read it without walking the holds.
    pub fn counts(&self) -> [[usize; 3]; 4] {
        self.read().counts
    }

    /// What placing `plan` at `now` would do.
    pub fn preview(&self, plan: &HoldPlan<'_>, now: UnixMillis) -> Merge {
        if self.is_empty() {
            return Merge::Place;
        }
        hold::merge(
            self.read().get(Scope::of_plan(plan), plan.kind).map(|h| &**h),
            plan.until,
            now,
        )
    }

    /// Places `plan` at `now` for an unnamed caller (see [`Self::place_by`]).
    pub fn place(&self, plan: &HoldPlan<'_>, now: UnixMillis, new_id: impl FnOnce() -> String) -> Placed {
        self.place_by(plan, 0, Standing::Anonymous, now, new_id)
    }

    /// Places `plan` at `now` (extend-only; `new_id` names a new hold) for
    /// the caller whose hash is `caller` (0: unnamed): a caller not yet
    /// counted on a hold in force corroborates it.
    pub fn place_by(
        &self,
        plan: &HoldPlan<'_>,
        caller: u32,
        standing: Standing,
        now: UnixMillis,
        new_id: impl FnOnce() -> String,
    ) -> Placed {
        let mut state = self.write();
        let existing = state.get(Scope::of_plan(plan), plan.kind).cloned();
        let placed = match hold::merge(existing.as_deref(), plan.until, now) {
            // Most placements meet the hold in force and keep it: shared,
            // copied only when a new caller corroborates it.
            Merge::Keep => match existing {
                Some(h) => {
                    let mut rank = h.rank;
                    if caller != 0 && rank.corroborate(caller) {
                        let h = Arc::new(Hold {
                            rank,
                            ..Hold::clone(&h)
                        });
                        state.insert(Arc::clone(&h));
                        Placed::Kept(h)
                    } else {
                        Placed::Kept(h)
                    }
                }
                None => Placed::Full,
            },
            Merge::Extend => match existing {
                Some(h) => {
                    let mut h = Arc::unwrap_or_clone(h);
                    if caller != 0 {
                        h.rank.corroborate(caller);
                    }
                    h.until = plan.until;
                    h.probe_window_ms = plan.probe_window_ms;
                    h.code = plan.code.to_owned();
                    h.rule = plan.rule.to_owned();
                    h.reason = plan.reason.to_owned();
                    let h = Arc::new(h);
                    state.insert(Arc::clone(&h));
                    Placed::Extended(h)
                }
                None => Placed::Full,
            },
            Merge::Place => {
                if let Some(old) = existing {
                    state.remove_id(&old.id);
                }
                let mut h = plan.to_hold(String::new(), now);
                h.rank = Rank::placed_by(caller, standing);
                if state.len() >= self.max_holds && !self.evict_for(&mut state, &h, now) {
                    Placed::Full
                } else {
                    h.id = new_id();
                    let h = Arc::new(h);
                    state.insert(Arc::clone(&h));
                    Placed::New(h)
                }
            }
        };
        self.settle_len(&state);
        drop(state);
        match &placed {
            Placed::New(h) => self.emit(HoldEventKind::Placed, h),
            Placed::Extended(h) => self.emit(HoldEventKind::Extended, h),
            Placed::Kept(_) | Placed::Full => {}
        }
        placed
    }

    /// Makes room for `newcomer`: an expired hold first; else the lowest
    /// ranked hold — least corroborated, then lowest standing, tenant holds
    /// before wider ones, and among equals the placer with the most holds
    /// loses first — unless it ranks above the newcomer. A dependency-wide
    /// or method hold never makes room for a tenant hold.
    fn evict_for(&self, state: &mut State, newcomer: &Hold, now: UnixMillis) -> bool {
        // An expired hold not yet swept is the first due instant, if any is past.
        let expired = state
            .due
            .iter()
            .take_while(|(at, _)| *at <= now)
            .find(|(_, id)| state.by_id(id).is_some_and(|h| !h.active(now)))
            .map(|(_, id)| id.clone());
        let tenant_only = newcomer.key.scope == HoldScope::Tenant;
        let ceiling = bucket_key(newcomer);
        let ranked = || {
            state
                .buckets
                .iter()
                .filter(|((_, _, class), _)| !tenant_only || *class == 0)
                .find_map(|(key, b)| b.victim().map(|id| (*key, id.clone())))
                // Never a hold that ranks above the newcomer.
                .filter(|(key, _)| *key <= ceiling)
                .map(|(_, id)| id)
        };
        let Some(id) = expired.or_else(ranked) else {
            return false;
        };
        if let Some(h) = state.remove_id(&id) {
            if h.active(now) {
                self.evicted.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    hold = %h.id,
                    kind = h.kind.as_str(),
                    scope = h.key.scope.as_str(),
                    catalog = %h.key.catalog,
                    dependency = %h.key.dependency,
                    corroboration = h.rank.corroboration,
                    standing = h.rank.standing.as_str(),
                    for_kind = newcomer.kind.as_str(),
                    for_scope = newcomer.key.scope.as_str(),
                    for_dependency = %newcomer.key.dependency,
                    "hold evicted at --max-holds"
                );
                state.evicted_out.push(Hold::clone(&h));
                self.evicted_pending.fetch_add(1, Ordering::Relaxed);
            }
            self.emit(HoldEventKind::Lifted, &h);
        }
        true
    }

    /// The holds evicted since the last call: their owner writes their
    /// tombstones, so every replica drops them too.
    pub fn drain_evicted(&self) -> Vec<Hold> {
        // Only evictions since the last drain take the lock: a replica that
        // evicted once must not pay a write lock on every placement after.
        if self.evicted_pending.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let mut state = self.write();
        self.evicted_pending.store(0, Ordering::Relaxed);
        std::mem::take(&mut state.evicted_out)
    }

    /// Applies another replica's placement or extension: the later end wins;
    /// on a tie of key and kind the stored hold (and its id) is adopted.
    pub fn apply_remote(&self, hold: Hold, now: UnixMillis) {
        if !hold.active(now) {
            return;
        }
        let mut state = self.write();
        let scope = Scope::of_key(&hold.key);
        let kind = match state.get(scope, hold.kind) {
            Some(h) if h.active(now) && h.until >= hold.until && h.id == hold.id => return,
            Some(h) if h.active(now) && h.until > hold.until => return,
            Some(h) if h.active(now) => HoldEventKind::Extended,
            _ => HoldEventKind::Placed,
        };
        if state.len() >= self.max_holds
            && state.get(scope, hold.kind).is_none()
            && !self.evict_for(&mut state, &hold, now)
        {
            return;
        }
        state.insert(hold.clone());
        self.settle_len(&state);
        drop(state);
        self.emit(kind, &hold);
    }

    /// Lifts the hold `id` (released, closed by a probe, or lifted by
    /// another replica); returns it as it was.
    pub fn lift(&self, id: &str) -> Option<Hold> {
        let mut state = self.write();
        let hold = state.remove_id(id)?;
        self.settle_len(&state);
        drop(state);
        self.emit(HoldEventKind::Lifted, &hold);
        Some(Arc::unwrap_or_clone(hold))
    }

    /// Drops expired holds, announcing each as lifted, and announces the
    /// probe phases that began; touches only the holds that are due.
    pub fn sweep(&self, now: UnixMillis) -> usize {
        if self.is_empty() {
            return 0;
        }
        let due: Vec<(UnixMillis, Id)> = {
            let state = self.read();
            state.due.range(..(now.plus_ms(1), Id::from(""))).cloned().collect()
        };
        let mut lifted = 0;
        for (at, id) in due {
            let Some(h) = self.get_any(&id) else { continue };
            if !h.active(now) {
                lifted += usize::from(self.lift(&id).is_some());
            } else if h.probe_window_ms > 0 && at == h.until && h.probing(now) {
                let mut state = self.write();
                let still = state.due.remove(&(at, Arc::clone(&id)));
                drop(state);
                if still {
                    self.emit(HoldEventKind::Probing, &h);
                }
            }
        }
        lifted
    }

    /// The hold with `id`, in force or not (until the sweep).
    fn get_any(&self, id: &str) -> Option<Hold> {
        self.read().by_id(id).map(|h| Hold::clone(h))
    }

    /// Whether probe slot `slot` of hold `id` is known to be taken.
    pub fn probe_taken(&self, id: &str, slot: u64) -> bool {
        self.read().probes.get(id).is_some_and(|p| p.slot >= slot)
    }

    /// Takes probe slot `slot` of hold `id` in this replica, recording the
    /// token's nonce: `true` once per slot.
    pub fn try_take_probe(&self, id: &str, slot: u64, nonce: &str) -> bool {
        let mut state = self.write();
        if !state.by_id.contains_key(id) {
            return false;
        }
        if state.probes.get(id).is_some_and(|p| p.slot >= slot) {
            return false;
        }
        state.probes.insert(
            id.to_owned(),
            ProbeRecord {
                slot,
                nonce: Some(nonce.to_owned()),
                redeemed: false,
            },
        );
        true
    }

    /// The nonce of this replica's take of slot `slot` of hold `id` that the
    /// shared store left unanswered, if any — given to one caller only (two
    /// asking with one nonce would both be told they won).
    pub fn take_unanswered(&self, id: &str, slot: u64) -> Option<u128> {
        let mut state = self.write();
        match state.unanswered.get(id) {
            Some((s, _)) if *s == slot => state.unanswered.remove(id).map(|(_, n)| n),
            _ => None,
        }
    }

    /// Notes a take the shared store left unanswered, to ask again with its
    /// nonce (one per hold in force: bounded by the holds).
    pub fn note_unanswered_take(&self, id: &str, slot: u64, nonce: u128) {
        let mut state = self.write();
        if state.by_id.contains_key(id) {
            state.unanswered.insert(id.to_owned(), (slot, nonce));
        }
    }

    /// Records that probe slot `slot` of hold `id` is taken (by this
    /// replica with `nonce`, or elsewhere), unless a later one is known.
    pub fn mark_probe_taken(&self, id: &str, slot: u64, nonce: Option<&str>) {
        let mut state = self.write();
        if !state.by_id.contains_key(id) {
            return;
        }
        state.unanswered.remove(id);
        if state
            .probes
            .get(id)
            .is_some_and(|p| p.slot > slot || (p.slot == slot && nonce.is_none()))
        {
            return;
        }
        state.probes.insert(
            id.to_owned(),
            ProbeRecord {
                slot,
                nonce: nonce.map(str::to_owned),
                redeemed: false,
            },
        );
    }

    /// Validates a probe token against what this replica issued (the store
    /// of `--state memory`, and the fallback while Redis is away): accepted
    /// once, for the latest slot known, with the nonce issued for it.
    pub fn redeem_probe(&self, id: &str, slot: u64, nonce: &str) -> Redeemed {
        let mut state = self.write();
        let Some(p) = state.probes.get_mut(id) else {
            return Redeemed::Forged;
        };
        if p.slot > slot {
            return Redeemed::Superseded;
        }
        if p.slot != slot || p.nonce.as_deref().is_none_or(|n| !constant_time_eq(n, nonce)) {
            return Redeemed::Forged;
        }
        if std::mem::replace(&mut p.redeemed, true) {
            return Redeemed::Reused;
        }
        Redeemed::Accepted
    }

    /// Rebuilds from the shared store's holds after a (re)connect: each
    /// stored hold is applied as another replica's; the local holds the
    /// store lacks (placed while it was unreachable) are returned, to be
    /// written through.
    pub fn resync(&self, stored: Vec<Hold>, now: UnixMillis) -> Vec<Hold> {
        let stored_keys: std::collections::HashSet<(String, HoldKind)> =
            stored.iter().map(|h| (h.key.storage_key(), h.kind)).collect();
        for h in stored {
            self.apply_remote(h, now);
        }
        self.snapshot(now)
            .into_iter()
            .filter(|h| !stored_keys.contains(&(h.key.storage_key(), h.kind)))
            .collect()
    }
}

/// Compares two nonces in time independent of where they differ.
fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests;
