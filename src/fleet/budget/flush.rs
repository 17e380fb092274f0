//! The flush: every period, this replica's unflushed counts go to the
//! shared store in one pipelined round trip that also reads the fleet
//! totals of the scopes this replica uses, and a heartbeat that counts the
//! replicas alive (for the Redis-down fallback).
//!
//! Error bound: a replica judges with the fleet totals of its last flush
//! plus its own counts since. What it cannot see are the retries the other
//! replicas approved since their last flush reached the store and this
//! replica read it back: at most one flush period plus one round trip of
//! their approvals. So the fleet's approved retries exceed the budget by at
//! most the retries the *other* replicas approve in one flush period (+ RTT)
//! — with N replicas sharing a retry rate R evenly, about
//! `R × (N−1)/N × (period + RTT)`; measured in `bench/RESULTS.md`.
//! Strictly, a replica's view of another's counts can lag by up to two
//! periods (one of theirs before the count reaches Redis, one of its own
//! before it reads it back), so the proven bound (the property test) is
//! the retries the fleet counts in two flush periods.
//! That bound is why a scope near exhaustion leaves this path: its
//! replicas then approve only from leases of the room ([`super::lease`]),
//! which a flush asks for (and the flush task is woken to ask at once).
//!
//! One more lag: a replica that has never seen a scope (no Admit, no
//! failure of it through this replica) learns its fleet totals at its next
//! flush; until then it judges that scope by its own counts alone, which
//! for a scope with no first attempt recorded here means "not budgeted" for
//! at most one flush period.

use std::sync::atomic::Ordering;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{Budgets, lease};
use crate::core::budget::{BUCKETS, Counts};
use crate::core::time::UnixMillis;
use crate::fleet::store::{FlushReply, ScopeFlush, SharedStore};

/// Most scopes sent in one flush (the rest go in the next ones).
pub const MAX_SCOPES_PER_FLUSH: usize = 2_000;

