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
//! - **Per caller** (`--max-connections-per-caller`): the caller is the
//!   peer's IP address, as [`crate::doors::peers::caller_of_parts`] names a
//!   caller without a client certificate (the certificate is not known when
//!   the connection is accepted); over the limit a new connection is closed
//!   at once.
//! - **Descriptors**: at start the soft `RLIMIT_NOFILE` is raised to the hard
//!   limit ([`raise_nofile`]). Accepting never stalls: a spare descriptor is
//!   held and given up to accept-and-close when the process is out of them.
//!   When connections reach 90 % of the descriptors left after start-up, the
//!   oldest connections that have not finished their handshake are closed
//!   first, so new clients (and `retryd health`) get in.
//!
//! All of it is counted (`retryd_connections_closed_total{reason}`,
//! `retryd_connections_open`) and logged at most every 10 s.

use std::collections::{BTreeMap, HashMap};
use std::future::Future as _;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::socket::Coalescing;

/// Gauge of connections open on the gRPC port.
pub const CONNECTIONS_OPEN: &str = "retryd_connections_open";
/// Counter of connections closed by retryd, by `reason`: `handshake_timeout`,
/// `per_caller`, `shed` (near the descriptor limit), `no_descriptor`
/// (accepted with the spare descriptor and closed at once).
pub const CONNECTIONS_CLOSED_TOTAL: &str = "retryd_connections_closed_total";
const REASONS: [&str; 4] = ["handshake_timeout", "per_caller", "shed", "no_descriptor"];

/// Default of `--max-connections-per-caller`: a node's pods behind one
/// address (Kubernetes' 110 pods a node, a few channels each), with room.
pub const DEFAULT_MAX_CONNECTIONS_PER_CALLER: u32 = 512;
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
    /// Most connections from one IP address (0: no limit).
    pub max_per_caller: u32,
    /// Connections allowed before shedding (from the descriptor limit).
    pub shed_at: u64,
    /// Whether connections are TLS (the handshake is judged on ciphertext).
    pub tls: bool,
}

impl ConnLimits {
    /// The limits for a process whose soft descriptor limit is `nofile` and
    /// which has `in_use` descriptors open now.
    pub fn new(handshake_timeout: Duration, max_per_caller: u32, nofile: u64, in_use: u64, tls: bool) -> Self {
        let free = nofile.saturating_sub(in_use).saturating_sub(2);
        ConnLimits {
            handshake_timeout,
            max_per_caller,
            shed_at: (free * SHED_AT_PERCENT / 100).max(1),
            tls,
        }
    }
}

/// One live connection, as the registry and its IO share it.
#[derive(Debug)]
struct Entry {
    ip: IpAddr,
    handshaken: AtomicBool,
    shed: AtomicBool,
    waker: AtomicWaker,
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
    counts: [u64; 4],
}

/// The live connections of the gRPC port.
#[derive(Debug)]
pub struct Registry {
    limits: ConnLimits,
    live: Mutex<Live>,
    tally: Mutex<Tally>,
}

impl Registry {
    /// An empty registry.
    pub fn new(limits: ConnLimits) -> Arc<Self> {
        metrics::gauge!(CONNECTIONS_OPEN).set(0.0);
        for r in REASONS {
            metrics::counter!(CONNECTIONS_CLOSED_TOTAL, "reason" => r).increment(0);
        }
        Arc::new(Registry {
            limits,
            live: Mutex::new(Live::default()),
            tally: Mutex::new(Tally::default()),
        })
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a closure and logs the closures at most every 10 s.
    fn closed(&self, reason: usize) {
        metrics::counter!(CONNECTIONS_CLOSED_TOTAL, "reason" => REASONS[reason]).increment(1);
        let mut t = self.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        t.counts[reason] += 1;
        if t.since.is_none_or(|s| s.elapsed() >= LOG_EVERY) {
            let c = std::mem::take(&mut t.counts);
            t.since = Some(Instant::now());
            drop(t);
            tracing::warn!(
                handshake_timeout = c[0],
                per_caller = c[1],
                shed = c[2],
                no_descriptor = c[3],
                open = self.live().conns.len(),
                shed_at = self.limits.shed_at,
                "connections closed (counts since the last such line, at most every 10 s)"
            );
        }
    }

    /// Admits a connection from `peer`: `None` (closed, counted) over the
    /// per-caller limit. Near the descriptor limit the oldest connections
    /// still in their handshake are told to close.
    fn admit(self: &Arc<Self>, peer: SocketAddr) -> Option<(u64, Arc<Entry>)> {
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
        let id = live.next_id;
        live.next_id += 1;
        let entry = Arc::new(Entry {
            ip,
            handshaken: AtomicBool::new(false),
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

    fn remove(&self, id: u64) {
        let mut live = self.live();
        if let Some(e) = live.conns.remove(&id) {
            if let Some(n) = live.per_caller.get_mut(&e.ip) {
                *n -= 1;
                if *n == 0 {
                    live.per_caller.remove(&e.ip);
                }
            }
        }
        metrics::gauge!(CONNECTIONS_OPEN).set(live.conns.len() as f64);
    }
}

/// The accepted connections of `listener`, guarded, as a stream for
/// tonic's `serve_with_incoming`. Accepting never stalls on a full
/// descriptor table: the spare descriptor is given up to accept and close.
pub fn incoming(
    listener: TcpListener,
    registry: Arc<Registry>,
    keepalive: Duration,
) -> impl futures_util::Stream<Item = io::Result<Guarded>> {
    let mut spare = open_spare();
    let mut backoff: Option<Pin<Box<tokio::time::Sleep>>> = None;
    futures_util::stream::poll_fn(move |cx| {
        loop {
            if let Some(sleep) = backoff.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                backoff = None;
            }
            match listener.poll_accept(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok((stream, peer))) => {
                    if let Some(g) = guard(stream, peer, &registry, keepalive) {
                        return Poll::Ready(Some(Ok(g)));
                    }
                }
                Poll::Ready(Err(e)) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    // Out of descriptors: give up the spare, take the waiting
                    // connection off the queue and close it, take the spare back.
                    // Without it the listener would stay readable and accept
                    // would fail in a loop while the client waits.
                    if spare.take().is_some() {
                        if let Poll::Ready(Ok((stream, _))) = listener.poll_accept(cx) {
                            drop(stream);
                            registry.closed(3);
                        }
                        spare = open_spare();
                    } else {
                        spare = open_spare();
                        backoff = Some(Box::pin(tokio::time::sleep(Duration::from_millis(50))));
                    }
                }
                Poll::Ready(Err(e)) => {
                    // ECONNABORTED and the like: the next connection is fine.
                    tracing::debug!(error = %e, "accept failed");
                }
            }
        }
    })
}

fn open_spare() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

fn guard(stream: TcpStream, peer: SocketAddr, registry: &Arc<Registry>, keepalive: Duration) -> Option<Guarded> {
    let (id, entry) = registry.admit(peer)?;
    let _ = stream.set_nodelay(true);
    let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(keepalive));
    let deadline = Box::pin(tokio::time::sleep(registry.limits.handshake_timeout));
    Some(Guarded {
        inner: Coalescing::new(stream),
        registry: Arc::clone(registry),
        id,
        entry,
        deadline: Some(deadline),
        scan: Scan::default(),
        wrote: false,
    })
}

