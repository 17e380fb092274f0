//! The connections the gRPC port accepts, kept within what the process can
//! hold: a connection that never finishes its handshake, one caller opening
//! hundreds of them, or a thousand silent sockets must not take the file
//! descriptors the health service and well-behaved clients need.
//!
//! - **Handshake deadline** (`--handshake-timeout`): a connection that has
//!   not sent a complete HTTP/2 preface or HTTP/1.1 request line in time is
//!   closed. Under TLS the bytes are ciphertext, so the handshake counts as
//!   done when the client sends again after the server's first flight (its
//!   TLS `Finished`); the deadline covers the TLS handshake either way.
//! - **In all** (`--max-connections`): each open connection costs memory
//!   (about 10 KiB idle, measured, and up to [`super::socket::HELD_MAX`]
//!   held for its next write once it has written), so their number is
//!   capped like every other table; at the cap the oldest connections still
//!   in their handshake are closed first, and a new one is closed at once
//!   when none is.
//! - **Per caller** (`--max-connections-per-caller`): the caller is the
//!   peer's IP address, as [`crate::doors::peers::caller_of_parts`] names a
//!   caller without a client certificate (the certificate is not known when
//!   the connection is accepted); over the limit a new connection is closed
//!   at once.
//! - **Descriptors**: at start the soft `RLIMIT_NOFILE` is raised to the hard
//!   limit ([`super::accept::raise_nofile`]). Accepting never stalls: a spare descriptor is
//!   held and given up to accept-and-close when the process is out of them.
//!   When connections reach 90 % of the descriptors left after start-up, the
//!   oldest connections that have not finished their handshake are closed
//!   first, so new clients (and `retryd health`) get in.
//!
//! All of it is counted (`retryd_connections_closed_total{reason}`,
//! `retryd_connections_open`) and logged at most every 10 s.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;

/// Gauge of connections open on the gRPC port.
pub const CONNECTIONS_OPEN: &str = "retryd_connections_open";
/// Counter of connections closed by retryd, by `reason`: `handshake_timeout`,
/// `per_caller`, `shed` (near the descriptor limit), `no_descriptor`
/// (accepted with the spare descriptor and closed at once), `idle` (no open
/// stream for `--idle-connection-timeout`), `max_connections` (a new one
/// over `--max-connections`).
pub const CONNECTIONS_CLOSED_TOTAL: &str = "retryd_connections_closed_total";
const REASONS: [&str; 6] = [
    "handshake_timeout",
    "per_caller",
    "shed",
    "no_descriptor",
    "idle",
    "max_connections",
];

/// Default of `--max-connections`: about 40 MiB of idle connections.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 4_096;
/// Default of `--max-connections-per-caller`: a node's pods behind one
/// address (Kubernetes' 110 pods a node, a few channels each), with room.
pub const DEFAULT_MAX_CONNECTIONS_PER_CALLER: u32 = 512;
/// Default of `--idle-connection-timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Default of `--handshake-timeout`.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections may use this share of the descriptors left after start-up
/// before un-handshaken ones are shed.
const SHED_AT_PERCENT: u64 = 90;
/// How often the closures are logged, at most.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The connection limits.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Time to a complete preface or request line.
    pub handshake_timeout: Duration,
    /// Time a connection may have no open stream (zero: no limit).
    pub idle_timeout: Duration,
    /// Most connections from one IP address (0: no limit).
    pub max_per_caller: u32,
    /// Most connections in all (0: no limit).
    pub max_total: u32,
    /// Connections allowed before shedding (from the descriptor limit).
    pub shed_at: u64,
    /// Whether connections are TLS (the handshake is judged on ciphertext).
    pub tls: bool,
}

impl ConnLimits {
    /// The limits for a process whose soft descriptor limit is `nofile` and
    /// which has `in_use` descriptors open now.
    pub fn new(
        (handshake_timeout, idle_timeout): (Duration, Duration),
        (max_total, max_per_caller): (u32, u32),
        nofile: u64,
        in_use: u64,
        tls: bool,
    ) -> Self {
        let free = nofile.saturating_sub(in_use).saturating_sub(2);
        ConnLimits {
            handshake_timeout,
            idle_timeout,
            max_per_caller,
            max_total,
            shed_at: match max_total {
                0 => free * SHED_AT_PERCENT / 100,
                n => (free * SHED_AT_PERCENT / 100).min(u64::from(n)),
            }
            .max(1),
            tls,
        }
    }
}

