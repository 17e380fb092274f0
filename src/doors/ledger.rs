//! What calls hold: call slots and buffered bytes, over all connections and
//! per connection.
//!
//! Every decision call takes a [`Ticket`]. Bytes are charged to it while its
//! request is buffered (before a slot is taken), then the estimated and
//! finally the encoded answer; the slot is taken once the request is whole
//! and held until the answer has been handed to the connection. Dropping the
//! ticket gives everything back. Each connection (its peer address) may hold
//! only a share of the server-wide limits, so one connection cannot starve
//! the others.
//!
//! A watch stream's queued events (encoded, not yet taken by its
//! connection) are charged the same way, to a ticket of their own
//! ([`Ledger::queue_ticket`]), and all streams' queued events together may
//! hold at most half of `--max-buffered-bytes` ([`Refusal::QueuedBytes`]):
//! streams whose clients do not read cannot shed the unary calls.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

/// Gauge of call slots held.
pub const CALLS_HELD: &str = "retryd_calls_held";
/// Gauge of request and answer bytes held (`--max-buffered-bytes`).
pub const BYTES_HELD: &str = "retryd_buffered_bytes";
/// Gauge of the most bytes held at once since the start.
pub const BYTES_PEAK: &str = "retryd_buffered_bytes_peak";
/// Gauge of the bytes watch streams' queued events hold (part of `retryd_buffered_bytes`).
pub const QUEUED_BYTES: &str = "retryd_watch_queued_bytes";

/// The limits; 0 means no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Calls in flight, all connections (`--max-concurrent-calls`).
    pub calls: usize,
    /// Calls in flight on one connection (`--max-calls-per-connection`).
    pub calls_per_connection: usize,
    /// Request and answer bytes held, all connections (`--max-buffered-bytes`).
    pub bytes: usize,
    /// Request and answer bytes held by one connection
    /// (`--max-buffered-bytes-per-connection`).
    pub bytes_per_connection: usize,
}

/// Which limit refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `--max-concurrent-calls`.
    Calls(usize),
    /// `--max-calls-per-connection`.
    CallsPerConnection(usize),
    /// `--max-buffered-bytes`.
    Bytes(usize),
    /// `--max-buffered-bytes-per-connection`.
    BytesPerConnection(usize),
    /// Half of `--max-buffered-bytes`: what watch streams' queued events
    /// may hold in all.
    QueuedBytes(usize),
}

impl Refusal {
    /// The limit that refused, in its unit.
    pub fn limit(self) -> usize {
        match self {
            Refusal::Calls(n)
            | Refusal::CallsPerConnection(n)
            | Refusal::Bytes(n)
            | Refusal::BytesPerConnection(n)
            | Refusal::QueuedBytes(n) => n,
        }
    }

    /// How long the refused caller is advised to wait (jittered).
    pub fn advice(self) -> std::time::Duration {
        super::overload::jittered(match self {
            Refusal::Calls(_) | Refusal::Bytes(_) | Refusal::QueuedBytes(_) => super::overload::SERVER_SHED_DELAY,
            Refusal::CallsPerConnection(_) | Refusal::BytesPerConnection(_) => super::overload::CONNECTION_SHED_DELAY,
        })
    }

    /// What is full, naming its flag.
    pub fn describe(self) -> String {
        match self {
            Refusal::Calls(n) => format!("server overloaded: {n} calls in flight (--max-concurrent-calls)"),
            Refusal::CallsPerConnection(n) => {
                format!("this connection has {n} calls in flight (--max-calls-per-connection)")
            }
            Refusal::Bytes(n) => format!("server overloaded: {n} bytes of calls buffered (--max-buffered-bytes)"),
            Refusal::BytesPerConnection(n) => {
                format!("this connection holds {n} bytes of calls (--max-buffered-bytes-per-connection)")
            }
            Refusal::QueuedBytes(n) => {
                format!("watch streams hold {n} bytes of unsent events (half of --max-buffered-bytes)")
            }
        }
    }

