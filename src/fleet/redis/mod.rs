//! `--state redis://…`: holds shared between replicas through Redis.
//!
//! Calls never wait on Redis, except an open circuit's probe slot (one `SET
//! NX PX`, bounded by a short timeout): decisions and Admit read the
//! replica's [`Mirror`]. This store carries the mirror's changes out and
//! the other replicas' changes in:
//!
//! - [`SharedStore::put`] / [`SharedStore::lift`] queue the write (bounded;
//!   a full queue drops it, counted in [`STATE_DROPPED_WRITES_TOTAL`]). One
//!   writer task runs the atomic extend-only Lua script, which also
//!   announces the change on the fleet's channel.
//! - A supervisor task connects (with backoff), subscribes, then SCANs every
//!   stored hold (every master of a cluster) into the mirror
//!   ([`Mirror::resync`]) and writes through the holds placed here while
//!   Redis was away; then applies other replicas' announcements until the
//!   connection is lost, and starts over.
//! - Redis down: nothing fails. [`SharedStore::connected`] is false, a
//!   warning is logged at most once per [`RedisOptions::warn_every`],
//!   [`STATE_ERRORS_TOTAL`] counts failed Redis operations and
//!   [`STATE_CONNECTED`] is 0.
//!
//! - A lift leaves a tombstone (the lifted id, until the hold's end), so a
//!   replica that missed the lift cannot write the hold back on resync;
//!   lifts made while Redis is away are replayed on reconnect.
//!
//! Topologies, by address:
//! - `redis://[user:pass@]host:port[/db]`, `rediss://…` (TLS; a private CA
//!   or client certificate through [`RedisOptions::tls`]): one Redis. If
//!   that Redis turns out to be a Cluster node (`INFO cluster`), the store
//!   treats it as a seed of the cluster.
//! - `redis://h1:p1,redis://h2:p2,…`: Redis Cluster seeds. Pub/sub goes
//!   through one node (cluster PUBLISH reaches every node); the resync
//!   SCANs every master.
//! - `redis+sentinel://[user:pass@]s1:26379,s2:26379/<service>[/db]`
//!   (`rediss+sentinel://`: TLS to the master): the master the sentinels
//!   name, asked again on every reconnect, so a failover is a reconnect
//!   and a resync. Sentinels themselves are reached without password/TLS.
//!
//! Commands used (for an ACL): EVALSHA/EVAL (scripts that call HMGET,
//! HSET, DEL, GET, SET, PEXPIREAT, PUBLISH), SET, SCAN, HMGET, SUBSCRIBE,
//! PING, INFO, CLUSTER NODES; for retry budgets ZADD, ZREMRANGEBYSCORE,
//! ZCARD, PEXPIRE, HINCRBY, HDEL, HGETALL, and EVAL of the lease script
//! (HGET, HSET, HMGET, HINCRBY, PEXPIRE) near exhaustion ([`budget`]). Key layout (Redis Cluster ready, bounded
//! sizes): see [`keys`].

pub mod budget;
mod conn;
pub mod keys;
mod options;
mod queue;
mod scan;
mod sentinel;
mod sync;
mod tls;

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use ::redis::{RedisError, Script};
use arc_swap::ArcSwapOption;
use tokio::sync::{Notify, watch};

pub use conn::Topology;
use conn::{Conn, Target, Timeouts};
pub use options::{RedisOptions, RedisTls};

use super::mirror::{Mirror, Redeemed};
use super::store::{SharedStore, StoreError, StoreFuture, Take};
use crate::core::hold::Hold;
use crate::core::time::UnixMillis;

/// Counter of failed Redis operations (connects, commands, probe slots).
pub const STATE_ERRORS_TOTAL: &str = "retryd_state_errors_total";
/// Gauge: 1 while the shared store is connected and resynced, else 0.
pub const STATE_CONNECTED: &str = "retryd_state_connected";
/// Counter of writes not made: the queue was full, or the hold was too large.
pub const STATE_DROPPED_WRITES_TOTAL: &str = "retryd_state_dropped_writes_total";
/// Gauge of holds waiting in the write queue.
pub const STATE_QUEUED_WRITES: &str = "retryd_state_queued_writes";
/// Counter of anti-entropy passes, labelled `result` (`ok`, `failed`).
pub const STATE_ANTI_ENTROPY_TOTAL: &str = "retryd_state_anti_entropy_total";
/// Counter of holds an anti-entropy pass repaired, labelled `direction`
/// (`written`: the mirror had it, Redis did not; `read`: the other way).
pub const STATE_REPAIRED_TOTAL: &str = "retryd_state_repaired_total";

