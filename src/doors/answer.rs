//! The body of an admitted call's answer: the encoded answer, handed to the
//! connection in pieces of at most [`PIECE`] bytes, holding the call's
//! [`Ticket`] (its slot and bytes) until the whole answer has been taken.
//!
//! hyper asks for the next piece only once the connection has sent the
//! last one (HTTP/2 flow control), so each piece taken is progress, and a
//! client that does not read keeps the answer here, where it is counted. A
//! [`Stalls`] sweeper drops answers that make no progress for the stall
//! timeout and gives their server-wide slot back; the stream is reset when
//! hyper next asks for a piece. Pieces share the answer's memory (no copy),
//! so an answer of which a piece was taken stays in memory, and charged to
//! the connection, until its stream is gone; one that was never read is
//! freed at once. Until the stream is gone its connection keeps the slot
//! (so it cannot pile up stalled streams for free).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::ledger::Ticket;

/// Largest piece of an answer handed to the connection at once: the unit of
/// progress the stall timeout sees (four HTTP/2 DATA frames at the default
/// frame size).
pub const PIECE: usize = 64 * 1024;

/// Counter of answers dropped because the client stopped reading them.
pub const STALLED_TOTAL: &str = "retryd_answers_stalled_total";

/// One frame of a service's answer body.
pub type Item = Result<Frame<Bytes>, tonic::Status>;

/// Frames taken from a service's body, in order: the first two held inline,
/// so a unary answer (its data, then its trailers) is queued without an
/// allocation; any more in a queue behind them.
#[derive(Debug, Default)]
pub struct Frames {
    // Invariant: `first` is empty only if all are, `second` only if `more` is.
    first: Option<Item>,
    second: Option<Item>,
    more: VecDeque<Item>,
}

impl Frames {
    /// Adds `item` behind the others.
    pub fn push_back(&mut self, item: Item) {
        if self.first.is_none() {
            self.first = Some(item);
        } else if self.second.is_none() {
            self.second = Some(item);
        } else {
            self.more.push_back(item);
        }
    }

    fn pop_front(&mut self) -> Option<Item> {
        let item = self.first.take()?;
        self.first = self.second.take();
        if self.first.is_some() {
            self.second = self.more.pop_front();
        }
        Some(item)
    }

    /// No frame is queued.
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    fn clear(&mut self) {
        *self = Frames::default();
    }
}

impl From<VecDeque<Item>> for Frames {
    fn from(items: VecDeque<Item>) -> Self {
        let mut frames = Frames::default();
        for item in items {
            frames.push_back(item);
        }
        frames
    }
}

#[derive(Debug)]
struct Payload {
    frames: Frames,
    data: Bytes,
    /// A piece was handed to the connection (which may still hold it).
    handed: bool,
    rest: Option<tonic::body::Body>,
    ticket: Option<Ticket>,
    last_progress: Instant,
    stalled: bool,
}

