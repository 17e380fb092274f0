//! A watch stream's queue: the events a door has encoded and not yet handed
//! to its connection, each charged to the door's bytes ledger while queued
//! ([`WatchWire`]) and given back when the transport takes it.
//!
//! A stream whose event cannot be charged (the ledger, its connection's
//! share or the watch streams' half of it is full) waits for room: only
//! that stream is held back, and no event is dropped. Meanwhile it is ended
//! as stalled (RESOURCE_EXHAUSTED, `retryd_answers_stalled_total`) once its
//! client has taken nothing of what is queued for it for `--stall-timeout`;
//! a stream whose client took everything is waiting for the server, not
//! stalled, and is served as the stalled ones end and give their bytes back.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;

use super::error::{Error, ErrorKind};
use super::holds::Shown;
use super::stall::StallAlarm;
use crate::core::UnixMillis;
use crate::fleet::HoldEventKind;

/// Counter of answers and watch streams ended because their client took
/// nothing of them for `--stall-timeout` (shared with the doors' answers).
pub const STALLED_TOTAL: &str = "retryd_answers_stalled_total";

/// A change to a watched hold.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    /// Placed (or in force at the start), extended, lifted, probing, or synced.
    pub kind: HoldEventKind,
    /// The hold after the change (`None` for `Synced`).
    pub hold: Option<Shown>,
    /// The server's clock when the event was sent.
    pub server_time: UnixMillis,
    /// `Synced` of a resumed watch: the buckets its snapshot sent.
    pub resent_buckets: Option<Vec<u32>>,
}

/// Events queued per stream beyond what its connection took: a stream
/// holds at most this many (each at most a hold's 8 KiB bound).
pub(super) const QUEUED_EVENTS: usize = 16;
/// Longest pause between two tries of a stream waiting for bytes.
const MOST_BACKOFF: Duration = Duration::from_millis(100);

/// Whether a queued event's bytes could be charged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Charge {
    /// Charged: the event may be queued.
    Charged,
    /// A limit is reached for now: wait until bytes are given back.
    Full,
    /// The event alone is over a limit: it never fits (why, naming the flag).
    Never(String),
}

/// What a door sends a watch's events as, and where their bytes are charged.
pub trait WatchWire: Send + Sync + 'static {
    /// An event as the door's transport takes it.
    type Item: Send + 'static;
    /// The event in the door's form, and its encoded size in bytes.
    fn encode(&self, event: WatchEvent) -> (Self::Item, usize);
    /// Charges `n` bytes for an event about to be queued.
    fn charge(&self, n: usize) -> Charge;
    /// Gives back the `n` bytes of an event taken by the transport (or dropped).
    fn release(&self, n: usize);
}

/// Events as they are, charged nowhere: for callers without a transport of
/// their own (tests, the process itself).
#[derive(Debug, Clone, Copy, Default)]
pub struct Plain;

impl WatchWire for Plain {
    type Item = WatchEvent;

    fn encode(&self, event: WatchEvent) -> (WatchEvent, usize) {
        (event, 0)
    }

    fn charge(&self, _: usize) -> Charge {
        Charge::Charged
    }

    fn release(&self, _: usize) {}
}

/// One stream's queue, shared by its producer task and its consumer.
#[derive(Debug)]
struct Queue<T> {
    state: Mutex<State<T>>,
    /// Wakes the consumer.
    taker: AtomicWaker,
    /// Wakes the producer: room was made, or the consumer went away.
    room: Notify,
}

#[derive(Debug)]
struct State<T> {
    /// Events and their charged bytes, oldest first.
    items: VecDeque<(T, usize)>,
    /// The error that ends the stream, after `items`.
    end: Option<Error>,
    /// The producer is done: nothing follows `items` and `end`.
    finished: bool,
    /// The consumer went away.
    gone: bool,
    /// The last take, or the first event queued since the queue was empty.
    since: Instant,
}

impl<T> Queue<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long the queued events have waited for the client (zero when
    /// none waits).
    fn waited(&self) -> Duration {
        let s = self.lock();
        if s.items.is_empty() {
            Duration::ZERO
        } else {
            s.since.elapsed()
        }
    }

    /// Empties the queue: the bytes of what it held.
    fn clear(s: &mut State<T>) -> usize {
        s.items.drain(..).map(|(_, n)| n).sum()
    }
}

/// The stream of a watch: events in the door's form, then an error when it
/// ends abnormally. It holds its caller's place until the door drops it — a
/// stalled stream whose connection never takes its last message still
/// counts against the caller's cap, so stalling cannot open more than the
/// cap. Dropping it gives back the bytes of what was still queued.
#[derive(Debug)]
pub struct WatchEvents<W: WatchWire> {
    queue: Arc<Queue<W::Item>>,
    wire: Arc<W>,
    /// The stream's place among the caller's (given back when dropped).
    _seat: Box<dyn std::fmt::Debug + Send + Sync>,
    alarm: StallAlarm,
}

impl<W: WatchWire> WatchEvents<W> {
    /// Raised when the stream is ended for stalling: the transport must then
    /// end it too, as its last message may never be taken.
    pub fn stall_alarm(&self) -> StallAlarm {
        self.alarm.clone()
    }
}

impl<W: WatchWire> tokio_stream::Stream for WatchEvents<W> {
    type Item = Result<W::Item, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut s = self.queue.lock();
        if let Some((item, n)) = s.items.pop_front() {
            s.since = Instant::now();
            drop(s);
            self.wire.release(n);
            self.queue.room.notify_one();
            return Poll::Ready(Some(Ok(item)));
        }
        if let Some(e) = s.end.take() {
            s.finished = true;
            return Poll::Ready(Some(Err(e)));
        }
        if s.finished {
            return Poll::Ready(None);
        }
        // Registered under the lock: the producer wakes after changing the state.
        self.queue.taker.register(cx.waker());
        Poll::Pending
    }
}

