//! Admission of decision calls (`retryd.v1.RetryDecisionService/*`, one
//! request message each): what one client can hold is bounded, so it cannot exhaust the
//! server's memory or call slots.
//!
//! 1. The request is read whole before the call takes a slot; its bytes are
//!    charged to the [`Ledger`] as they arrive (server-wide and per
//!    connection), and it must arrive within `--first-message-timeout`
//!    (DEADLINE_EXCEEDED otherwise). A stream that never sends its request
//!    holds no slot.
//! 2. A request with more than one message is a cardinality violation:
//!    UNIMPLEMENTED, as the gRPC status-code table says.
//! 3. The answer's size is estimated from the request (a ClassifyBatch's
//!    items times the largest answer of one item) and charged before the
//!    handler runs, then a call slot is taken; over a limit the call is
//!    answered RESOURCE_EXHAUSTED at once and the handler never runs.
//! 4. A large batch, decided on the blocking pool (which finishes it even
//!    when the call is dropped), runs on a task of its own holding the
//!    call's slot and bytes until it ends, so clients that reset their
//!    calls cannot pile up work beyond the limits.
//! 5. The answer is encoded at once and charged at its real size; the slot
//!    and bytes are held until the connection has taken the whole answer
//!    ([`Answer`]), or the answer is dropped as stalled (`--stall-timeout`).
//! 6. On the gRPC port, Classify, ClassifyBatch and Admit are served here by
//!    [`Direct`] from the bytes read in 1, not passed on: the layers below
//!    would only route the same bytes to the same handler. A panic in it is
//!    answered INTERNAL, as the CatchPanic layer below answers one.
//!
//! A server-streaming answer (WatchHolds: one request, then messages for as
//! long as the client wants) gives its slot back at once and holds no bytes
//! of its own: the stream charges each queued event to the ledger itself
//! (the call finds the ledger in its extensions). It is not dropped for
//! waiting on its next message.
//!
//! Health checks and reflection are not admitted here: an overloaded server
//! is busy, not unhealthy, and must not be restarted for it.

use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf as _, Bytes, BytesMut};
use futures_util::FutureExt as _;
use futures_util::future::Either;
use http_body::Body as _;
use http_body_util::BodyExt as _;
use tonic::body::Body;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tower::{Layer, Service};

use crate::doors::answer::{Answer, Frames, Stalls};
use crate::doors::ledger::{Ledger, Ticket};
use crate::doors::overload::SHED_TOTAL;
use crate::doors::watch_bytes::StreamAccount;
use crate::grpc::first::{Answered, Direct, Method, ok_trailers};
use crate::grpc::wire::codec::{message_len, second_message};
use crate::server::panic;

/// Paths admitted here.
const SERVICE_PREFIX: &str = "/retryd.v1.RetryDecisionService/";
/// The streaming path: its queued events are charged by the stream itself.
const WATCH_HOLDS: &str = "/retryd.v1.RetryDecisionService/WatchHolds";
/// The path whose answers grow with the request.
const CLASSIFY_BATCH: &str = "/retryd.v1.RetryDecisionService/ClassifyBatch";

/// Upper bound of the encoded size of one ClassifyBatch result (and of a
/// Classify answer), in any embedded locale, with every echoed field at its
/// limit and the fleet hold and retry budget it may carry; checked by `tests/grpc_answer_size.rs` against every code of every
/// embedded catalog.
pub const ITEM_ANSWER_BYTES: usize = 2560;
/// Charged for an answer whose size is not known before it is made
/// (ListCatalogs); corrected once it is encoded.
const OTHER_ANSWER_BYTES: usize = 64 * 1024;
/// Room for the batch summary and framing.
const ANSWER_OVERHEAD: usize = 1024;
/// Calls estimated above this (batches of more than 256 items, which the
/// service decides on the blocking pool) run on a task of their own.
const SPAWN_ABOVE: usize = 256 * ITEM_ANSWER_BYTES + ANSWER_OVERHEAD;