#[derive(Debug)]
struct Shared(Mutex<Payload>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Payload> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An answer's body (see the module documentation).
#[derive(Debug)]
pub struct Answer(Arc<Shared>);

impl Answer {
    /// An answer of `frames` already taken from the service's body, then
    /// whatever is left in `rest`, holding `ticket` until it is all taken.
    pub fn new(frames: impl Into<Frames>, rest: Option<tonic::body::Body>, ticket: Ticket, stalls: &Stalls) -> Self {
        let shared = Arc::new(Shared(Mutex::new(Payload {
            frames: frames.into(),
            data: Bytes::new(),
            handed: false,
            rest,
            ticket: Some(ticket),
            last_progress: Instant::now(),
            stalled: false,
        })));
        stalls.watch(&shared);
        Answer(shared)
    }
}

/// Why an answer's stream was reset.
#[derive(Debug, thiserror::Error)]
#[error("the client read nothing of the answer for the stall timeout (--stall-timeout)")]
pub struct StalledError;

impl Body for Answer {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let mut p = self.0.lock();
        if p.stalled {
            return Poll::Ready(Some(Err(tonic::Status::cancelled(StalledError.to_string()))));
        }
        p.last_progress = Instant::now();
        loop {
            if !p.data.is_empty() {
                let n = p.data.len().min(PIECE);
                let piece = p.data.split_to(n);
                p.handed = true;
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            let frame = match p.frames.pop_front() {
                Some(f) => Some(f),
                None => match p.rest.as_mut() {
                    Some(rest) => match Pin::new(rest).poll_frame(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(f) => f,
                    },
                    None => None,
                },
            };
            match frame {
                Some(Ok(f)) => match f.into_data() {
                    Ok(data) => p.data = data,
                    Err(trailers) => {
                        p.ticket = None;
                        return Poll::Ready(Some(Ok(trailers)));
                    }
                },
                Some(Err(e)) => {
                    p.ticket = None;
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    p.ticket = None;
                    p.rest = None;
                    return Poll::Ready(None);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.lock().ticket.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// The answers in flight, swept for stalls by a task of the server.
#[derive(Debug, Clone)]
pub struct Stalls(Arc<Mutex<Vec<Weak<Shared>>>>);

impl Stalls {
    /// An empty set; [`Stalls::sweep`] must run for stalls to be dropped.
    pub fn new() -> Self {
        Stalls(Arc::new(Mutex::new(Vec::new())))
    }

    fn list(&self) -> MutexGuard<'_, Vec<Weak<Shared>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn watch(&self, answer: &Arc<Shared>) {
        self.list().push(Arc::downgrade(answer));
    }

    /// Drops the answers that made no progress for `timeout`, every quarter
    /// of it and at least every 100 ms (so the finished answers' entries,
    /// one per call, are forgotten before many pile up); runs until aborted.
    pub async fn sweep(self, timeout: Duration) {
        let every = (timeout / 4).clamp(Duration::from_millis(20), Duration::from_millis(100));
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.sweep_once(timeout);
        }
    }

    /// One pass: forgets finished answers, drops stalled ones; returns how
    /// many it dropped.
    pub fn sweep_once(&self, timeout: Duration) -> usize {
        let now = Instant::now();
        let mut dropped = 0;
        // Taken out so answers are locked without holding the list.
        let list = std::mem::take(&mut *self.list());
        let mut live = Vec::with_capacity(list.len());
        for weak in list {
            let Some(shared) = weak.upgrade() else { continue };
            let mut p = shared.lock();
            if p.ticket.is_none() {
                continue;
            }
            // Only an answer with bytes waiting for the client can stall; a
            // streaming answer waiting for its next message is not stalled.
            let waiting = !p.data.is_empty() || !p.frames.is_empty();
            if !waiting || now.saturating_duration_since(p.last_progress) < timeout {
                drop(p);
                live.push(weak);
                continue;
            }
            p.stalled = true;
            p.frames.clear();
            p.data = Bytes::new();
            p.rest = None;
            let handed = p.handed;
            if let Some(t) = p.ticket.as_mut() {
                // What the connection took pins the whole answer.
                let pinned = if handed { t.bytes() } else { 0 };
                t.stalled(pinned);
            }
            dropped += 1;
        }
        if dropped > 0 {
            metrics::counter!(STALLED_TOTAL).increment(dropped as u64);
            tracing::warn!(
                answers = dropped,
                ?timeout,
                "dropped answers their clients did not read (--stall-timeout)"
            );
        }
        self.list().extend(live);
        dropped
    }
}

impl Default for Stalls {
    fn default() -> Self {
        Stalls::new()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;
    use crate::doors::ledger::{Ledger, Limits};

    fn answer(len: usize, ledger: &Arc<Ledger>, stalls: &Stalls) -> Answer {
        let mut ticket = ledger.ticket(None);
        ticket.take_call().unwrap();
        ticket.set_bytes(len);
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        let frames = VecDeque::from([
            Ok(Frame::data(Bytes::from(vec![7u8; len]))),
            Ok(Frame::trailers(trailers)),
        ]);
        Answer::new(frames, None, ticket, stalls)
    }

    #[test]
    fn frames_come_out_in_the_order_they_went_in() {
        let item = |n: u8| Ok(Frame::data(Bytes::from(vec![n])));
        let first = |f: Option<Item>| f.and_then(|i| i.ok()).and_then(|f| f.into_data().ok()).map(|d| d[0]);
        let mut frames = Frames::default();
        let mut expected = VecDeque::new();
        // Pushes and pops interleaved, the queue crossing its inline slots both ways.
        for (step, push) in [
            true, true, true, true, false, true, false, false, true, false, false, false, false,
        ]
        .into_iter()
        .enumerate()
        {
            let n = u8::try_from(step).unwrap();
            if push {
                frames.push_back(item(n));
                expected.push_back(n);
            } else {
                assert_eq!(first(frames.pop_front()), expected.pop_front());
            }
            assert_eq!(frames.is_empty(), expected.is_empty());
        }
        let from: Frames = VecDeque::from([item(1), item(2), item(3)]).into();
        let mut from = from;
        assert_eq!(
            [from.pop_front(), from.pop_front(), from.pop_front(), from.pop_front()].map(first),
            [Some(1), Some(2), Some(3), None]
        );
    }

    #[tokio::test]
    async fn pieces_then_trailers_then_the_ticket_goes_back() {
        let ledger = Ledger::new(Limits::default());
        let stalls = Stalls::new();
        let mut body = answer(PIECE * 2 + 5, &ledger, &stalls);
        let mut sizes = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.unwrap();
            assert_eq!(
                ledger.held().0,
                usize::from(frame.is_data()),
                "the slot is held until the end"
            );
            match frame.into_data() {
                Ok(d) => sizes.push(d.len()),
                Err(t) => assert_eq!(t.trailers_ref().unwrap()["grpc-status"], "0"),
            }
        }
        assert_eq!(sizes, [PIECE, PIECE, 5]);
        assert_eq!(ledger.held(), (0, 0));
        assert_eq!(stalls.sweep_once(Duration::ZERO), 0);
        assert!(stalls.list().is_empty());
    }

    #[tokio::test]
    async fn a_streaming_answer_waiting_for_its_next_message_is_not_stalled() {
        let ledger = Ledger::new(Limits::default());
        let stalls = Stalls::new();
        let (_tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, tonic::Status>>(1);
        let rest = tonic::body::Body::new(http_body_util::StreamBody::new(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        ));
        let mut body = Answer::new(VecDeque::new(), Some(rest), ledger.ticket(None), &stalls);
        let pending = futures_poll_once(&mut body);
        assert!(pending, "waits for the next message");
        assert_eq!(stalls.sweep_once(Duration::ZERO), 0);
    }

    fn futures_poll_once(body: &mut Answer) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        Pin::new(body).poll_frame(&mut cx).is_pending()
    }

    #[tokio::test]
    async fn a_stalled_answer_is_dropped_and_its_stream_reset() {
        let ledger = Ledger::new(Limits::default());
        let stalls = Stalls::new();
        let mut body = answer(1 << 20, &ledger, &stalls);
        let mut read_some = answer(PIECE * 3, &ledger, &stalls);
        let piece = read_some.frame().await.unwrap().unwrap();
        assert_eq!(piece.data_ref().map(Bytes::len), Some(PIECE));
        assert_eq!(ledger.held(), (2, (1 << 20) + PIECE * 3));
        assert_eq!(stalls.sweep_once(Duration::from_secs(60)), 0);
        assert_eq!(stalls.sweep_once(Duration::ZERO), 2);
        assert_eq!(ledger.held(), (0, PIECE * 3), "only what a piece of which was taken");
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(err.code(), tonic::Code::Cancelled);
        drop((body, read_some, piece));
        assert_eq!(ledger.held(), (0, 0));
    }
}