/// Registers the HELP text of the store's metrics (call once where the
/// exporter is set up).
pub fn describe_metrics() {
    metrics::describe_counter!(
        STATE_ERRORS_TOTAL,
        "Failed operations on the shared state store (connects, writes, probe slots); decisions go on from the replica's holds."
    );
    metrics::describe_gauge!(
        STATE_CONNECTED,
        "1 while the shared state store is connected and resynced, else 0."
    );
    metrics::describe_counter!(
        STATE_DROPPED_WRITES_TOTAL,
        "Hold writes to the shared state store dropped: queue full (repaired by the next anti-entropy pass), or a hold over 8 KiB."
    );
    metrics::describe_gauge!(
        STATE_QUEUED_WRITES,
        "Holds waiting in the shared state store's write queue."
    );
    metrics::describe_counter!(
        STATE_ANTI_ENTROPY_TOTAL,
        "Anti-entropy passes between this replica's holds and the shared store, by result."
    );
    metrics::describe_counter!(
        STATE_REPAIRED_TOTAL,
        "Holds an anti-entropy pass repaired, by direction (written to the store, read from it)."
    );
}

/// Lifts kept while Redis is unreachable, replayed on reconnect.
const MAX_PENDING_LIFTS: usize = 1024;

use queue::{Op, WriteQueue};

/// What the store's tasks share.
struct Shared {
    target: Target,
    opts: RedisOptions,
    /// This replica's name in announcements (its own are skipped).
    origin: String,
    channel: String,
    queue: WriteQueue,
    conn: ArcSwapOption<Conn>,
    connected: AtomicBool,
    errors: AtomicU64,
    dropped: AtomicU64,
    last_warn_ms: AtomicI64,
    /// Wakes the supervisor to reconnect after a command failed.
    reconnect: Notify,
    pending_lifts: Mutex<VecDeque<Hold>>,
    /// The fleet's tenant hash key, read from Redis on connect.
    tenant_key: ArcSwapOption<Vec<u8>>,
    mirror: OnceLock<Arc<Mirror>>,
    put_script: Script,
    lift_script: Script,
    take_probe_script: Script,
    redeem_probe_script: Script,
    /// Set when the store is dropped: its tasks end.
    stop: watch::Sender<bool>,
}

impl Shared {
    fn timeouts(&self) -> Timeouts {
        Timeouts {
            connect: self.opts.connect_timeout,
            response: self.opts.command_timeout,
        }
    }

    /// Counts a failed Redis operation and warns, at most once per interval.
    fn error(&self, what: &str, err: &dyn fmt::Display) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(STATE_ERRORS_TOTAL).increment(1);
        let now = UnixMillis::now().0;
        let every = i64::try_from(self.opts.warn_every.as_millis()).unwrap_or(i64::MAX);
        let last = self.last_warn_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= every
            && self
                .last_warn_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                store = %self.target.describe(),
                error = %err,
                "shared state store: {what} failed; decisions go on from this replica's holds (warned at most every {:?})",
                self.opts.warn_every
            );
        }
    }

    fn dropped(&self, why: &str, hold: &Hold) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(STATE_DROPPED_WRITES_TOTAL).increment(1);
        tracing::debug!(hold = %hold.id, why, "shared state write dropped");
    }

    fn set_connected(&self, up: bool) {
        if self.connected.swap(up, Ordering::Relaxed) != up {
            metrics::gauge!(STATE_CONNECTED).set(if up { 1.0 } else { 0.0 });
        }
    }

    fn enqueue(&self, op: Op) {
        let hold = op.hold().clone();
        if !self.queue.push(op) {
            // The anti-entropy pass writes it later if the mirror still has it.
            self.dropped("queue full", &hold);
        }
    }

    fn keep_lift(&self, hold: Hold) {
        let mut pending = self
            .pending_lifts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if pending.len() >= MAX_PENDING_LIFTS {
            pending.pop_front();
        }
        pending.push_back(hold);
    }

    /// Runs a probe script (on the Admit or report path) within the probe
    /// timeout; `None` when Redis failed or was slow (counted), and the
    /// caller decides from this replica alone.
    async fn probe_call<T>(
        &self,
        what: &str,
        run: impl std::future::Future<Output = ::redis::RedisResult<T>>,
    ) -> Option<T> {
        match tokio::time::timeout(self.opts.probe_timeout, run).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                self.failed(what, &e);
                None
            }
            Err(_) => {
                self.error(what, &"timed out");
                None
            }
        }
    }

    /// A command failed: if the connection looks lost, reconnect (and resync).
    fn failed(&self, what: &str, e: &RedisError) {
        self.error(what, e);
        if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
            self.reconnect.notify_waiters();
        }
    }
}