    /// The RESOURCE_EXHAUSTED status that answers the call, advising to
    /// retry after `delay` (see [`Self::advice`]).
    pub fn status(self, delay: std::time::Duration) -> tonic::Status {
        let why = self.describe();
        super::overload::advise(
            tonic::Status::resource_exhausted(format!("{why}; retry after {} ms", delay.as_millis())),
            delay,
        )
    }
}

#[derive(Debug, Default)]
struct Share {
    calls: usize,
    bytes: usize,
}

/// What all connections hold.
#[derive(Debug, Default)]
struct Totals {
    calls: usize,
    bytes: usize,
    /// Of `bytes`, what watch streams' queued events hold.
    queued: usize,
    /// Most `bytes` held at once since the start.
    peak: usize,
}

#[derive(Debug, Default)]
struct State {
    all: Totals,
    /// Seeded per process (foldhash), so peers cannot aim for collisions.
    connections: HashMap<SocketAddr, Share, foldhash::fast::RandomState>,
}

impl State {
    /// The totals and the share of `peer`'s connection (none for an unknown
    /// peer), the share looked up once for a whole check-then-charge.
    fn split(&mut self, peer: Option<SocketAddr>) -> (&mut Totals, Option<&mut Share>) {
        let share = peer.map(|p| self.connections.entry(p).or_default());
        (&mut self.all, share)
    }
}

/// The server-wide account of call slots and buffered bytes.
#[derive(Debug)]
pub struct Ledger {
    limits: Limits,
    state: Mutex<State>,
}

