//! The mirror's holds: one hold, a set indexed by dependency, and the state
//! events are applied to (idempotently by id and until, bounded).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::SystemTime;

use super::{MAX_TOMBSTONES, PROBE_GRACE};
use crate::pb;

pub(super) struct MHold {
    pub(super) catalog: String,
    pub(super) tenant: String,
    pub(super) method: String,
    pub(super) scope: i32,
    pub(super) until: SystemTime,
    /// `until` as the server sent it, in Unix ms (its resume digest).
    pub(super) until_ms: i64,
    pub(super) next_probe: Option<SystemTime>,
    pub(super) probing: bool,
    pub(super) raw: pb::Hold,
}

impl MHold {
    pub(super) fn covers(&self, catalog: &str, tenant: &str, method: &str) -> bool {
        if !catalog.is_empty() && self.catalog != catalog {
            return false;
        }
        match pb::Scope::try_from(self.scope) {
            // A hashed tenant ("h:…", from a retryd that ignores `tenants`)
            // may be this one: it covers, and the call asks Admit.
            Ok(pb::Scope::Tenant) => self.tenant == tenant || (!tenant.is_empty() && self.tenant.starts_with("h:")),
            Ok(pb::Scope::Method) => self.method == method,
            // dependency scope, or one this library does not know: cover (conservative)
            _ => true,
        }
    }

    pub(super) fn in_force(&self, now: SystemTime) -> bool {
        now < self.until || (self.next_probe.is_some() && now < self.until + PROBE_GRACE)
    }
}

pub(super) fn time_of(t: &Option<prost_types::Timestamp>) -> Option<SystemTime> {
    (*t).and_then(|t| SystemTime::try_from(t).ok())
}

#[derive(Default)]
pub(super) struct HoldSet {
    pub(super) by_id: HashMap<String, String>, // id → dependency
    pub(super) by_dep: HashMap<String, HashMap<String, MHold>>,
    pub(super) dropped: HashSet<String>, // dependencies a drop at the cap left unsynced
}

impl HoldSet {
    pub(super) fn remove(&mut self, id: &str) {
        if let Some(dep) = self.by_id.remove(id) {
            if let Some(m) = self.by_dep.get_mut(&dep) {
                m.remove(id);
                if m.is_empty() {
                    self.by_dep.remove(&dep);
                }
            }
        }
    }
    pub(super) fn get(&self, id: &str) -> Option<&MHold> {
        self.by_dep.get(self.by_id.get(id)?)?.get(id)
    }
}

#[derive(Default)]
pub(super) struct State {
    pub(super) live: HoldSet,
    pub(super) lifted: HashMap<String, SystemTime>,
    pub(super) lifted_order: VecDeque<String>,
    pub(super) want_deps: HashSet<String>,
    pub(super) want_tenants: HashSet<String>,
    pub(super) sync_deps: HashSet<String>,
    pub(super) sync_tenants: HashSet<String>,
    pub(super) live_gen: u64,
    pub(super) next_gen: u64,
    pub(super) stale: bool,
    pub(super) ever_synced: bool,
}

impl State {
    pub(super) fn covered<'a>(
        &self,
        deps: impl IntoIterator<Item = &'a String>,
        tenants: impl IntoIterator<Item = &'a String>,
    ) -> bool {
        deps.into_iter()
            .all(|d| d.is_empty() || (self.sync_deps.contains(d) && !self.live.dropped.contains(d)))
            && tenants
                .into_iter()
                .all(|t| t.is_empty() || self.sync_tenants.contains(t))
    }

    /// Applies one event to the live set (`snap`: a stream's snapshot), idempotently by id and until.
    pub(super) fn apply(&mut self, snap: Option<&mut HoldSet>, kind: i32, h: pb::Hold, max: usize) {
        if h.id.is_empty() {
            return;
        }
        let until = time_of(&h.until).unwrap_or(SystemTime::UNIX_EPOCH);
        let set = match snap {
            Some(s) => s,
            None => &mut self.live,
        };
        match pb::HoldEventKind::try_from(kind) {
            Ok(pb::HoldEventKind::Lifted) => {
                set.remove(&h.id);
                if !self.lifted.contains_key(&h.id) {
                    self.lifted_order.push_back(h.id.clone());
                    if self.lifted_order.len() > MAX_TOMBSTONES {
                        if let Some(old) = self.lifted_order.pop_front() {
                            self.lifted.remove(&old);
                        }
                    }
                }
                let e = self.lifted.entry(h.id).or_insert(until);
                *e = (*e).max(until);
                return;
            }
            Ok(pb::HoldEventKind::Placed | pb::HoldEventKind::Extended | pb::HoldEventKind::Probing) => {}
            _ => return,
        }
        if self.lifted.get(&h.id).is_some_and(|l| until <= *l) {
            return; // a PLACED that raced the snapshot: already lifted
        }
        if set.get(&h.id).is_some_and(|old| until < old.until) {
            return;
        }
        let m = MHold {
            catalog: h.catalog.clone(),
            tenant: h.tenant.clone(),
            method: h.method.clone(),
            scope: h.scope,
            until,
            until_ms: h
                .until
                .map_or(0, |t| t.seconds.saturating_mul(1000) + i64::from(t.nanos) / 1_000_000),
            next_probe: time_of(&h.next_probe_at),
            probing: h.probing || kind == pb::HoldEventKind::Probing as i32,
            raw: h,
        };
        put(set, m, max);
    }
}

/// Stores `m` in `set` (replacing its id), within the bound `max`.
pub(super) fn put(set: &mut HoldSet, m: MHold, max: usize) {
    set.remove(&m.raw.id);
    let (id, dep) = (m.raw.id.clone(), m.raw.dependency.clone());
    set.by_id.insert(id.clone(), dep.clone());
    set.by_dep.entry(dep).or_default().insert(id, m);
    if set.by_id.len() > max {
        // Full: drop the hold ending soonest; its dependency goes back to
        // Admit until the next SYNCED, so the drop never lets a call through.
        let soonest = set
            .by_dep
            .iter()
            .flat_map(|(d, m)| m.iter().map(move |(id, h)| (h.until, d.clone(), id.clone())))
            .min();
        if let Some((_, dep, id)) = soonest {
            set.dropped.insert(dep);
            set.remove(&id);
        }
    }
}