/// The settings of [`AdmissionLayer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Time a call's request has to arrive whole (`--first-message-timeout`).
    pub first_message_timeout: Duration,
    /// Largest request message (`--max-message-bytes`).
    pub max_message_bytes: usize,
    /// Most items of a ClassifyBatch (`--max-batch`).
    pub max_batch: usize,
}

#[derive(Debug)]
struct Admission {
    ledger: Arc<Ledger>,
    stalls: Stalls,
    config: AdmissionConfig,
    /// Serves Classify, ClassifyBatch and Admit from the request as read.
    direct: Option<Direct>,
}

/// Layer applying [`Admit`].
#[derive(Debug, Clone)]
pub struct AdmissionLayer(Arc<Admission>);

impl AdmissionLayer {
    /// Admits calls against `ledger`; answers are watched by `stalls`.
    /// With `direct`, Classify, ClassifyBatch and Admit are served by it
    /// from the request as read here, not passed on to the inner service
    /// (the router, the generated server and [`crate::grpc::first::BytesFirst`]
    /// would only hand the same bytes to the same handler, at about 5 k
    /// instructions a call); without it, every call is passed on.
    pub fn new(ledger: Arc<Ledger>, stalls: Stalls, config: AdmissionConfig, direct: Option<Direct>) -> Self {
        AdmissionLayer(Arc::new(Admission {
            ledger,
            stalls,
            config,
            direct,
        }))
    }
}

impl<S> Layer<S> for AdmissionLayer {
    type Service = Admit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Admit {
            inner,
            admission: Arc::clone(&self.0),
        }
    }
}

/// The service of [`AdmissionLayer`].
#[derive(Debug, Clone)]
pub struct Admit<S> {
    inner: S,
    admission: Arc<Admission>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> Service<http::Request<Body>> for Admit<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<http::Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        if !req.uri().path().starts_with(SERVICE_PREFIX) {
            return Box::pin(self.inner.call(req));
        }
        if let Some((direct, method)) = self.admission.direct.as_ref().zip(Method::of(req.uri().path())) {
            let call = open(req, &self.admission);
            return Box::pin(admit_direct(direct.clone(), method, call, Arc::clone(&self.admission)));
        }
        // The clone that was made ready is the one that is called.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let call = open(req, &self.admission);
        Box::pin(admit(inner, call, Arc::clone(&self.admission)))
    }
}

/// The peer address of the request's connection, plaintext or TLS.
fn peer(req: &http::Request<Body>) -> Option<SocketAddr> {
    let ext = req.extensions();
    ext.get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| {
            ext.get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|i| i.get_ref().remote_addr())
        })
}

fn answer(status: tonic::Status) -> http::Response<Body> {
    status.into_http()
}

/// A call opened: its head, the body still to read, and the ticket its
/// bytes are charged to. Done before the call's future is made, so that
/// the future holds these once (a future keeps what it is given beside
/// what it moves on, and is moved into its box whole).
struct Opened {
    parts: http::request::Parts,
    body: Body,
    ticket: Ticket,
    peer: Option<SocketAddr>,
}

fn open(req: http::Request<Body>, admission: &Admission) -> Opened {
    let peer = peer(&req);
    let ticket = admission.ledger.ticket(peer);
    let (parts, body) = req.into_parts();
    Opened {
        parts,
        body,
        ticket,
        peer,
    }
}

/// Steps 1 and 3 of the module's list: the request read whole within
/// its time, then the answer's estimate charged with a call slot; the
/// request and the estimate, or the status that refuses the call.
async fn read_and_charge(
    body: Body,
    parts: &http::request::Parts,
    ticket: &mut Ticket,
    config: &AdmissionConfig,
) -> Result<(Bytes, usize), tonic::Status> {
    let request = read_in_time(body, ticket, config).await?;
    let estimate = charge(parts, &request, ticket, config)?;
    Ok((request, estimate))
}

