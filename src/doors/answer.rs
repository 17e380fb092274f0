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

/// Frames taken from a service's body, in order: a unary answer (its data,
/// then its trailers) is held inline in slots of its own, queued without an
/// allocation and without room for a status; anything else in a queue.
#[derive(Debug, Default)]
pub struct Frames {
    // Popped in this order. Invariant: `data` is filled only when all are
    // empty, `trailers` only when `more` is, so every frame in `more` came
    // after those in the slots.
    data: Option<Bytes>,
    trailers: Option<http::HeaderMap>,
    more: VecDeque<Item>,
}

impl Frames {
    /// Adds `item` behind the others.
    pub fn push_back(&mut self, item: Item) {
        let item = match item {
            Ok(frame) if self.more.is_empty() && self.trailers.is_none() => match frame.into_data() {
                Ok(data) if self.data.is_none() => {
                    self.data = Some(data);
                    return;
                }
                Ok(data) => Ok(Frame::data(data)),
                Err(frame) => match frame.into_trailers() {
                    Ok(trailers) => {
                        self.trailers = Some(trailers);
                        return;
                    }
                    Err(frame) => Ok(frame),
                },
            },
            item => item,
        };
        self.more.push_back(item);
    }

    fn pop_front(&mut self) -> Option<Item> {
        if let Some(data) = self.data.take() {
            return Some(Ok(Frame::data(data)));
        }
        if let Some(trailers) = self.trailers.take() {
            return Some(Ok(Frame::trailers(trailers)));
        }
        self.more.pop_front()
    }

    /// No frame is queued.
    pub fn is_empty(&self) -> bool {
        self.data.is_none() && self.trailers.is_none() && self.more.is_empty()
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

    /// A frame numbered `n`, of each kind a body yields: data, trailers, an error.
    fn numbered(n: u8) -> Item {
        match n % 3 {
            0 => Ok(Frame::data(Bytes::from(vec![n]))),
            1 => {
                let mut trailers = http::HeaderMap::new();
                trailers.insert("n", http::HeaderValue::from(u16::from(n)));
                Ok(Frame::trailers(trailers))
            }
            _ => Err(tonic::Status::internal(n.to_string())),
        }
    }

    fn number(item: Option<Item>) -> Option<u8> {
        match item? {
            Ok(frame) => match frame.into_data() {
                Ok(data) => Some(data[0]),
                Err(frame) => frame.into_trailers().ok()?["n"].to_str().ok()?.parse().ok(),
            },
            Err(status) => status.message().parse().ok(),
        }
    }

    #[test]
    fn frames_come_out_in_the_order_they_went_in() {
        // Pushes and pops interleaved, every kind of frame crossing the inline
        // slots and the queue both ways (the steps' kinds cycle over 3, the
        // patterns' lengths are not multiples of it).
        for pattern in [
            &[
                true, true, true, true, false, true, false, false, true, false, false, false, false,
            ][..],
            &[true, false, true, true, false, false],
            &[
                true, true, false, true, false, false, true, true, true, false, false, false, false,
            ],
            &[true, false, true, false, true, false, true, false],
        ] {
            for skip in 0..3u8 {
                let mut frames = Frames::default();
                let mut expected = VecDeque::new();
                for (step, &push) in pattern.iter().enumerate() {
                    let n = u8::try_from(step).unwrap() + skip;
                    if push {
                        frames.push_back(numbered(n));
                        expected.push_back(n);
                    } else {
                        assert_eq!(number(frames.pop_front()), expected.pop_front(), "{pattern:?} {skip}");
                    }
                    assert_eq!(frames.is_empty(), expected.is_empty());
                }
                while let Some(n) = expected.pop_front() {
                    assert_eq!(number(frames.pop_front()), Some(n), "{pattern:?} {skip}");
                }
                assert!(frames.pop_front().is_none());
            }
        }
        let from: Frames = VecDeque::from([numbered(3), numbered(1), numbered(6)]).into();
        let mut from = from;
        assert_eq!(
            [from.pop_front(), from.pop_front(), from.pop_front(), from.pop_front()].map(number),
            [Some(3), Some(1), Some(6), None]
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
