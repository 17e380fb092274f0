//! Where a watch stream's queued events are charged: a ticket of the
//! bytes ledger for the stream's connection ([`Ledger::queue_ticket`]), so
//! they count against `--max-buffered-bytes` with the connection's share,
//! as unary answers do.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use super::ledger::{Ledger, Ticket};
use crate::service::watch::Charge;

/// The ledger and connection of a watch call, put in its request's
/// extensions by the admission (gRPC) or the HTTP door.
#[derive(Debug, Clone)]
pub struct StreamAccount {
    ledger: Arc<Ledger>,
    peer: Option<SocketAddr>,
}

impl StreamAccount {
    /// The account of a call from `peer` against `ledger`.
    pub fn new(ledger: Arc<Ledger>, peer: Option<SocketAddr>) -> Self {
        StreamAccount { ledger, peer }
    }

    /// A new stream's queue bytes, holding nothing yet.
    pub fn open(&self) -> QueuedBytes {
        QueuedBytes(Mutex::new(self.ledger.queue_ticket(self.peer)))
    }
}

/// One stream's queued bytes; all given back when dropped.
#[derive(Debug)]
pub struct QueuedBytes(Mutex<Ticket>);

impl QueuedBytes {
    fn ticket(&self) -> std::sync::MutexGuard<'_, Ticket> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Charges an event of `n` bytes.
    pub fn charge(&self, n: usize) -> Charge {
        match self.ticket().charge(n) {
            Ok(()) => Charge::Charged,
            Err(refusal) if n > refusal.limit() => {
                Charge::Never(format!("a watch event of {n} bytes never fits: {}", refusal.describe()))
            }
            Err(_) => Charge::Full,
        }
    }

    /// Gives back `n` bytes.
    pub fn release(&self, n: usize) {
        self.ticket().release(n);
    }
}

/// Charges to `bytes` when there is a ledger (calls from the network).
pub fn charge(bytes: Option<&QueuedBytes>, n: usize) -> Charge {
    bytes.map_or(Charge::Charged, |b| b.charge(n))
}

/// Gives back to `bytes` when there is a ledger.
pub fn release(bytes: Option<&QueuedBytes>, n: usize) {
    if let Some(b) = bytes {
        b.release(n);
    }
}