/// The Redis hash tag of a storage key.
pub fn tag_of(storage_key: &str) -> String {
    let digest = Sha256::digest(storage_key.as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

impl Budgets {
    /// Takes the next flush: every scope with unflushed counts or used in
    /// the last [`super::READ_BACK_ROUNDS`] flushes (at most [`MAX_SCOPES_PER_FLUSH`]); their pending
    /// counts become in flight, and scopes near exhaustion ask for (or hand
    /// back) a lease. Returns the storage keys and what to send.
    pub fn take_flush(&self, now: UnixMillis) -> (Vec<String>, Vec<ScopeFlush>) {
        self.take(now, true)
    }

    /// Takes a flush of only the scopes whose lease ran low (the flush task
    /// is woken for it): their pending counts and their lease asks.
    pub fn take_lease_flush(&self, now: UnixMillis) -> (Vec<String>, Vec<ScopeFlush>) {
        self.take(now, false)
    }

    fn take(&self, now: UnixMillis, periodic: bool) -> (Vec<String>, Vec<ScopeFlush>) {
        let replicas = self.replicas();
        let mut t = self.lock();
        let round = t.round;
        if periodic {
            t.round += 1;
        }
        let mut keys = Vec::new();
        let mut batch = Vec::new();
        let wanted = |e: &super::Entry| {
            if periodic {
                e.dirty || e.touched.saturating_add(super::READ_BACK_ROUNDS) >= round
            } else {
                e.lease.asked
            }
        };
        for (key, e) in t.map.iter_mut().filter(|(_, e)| wanted(e)) {
            if batch.len() >= MAX_SCOPES_PER_FLUSH {
                break;
            }
            let bucket = e.rule.bucket_of(now);
            let view = super::totals(e, bucket, true, false, replicas)
                .iter()
                .fold(Counts::default(), |a, c| a.plus(*c));
            let lease = lease::ask(e, view, bucket, replicas, periodic);
            let first = bucket - (BUCKETS as i64 - 1);
            let deltas: Vec<(i64, Counts)> = (first..=bucket)
                .map(|b| (b, e.pending.get(b)))
                .filter(|(_, c)| *c != Counts::default())
                .collect();
            for (b, c) in &deltas {
                e.inflight.add(*b, *c);
            }
            e.pending.clear();
            e.dirty = false;
            keys.push(key.clone());
            batch.push(ScopeFlush {
                tag: tag_of(key),
                window_ms: e.rule.window_ms,
                bucket,
                deltas,
                lease,
            });
        }
        (keys, batch)
    }

    /// Applies the store's answer to a flush (`None`: it failed, and the
    /// counts in flight go back to pending, to be sent again).
    pub fn apply_flush(&self, keys: &[String], reply: Option<FlushReply>, now: UnixMillis) {
        let mut t = self.lock();
        match reply {
            Some(reply) => {
                self.replicas.store(reply.replicas.max(1), Ordering::Relaxed);
                self.fleet_ok_ms.store(now.0, Ordering::Relaxed);
                let granted = reply.granted.iter().copied().chain(std::iter::repeat(0));
                for ((key, totals), granted) in keys.iter().zip(reply.totals).zip(granted) {
                    let Some(e) = t.map.get_mut(key) else { continue };
                    let bucket = e.rule.bucket_of(now);
                    lease::granted(e, Some(granted), bucket);
                    e.fleet.clear();
                    for (b, c) in totals {
                        if c.requests > 0 {
                            // Another replica's first attempts make the scope seen here too.
                            e.seen_ms = e.seen_ms.max(now.0);
                        }
                        e.fleet.set(b, c);
                    }
                    e.inflight.clear();
                }
            }
            None => {
                for key in keys {
                    let Some(e) = t.map.get_mut(key) else { continue };
                    let bucket = e.rule.bucket_of(now);
                    lease::granted(e, None, bucket);
                    let first = bucket - (BUCKETS as i64 - 1);
                    for b in first..=bucket {
                        let c = e.inflight.get(b);
                        if c != Counts::default() {
                            e.pending.add(b, c);
                            e.dirty = true;
                        }
                    }
                    e.inflight.clear();
                }
            }
        }
    }

    /// One flush through `store`, as of `now`.
    pub async fn flush_once(&self, store: &dyn SharedStore, now: UnixMillis) {
        let (keys, batch) = self.take_flush(now);
        self.send(store, keys, batch, now).await;
    }

    /// One flush of the leases asked for, through `store`.
    pub async fn flush_leases(&self, store: &dyn SharedStore, now: UnixMillis) {
        let (keys, batch) = self.take_lease_flush(now);
        if !batch.is_empty() {
            metrics::counter!(super::BUDGET_LEASE_FLUSHES_TOTAL).increment(1);
            self.send(store, keys, batch, now).await;
        }
    }

    async fn send(&self, store: &dyn SharedStore, keys: Vec<String>, batch: Vec<ScopeFlush>, now: UnixMillis) {
        if batch.is_empty() {
            // Nothing to send or read: no round trip, no key (an idle
            // replica writes nothing to Redis, not even its heartbeat; the
            // replica count is of replicas with budget traffic).
            if store.connected() {
                self.fleet_ok_ms.store(now.0, Ordering::Relaxed);
            }
            return;
        }
        let reply = store.flush_budgets(&batch, now).await;
        self.apply_flush(&keys, reply, UnixMillis::now());
    }
}

/// Flushes `budgets` through `store` every `every`, until either is dropped;
/// refreshes the utilization gauges about once a second.
pub fn spawn(budgets: std::sync::Weak<Budgets>, store: std::sync::Weak<dyn SharedStore>, every: Duration) {
    let Some(wake) = budgets.upgrade().map(|b| std::sync::Arc::clone(&b.wake)) else {
        return;
    };
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let gauges_every = (1_000 / every.as_millis().max(1)).max(1);
        let mut n: u128 = 0;
        loop {
            let periodic = tokio::select! {
                _ = tick.tick() => true,
                () = wake.notified() => false,
            };
            let (Some(budgets), Some(store)) = (budgets.upgrade(), store.upgrade()) else {
                return;
            };
            let now = UnixMillis::now();
            if !periodic {
                // A lease ran low near exhaustion: ask now, not at the tick.
                budgets.flush_leases(store.as_ref(), now).await;
                continue;
            }
            budgets.flush_once(store.as_ref(), now).await;
            n += 1;
            if n.is_multiple_of(gauges_every) {
                budgets.update_gauges(now);
                let fallback = budgets.in_fallback(now);
                budgets.note_fallback(fallback);
            }
        }
    });
}

/// The gauges of a replica that shares nothing, about once a second.
pub fn spawn_gauges(budgets: std::sync::Weak<Budgets>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let Some(budgets) = budgets.upgrade() else { return };
            budgets.update_gauges(UnixMillis::now());
        }
    });
}