/// Step 3 of the module's list for the request `request` (read whole):
/// the answer's estimate charged to `ticket` with a call slot, or the
/// status that refuses the call.
fn charge(
    parts: &http::request::Parts,
    request: &[u8],
    ticket: &mut Ticket,
    config: &AdmissionConfig,
) -> Result<usize, tonic::Status> {
    let estimate = if parts.uri.path() == CLASSIFY_BATCH {
        match batch_items(request) {
            Some(n) if n <= config.max_batch => n * ITEM_ANSWER_BYTES + ANSWER_OVERHEAD,
            Some(_) => ANSWER_OVERHEAD,
            None => config.max_batch * ITEM_ANSWER_BYTES + ANSWER_OVERHEAD,
        }
    } else if parts.uri.path().ends_with("/Classify") {
        ITEM_ANSWER_BYTES + ANSWER_OVERHEAD
    } else {
        OTHER_ANSWER_BYTES
    };
    ticket.charge_and_take_call(estimate).map_err(|refusal| {
        metrics::counter!(SHED_TOTAL).increment(1);
        refusal.status(refusal.advice())
    })?;
    Ok(estimate)
}

/// A call of `method` admitted and served by `direct`. A future of its
/// own, not a branch of [`admit`]: it does not carry the inner service's
/// call, and [`admit`] does not carry this one.
async fn admit_direct<E>(
    direct: Direct,
    method: Method,
    mut call: Opened,
    admission: Arc<Admission>,
) -> Result<http::Response<Body>, E> {
    // `call`'s fields used where they are (not moved into locals the
    // future would hold beside them).
    let (request, estimate) = match read_and_charge(call.body, &call.parts, &mut call.ticket, &admission.config).await {
        Ok(admitted) => admitted,
        Err(status) => return Ok(answer(status)),
    };
    // Caught here as the CatchPanic layer below would catch it.
    let served = AssertUnwindSafe(direct.serve(method, call.parts, request)).catch_unwind();
    Ok(match ticketed(served, call.ticket, estimate > SPAWN_ABOVE).await {
        Ok((Ok(Ok(answered)), ticket)) => direct_answer(answered, ticket, &admission.stalls),
        Ok((Ok(Err(status)), _)) | Err(status) => answer(status),
        Ok((Err(panic), _)) => panic::internal(method.path(), &*panic),
    })
}

async fn admit<S>(mut inner: S, call: Opened, admission: Arc<Admission>) -> Result<http::Response<Body>, S::Error>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    let Opened {
        mut parts,
        body,
        mut ticket,
        peer,
    } = call;
    let (request, estimate) = match read_and_charge(body, &parts, &mut ticket, &admission.config).await {
        Ok(admitted) => admitted,
        Err(status) => return Ok(answer(status)),
    };
    let watch = parts.uri.path() == WATCH_HOLDS;
    if watch {
        parts
            .extensions
            .insert(StreamAccount::new(Arc::clone(&admission.ledger), peer));
    }
    let spawn = estimate > SPAWN_ABOVE;
    let req = http::Request::from_parts(parts, Body::new(http_body_util::Full::new(request)));
    let (response, mut ticket) = match ticketed(inner.call(req), ticket, spawn).await {
        Ok(done) => done,
        Err(status) => return Ok(answer(status)),
    };
    let response = response?;
    if watch {
        return Ok(watch_answer(response, ticket, &admission.stalls));
    }
    let (parts, mut body) = response.into_parts();
    let (frames, size, done) = take_ready(&mut body).await;
    if done && frames.is_empty() {
        // A trailers-only answer (an error status): nothing left to hold.
        return Ok(http::Response::from_parts(parts, body));
    }
    ticket.set_bytes(size);
    if !done {
        // A server-streaming answer (its first messages are taken above):
        // it lasts as long as its client wants, so it holds no slot.
        ticket.release_call();
    }
    let rest = (!done).then_some(body);
    let answer = Answer::new(frames, rest, ticket, &admission.stalls);
    Ok(http::Response::from_parts(parts, Body::new(answer)))
}

