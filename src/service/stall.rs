//! The alarm a stalled stream raises for its transport. A WatchHolds stream
//! whose client takes nothing for `--stall-timeout` is ended with
//! RESOURCE_EXHAUSTED, but that end travels in the stream's own body: when
//! the client's HTTP/2 window is 0 the server's HTTP stack never takes it
//! (it waits for window first), so the client would never see the end and
//! the stream would keep its caller's seat. The alarm lets the server reset
//! the stream at the transport instead (see `crate::server::stream_task`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Context;

use futures_util::task::AtomicWaker;

/// Raised once, when a stream is ended for stalling; cloned to whoever must
/// act on it (the door puts it in the answer's extensions).
#[derive(Debug, Clone, Default)]
pub struct StallAlarm(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    raised: AtomicBool,
    waker: AtomicWaker,
}

impl StallAlarm {
    /// Raises the alarm and wakes the task polling it.
    pub fn raise(&self) {
        self.0.raised.store(true, Ordering::Release);
        self.0.waker.wake();
    }

    /// Whether it has been raised; if not, `cx` is woken when it is.
    pub fn poll_raised(&self, cx: &mut Context<'_>) -> bool {
        if self.0.raised.load(Ordering::Acquire) {
            return true;
        }
        self.0.waker.register(cx.waker());
        self.0.raised.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_wakes_the_registered_task() {
        let alarm = StallAlarm::default();
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(!alarm.poll_raised(&mut cx));
        alarm.clone().raise();
        assert!(alarm.poll_raised(&mut cx));
    }
}
