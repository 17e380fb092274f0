//! The mirror's holds and the indexes kept over them, under its lock.
//!
//! Holds are found by scope through a hash of the scope's parts, computed
//! from borrowed strings: a decision looks up to three scopes while any hold
//! is in force, and writing each scope's text key first (as this index once
//! did) cost more than the lookup (callgrind). A hash names a bucket, not a
//! scope: every lookup compares the holds' own keys, so two scopes whose
//! hashes meet share a bucket and are still told apart.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasher;
use std::sync::Arc;

use crate::core::hold::{Hold, HoldKey, HoldKind, HoldPlan, HoldScope, Standing};
use crate::core::time::UnixMillis;

use super::ProbeRecord;

/// A scope by its parts, borrowed: what holds are looked up by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Scope<'a> {
    pub scope: HoldScope,
    pub catalog: &'a str,
    pub dependency: &'a str,
    pub subject: &'a str,
}

impl<'a> Scope<'a> {
    pub fn of_key(key: &'a HoldKey) -> Self {
        Scope {
            scope: key.scope,
            catalog: &key.catalog,
            dependency: &key.dependency,
            subject: &key.subject,
        }
    }

    pub fn of_plan(plan: &HoldPlan<'a>) -> Self {
        Scope {
            scope: plan.scope,
            catalog: plan.catalog,
            dependency: plan.dependency,
            subject: plan.subject,
        }
    }

    fn covers(&self, key: &HoldKey) -> bool {
        self.scope == key.scope
            && self.catalog == key.catalog
            && self.dependency == key.dependency
            && self.subject == key.subject
    }
}

#[derive(Debug, Default)]
pub(super) struct State {
    /// Scope hash → the holds of the scopes with that hash (one per scope
    /// and kind; almost always one scope). foldhash, seeded per process:
    /// scopes carry client-chosen tenants. Each list starts with room for
    /// one hold (a `Vec`'s first growth would reserve four: most of a
    /// hold's memory). Holds are shared, so a decision that meets one takes
    /// a reference, not a copy of its strings.
    by_scope: HashMap<u64, Vec<Arc<Hold>>, foldhash::fast::FixedState>,
    seed: foldhash::fast::RandomState,
    /// Tests: every scope hashes alike, so every lookup relies on comparing keys.
    #[cfg(test)]
    pub collide: bool,
    /// hold id → its scope's hash, in id order: ListHolds' cursor and a
    /// watch's snapshot walk it (an extended hold keeps its place).
    pub by_id: BTreeMap<Id, u64>,
    /// dependency → its holds' ids, in id order: a dependency filter (a
    /// client mirror's watch, ListHolds) walks only that dependency's
    /// holds. The ids are `by_id`'s own (no copy).
    pub by_dep: HashMap<Box<str>, BTreeSet<Id>, foldhash::fast::RandomState>,
    /// hold id → what is known of its latest probe slot.
    pub probes: HashMap<String, ProbeRecord>,
    /// hold id → (slot, nonce) of a take the shared store left unanswered,
    /// asked again with that nonce (at most one per hold in force).
    pub unanswered: HashMap<String, (u64, u128)>,
    /// (instant, hold id): when each hold next changes by itself — its
    /// probe phase begins (`until`, for a hold with a phase) or it ends —
    /// so the sweep touches only what is due, not every hold.
    pub due: BTreeSet<(UnixMillis, Id)>,
    /// Holds by kind and scope, kept as holds come and go (the gauges).
    pub counts: [[usize; 3]; 4],
    /// The eviction order at the cap, by (corroboration, standing, scope
    /// class): within a bucket, the placer with the most holds loses first.
    pub buckets: BTreeMap<BucketKey, Bucket>,
    /// Holds evicted since the owner last asked (it writes their tombstones).
    pub evicted_out: Vec<Hold>,
}

/// A hold id as the indexes keep it: one allocation shared by all of them.
pub(super) type Id = Arc<str>;

/// (corroboration, standing, 0 for tenant holds / 1 for wider ones).
pub(super) type BucketKey = (u8, Standing, u8);

pub(super) fn bucket_key(h: &Hold) -> BucketKey {
    let class = u8::from(h.key.scope != HoldScope::Tenant);
    (h.rank.corroboration.min(8), h.rank.standing, class)
}

/// The holds of one rank, by placer.
#[derive(Debug, Default)]
pub(super) struct Bucket {
    by_placer: HashMap<u32, BTreeSet<Id>>,
    /// (holds of the placer here, placer): the last is the biggest placer.
    order: BTreeSet<(usize, u32)>,
}

impl Bucket {
    fn add(&mut self, placer: u32, id: &Id) {
        let ids = self.by_placer.entry(placer).or_default();
        self.order.remove(&(ids.len(), placer));
        ids.insert(Arc::clone(id));
        self.order.insert((ids.len(), placer));
    }

    fn remove(&mut self, placer: u32, id: &str) {
        let Some(ids) = self.by_placer.get_mut(&placer) else {
            return;
        };
        self.order.remove(&(ids.len(), placer));
        ids.remove(id);
        if ids.is_empty() {
            self.by_placer.remove(&placer);
        } else {
            self.order.insert((ids.len(), placer));
        }
    }