/// `call` run holding `ticket`. With `spawn` (a large batch, decided on
/// the blocking pool, which finishes it even if this call is dropped
/// because the client reset it) the work is run on a task of its own that
/// keeps the ticket until it ends, so resets cannot pile up work beyond the
/// limits. Not an `async fn`: one would hold `call` twice (as given, and
/// as awaited).
fn ticketed<F>(call: F, ticket: Ticket, spawn: bool) -> impl Future<Output = Result<(F::Output, Ticket), tonic::Status>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if !spawn {
        return Either::Left(call.map(move |out| Ok((out, ticket))));
    }
    Either::Right(
        tokio::spawn(async move { (call.await, ticket) })
            .map(|done| done.map_err(|e| tonic::Status::internal(format!("the call's task failed: {e}")))),
    )
}

/// A call answered by [`Direct`]: its message and the trailers of an OK
/// status, held by `ticket` (charged the message's size) until the
/// connection has taken them.
fn direct_answer(answered: Answered, mut ticket: Ticket, stalls: &Stalls) -> http::Response<Body> {
    ticket.set_bytes(answered.message.len());
    let mut frames = Frames::default();
    frames.push_back(Ok(http_body::Frame::data(answered.message)));
    frames.push_back(Ok(http_body::Frame::trailers(ok_trailers())));
    let mut response = http::Response::new(Body::new(Answer::new(frames, None, ticket, stalls)));
    *response.headers_mut() = answered.headers;
    *response.extensions_mut() = answered.extensions;
    response
}

/// A WatchHolds answer: its events are charged to the ledger by the stream
/// while queued (see `crate::doors::watch_bytes`), and taken from it only
/// as the connection asks for them, so the answer holds no slot and no
/// bytes of its own. A refused watch (a trailers-only status) is passed on.
fn watch_answer(response: http::Response<Body>, mut ticket: Ticket, stalls: &Stalls) -> http::Response<Body> {
    if response.headers().contains_key("grpc-status") {
        return response;
    }
    ticket.release_call();
    ticket.set_bytes(0);
    let (parts, body) = response.into_parts();
    let answer = Answer::new(Frames::default(), Some(body), ticket, stalls);
    http::Response::from_parts(parts, Body::new(answer))
}

/// [`read_request`] within `--first-message-timeout` (DEADLINE_EXCEEDED
/// otherwise). Most requests are whole by the time their call starts: they
/// are read at once, and only a request still arriving gets a timer (which
/// then starts a poll later than the call: a few microseconds).
async fn read_in_time(body: Body, ticket: &mut Ticket, config: &AdmissionConfig) -> Result<Bytes, tonic::Status> {
    let mut read = std::pin::pin!(read_request(body, ticket, config.max_message_bytes));
    let now = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
    if let Poll::Ready(result) = now {
        return result;
    }
    match tokio::time::timeout(config.first_message_timeout, read).await {
        Ok(result) => result,
        Err(_) => Err(tonic::Status::deadline_exceeded(format!(
            "the request message did not arrive within {:?} (--first-message-timeout)",
            config.first_message_timeout
        ))),
    }
}