/// The store for `--state <url>` with default options, as the server
/// assembly takes it: [`RedisStore::connect_lazy`] behind the trait.
pub fn connect(url: &str) -> Result<Arc<dyn SharedStore>, String> {
    let store: Arc<dyn SharedStore> =
        RedisStore::connect_lazy(url, RedisOptions::default()).map_err(|e| e.to_string())?;
    Ok(store)
}

/// Holds shared through Redis (one Redis, a Cluster or a Sentinel-watched
/// master; `redis://` or `rediss://`).
pub struct RedisStore {
    shared: Arc<Shared>,
}

impl Drop for RedisStore {
    /// Ends the store's tasks (queued writes not yet made are dropped).
    fn drop(&mut self) {
        self.shared.stop.send_replace(true);
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.shared.target.describe())
            .field("connected", &self.connected())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store for `url` — `redis://[user:pass@]host:port[/db]`,
    /// `rediss://…` (TLS), several comma-separated addresses (cluster
    /// seeds), or `redis+sentinel://s1:26379,…/<service>[/db]` (see the
    /// module docs). The address is validated now (a bad one is an error at
    /// startup); nothing is dialled until [`SharedStore::start`] (called by
    /// `Fleet::new`, inside a tokio runtime), which never waits for Redis.
    pub fn connect_lazy(url: &str, opts: RedisOptions) -> Result<Arc<RedisStore>, StoreError> {
        if !keys::valid_namespace(&opts.namespace) {
            return Err(StoreError::Config(format!(
                "namespace {:?}: 1 to {} of [A-Za-z0-9._-]",
                opts.namespace,
                keys::MAX_NAMESPACE_BYTES
            )));
        }
        if opts.queue_capacity == 0 {
            return Err(StoreError::Config("queue capacity must be at least 1".to_owned()));
        }
        let target = Target::parse(url, opts.topology, opts.tls.as_ref()).map_err(StoreError::Config)?;
        let queue = WriteQueue::new(opts.queue_capacity);
        metrics::gauge!(STATE_CONNECTED).set(0.0);
        let shared = Arc::new(Shared {
            target,
            origin: format!("{:016x}", rand::random::<u64>()),
            channel: keys::channel(&opts.namespace),
            opts,
            queue,
            conn: ArcSwapOption::empty(),
            connected: AtomicBool::new(false),
            errors: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            last_warn_ms: AtomicI64::new(i64::MIN),
            reconnect: Notify::new(),
            pending_lifts: Mutex::new(VecDeque::new()),
            tenant_key: ArcSwapOption::empty(),
            mirror: OnceLock::new(),
            put_script: Script::new(keys::PUT_SCRIPT),
            lift_script: Script::new(keys::LIFT_SCRIPT),
            take_probe_script: Script::new(keys::TAKE_PROBE_SCRIPT),
            redeem_probe_script: Script::new(keys::REDEEM_PROBE_SCRIPT),
            stop: watch::Sender::new(false),
        });
        Ok(Arc::new(RedisStore { shared }))
    }

    /// Failed Redis operations so far (as [`STATE_ERRORS_TOTAL`]).
    pub fn errors(&self) -> u64 {
        self.shared.errors.load(Ordering::Relaxed)
    }

    /// Writes dropped so far (as [`STATE_DROPPED_WRITES_TOTAL`]).
    pub fn dropped_writes(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// The Redis key `hold` is stored under (for operators and tests).
    pub fn key_of(&self, hold: &Hold) -> String {
        keys::hold_key(&self.shared.opts.namespace, hold)
    }
}

impl SharedStore for RedisStore {
    fn put(&self, hold: &Hold) {
        if keys::encode_hold(hold).is_none() {
            self.shared.dropped("hold larger than 8 KiB", hold);
            return;
        }
        self.shared.enqueue(Op::Put(hold.clone()));
    }

