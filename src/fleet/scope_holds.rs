//! The holds in force met within one call, per scope: a ClassifyBatch asks
//! the mirror once per distinct (catalog, dependency, tenant, method), not
//! once per item. Exact: `now` is one instant per batch, and every answer
//! kept is dropped as soon as the mirror's holds may have changed (a write
//! lock taken: this batch's own placements, another call's, another
//! replica's, a sweep), so an item is answered what the mirror answers. A
//! call whose scopes rarely repeat gains nothing from it and the memo steps
//! aside after a trial ([`TRIAL_LOOKUPS`]).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use crate::core::hold::Hold;
use crate::core::time::UnixMillis;

use super::Fleet;

/// The most scopes one memo keeps (above `--max-batch`'s ceiling): past it,
/// further scopes are asked of the mirror every time, as without a memo.
pub const MAX_SCOPES: usize = 4_096;

/// Lookups after which a memo that answered fewer than half of them itself
/// steps aside for the rest of the call. A mirror lookup (three scopes
/// hashed by their parts) costs about what a memo miss adds on top of it
/// (hashing the four strings, keeping them), so the memo pays only when
/// most items repeat a scope (callgrind, ClassifyBatch x1000 of the load
/// mix, where almost every item has its own scope: ~500 instructions an
/// item for 3 % hits).
pub const TRIAL_LOOKUPS: u64 = 64;

/// The answers of [`Fleet::in_force`] kept for one call.
#[derive(Debug, Default)]
pub struct ScopeHolds {
    /// Scope hash → where its key is in `keys`, and the answer.
    answers: HashMap<u64, (Key, Option<Arc<Hold>>), foldhash::fast::FixedState>,
    /// Every kept scope's four strings, back to back (one buffer, no
    /// allocation per scope).
    keys: String,
    /// The mirror's change count the answers were read at.
    changes: u64,
    hits: u64,
    lookups: u64,
}

/// Where a scope's strings are in `ScopeHolds::keys`: start and lengths.
#[derive(Debug, Clone, Copy)]
struct Key {
    start: usize,
    lens: [usize; 4],
}

impl ScopeHolds {
    /// The hold in force on a call's scopes that ends last (as
    /// [`Fleet::in_force`]), asked of the mirror only when this scope was
    /// not asked since the holds last changed.
    pub fn in_force(&mut self, fleet: &Fleet, scope: [&str; 4], now: UnixMillis) -> Option<Arc<Hold>> {
        let [catalog, dependency, tenant, method] = scope;
        if fleet.mirror().is_empty() {
            return None;
        }
        self.lookups += 1;
        if self.stepped_aside() {
            return fleet.in_force(catalog, dependency, tenant, method, now);
        }
        // Read before the lookup: a change after it leaves a newer count.
        let changes = fleet.mirror().changes();
        if changes != self.changes {
            self.clear();
            self.changes = changes;
        }
        let hash = foldhash::fast::FixedState::default().hash_one(scope);
        match self.answers.get(&hash) {
            Some((key, answer)) if self.same(key, scope) => {
                self.hits += 1;
                return answer.clone();
            }
            // Another scope with the same hash: asked every time.
            Some(_) => return fleet.in_force(catalog, dependency, tenant, method, now),
            None => {}
        }
        let answer = fleet.in_force(catalog, dependency, tenant, method, now);
        if self.answers.len() < MAX_SCOPES {
            let key = Key {
                start: self.keys.len(),
                lens: scope.map(str::len),
            };
            scope.iter().for_each(|s| self.keys.push_str(s));
            self.answers.insert(hash, (key, answer.clone()));
        }
        answer
    }

    /// Whether this call's scopes repeat too rarely for the memo to pay
    /// (see [`TRIAL_LOOKUPS`]); answers are the mirror's either way.
    pub fn stepped_aside(&self) -> bool {
        self.lookups > TRIAL_LOOKUPS && self.hits * 2 < TRIAL_LOOKUPS
    }

    fn same(&self, key: &Key, scope: [&str; 4]) -> bool {
        let mut at = key.start;
        scope.iter().zip(key.lens).all(|(s, len)| {
            let kept = self.keys.get(at..at + len);
            at += len;
            kept == Some(*s)
        })
    }

    fn clear(&mut self) {
        self.answers.clear();
        self.keys.clear();
    }

