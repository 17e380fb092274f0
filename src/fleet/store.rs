//! Where holds are shared: one trait, an in-process store and a Redis store.
//!
//! Every decision and every Admit reads the replica's [`Mirror`]; a store
//! only carries the mirror's changes to the other replicas and theirs back,
//! off the call path. Only taking an open circuit's probe slot waits on the
//! store, and only when a slot falls due.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::mirror::{Mirror, Redeemed};
use crate::core::budget::Counts;
use crate::core::hold::Hold;
use crate::core::time::UnixMillis;

/// A boxed future, for the one awaited store operation.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Shares holds between the replicas of a fleet.
pub trait SharedStore: Send + Sync + std::fmt::Debug + 'static {
    /// Writes a placed or extended hold for every replica, extend-only (a
    /// hold already stored with a later `until` wins). Never blocks: the
    /// write is queued, and a full queue drops it (counted).
    fn put(&self, hold: &Hold);

    /// Lifts `hold` for every replica (an operator's release, or a probe's
    /// success). Queued like [`SharedStore::put`].
    fn lift(&self, hold: &Hold);

    /// Takes probe slot `slot` of `hold` (an open circuit, or a hold in its
    /// probe phase) for the whole fleet, storing the token's `nonce` with
    /// it: [`Take::Taken`] for exactly one caller per slot (and again for
    /// the same nonce: a take whose answer was lost can be asked again).
    /// When the store cannot be reached, decides from this replica alone
    /// (at most one probe per slot per replica); when it answers too late,
    /// [`Take::Unanswered`].
    fn take_probe_slot<'a>(&'a self, hold: &'a Hold, slot: u64, nonce: &'a str) -> StoreFuture<'a, Take>;

    /// Validates a probe token's report atomically, whichever replica
    /// issued it: accepted once, for its own slot, while no newer slot's
    /// token has been issued. When the store cannot be reached, only the
    /// tokens this replica issued can be validated.
    fn redeem_probe<'a>(&'a self, hold: &'a Hold, slot: u64, nonce: &'a str) -> StoreFuture<'a, Redeemed>;

    /// Starts the store's background work (connect, subscribe, resync),
    /// feeding other replicas' changes into `mirror`. Called once.
    fn start(self: Arc<Self>, mirror: Arc<Mirror>);

    /// Whether the shared store is reachable now (always true in memory).
    fn connected(&self) -> bool;

    /// A name for logs: `memory` or the Redis address without credentials.
    fn describe(&self) -> String;

    /// The tenant hash key every replica sharing this store uses, once
    /// known (generated once and kept in the store); `None` in memory.
    fn tenant_hash_key(&self) -> Option<Arc<Vec<u8>>> {
        None
    }

    /// Whether retry-budget counts are shared through this store (then a
    /// flush task calls [`SharedStore::flush_budgets`] every period).
    fn shares_budgets(&self) -> bool {
        false
    }

    /// Adds this replica's budget counts to the fleet's and reads the
    /// fleet's totals back, in one round trip; `None` when the store cannot
    /// be reached (the counts are kept and sent again).
    fn flush_budgets<'a>(&'a self, _batch: &'a [ScopeFlush], _now: UnixMillis) -> StoreFuture<'a, Option<FlushReply>> {
        Box::pin(async { None })
    }
}

/// Why a shared store could not be set up (at startup: a bad `--state` value).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The address or an option is not usable.
    #[error("invalid state store configuration: {0}")]
    Config(String),
}

/// One scope's part of a flush.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeFlush {
    /// 32 hex digits of the SHA-256 of the scope's storage key (the Redis
    /// hash tag: no tenant in clear, bounded size).
    pub tag: String,
    /// The scope's window, ms (keys expire two windows after their last write).
    pub window_ms: u64,
    /// The bucket `now` falls in.
    pub bucket: i64,
    /// Counts to add, per bucket.
    pub deltas: Vec<(i64, Counts)>,
    /// A lease of the scope's remaining room, asked when the scope is near
    /// exhaustion (`crate::fleet::budget::lease`); taken after `deltas` are added.
    pub lease: Option<LeaseAsk>,
}

/// A slice of a scope's remaining room, asked for atomically: the store
/// grants `min(want, allowed − retries)` over the window ending with the
/// flush's bucket and counts it as retries at once (Doorman's lease: the
/// replica then approves up to the grant without another round trip).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseAsk {
    /// Retries wanted (0: only give back).
    pub want: u64,
    /// Unused retries of an earlier lease handed back first.
    pub give_back: u64,
    /// The bucket the handed-back retries were counted in.
    pub give_back_bucket: i64,
    /// The budget's share of first attempts, percent.
    pub retry_percent: u32,
    /// The budget's reserve over the window (`BudgetRule::floor`).
    pub floor: u64,
    /// An allowance budget's first attempts per window (`None`: traffic budget).
    pub allowance: Option<u64>,
}

/// What the store answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlushReply {
    /// Replicas alive (heartbeats within the last few seconds), this one included.
    pub replicas: u64,
    /// Per scope sent, in order: the fleet's counts per bucket.
    pub totals: Vec<Vec<(i64, Counts)>>,
    /// Per scope sent, in order: the retries its lease ask was granted (0 without one).
    pub granted: Vec<u64>,
}

/// What asking for a probe slot came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// This caller has the slot: it is the probe.
    Taken,
    /// Someone else has it.
    Refused,
    /// The store did not answer in time: it may still give the slot to
    /// this nonce, so the replica asks again with the same nonce rather
    /// than deciding alone (which could admit a second probe).
    Unanswered,
}