impl Ledger {
    /// A ledger enforcing `limits`.
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Ledger {
            limits,
            state: Mutex::new(State::default()),
        })
    }

    /// A ticket for a call on the connection from `peer` (`None`: unknown,
    /// only the server-wide limits apply); it holds nothing yet.
    pub fn ticket(self: &Arc<Self>, peer: Option<SocketAddr>) -> Ticket {
        Ticket {
            ledger: Arc::clone(self),
            peer,
            queue: false,
            call: false,
            connection_call: false,
            bytes: 0,
        }
    }

    /// A ticket for a watch stream's queued events on the connection from
    /// `peer`: its bytes also count against the streams' half of the
    /// server-wide bytes.
    pub fn queue_ticket(self: &Arc<Self>, peer: Option<SocketAddr>) -> Ticket {
        let mut ticket = self.ticket(peer);
        ticket.queue = true;
        ticket
    }

    /// Bytes held now by watch streams' queued events, and the most bytes
    /// held at once since the start.
    pub fn queued_and_peak(&self) -> (usize, usize) {
        let s = self.lock();
        (s.all.queued, s.all.peak)
    }

    /// Sets the ledger's gauges (called periodically: a gauge set on every
    /// charge would cost each call a registry look-up).
    pub fn publish(&self) {
        let (calls, bytes, queued, peak) = {
            let s = self.lock();
            (s.all.calls, s.all.bytes, s.all.queued, s.all.peak)
        };
        metrics::gauge!(CALLS_HELD).set(calls as f64);
        metrics::gauge!(BYTES_HELD).set(bytes as f64);
        metrics::gauge!(BYTES_PEAK).set(peak as f64);
        metrics::gauge!(QUEUED_BYTES).set(queued as f64);
    }

    /// Calls and bytes held now, all connections.
    pub fn held(&self) -> (usize, usize) {
        let s = self.lock();
        (s.all.calls, s.all.bytes)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent even if a holder panicked (every update
        // is a pair of plain additions), so a poisoned lock is used as is.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Charges `n` bytes, checked by [`Ticket::check_bytes`] under the same lock.
fn add_bytes(all: &mut Totals, share: Option<&mut Share>, queue: bool, n: usize) {
    if let Some(share) = share {
        share.bytes += n;
    }
    all.bytes += n;
    all.peak = all.peak.max(all.bytes);
    if queue {
        all.queued += n;
    }
}

/// Takes a call slot, checked by [`Ticket::check_call`] under the same
/// lock; whether it was also taken on a connection.
fn add_call(all: &mut Totals, share: Option<&mut Share>) -> bool {
    all.calls += 1;
    match share {
        Some(share) => {
            share.calls += 1;
            true
        }
        None => false,
    }
}

fn over(limit: usize, now: usize, more: usize) -> bool {
    limit > 0 && now.saturating_add(more) > limit
}

/// What one call holds; gives it back when dropped.
#[derive(Debug)]
pub struct Ticket {
    ledger: Arc<Ledger>,
    peer: Option<SocketAddr>,
    /// A watch stream's queued events (see [`Ledger::queue_ticket`]).
    queue: bool,
    call: bool,
    connection_call: bool,
    bytes: usize,
}

impl Ticket {
    /// Charges `n` more bytes, unless that goes over a limit.
    pub fn charge(&mut self, n: usize) -> Result<(), Refusal> {
        let mut s = self.ledger.lock();
        let (all, share) = s.split(self.peer);
        self.check_bytes(all, share.as_deref(), n)?;
        add_bytes(all, share, self.queue, n);
        self.bytes += n;
        Ok(())
    }

    /// Gives back `n` of the bytes held.
    pub fn release(&mut self, n: usize) {
        let left = self.bytes.saturating_sub(n);
        self.set_bytes(left);
    }

    /// Sets the bytes held to `n` (an answer already in memory: charged even
    /// over the limits, which then refuse the next calls).
    pub fn set_bytes(&mut self, n: usize) {
        let mut s = self.ledger.lock();
        let (all, share) = s.split(self.peer);
        all.bytes = all.bytes.saturating_sub(self.bytes) + n;
        all.peak = all.peak.max(all.bytes);
        if self.queue {
            all.queued = all.queued.saturating_sub(self.bytes) + n;
        }
        if let Some(share) = share {
            share.bytes = share.bytes.saturating_sub(self.bytes) + n;
        }
        self.bytes = n;
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes a call slot, unless none is free server-wide or on this connection.
    pub fn take_call(&mut self) -> Result<(), Refusal> {
        let mut s = self.ledger.lock();
        let (all, share) = s.split(self.peer);
        self.check_call(all, share.as_deref())?;
        self.connection_call |= add_call(all, share);
        self.call = true;
        Ok(())
    }

    /// [`Self::charge`] then [`Self::take_call`] under one lock (an admitted
    /// call's answer estimate and its slot): the same checks in the same
    /// order, and nothing held if either refuses.
    pub fn charge_and_take_call(&mut self, n: usize) -> Result<(), Refusal> {
        let mut s = self.ledger.lock();
        let (all, mut share) = s.split(self.peer);
        self.check_bytes(all, share.as_deref(), n)?;
        self.check_call(all, share.as_deref())?;
        add_bytes(all, share.as_deref_mut(), self.queue, n);
        self.bytes += n;
        self.connection_call |= add_call(all, share);
        self.call = true;
        Ok(())
    }

    /// Refuses `n` more bytes that would go over a limit (nothing is charged).
    fn check_bytes(&self, all: &Totals, share: Option<&Share>, n: usize) -> Result<(), Refusal> {
        let limits = self.ledger.limits;
        if over(limits.bytes, all.bytes, n) {
            return Err(Refusal::Bytes(limits.bytes));
        }
        if self.queue && over(limits.bytes / 2, all.queued, n) {
            return Err(Refusal::QueuedBytes(limits.bytes / 2));
        }
        if let Some(share) = share {
            if over(limits.bytes_per_connection, share.bytes, n) {
                return Err(Refusal::BytesPerConnection(limits.bytes_per_connection));
            }
        }
        Ok(())
    }

    /// Refuses a call slot when none is free server-wide or on this connection.
    fn check_call(&self, all: &Totals, share: Option<&Share>) -> Result<(), Refusal> {
        let limits = self.ledger.limits;
        if over(limits.calls, all.calls, 1) {
            return Err(Refusal::Calls(limits.calls));
        }
        if let Some(share) = share {
            if over(limits.calls_per_connection, share.calls, 1) {
                return Err(Refusal::CallsPerConnection(limits.calls_per_connection));
            }
        }
        Ok(())
    }

    /// Gives the call slot back (server-wide and on the connection), keeping
    /// the bytes: for a streaming answer, which may last as long as its client
    /// wants and must not hold a slot meanwhile.
    pub fn release_call(&mut self) {
        let mut s = self.ledger.lock();
        if std::mem::take(&mut self.call) {
            s.all.calls = s.all.calls.saturating_sub(1);
        }
        if std::mem::take(&mut self.connection_call) {
            if let Some(share) = self.peer.and_then(|p| s.connections.get_mut(&p)) {
                share.calls = share.calls.saturating_sub(1);
            }
        }
    }

    /// A stalled answer was dropped, but its stream lives on: the server-wide
    /// slot goes back, while the connection keeps its slot and `bytes` (what
    /// the connection may still buffer for it) until the stream is gone.
    pub fn stalled(&mut self, bytes: usize) {
        let n = bytes.min(self.bytes);
        self.set_bytes(n);
        if std::mem::take(&mut self.call) {
            self.ledger.lock().all.calls -= 1;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.call && !self.connection_call && self.bytes == 0 {
            if let Some(peer) = self.peer {
                // A charge that was refused may have created an empty share.
                let mut s = self.ledger.lock();
                if s.connections.get(&peer).is_some_and(|c| c.calls == 0 && c.bytes == 0) {
                    s.connections.remove(&peer);
                }
            }
            return;
        }
        let mut s = self.ledger.lock();
        s.all.bytes = s.all.bytes.saturating_sub(self.bytes);
        if self.queue {
            s.all.queued = s.all.queued.saturating_sub(self.bytes);
        }
        if self.call {
            s.all.calls = s.all.calls.saturating_sub(1);
        }
        if let Some(share) = self.peer.and_then(|p| s.connections.get_mut(&p)) {
            share.bytes = share.bytes.saturating_sub(self.bytes);
            if self.connection_call {
                share.calls = share.calls.saturating_sub(1);
            }
            if share.calls == 0 && share.bytes == 0 {
                if let Some(peer) = self.peer {
                    s.connections.remove(&peer);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            calls: 3,
            calls_per_connection: 2,
            bytes: 100,
            bytes_per_connection: 60,
        }
    }

    fn peer(port: u16) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    #[test]
    fn a_connection_gets_only_its_share() {
        let ledger = Ledger::new(limits());
        let mut a1 = ledger.ticket(peer(1));
        let mut a2 = ledger.ticket(peer(1));
        let mut a3 = ledger.ticket(peer(1));
        a1.take_call().unwrap();
        a2.take_call().unwrap();
        assert_eq!(a3.take_call(), Err(Refusal::CallsPerConnection(2)));
        let mut b1 = ledger.ticket(peer(2));
        b1.take_call().unwrap();
        let mut b2 = ledger.ticket(peer(2));
        assert_eq!(b2.take_call(), Err(Refusal::Calls(3)));
        drop(a1);
        b2.take_call().unwrap();

        a2.charge(60).unwrap();
        assert_eq!(a3.charge(1), Err(Refusal::BytesPerConnection(60)));
        b1.charge(40).unwrap();
        assert_eq!(b2.charge(1), Err(Refusal::Bytes(100)));
        b1.set_bytes(10);
        b2.charge(20).unwrap();
        assert_eq!(ledger.held(), (3, 90));
        drop((a2, a3, b1, b2));
        assert_eq!(ledger.held(), (0, 0));
        assert!(ledger.lock().connections.is_empty());
    }

    #[test]
    fn charge_and_take_call_refuses_as_the_two_steps_do() {
        // Every state of two earlier tickets, then one ticket asking for
        // bytes and a slot: one step answers as the two did, holding the same.
        for (bytes_a, bytes_b, calls_a, calls_b, n) in [
            (0, 0, 0, 0, 10),
            (50, 0, 0, 0, 20),
            (40, 40, 0, 0, 30),
            (0, 0, 2, 0, 1),
            (0, 0, 1, 2, 1),
            (10, 0, 1, 1, 45),
        ] {
            let run = |one_step: bool| {
                let ledger = Ledger::new(limits());
                let mut a = ledger.ticket(peer(1));
                let mut b = ledger.ticket(peer(2));
                a.charge(bytes_a).unwrap();
                b.charge(bytes_b).unwrap();
                // Slots held by calls that stay in flight through the test.
                let mut in_flight = Vec::new();
                for (port, calls) in [(1, calls_a), (2, calls_b)] {
                    for _ in 0..calls {
                        let mut extra = ledger.ticket(peer(port));
                        extra.take_call().unwrap();
                        in_flight.push(extra);
                    }
                }
                let mut t = ledger.ticket(peer(1));
                let got = if one_step {
                    t.charge_and_take_call(n)
                } else {
                    t.charge(n).and_then(|()| t.take_call())
                };
                let held = if got.is_ok() { Some((t.bytes(), t.call)) } else { None };
                drop(t);
                let after = ledger.held();
                drop((a, b, in_flight));
                (got, held, after)
            };
            assert_eq!(run(true), run(false), "{bytes_a} {bytes_b} {calls_a} {calls_b} {n}");
        }
    }

    #[test]
    fn a_stalled_answer_keeps_its_connection_slot() {
        let ledger = Ledger::new(limits());
        let mut a = ledger.ticket(peer(1));
        a.take_call().unwrap();
        a.charge(50).unwrap();
        a.stalled(16);
        assert_eq!(ledger.held(), (0, 16));
        let mut a2 = ledger.ticket(peer(1));
        a2.take_call().unwrap();
        let mut a3 = ledger.ticket(peer(1));
        assert_eq!(a3.take_call(), Err(Refusal::CallsPerConnection(2)));
        drop(a);
        a3.take_call().unwrap();
        a3.release_call();
        a3.release_call();
        assert_eq!(ledger.held(), (1, 0));
        drop((a2, a3));
        assert_eq!(ledger.held(), (0, 0));
        assert!(ledger.lock().connections.is_empty());
    }

    #[test]
    fn queued_events_hold_at_most_half_and_leave_the_rest_to_calls() {
        let ledger = Ledger::new(limits());
        let mut q1 = ledger.queue_ticket(peer(1));
        let mut q2 = ledger.queue_ticket(peer(2));
        q1.charge(30).unwrap();
        q2.charge(20).unwrap();
        assert_eq!(q2.charge(1), Err(Refusal::QueuedBytes(50)));
        let mut call = ledger.ticket(peer(3));
        call.charge(50).unwrap();
        assert_eq!(ledger.held(), (0, 100));
        assert_eq!(ledger.queued_and_peak(), (50, 100));
        q1.release(25);
        assert_eq!(q1.bytes(), 5);
        assert_eq!(ledger.queued_and_peak(), (25, 100));
        drop(call);
        q2.charge(20).unwrap();
        assert_eq!(ledger.queued_and_peak(), (45, 100));
        drop((q1, q2));
        assert_eq!(ledger.held(), (0, 0));
        assert_eq!(ledger.queued_and_peak(), (0, 100));
        assert!(ledger.lock().connections.is_empty());
    }

    #[test]
    fn zero_is_no_limit_and_unknown_peers_share_nothing() {
        let ledger = Ledger::new(Limits::default());
        let tickets: Vec<_> = (0..100)
            .map(|_| {
                let mut t = ledger.ticket(None);
                t.take_call().unwrap();
                t.charge(1 << 30).unwrap();
                t
            })
            .collect();
        assert_eq!(ledger.held().0, 100);
        drop(tickets);
        assert_eq!(ledger.held(), (0, 0));
    }
}
