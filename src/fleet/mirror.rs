//! The replica's in-process copy of the holds in force: what every decision
//! and every Admit reads, without waiting on a shared store. In memory mode
//! it is the whole truth; with Redis it is a mirror kept current by the
//! store's subscription and rebuilt on (re)connect.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::broadcast;

use crate::core::hold::{self, Hold, HoldKind, HoldPlan, HoldScope, Merge, storage_key, storage_key_into};
use crate::core::time::UnixMillis;

/// What happened to a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEventKind {
    /// Placed (or, at the start of a watch, in force).
    Placed,
    /// Its end moved later.
    Extended,
    /// Expired, released, or closed by a probe.
    Lifted,
}

crate::words!(HoldEventKind {
    Placed => "placed",
    Extended => "extended",
    Lifted => "lifted",
});

/// A change to the holds in force, for watchers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldEvent {
    /// What happened.
    pub kind: HoldEventKind,
    /// The hold after it happened.
    pub hold: Hold,
}

/// The outcome of placing a plan locally.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// A new hold.
    New(Hold),
    /// The hold in force, extended.
    Extended(Hold),
    /// The hold in force, unchanged (it ends later, or barely earlier).
    Kept(Hold),
    /// Not placed: the hold cap is reached and nothing may be evicted for it.
    Full,
}

#[derive(Debug, Default)]
struct State {
    /// storage key → the holds of that key, one per kind. Looked up three
    /// times a decision while any hold is in force: foldhash, seeded per
    /// process (keys carry client-chosen tenants), at a fraction of SipHash.
    by_key: HashMap<String, Vec<Hold>, foldhash::fast::RandomState>,
    /// hold id → storage key.
    by_id: HashMap<String, String>,
    /// circuit hold id → the highest probe slot known to be taken.
    probes: HashMap<String, u64>,
}

impl State {
    fn get(&self, key: &str, kind: HoldKind) -> Option<&Hold> {
        self.by_key.get(key)?.iter().find(|h| h.kind == kind)
    }

    fn insert(&mut self, key: String, hold: Hold) -> Option<Hold> {
        self.by_id.insert(hold.id.clone(), key.clone());
        let holds = self.by_key.entry(key).or_default();
        match holds.iter_mut().find(|h| h.kind == hold.kind) {
            Some(slot) => {
                let old = std::mem::replace(slot, hold);
                if old.id != slot.id {
                    self.by_id.remove(&old.id);
                    self.probes.remove(&old.id);
                }
                Some(old)
            }
            None => {
                holds.push(hold);
                None
            }
        }
    }

    fn remove_id(&mut self, id: &str) -> Option<Hold> {
        let key = self.by_id.remove(id)?;
        self.probes.remove(id);
        let holds = self.by_key.get_mut(&key)?;
        let i = holds.iter().position(|h| h.id == id)?;
        let hold = holds.swap_remove(i);
        if holds.is_empty() {
            self.by_key.remove(&key);
        }
        Some(hold)
    }

    fn len(&self) -> usize {
        self.by_id.len()
    }
}

/// The holds of one replica.
#[derive(Debug)]
pub struct Mirror {
    state: RwLock<State>,
    len: AtomicUsize,
    max_holds: usize,
    evicted: AtomicU64,
    events: broadcast::Sender<HoldEvent>,
}

impl Mirror {
    /// An empty mirror holding at most `max_holds` holds.
    pub fn new(max_holds: usize) -> Self {
        Mirror {
            state: RwLock::new(State::default()),
            len: AtomicUsize::new(0),
            max_holds: max_holds.max(1),
            evicted: AtomicU64::new(0),
            events: broadcast::channel(4096).0,
        }
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

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner)
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
    pub fn covering(&self, catalog: &str, dependency: &str, tenant: &str, method: &str, now: UnixMillis) -> Vec<Hold> {
        let mut out = Vec::new();
        self.each_covering(catalog, dependency, tenant, method, now, |h| out.push(h.clone()));
        out
    }