    /// A hold of the placer with the most holds here.
    pub fn victim(&self) -> Option<&Id> {
        let (_, placer) = self.order.last()?;
        self.by_placer.get(placer)?.first()
    }
}

fn due_instants(h: &Hold) -> [Option<UnixMillis>; 2] {
    [(h.probe_window_ms > 0).then_some(h.until), Some(h.end())]
}

impl State {
    fn hash(&self, scope: Scope<'_>) -> u64 {
        #[cfg(test)]
        if self.collide {
            return 0;
        }
        self.seed.hash_one(scope)
    }

    /// The holds of `scope`, one per kind.
    pub fn at<'s, 'k>(&'s self, scope: Scope<'k>) -> impl Iterator<Item = &'s Arc<Hold>> + use<'s, 'k> {
        let holds = self.by_scope.get(&self.hash(scope)).map_or(&[][..], Vec::as_slice);
        holds.iter().filter(move |h| scope.covers(&h.key))
    }

    /// The hold of `scope` and `kind`.
    pub fn get(&self, scope: Scope<'_>, kind: HoldKind) -> Option<&Arc<Hold>> {
        self.at(scope).find(|h| h.kind == kind)
    }

    /// The hold with `id`, in force or not (until the sweep).
    pub fn by_id(&self, id: &str) -> Option<&Arc<Hold>> {
        self.in_bucket(*self.by_id.get(id)?, id)
    }

    /// The hold `id` in the bucket of scope hash `hash` (a walk of `by_id`
    /// has both at hand: no second look-up of the id).
    pub fn in_bucket(&self, hash: u64, id: &str) -> Option<&Arc<Hold>> {
        self.by_scope.get(&hash)?.iter().find(|h| h.id == id)
    }

    /// Every hold, in no order.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Hold>> {
        self.by_scope.values().flatten()
    }

    /// The shared id of a hold in `by_id` (a fresh one if it is not there).
    fn id_of(&self, id: &str) -> Id {
        match self.by_id.get_key_value(id) {
            Some((shared, _)) => Arc::clone(shared),
            None => Arc::from(id),
        }
    }

    fn index(&mut self, h: &Hold, add: bool) {
        let id = self.id_of(&h.id);
        for at in due_instants(h).into_iter().flatten() {
            if add {
                self.due.insert((at, Arc::clone(&id)));
            } else {
                self.due.remove(&(at, Arc::clone(&id)));
            }
        }
        let dependency = h.key.dependency.as_str();
        if add {
            match self.by_dep.get_mut(dependency) {
                Some(ids) => {
                    ids.insert(Arc::clone(&id));
                }
                None => {
                    self.by_dep.insert(dependency.into(), BTreeSet::from([Arc::clone(&id)]));
                }
            }
        } else if let Some(ids) = self.by_dep.get_mut(dependency) {
            ids.remove(&*id);
            if ids.is_empty() {
                self.by_dep.remove(dependency);
            }
        }
        let count = &mut self.counts[h.kind.index()][h.key.scope as usize];
        *count = if add { *count + 1 } else { count.saturating_sub(1) };
        let key = bucket_key(h);
        if add {
            self.buckets.entry(key).or_default().add(h.rank.placer(), &id);
        } else if let Some(b) = self.buckets.get_mut(&key) {
            b.remove(h.rank.placer(), &h.id);
            if b.by_placer.is_empty() {
                self.buckets.remove(&key);
            }
        }
    }

    /// Stores `hold`, replacing the hold of its scope and kind if any
    /// (returned).
    pub fn insert(&mut self, hold: impl Into<Arc<Hold>>) -> Option<Arc<Hold>> {
        let hold = hold.into();
        let id = self.id_of(&hold.id);
        let hash = self.hash(Scope::of_key(&hold.key));
        self.by_id.insert(Arc::clone(&id), hash);
        let indexed = Arc::clone(&hold);
        let holds = self.by_scope.entry(hash).or_insert_with(|| Vec::with_capacity(1));
        let old = match holds.iter_mut().find(|h| h.kind == hold.kind && h.key == hold.key) {
            Some(slot) => Some(std::mem::replace(slot, hold)),
            None => {
                holds.push(hold);
                None
            }
        };
        // The old entries go before the new ones are made: they may be equal.
        if let Some(old) = &old {
            self.index(old, false);
        }
        self.index(&indexed, true);
        if let Some(old) = &old {
            if *old.id != *id {
                self.by_id.remove(old.id.as_str());
                self.probes.remove(&old.id);
                self.unanswered.remove(&old.id);
            }
        }
        old
    }

    pub fn remove_id(&mut self, id: &str) -> Option<Arc<Hold>> {
        let hash = *self.by_id.get(id)?;
        let holds = self.by_scope.get_mut(&hash);
        let hold = holds.and_then(|hs| {
            let i = hs.iter().position(|h| h.id == id)?;
            Some(hs.swap_remove(i))
        });
        if self.by_scope.get(&hash).is_some_and(Vec::is_empty) {
            self.by_scope.remove(&hash);
        }
        // Unindexed while `by_id` still holds the shared id: no copy of it.
        if let Some(h) = &hold {
            self.index(h, false);
        }
        self.by_id.remove(id);
        self.probes.remove(id);
        self.unanswered.remove(id);
        hold
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }
}