impl<W: WatchWire> Drop for WatchEvents<W> {
    fn drop(&mut self) {
        let freed = {
            let mut s = self.queue.lock();
            s.gone = true;
            Queue::clear(&mut s)
        };
        self.wire.release(freed);
        self.queue.room.notify_one();
    }
}

/// The sending end of one stream.
pub(super) struct Out<W: WatchWire> {
    queue: Arc<Queue<W::Item>>,
    wire: Arc<W>,
    stall: Duration,
    alarm: StallAlarm,
}

/// A new stream's two ends; `stall` is `--stall-timeout`.
pub(super) fn channel<W: WatchWire>(
    wire: Arc<W>,
    seat: Box<dyn std::fmt::Debug + Send + Sync>,
    stall: Duration,
) -> (Out<W>, WatchEvents<W>) {
    let queue = Arc::new(Queue {
        state: Mutex::new(State {
            items: VecDeque::with_capacity(QUEUED_EVENTS),
            end: None,
            finished: false,
            gone: false,
            since: Instant::now(),
        }),
        taker: AtomicWaker::new(),
        room: Notify::new(),
    });
    let alarm = StallAlarm::default();
    let out = Out {
        queue: Arc::clone(&queue),
        wire: Arc::clone(&wire),
        stall: stall.max(Duration::from_millis(1)),
        alarm: alarm.clone(),
    };
    let events = WatchEvents {
        queue,
        wire,
        _seat: seat,
        alarm,
    };
    (out, events)
}

impl<W: WatchWire> Out<W> {
    /// Completes when the stream's consumer has gone away.
    pub(super) async fn closed(&self) {
        loop {
            let notified = self.queue.room.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.queue.lock().gone {
                return;
            }
            notified.await;
        }
    }

    /// Queues `kind` of `hold`; false when the stream is over (its client
    /// went away, or took nothing for the stall timeout: then it is ended
    /// with RESOURCE_EXHAUSTED).
    pub(super) async fn send(&self, kind: HoldEventKind, hold: Option<Shown>) -> bool {
        self.send_event(WatchEvent {
            kind,
            hold,
            server_time: UnixMillis::now(),
            resent_buckets: None,
        })
        .await
    }

    /// Queues `synced`, naming the buckets a resumed watch's snapshot sent.
    pub(super) async fn send_synced(&self, resent_buckets: Option<Vec<u32>>) -> bool {
        self.send_event(WatchEvent {
            kind: HoldEventKind::Synced,
            hold: None,
            server_time: UnixMillis::now(),
            resent_buckets,
        })
        .await
    }

    async fn send_event(&self, e: WatchEvent) -> bool {
        let (item, n) = self.wire.encode(e);
        if !self.charge(n).await {
            return false;
        }
        loop {
            let notified = self.queue.room.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.queue.lock();
                if s.gone {
                    drop(s);
                    self.wire.release(n);
                    return false;
                }
                if s.items.len() < QUEUED_EVENTS {
                    if s.items.is_empty() {
                        s.since = Instant::now();
                    }
                    s.items.push_back((item, n));
                    drop(s);
                    self.queue.taker.wake();
                    return true;
                }
            }
            // Full: wait for a take, until the client has taken nothing
            // for the stall timeout.
            let left = self.stall.saturating_sub(self.queue.waited());
            if left.is_zero()
                || tokio::time::timeout(left, notified).await.is_err() && self.queue.waited() >= self.stall
            {
                self.wire.release(n);
                self.stalled();
                return false;
            }
        }
    }

    /// Charges `n` bytes, waiting while a limit is full; false when the
    /// stream is over meanwhile.
    async fn charge(&self, n: usize) -> bool {
        let mut backoff = Duration::from_millis(5);
        loop {
            match self.wire.charge(n) {
                Charge::Charged => return true,
                Charge::Never(why) => {
                    self.end(Error::new(ErrorKind::ResourceExhausted, why));
                    return false;
                }
                Charge::Full => {}
            }
            if self.queue.waited() >= self.stall {
                self.stalled();
                return false;
            }
            tokio::select! {
                () = self.closed() => return false,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MOST_BACKOFF);
        }
    }

    /// Ends a stream whose client took nothing for the stall timeout: what
    /// it queued is dropped and its bytes given back now (the client must
    /// watch again, and gets a fresh snapshot).
    fn stalled(&self) {
        metrics::counter!(STALLED_TOTAL).increment(1);
        tracing::debug!(stall = ?self.stall, "watch stream ended: its client took nothing (--stall-timeout)");
        let freed = Queue::clear(&mut self.queue.lock());
        self.wire.release(freed);
        self.end(Error::new(
            ErrorKind::ResourceExhausted,
            format!(
                "the watch's client took nothing for {:?} (--stall-timeout); watch again",
                self.stall
            ),
        ));
        self.alarm.raise();
    }

    /// Ends the stream with `e`, after what is queued.
    fn end(&self, e: Error) {
        self.queue.lock().end.get_or_insert(e);
        self.queue.taker.wake();
    }

    /// Ends the stream with `e` (the server drains, or the watch fell behind).
    pub(super) fn fail(&self, e: Error) {
        self.end(e);
    }
}

impl<W: WatchWire> Drop for Out<W> {
    fn drop(&mut self) {
        self.queue.lock().finished = true;
        self.queue.taker.wake();
    }
}