    /// The active hold covering a call that ends last, if any: the one
    /// [`Self::covering`] lookup a decision needs, cloning only the winner.
    pub fn ending_last(
        &self,
        catalog: &str,
        dependency: &str,
        tenant: &str,
        method: &str,
        now: UnixMillis,
    ) -> Option<Hold> {
        let mut best: Option<Hold> = None;
        self.each_covering(catalog, dependency, tenant, method, now, |h| {
            if best.as_ref().is_none_or(|b| b.until < h.until) {
                best = Some(h.clone());
            }
        });
        best
    }

    /// Calls `f` with each active hold covering a call, tenant's first, then
    /// the dependency's, then the method's. The keys are built in a
    /// per-thread buffer: this runs on every decision while any hold is in
    /// force, and three key allocations were most of its cost.
    fn each_covering(
        &self,
        catalog: &str,
        dependency: &str,
        tenant: &str,
        method: &str,
        now: UnixMillis,
        mut f: impl FnMut(&Hold),
    ) {
        thread_local! {
            static KEY: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
        }
        if self.is_empty() {
            return;
        }
        let scopes = [
            (!tenant.is_empty()).then_some((HoldScope::Tenant, tenant)),
            (!dependency.is_empty()).then_some((HoldScope::Dependency, "")),
            (!dependency.is_empty() && !method.is_empty()).then_some((HoldScope::Method, method)),
        ];
        KEY.with_borrow_mut(|key| {
            let state = self.read();
            for (scope, subject) in scopes.into_iter().flatten() {
                storage_key_into(key, scope, catalog, dependency, subject);
                for h in state.by_key.get(key.as_str()).into_iter().flatten() {
                    if h.active(now) {
                        f(h);
                    }
                }
            }
        });
    }

    /// The hold with `id`, if in force.
    pub fn get(&self, id: &str, now: UnixMillis) -> Option<Hold> {
        let state = self.read();
        let key = state.by_id.get(id)?;
        state
            .by_key
            .get(key)?
            .iter()
            .find(|h| h.id == id && h.active(now))
            .cloned()
    }

    /// Every active hold, ending soonest first.
    pub fn snapshot(&self, now: UnixMillis) -> Vec<Hold> {
        let state = self.read();
        let mut all: Vec<Hold> = state
            .by_key
            .values()
            .flatten()
            .filter(|h| h.active(now))
            .cloned()
            .collect();
        all.sort_by(|a, b| a.until.cmp(&b.until).then_with(|| a.id.cmp(&b.id)));
        all
    }

    /// What placing `plan` at `now` would do.
    pub fn preview(&self, plan: &HoldPlan<'_>, now: UnixMillis) -> Merge {
        if self.is_empty() {
            return Merge::Place;
        }
        let key = storage_key(plan.scope, plan.catalog, plan.dependency, plan.subject);
        hold::merge(self.read().get(&key, plan.kind), plan.until, now)
    }

