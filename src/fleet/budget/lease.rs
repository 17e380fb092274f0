//! Exact when the room is small: leases of a scope's remaining room, as
//! Google's Doorman leases capacity.
//!
//! Far from exhaustion a replica approves from its view (the fleet totals
//! of its last flush plus its own counts since) and the fleet may overshoot
//! by what the other replicas approve in about two flush periods
//! ([`super::flush`]). When a scope's remaining room (allowed − retries, as
//! this replica sees it) falls below what the fleet could approve in two
//! flush periods at its current rate — `2 × rate + 2 × replicas`, where
//! `rate` is the fleet's approvals per flush period (the larger of the
//! increase the last flush read back and this replica's approvals × the
//! replica count) — the replica approves only from a *lease*: a slice of
//! the room that the store granted it atomically and already counted as
//! retries (`fleet::redis::budget::LEASE_SCRIPT`). So the fleet's
//! approvals in that scope never exceed what the store granted, and the
//! store never grants more than the room: exact up to what was approved
//! before the switch.
//!
//! - Slice: `⌈room / (2 × replicas)⌉` (at least 1); asked again as soon as
//!   the lease falls below one slice, by waking the flush task at once (a
//!   flush of only the scopes that asked, [`super::Budgets::take_flush`]),
//!   and at every periodic flush.
//! - The decision never waits for the store: a scope near exhaustion whose
//!   lease is empty defers the retry (paced like any spent budget), and the
//!   lease arrives for the retries after it. A lease answer later than the
//!   Redis lease timeout (200 ms) grants nothing.
//! - Unused retries of a lease are handed back at the next periodic flush
//!   when the scope had no retry judged, the bucket changed, or the scope
//!   is far from exhaustion again.
//! - A store that granted nothing is asked again only at the next periodic
//!   flush (a spent scope costs one `EVAL` per flush period, not one per retry).
//! - Redis down (the fallback, [`super::Budgets::in_fallback`]): no lease;
//!   own counts × the replica count, as before.

use super::Entry;
use crate::core::budget::{BudgetRule, Counts, Standing};
use crate::core::time::UnixMillis;
use crate::fleet::store::LeaseAsk;

/// One scope's lease (48 bytes).
#[derive(Debug, Clone, Default)]
pub(super) struct Lease {
    /// Retries this replica may still approve from its slice (already
    /// counted as retries in the store).
    pub(super) held: u32,
    /// The bucket the slice was counted in (handed back there).
    pub(super) bucket: i64,
    /// The slice aimed at, set at each ask.
    pub(super) target: u32,
    /// Retries judged near exhaustion since the last periodic flush.
    pub(super) demand: u32,
    /// Approvals taken from `held` whose withdrawal is not recorded yet.
    pub(super) taken: u32,
    /// This replica's approvals since the last periodic flush.
    pub(super) approved: u32,
    /// The fleet's approvals per flush period, as last estimated.
    pub(super) rate: u32,
    /// The retries this replica saw in the window at the last periodic flush.
    pub(super) seen_retries: u64,
    /// Near exhaustion: approvals come from `held` only.
    pub(super) on: bool,
    /// A lease flush is asked for and not taken yet.
    pub(super) asked: bool,
    /// A lease ask is on its way.
    pub(super) waiting: bool,
    /// The store granted nothing at the last ask.
    pub(super) dry: bool,
}

/// Whether `room` left is below what the fleet could approve in two flush
/// periods at `per_period` approvals per period (and one retry per replica
/// each way, so a quiet scope's last few retries are leased too).
pub(super) fn near(room: u64, per_period: u64, replicas: u64) -> bool {
    room < per_period.saturating_mul(2).saturating_add(replicas.saturating_mul(2))
}

/// What a lease flush gates for one judged scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    /// Far from exhaustion: approve from the view.
    Open,
    /// Near exhaustion, with a lease to approve from.
    Leased,
    /// Near exhaustion, no lease left: defer.
    Empty,
}

impl Lease {
    /// The fleet's approvals per flush period as judged now.
    fn per_period(&self, replicas: u64) -> u64 {
        u64::from(self.rate).max(u64::from(self.approved).saturating_mul(replicas))
    }

    /// Gates one retry judged with `room` left; `true` in `wake` when a
    /// lease should be asked for now.
    pub(super) fn gate(&mut self, room: u64, replicas: u64, wake: &mut bool) -> Gate {
        let per_period = self.per_period(replicas);
        if self.on && !near(room, per_period.saturating_mul(2), replicas) {
            // Far again (a new window, first attempts arriving): the view
            // decides; what is held goes back at the next periodic flush.
            self.on = false;
        }
        if !self.on && !near(room, per_period, replicas) {
            return Gate::Open;
        }
        self.on = true;
        self.demand = self.demand.saturating_add(1);
        // Asked while a slice is still held: the next one is on its way
        // before this one runs out (a gap defers every retry in it).
        if !self.asked && !self.waiting && !self.dry && self.held < self.target.max(1) {
            self.asked = true;
            *wake = true;
        }
        if self.held == 0 { Gate::Empty } else { Gate::Leased }
    }