    /// Scopes kept now.
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    /// Whether no scope is kept.
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    /// Lookups answered from the memo, not the mirror.
    pub fn hits(&self) -> u64 {
        self.hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::hold::{HoldKind, HoldPlan, HoldScope};
    use crate::fleet::FleetConfig;

    const NOW: UnixMillis = UnixMillis(1_786_190_700_000);

    fn pause<'a>(dependency: &'a str, until: UnixMillis) -> HoldPlan<'a> {
        HoldPlan {
            scope: HoldScope::Dependency,
            kind: HoldKind::Pause,
            catalog: "vibecode",
            dependency,
            subject: "",
            until,
            probe_every_ms: 0,
            probe_window_ms: 0,
            code: "QUEUE_OVERFLOW",
            rule: "r",
            reason: "paused",
        }
    }

    fn scope(dependency: &str) -> [&str; 4] {
        ["vibecode", dependency, "acme", "crm.deal.get"]
    }

    /// A scope met twice is asked of the mirror once; a placement in
    /// between (any change to the holds) is seen at once.
    #[test]
    fn a_scope_is_asked_once_until_the_holds_change() {
        let fleet = Fleet::in_memory(FleetConfig::default());
        let mut memo = ScopeHolds::default();
        assert!(memo.in_force(&fleet, scope("p1"), NOW).is_none(), "no hold at all");
        fleet.place(&pause("p1", NOW.plus_ms(10_000)), "a", NOW);
        let first = memo.in_force(&fleet, scope("p1"), NOW).expect("the pause");
        assert_eq!(memo.hits(), 0);
        let again = memo.in_force(&fleet, scope("p1"), NOW).expect("the pause");
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(memo.hits(), 1);
        // Extended by another call: the memo's answer is dropped.
        fleet.place(&pause("p1", NOW.plus_ms(60_000)), "b", NOW);
        let extended = memo.in_force(&fleet, scope("p1"), NOW).expect("the pause");
        assert_eq!(extended.until, NOW.plus_ms(60_000));
        assert_eq!(memo.hits(), 1);
        // A scope without a hold is remembered as such, and told apart
        // from one whose strings join into the same text.
        assert!(
            memo.in_force(&fleet, ["vibecode", "p", "1acme", "crm.deal.get"], NOW)
                .is_none()
        );
        assert!(memo.in_force(&fleet, scope("p1"), NOW).is_some());
        assert_eq!(memo.hits(), 2);
    }

    /// Past `MAX_SCOPES` nothing more is kept, and answers stay right.
    #[test]
    fn the_memo_keeps_at_most_max_scopes() {
        let fleet = Fleet::in_memory(FleetConfig::default());
        fleet.place(&pause("held", NOW.plus_ms(10_000)), "a", NOW);
        let mut memo = ScopeHolds::default();
        let names: Vec<String> = (0..MAX_SCOPES + 10).map(|i| format!("p{i}")).collect();
        // Each scope twice: half the lookups hit, so the memo stays on.
        for name in &names {
            for _ in 0..2 {
                assert!(memo.in_force(&fleet, scope(name), NOW).is_none());
            }
        }
        assert!(!memo.stepped_aside());
        assert_eq!(memo.len(), MAX_SCOPES);
        assert_eq!(memo.hits(), MAX_SCOPES as u64, "a scope past the cap is not kept");
        for _ in 0..2 {
            assert!(
                memo.in_force(&fleet, scope("held"), NOW).is_some(),
                "asked past the cap"
            );
        }
        assert_eq!(memo.hits(), MAX_SCOPES as u64);
    }

    /// A call whose scopes do not repeat: after the trial the memo keeps
    /// nothing more and asks the mirror every time (answers unchanged); one
    /// whose scopes repeat keeps the memo for good.
    #[test]
    fn a_memo_that_does_not_pay_steps_aside() {
        let fleet = Fleet::in_memory(FleetConfig::default());
        fleet.place(&pause("p7", NOW.plus_ms(10_000)), "a", NOW);
        let mut memo = ScopeHolds::default();
        let names: Vec<String> = (0..200).map(|i| format!("p{i}")).collect();
        for name in &names {
            let held = memo.in_force(&fleet, scope(name), NOW).is_some();
            assert_eq!(held, name == "p7", "{name}");
        }
        assert!(memo.stepped_aside());
        assert_eq!(memo.len(), TRIAL_LOOKUPS as usize, "nothing kept past the trial");
        assert!(memo.in_force(&fleet, scope("p7"), NOW).is_some());
        assert_eq!(memo.hits(), 0);

        let mut memo = ScopeHolds::default();
        for i in 0..1_000 {
            let name = &names[i % 8];
            assert_eq!(memo.in_force(&fleet, scope(name), NOW).is_some(), name == "p7");
        }
        assert!(!memo.stepped_aside());
        assert_eq!(memo.len(), 8);
        assert_eq!(memo.hits(), 1_000 - 8);
    }
}