    fn lift(&self, hold: &Hold) {
        self.shared.enqueue(Op::Lift(hold.clone()));
    }

    fn take_probe_slot<'a>(&'a self, hold: &'a Hold, slot: u64, nonce: &'a str) -> StoreFuture<'a, Take> {
        Box::pin(async move {
            let local = || {
                let won = self
                    .shared
                    .mirror
                    .get()
                    .is_some_and(|m| m.try_take_probe(&hold.id, slot, nonce));
                if won { Take::Taken } else { Take::Refused }
            };
            let Some(conn) = self.shared.conn.load_full() else {
                return local();
            };
            let mut conn = (*conn).clone();
            // Kept while the hold may still be in force, and a minute more
            // for a slow probe's report.
            let keep = UnixMillis::now().ms_until(hold.end()).saturating_add(60_000);
            let mut call = self.shared.take_probe_script.prepare_invoke();
            call.key(keys::probe_key(&self.shared.opts.namespace, hold))
                .arg(slot)
                .arg(nonce)
                .arg(keep);
            let run = call.invoke_async::<i64>(&mut conn);
            match tokio::time::timeout(self.shared.opts.probe_timeout, run).await {
                Ok(Ok(1)) => Take::Taken,
                Ok(Ok(_)) => Take::Refused,
                // Redis refused or the connection broke: this replica
                // decides alone (one probe per replica while Redis is away).
                Ok(Err(e)) => {
                    self.shared.failed("taking a probe slot", &e);
                    local()
                }
                // Slow is not down: the script may still run and give the
                // slot to this nonce, so granting it here alone could admit
                // a second probe elsewhere. The replica asks again with the
                // same nonce at the next poll (a Redis that stops answering
                // is found by its ping and treated as away).
                Err(_) => {
                    self.shared
                        .error("taking a probe slot", &"timed out; asked again at the next poll");
                    Take::Unanswered
                }
            }
        })
    }

    fn redeem_probe<'a>(&'a self, hold: &'a Hold, slot: u64, nonce: &'a str) -> StoreFuture<'a, Redeemed> {
        Box::pin(async move {
            let local = || {
                self.shared
                    .mirror
                    .get()
                    .map_or(Redeemed::Forged, |m| m.redeem_probe(&hold.id, slot, nonce))
            };
            let Some(conn) = self.shared.conn.load_full() else {
                return local();
            };
            let mut conn = (*conn).clone();
            let mut call = self.shared.redeem_probe_script.prepare_invoke();
            call.key(keys::probe_key(&self.shared.opts.namespace, hold))
                .arg(slot)
                .arg(nonce);
            let run = call.invoke_async::<String>(&mut conn);
            match self.shared.probe_call("redeeming a probe token", run).await {
                Some(word) => {
                    let redeemed = Redeemed::from_word(&word).unwrap_or(Redeemed::Forged);
                    if redeemed == Redeemed::Accepted {
                        // Spent here too, for reports that arrive while Redis is away.
                        if let Some(m) = self.shared.mirror.get() {
                            m.redeem_probe(&hold.id, slot, nonce);
                        }
                    }
                    redeemed
                }
                None => local(),
            }
        })
    }

    fn start(self: Arc<Self>, mirror: Arc<Mirror>) {
        // Until Redis's holds are read in, this replica's mirror is not the fleet's.
        mirror.expect_load();
        if self.shared.mirror.set(mirror).is_err() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!("the Redis state store was started outside a tokio runtime: holds stay local");
            return;
        };
        runtime.spawn(sync::write(Arc::clone(&self.shared)));
        runtime.spawn(sync::supervise(Arc::clone(&self.shared)));
    }

    fn connected(&self) -> bool {
        self.shared.connected.load(Ordering::Relaxed)
    }

    fn describe(&self) -> String {
        self.shared.target.describe()
    }

    fn shares_budgets(&self) -> bool {
        true
    }

    fn tenant_hash_key(&self) -> Option<Arc<Vec<u8>>> {
        self.shared.tenant_key.load_full()
    }

    fn flush_budgets<'a>(
        &'a self,
        batch: &'a [crate::fleet::store::ScopeFlush],
        now: UnixMillis,
    ) -> StoreFuture<'a, Option<crate::fleet::store::FlushReply>> {
        Box::pin(budget::flush(&self.shared, batch, now))
    }
}