    /// What [`Self::gate`] would answer now, changing nothing (explain).
    pub(super) fn would_gate(&self, room: u64, replicas: u64) -> Gate {
        let per_period = self.per_period(replicas);
        let on = if self.on {
            near(room, per_period.saturating_mul(2), replicas)
        } else {
            near(room, per_period, replicas)
        };
        match (on, self.held) {
            (false, _) => Gate::Open,
            (true, 0) => Gate::Empty,
            (true, _) => Gate::Leased,
        }
    }

    /// One approval taken from the lease (its withdrawal follows).
    pub(super) fn take(&mut self) {
        self.held = self.held.saturating_sub(1);
        self.taken = self.taken.saturating_add(1);
    }
}

/// The lease ask of `e` for a flush at `bucket`, its view of the window
/// being `view` (`periodic`: the every-period flush, which also hands back
/// and re-estimates the rate; else a flush of the scopes that asked).
pub(super) fn ask(e: &mut Entry, view: Counts, bucket: i64, replicas: u64, periodic: bool) -> Option<LeaseAsk> {
    let rule: BudgetRule = e.rule;
    let l = &mut e.lease;
    l.asked = false;
    let mut give_back = 0;
    let back_bucket = l.bucket;
    if periodic {
        let delta = view.retries.saturating_sub(l.seen_retries);
        let mine = u64::from(l.approved).saturating_mul(replicas);
        let rate = delta.max(mine).max(u64::from(l.rate / 2));
        l.rate = u32::try_from(rate).unwrap_or(u32::MAX);
        l.seen_retries = view.retries;
        l.approved = 0;
        if l.held > 0 && (!l.on || l.demand == 0 || l.bucket != bucket) {
            give_back = u64::from(std::mem::take(&mut l.held));
        }
        if l.demand == 0 {
            l.on = false;
        }
        l.demand = 0;
        l.dry = false;
    }
    // Half a fair share of what is left: the room drains only as fast as
    // the fleet approves (a replica that grabbed more would lock room its
    // callers may never use, and drain it faster than the others' view
    // of it can follow), and a busy replica asks again sooner.
    let room = rule.allowed(view.requests).saturating_sub(view.retries);
    let target = room.div_ceil(replicas.max(1).saturating_mul(2)).max(1);
    l.target = u32::try_from(target).unwrap_or(u32::MAX);
    // One more slice while less than one is held: the next is on its way
    // before this one runs out, and a replica holds under two slices —
    // together under the room.
    let want = if l.on && !l.dry && u64::from(l.held) < target {
        target
    } else {
        0
    };
    if want == 0 && give_back == 0 {
        return None;
    }
    l.waiting = want > 0;
    Some(LeaseAsk {
        want,
        give_back,
        give_back_bucket: back_bucket,
        retry_percent: rule.retry_percent,
        floor: rule.floor(),
        allowance: rule.requests,
    })
}

/// The store's answer to `e`'s ask: `granted` retries counted in `bucket`
/// (`None`: no answer, nothing granted).
pub(super) fn granted(e: &mut Entry, granted: Option<u64>, bucket: i64) {
    let l = &mut e.lease;
    if !std::mem::take(&mut l.waiting) {
        return;
    }
    let g = u32::try_from(granted.unwrap_or(0)).unwrap_or(u32::MAX);
    if g > 0 {
        l.held = l.held.saturating_add(g);
        l.bucket = bucket;
    }
    // Nothing left in the store: ask again at the periodic flush only.
    l.dry = granted == Some(0);
}

/// `standing` as its lease `gate` leaves it near exhaustion; true when the
/// approval would come from the lease.
pub(super) fn gated(standing: &mut Standing, gate: Gate, now: UnixMillis, flush_ms: u64) -> bool {
    match gate {
        Gate::Open => false,
        Gate::Leased => {
            // The view counts every lease granted as retries; what this
            // replica holds is room kept for it.
            standing.exhausted = false;
            standing.room_at = now;
            true
        }
        Gate::Empty => {
            if !standing.exhausted {
                // Room in the fleet, none leased here: the next lease is
                // one round trip away.
                standing.exhausted = true;
                standing.room_at = now.plus_ms(flush_ms);
            }
            false
        }
    }
}