    /// Places `plan` at `now` (extend-only; `new_id` names a new hold).
    pub fn place(&self, plan: &HoldPlan<'_>, now: UnixMillis, new_id: impl FnOnce() -> String) -> Placed {
        let key = storage_key(plan.scope, plan.catalog, plan.dependency, plan.subject);
        let mut state = self.write();
        let existing = state.get(&key, plan.kind).cloned();
        let placed = match hold::merge(existing.as_ref(), plan.until, now) {
            Merge::Keep => match existing {
                Some(h) => Placed::Kept(h),
                None => Placed::Full,
            },
            Merge::Extend => match existing {
                Some(mut h) => {
                    h.until = plan.until;
                    h.code = plan.code.to_owned();
                    h.rule = plan.rule.to_owned();
                    h.reason = plan.reason.to_owned();
                    state.insert(key, h.clone());
                    Placed::Extended(h)
                }
                None => Placed::Full,
            },
            Merge::Place => {
                if let Some(old) = existing {
                    state.remove_id(&old.id);
                }
                if state.len() >= self.max_holds && !self.evict_for(&mut state, plan.scope, now) {
                    Placed::Full
                } else {
                    let h = plan.to_hold(new_id(), now);
                    state.insert(key, h.clone());
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

    /// Makes room for one hold of `scope`: expired holds first, then tenant
    /// holds (oldest placed first); a dependency-wide or method hold is only
    /// dropped for another of its kind of scope, oldest-expiring first.
    fn evict_for(&self, state: &mut State, scope: HoldScope, now: UnixMillis) -> bool {
        let all = || state.by_key.values().flatten();
        let victim = all()
            .filter(|h| !h.active(now))
            .map(|h| h.id.clone())
            .next()
            .or_else(|| {
                all()
                    .filter(|h| h.key.scope == HoldScope::Tenant)
                    .min_by_key(|h| h.since)
                    .map(|h| h.id.clone())
            })
            .or_else(|| {
                (scope != HoldScope::Tenant)
                    .then(|| all().min_by_key(|h| h.until).map(|h| h.id.clone()))
                    .flatten()
            });
        match victim {
            Some(id) => {
                if let Some(h) = state.remove_id(&id) {
                    if h.active(now) {
                        self.evicted.fetch_add(1, Ordering::Relaxed);
                    }
                    self.emit(HoldEventKind::Lifted, &h);
                }
                true
            }
            None => false,
        }
    }

    /// Applies another replica's placement or extension: the later end wins;
    /// on a tie of key and kind the stored hold (and its id) is adopted.
    pub fn apply_remote(&self, hold: Hold, now: UnixMillis) {
        if !hold.active(now) {
            return;
        }
        let key = hold.key.storage_key();
        let mut state = self.write();
        let kind = match state.get(&key, hold.kind) {
            Some(h) if h.active(now) && h.until >= hold.until && h.id == hold.id => return,
            Some(h) if h.active(now) && h.until > hold.until => return,
            Some(h) if h.active(now) => HoldEventKind::Extended,
            _ => HoldEventKind::Placed,
        };
        if state.len() >= self.max_holds
            && state.get(&key, hold.kind).is_none()
            && !self.evict_for(&mut state, hold.key.scope, now)
        {
            return;
        }
        state.insert(key, hold.clone());
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
        Some(hold)
    }

    /// Drops expired holds, announcing each as lifted.
    pub fn sweep(&self, now: UnixMillis) -> usize {
        if self.is_empty() {
            return 0;
        }
        let expired: Vec<String> = {
            let state = self.read();
            state
                .by_key
                .values()
                .flatten()
                .filter(|h| !h.active(now))
                .map(|h| h.id.clone())
                .collect()
        };
        expired.iter().filter(|id| self.lift(id).is_some()).count()
    }

    /// Whether probe slot `slot` of circuit `id` is known to be taken.
    pub fn probe_taken(&self, id: &str, slot: u64) -> bool {
        self.read().probes.get(id).is_some_and(|taken| *taken >= slot)
    }

    /// Takes probe slot `slot` of circuit `id` in this replica: `true` once.
    pub fn try_take_probe(&self, id: &str, slot: u64) -> bool {
        let mut state = self.write();
        if !state.by_id.contains_key(id) {
            return false;
        }
        let taken = state.probes.entry(id.to_owned()).or_insert(0);
        if *taken >= slot {
            return false;
        }
        *taken = slot;
        true
    }

    /// Records that probe slot `slot` of circuit `id` is taken.
    pub fn mark_probe_taken(&self, id: &str, slot: u64) {
        let mut state = self.write();
        if state.by_id.contains_key(id) {
            let taken = state.probes.entry(id.to_owned()).or_insert(0);
            *taken = (*taken).max(slot);
        }
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

#[cfg(test)]
mod tests;