/// One live connection, as the registry and its IO share it.
#[derive(Debug)]
pub(super) struct Entry {
    peer: SocketAddr,
    pub(super) handshaken: AtomicBool,
    /// Streams open (requests whose answers are not done).
    streams: AtomicUsize,
    /// When `streams` last changed, in ms since the registry's epoch.
    changed_ms: AtomicU64,
    pub(super) shed: AtomicBool,
    pub(super) waker: AtomicWaker,
}

#[derive(Debug, Default)]
struct Live {
    next_id: u64,
    /// By accept order: the oldest first.
    conns: BTreeMap<u64, Arc<Entry>>,
    per_caller: HashMap<IpAddr, u32>,
}

/// What was closed since the last log line.
#[derive(Debug, Default)]
struct Tally {
    since: Option<Instant>,
    counts: [u64; 6],
}

/// The live connections of the gRPC port.
#[derive(Debug)]
pub struct Registry {
    pub(super) limits: ConnLimits,
    epoch: Instant,
    live: Mutex<Live>,
    tally: Mutex<Tally>,
}

impl Registry {
    /// An empty registry.
    pub fn new(limits: ConnLimits) -> Arc<Self> {
        metrics::describe_gauge!(CONNECTIONS_OPEN, "Connections open on the gRPC port.");
        metrics::describe_counter!(
            CONNECTIONS_CLOSED_TOTAL,
            "Connections closed by retryd, by reason (handshake_timeout, per_caller, shed, no_descriptor, idle, max_connections)."
        );
        metrics::gauge!(CONNECTIONS_OPEN).set(0.0);
        for r in REASONS {
            metrics::counter!(CONNECTIONS_CLOSED_TOTAL, "reason" => r).increment(0);
        }
        Arc::new(Registry {
            limits,
            epoch: Instant::now(),
            live: Mutex::new(Live::default()),
            tally: Mutex::new(Tally::default()),
        })
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a closure and logs the closures at most every 10 s.
    pub(super) fn closed(&self, reason: usize) {
        metrics::counter!(CONNECTIONS_CLOSED_TOTAL, "reason" => REASONS[reason]).increment(1);
        let mut t = self.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        t.counts[reason] += 1;
        drop(t);
        self.report();
    }

    /// Logs the closures counted since the last line, if there are any and
    /// the last line is at least 10 s old.
    fn report(&self) {
        let mut t = self.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let quiet = t.since.is_some_and(|s| s.elapsed() < LOG_EVERY);
        if t.counts.iter().all(|&n| n == 0) || quiet {
            return;
        }
        let c = std::mem::take(&mut t.counts);
        t.since = Some(Instant::now());
        drop(t);
        tracing::warn!(
            handshake_timeout = c[0],
            per_caller = c[1],
            shed = c[2],
            no_descriptor = c[3],
            idle = c[4],
            max_connections = c[5],
            open = self.live().conns.len(),
            shed_at = self.limits.shed_at,
            "connections closed (counts since the last such line, at most every 10 s)"
        );
    }

    /// Logs the closures not logged yet once the last line is 10 s old
    /// (the tail of a burst would otherwise wait for the next closure),
    /// looking every second. Runs until aborted.
    pub async fn report_every_10s(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.report();
        }
    }

    /// Admits a connection from `peer`: `None` (closed, counted) over the
    /// per-caller limit. Near the descriptor limit the oldest connections
    /// still in their handshake are told to close.
    pub(super) fn admit(self: &Arc<Self>, peer: SocketAddr) -> Option<(u64, Arc<Entry>)> {
        let ip = peer.ip();
        let mut live = self.live();
        let from_caller = live.per_caller.get(&ip).copied().unwrap_or(0);
        if self.limits.max_per_caller > 0 && from_caller >= self.limits.max_per_caller {
            drop(live);
            self.closed(1);
            return None;
        }
        let mut shed = 0;
        let mut over = (live.conns.len() as u64 + 1).saturating_sub(self.limits.shed_at);
        if over > 0 {
            for e in live.conns.values() {
                if over == 0 {
                    break;
                }
                if !e.handshaken.load(Ordering::Acquire) && !e.shed.swap(true, Ordering::AcqRel) {
                    e.waker.wake();
                    over -= 1;
                    shed += 1;
                }
            }
        }
        if self.limits.max_total > 0 && shed == 0 && live.conns.len() >= self.limits.max_total as usize {
            // At the cap with none left to shed: the new one goes.
            drop(live);
            self.closed(5);
            return None;
        }
        let id = live.next_id;
        live.next_id += 1;
        let entry = Arc::new(Entry {
            peer,
            handshaken: AtomicBool::new(false),
            streams: AtomicUsize::new(0),
            changed_ms: AtomicU64::new(self.now_ms()),
            shed: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        });
        live.conns.insert(id, Arc::clone(&entry));
        *live.per_caller.entry(ip).or_default() += 1;
        metrics::gauge!(CONNECTIONS_OPEN).set(live.conns.len() as f64);
        drop(live);
        for _ in 0..shed {
            self.closed(2);
        }
        Some((id, entry))
    }