/// Reads the whole request body, charging its bytes to `ticket`. Stops at
/// the first byte past one message of `max_message_bytes`: the message is
/// too large (RESOURCE_EXHAUSTED), or a second one follows (UNIMPLEMENTED).
/// A request in one DATA frame (most) is kept as it came, not copied; only
/// one in several frames is gathered into a buffer.
async fn read_request(mut body: Body, ticket: &mut Ticket, max_message_bytes: usize) -> Result<Bytes, tonic::Status> {
    let mut first = Bytes::new();
    let mut gathered: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| tonic::Status::cancelled(format!("reading the request: {e}")))?;
        let Ok(data) = frame.into_data() else { continue };
        if data.is_empty() {
            // An empty DATA frame (a client's end of stream): nothing to keep.
            if body.is_end_stream() {
                break;
            }
            continue;
        }
        ticket.charge(data.len()).map_err(|r| {
            metrics::counter!(SHED_TOTAL).increment(1);
            r.status(r.advice())
        })?;
        let buf: &[u8] = match gathered.as_mut() {
            Some(buf) => {
                buf.extend_from_slice(&data);
                buf
            }
            None if first.is_empty() => {
                first = data;
                &first
            }
            None => {
                let mut buf = BytesMut::with_capacity(first.len() + data.len());
                buf.extend_from_slice(&first);
                buf.extend_from_slice(&data);
                first = Bytes::new();
                gathered.insert(buf)
            }
        };
        if buf.len() > max_message_bytes + 5 {
            return Err(match message_len(buf) {
                Some(n) if n > max_message_bytes => too_large(n, max_message_bytes),
                _ => second_message(),
            });
        }
        if body.is_end_stream() {
            break;
        }
    }
    let buf = gathered.map_or(first, BytesMut::freeze);
    if let Some(n) = message_len(&buf) {
        if buf.len() > n + 5 {
            return Err(if n > max_message_bytes {
                too_large(n, max_message_bytes)
            } else {
                second_message()
            });
        }
    }
    Ok(buf)
}

fn too_large(n: usize, max: usize) -> tonic::Status {
    tonic::Status::resource_exhausted(format!(
        "request message is {n} bytes; the limit is {max} (--max-message-bytes)"
    ))
}

/// The number of `failures` (field 1) in a framed, uncompressed
/// ClassifyBatchRequest, by a walk over its top-level fields; `None` if it
/// is compressed or does not parse (the decoder will say why).
fn batch_items(framed: &[u8]) -> Option<usize> {
    if framed.first() != Some(&0) {
        return None;
    }
    let mut msg = framed.get(5..)?;
    let mut items = 0;
    while msg.has_remaining() {
        let key = prost::encoding::decode_varint(&mut msg).ok()?;
        let len = match key & 7 {
            0 => {
                prost::encoding::decode_varint(&mut msg).ok()?;
                0
            }
            1 => 8,
            2 => usize::try_from(prost::encoding::decode_varint(&mut msg).ok()?).ok()?,
            5 => 4,
            _ => return None,
        };
        if key >> 3 == 1 && key & 7 == 2 {
            items += 1;
        }
        if len > msg.remaining() {
            return None;
        }
        msg.advance(len);
    }
    Some(items)
}

