//! The unary calls in flight, so a drain that runs out of grace knows how
//! many it abandons (`retryd_shutdown_abandoned_calls_total`, exit status 1).
//!
//! Streams (health `Watch`, `WatchHolds`, reflection) are not counted: the
//! long-lived ones end with the drain's start, and none of them is a call a
//! client waits on for an answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counter of unary calls still in flight when the shutdown grace ran out.
pub const ABANDONED_TOTAL: &str = "retryd_shutdown_abandoned_calls_total";

/// Unary calls in flight on one server (cheap to clone; clones share the count).
#[derive(Debug, Clone, Default)]
pub struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    /// Counts a call in until the returned guard is dropped.
    pub fn enter(&self) -> InFlightGuard {
        self.0.fetch_add(1, Ordering::Relaxed);
        InFlightGuard(Arc::clone(&self.0))
    }

    /// Calls in flight now.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// One call counted by [`InFlight::enter`]; dropping it counts the call out.
#[derive(Debug)]
pub struct InFlightGuard(Arc<AtomicUsize>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_count_calls_in_and_out() {
        let in_flight = InFlight::default();
        let a = in_flight.enter();
        let b = in_flight.clone().enter();
        assert_eq!(in_flight.count(), 2);
        drop(a);
        assert_eq!(in_flight.count(), 1);
        drop(b);
        assert_eq!(in_flight.count(), 0);
    }
}