/// What the first bytes of a plaintext connection have shown so far.
#[derive(Debug, Default)]
struct Scan {
    /// Bytes seen, up to the preface's length.
    seen: usize,
    /// The first line so far (up to the preface's length).
    head: Vec<u8>,
}

/// The HTTP/2 client preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl Scan {
    /// Takes the next bytes read; true once the handshake is complete: the
    /// whole HTTP/2 preface, or an HTTP/1.1 request line.
    fn feed(&mut self, bytes: &[u8]) -> bool {
        for &b in bytes {
            self.seen += 1;
            if self.head.len() < PREFACE.len() {
                self.head.push(b);
            }
            if self.head.starts_with(b"PRI ") || PREFACE.starts_with(&self.head) {
                if self.head == PREFACE {
                    return true;
                }
            } else if b == b'\n' {
                return true;
            }
        }
        false
    }
}

/// An accepted connection under the handshake deadline and the shedding
/// rule; leaves the registry when dropped (closed).
pub struct Guarded {
    inner: Coalescing,
    registry: Arc<Registry>,
    id: u64,
    entry: Arc<Entry>,
    /// Until the handshake is complete.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    scan: Scan,
    wrote: bool,
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.registry.remove(self.id);
    }
}

impl Guarded {
    fn handshake_done(&mut self) {
        self.deadline = None;
        self.entry.handshaken.store(true, Ordering::Release);
    }
}

impl Connected for Guarded {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for Guarded {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(deadline) = this.deadline.as_mut() {
            this.entry.waker.register(cx.waker());
            if this.entry.shed.load(Ordering::Acquire) {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "shed: descriptors are short and the handshake was not done",
                )));
            }
            if deadline.as_mut().poll(cx).is_ready() {
                this.deadline = None;
                this.registry.closed(0);
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no complete handshake within --handshake-timeout",
                )));
            }
        }
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if this.deadline.is_some() && result.is_ready() {
            let fresh = &buf.filled()[before..];
            let done = if this.registry.limits.tls {
                // The client speaks again after the server's first flight.
                this.wrote && !fresh.is_empty()
            } else {
                this.scan.feed(fresh)
            };
            if done {
                this.handshake_done();
            }
        }
        result
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.wrote = true;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.wrote = true;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns `(soft
/// before, soft now, hard)`: a server started under `ulimit -n 1024` may
/// use every descriptor its hard limit allows.
pub fn raise_nofile() -> (Option<u64>, Option<u64>, Option<u64>) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let before = getrlimit(Resource::Nofile);
    if before.current != before.maximum {
        let raised = rustix::process::Rlimit {
            current: before.maximum,
            maximum: before.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(error = %e, "cannot raise the soft file-descriptor limit");
        }
    }
    let after = getrlimit(Resource::Nofile);
    (before.current, after.current, after.maximum)
}

/// Descriptors open now (`/proc/self/fd`), or 64 when that cannot be read.
pub fn descriptors_in_use() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handshake_is_a_whole_preface_or_a_request_line() {
        let mut s = Scan::default();
        assert!(!s.feed(&PREFACE[..10]));
        assert!(!s.feed(&PREFACE[10..20]), "the first line of the preface is not enough");
        assert!(s.feed(&PREFACE[20..]));
        let mut s = Scan::default();
        assert!(!s.feed(b"GET /healthz HTTP/1.1\r"));
        assert!(s.feed(b"\n"));
        let mut s = Scan::default();
        assert!(!s.feed(b""));
        assert!(!s.feed(b"\x16\x03\x01"));
    }

    fn limits(max_per_caller: u32, shed_at: u64) -> ConnLimits {
        ConnLimits {
            handshake_timeout: Duration::from_secs(10),
            max_per_caller,
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
}