/// Takes the frames the answer's body has ready (all of a unary answer):
/// the frames, their data bytes, and whether the body is finished.
async fn take_ready(body: &mut Body) -> (Frames, usize, bool) {
    let mut frames = Frames::default();
    let mut size = 0;
    let mut done = false;
    std::future::poll_fn(|cx| {
        loop {
            match Pin::new(&mut *body).poll_frame(cx) {
                Poll::Ready(Some(frame)) => {
                    if let Ok(data) = frame.as_ref().map(http_body::Frame::data_ref) {
                        size += data.map_or(0, Bytes::len);
                    }
                    let end = frame.is_err();
                    frames.push_back(frame);
                    if end {
                        done = true;
                        break;
                    }
                }
                Poll::Ready(None) => {
                    done = true;
                    break;
                }
                Poll::Pending => break,
            }
        }
        Poll::Ready(())
    })
    .await;
    (frames, size, done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::pb;

    fn framed(msg: &impl prost::Message) -> Vec<u8> {
        let body = msg.encode_to_vec();
        let mut out = vec![0];
        out.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn batch_items_counts_failures() {
        let req = pb::ClassifyBatchRequest {
            failures: vec![pb::Failure::default(); 7],
            locale: "ru".into(),
        };
        assert_eq!(batch_items(&framed(&req)), Some(7));
        assert_eq!(batch_items(&framed(&pb::ClassifyBatchRequest::default())), Some(0));
        assert_eq!(batch_items(&[0, 0, 0, 0, 2, 0x0a, 0x05]), None, "truncated");
        assert_eq!(batch_items(&[1, 0, 0, 0, 0]), None, "compressed");
    }

    #[test]
    fn the_peer_is_the_connections_remote_address() {
        let mut req = http::Request::new(Body::empty());
        assert_eq!(peer(&req), None, "in-process: no share of its own");
        let remote: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        req.extensions_mut().insert(TcpConnectInfo {
            local_addr: None,
            remote_addr: Some(remote),
        });
        assert_eq!(peer(&req), Some(remote));
    }

    fn body_of(pieces: Vec<Bytes>) -> Body {
        let frames: Vec<Result<http_body::Frame<Bytes>, tonic::Status>> =
            pieces.into_iter().map(|p| Ok(http_body::Frame::data(p))).collect();
        Body::new(http_body_util::StreamBody::new(tokio_stream::iter(frames)))
    }

    /// `bytes` cut at `cuts`, with empty frames between the pieces.
    fn pieces(bytes: &[u8], cuts: &[usize]) -> Vec<Bytes> {
        let mut out = vec![Bytes::new()];
        let mut at = 0;
        for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
            out.push(Bytes::copy_from_slice(&bytes[at..cut]));
            out.push(Bytes::new());
            at = cut;
        }
        out
    }

    #[tokio::test]
    async fn a_request_reads_the_same_in_any_frames() {
        let req = framed(&pb::ClassifyRequest {
            failure: None,
            locale: "ru".into(),
        });
        let ledger = crate::doors::ledger::Ledger::new(crate::doors::ledger::Limits::default());
        for cuts in [&[][..], &[1], &[3, 5], &[5, 6, 7]] {
            let mut ticket = ledger.ticket(None);
            let read = read_request(body_of(pieces(&req, cuts)), &mut ticket, 64).await;
            assert_eq!(read.map_err(|s| s.code()), Ok(Bytes::from(req.clone())), "{cuts:?}");
            assert_eq!(ticket.bytes(), req.len(), "every byte charged");

            let two = [req.clone(), req.clone()].concat();
            let read = read_request(body_of(pieces(&two, cuts)), &mut ledger.ticket(None), 64).await;
            assert_eq!(read.map_err(|s| s.code()), Err(tonic::Code::Unimplemented), "{cuts:?}");
            let read = read_request(body_of(pieces(&req, cuts)), &mut ledger.ticket(None), 2).await;
            assert_eq!(
                read.map_err(|s| s.code()),
                Err(tonic::Code::ResourceExhausted),
                "{cuts:?}"
            );
        }
        assert_eq!(ledger.held(), (0, 0));
    }

    /// A handler that panics, served directly: caught, and its call slot
    /// and bytes given back, on this task or on one of its own.
    #[tokio::test]
    async fn a_panic_in_a_direct_call_is_caught_and_its_ticket_given_back() {
        let ledger = crate::doors::ledger::Ledger::new(crate::doors::ledger::Limits::default());
        for spawn in [false, true] {
            let mut ticket = ledger.ticket(None);
            ticket.charge_and_take_call(4096).expect("within the limits");
            assert_ne!(ledger.held(), (0, 0));
            fn boom() {
                panic!("boom");
            }
            let served = ticketed(AssertUnwindSafe(async { boom() }).catch_unwind(), ticket, spawn).await;
            let (caught, ticket) = served.expect("the task itself ended");
            let panic = caught.expect_err("the panic is caught");
            let response: http::Response<Body> = panic::internal(Method::Classify.path(), &*panic);
            assert_eq!(
                tonic::Status::from_header_map(response.headers()).map(|s| s.code()),
                Some(tonic::Code::Internal)
            );
            drop(ticket);
            assert_eq!(ledger.held(), (0, 0), "spawn {spawn}");
        }
    }

    #[test]
    fn message_prefix() {
        assert_eq!(message_len(&[0, 0, 0, 1, 0]), Some(256));
        assert_eq!(message_len(&[0, 0, 0]), None);
    }
}