    pub(super) fn remove(&self, id: u64) {
        let mut live = self.live();
        if let Some(e) = live.conns.remove(&id) {
            let ip = e.peer.ip();
            if let Some(n) = live.per_caller.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    live.per_caller.remove(&ip);
                }
            }
        }
        metrics::gauge!(CONNECTIONS_OPEN).set(live.conns.len() as f64);
    }
}

impl Registry {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A stream opened on the connection `entry` (counted until the guard
    /// is dropped).
    pub(super) fn stream_opened(self: &Arc<Self>, entry: &Arc<Entry>) -> StreamGuard {
        entry.streams.fetch_add(1, Ordering::AcqRel);
        entry.changed_ms.store(self.now_ms(), Ordering::Release);
        StreamGuard {
            entry: Arc::clone(entry),
            registry: Arc::clone(self),
        }
    }

    /// How long the connection has had no open stream (`None`: it has one).
    pub(super) fn idle_for(&self, entry: &Entry) -> Option<Duration> {
        (entry.streams.load(Ordering::Acquire) == 0)
            .then(|| Duration::from_millis(self.now_ms().saturating_sub(entry.changed_ms.load(Ordering::Acquire))))
    }
}

/// One open stream of a connection (see [`Registry::stream_opened`]).
#[derive(Debug)]
pub struct StreamGuard {
    entry: Arc<Entry>,
    registry: Arc<Registry>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.entry.changed_ms.store(self.registry.now_ms(), Ordering::Release);
        self.entry.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_per_caller: u32, shed_at: u64) -> ConnLimits {
        ConnLimits {
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_per_caller,
            max_total: 0,
            shed_at,
            tls: false,
        }
    }

    #[test]
    fn per_caller_limit_and_shedding_the_oldest_unfinished_first() {
        let r = Registry::new(limits(3, 1000));
        let a: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:1".parse().unwrap();
        let held: Vec<_> = (0..3).map(|_| r.admit(a).expect("admitted")).collect();
        assert!(r.admit(a).is_none(), "a fourth from the same caller");
        assert!(r.admit(b).is_some(), "another caller");
        r.remove(held[0].0);
        assert!(r.admit(a).is_some(), "room again");

        let r = Registry::new(limits(0, 3));
        let first = r.admit(a).expect("1");
        let second = r.admit(a).expect("2");
        first.1.handshaken.store(true, Ordering::Release);
        let _third = r.admit(a).expect("3");
        assert!(!second.1.shed.load(Ordering::Acquire));
        let _fourth = r.admit(a).expect("4: over, the oldest unfinished shed");
        assert!(!first.1.shed.load(Ordering::Acquire), "handshaken: kept");
        assert!(second.1.shed.load(Ordering::Acquire), "the oldest unfinished: shed");
    }

    #[test]
    fn at_max_connections_the_unfinished_go_first_then_new_ones() {
        let a: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let at_most_two = || {
            Registry::new(ConnLimits::new(
                (Duration::from_secs(10), Duration::from_secs(300)),
                (2, 0),
                1 << 20,
                10,
                false,
            ))
        };
        let r = at_most_two();
        assert_eq!(r.limits.shed_at, 2, "the cap is below the descriptors' 90 %");
        let first = r.admit(a).expect("1");
        let _second = r.admit(a).expect("2");
        assert!(r.admit(a).is_some(), "3: the oldest unfinished is shed for it");
        assert!(first.1.shed.load(Ordering::Acquire));
        let r = at_most_two();
        for _ in 0..2 {
            r.admit(a)
                .expect("under the cap")
                .1
                .handshaken
                .store(true, Ordering::Release);
        }
        assert!(r.admit(a).is_none(), "at the cap, none to shed: refused");
    }
}
