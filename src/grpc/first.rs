//! The hot unary routes, served ahead of the generated server.
//!
//! Classify, ClassifyBatch and Admit are the calls a fleet makes on every
//! failure (and, for Admit, before a call). [`BytesFirst`] serves those
//! three paths itself and hands every other path to the generated server:
//! - The request's one message is read as tonic reads it (the size limit,
//!   its refusals with their codes and texts) straight from the bytes the
//!   admission layer already read, without tonic's `Streaming` (its buffer
//!   and state machine: ~3 k instructions a Classify, callgrind).
//! - The answer is bytes already: Classify and ClassifyBatch write theirs
//!   straight from the core's decisions ([`super::wire::answer`]), Admit's
//!   is encoded by prost. Each is sent as one data frame, the gRPC message
//!   header written in the room left for it before the message, then the
//!   `grpc-status: 0` trailers ([`AnswerBody`]). tonic's encoder would copy
//!   the bytes into its buffer and run its encoding state machine: ~2.3 k
//!   instructions a Classify, and a 1 000-item answer (300 KB) copied.
//!
//! The server's admission layer reads every request whole before it takes
//! a call slot, so it calls [`Direct`] with the bytes it read, and the
//! three calls skip the router and [`BytesFirst`] (about 5 k instructions a
//! Classify, callgrind): [`BytesFirst`] serves them for a server built
//! without that layer, through the same [`Direct`].
//!
//! The generated methods stay, for a server built without this layer and
//! for the library: they decode the same bytes into the message.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Buf as _;
use bytes::Bytes;
use futures_util::future::Either;
use http_body::Frame;
use tonic::codegen::{Body, BoxFuture, StdError};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

use super::pb;
use super::pb::retry_decision_service_server::RetryDecisionService as _;
use super::service::RetryDecisionApi;
use super::wire::answer::FRAME_HEADER;
use super::wire::codec::{Pooled, invalid_message, message_len, second_message};
use super::wire::encoded::{Encoded, EncodedAdmit};
use super::wire::headers::{GRPC_ENCODING, GRPC_STATUS};
use super::wire::view::BatchRequest;

/// The path of ClassifyBatch, which [`BytesFirst`] serves.
pub const CLASSIFY_BATCH_PATH: &str = "/retryd.v1.RetryDecisionService/ClassifyBatch";

/// The path of Admit, which [`BytesFirst`] serves.
pub const ADMIT_PATH: &str = "/retryd.v1.RetryDecisionService/Admit";

/// The path of Classify, which [`BytesFirst`] serves.
pub const CLASSIFY_PATH: &str = "/retryd.v1.RetryDecisionService/Classify";

/// The three methods served from bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `/retryd.v1.RetryDecisionService/Classify`
    Classify,
    /// `/retryd.v1.RetryDecisionService/ClassifyBatch`
    ClassifyBatch,
    /// `/retryd.v1.RetryDecisionService/Admit`
    Admit,
}

impl Method {
    /// The method served at `path`, if it is one of the three.
    pub fn of(path: &str) -> Option<Method> {
        match path {
            CLASSIFY_PATH => Some(Method::Classify),
            CLASSIFY_BATCH_PATH => Some(Method::ClassifyBatch),
            ADMIT_PATH => Some(Method::Admit),
            _ => None,
        }
    }

    /// The method's path.
    pub fn path(self) -> &'static str {
        match self {
            Method::Classify => CLASSIFY_PATH,
            Method::ClassifyBatch => CLASSIFY_BATCH_PATH,
            Method::Admit => ADMIT_PATH,
        }
    }
}

/// A unary call answered: the response's headers (the call's metadata and
/// `content-type`), its extensions, and the one message, framed (header
/// and bytes), to be sent as one data frame before the trailers of an OK
/// status.
#[derive(Debug)]
pub struct Answered {
    /// The response's headers.
    pub headers: http::HeaderMap,
    /// The response's extensions.
    pub extensions: http::Extensions,
    /// The framed message.
    pub message: Bytes,
}

impl Answered {
    /// The whole response: the message, then the trailers of an OK status
    /// ([`AnswerBody`]).
    pub fn into_response(self) -> http::Response<tonic::body::Body> {
        let mut response = http::Response::new(tonic::body::Body::new(AnswerBody::new(self.message)));
        *response.headers_mut() = self.headers;
        *response.extensions_mut() = self.extensions;
        response
    }
}

/// Classify, ClassifyBatch and Admit served from a request already read
/// whole: the request's head and its bytes in, the answer out. The
/// server's admission layer, which reads every request whole before it
/// takes a call slot, calls this directly; [`BytesFirst`] calls it for a
/// server built without that layer (and for the library).
#[derive(Debug, Clone)]
pub struct Direct {
    api: Arc<RetryDecisionApi>,
    limit: usize,
}

impl Direct {
    /// `api` answering, requests over `limit` bytes refused as the
    /// generated server refuses them.
    pub fn new(api: Arc<RetryDecisionApi>, limit: usize) -> Self {
        Direct { api, limit }
    }

    /// Serves `method` for the request of head `parts` and bytes `framed`
    /// (the whole body: one gRPC message, header and bytes), as tonic's
    /// `Grpc::unary` does with no compression enabled: a compressed request
    /// is refused as tonic refuses it, the one message is decoded under the
    /// limit, and an error is the status to answer with (trailers only).
    pub fn serve(
        &self,
        method: Method,
        parts: http::request::Parts,
        framed: Bytes,
    ) -> impl Future<Output = Result<Answered, Status>> + Send + 'static {
        let api = Arc::clone(&self.api);
        // Decoded before the future is made (a batch only split from its
        // frame: it is read in place when decided), and a future per method: the
        // future then holds only its method's request and call, not the
        // head, the bytes and the other methods' as well (it is moved whole
        // into the caller's box).
        match decoded(method, parts, &framed, self.limit) {
            Err(status) => Either::Left(std::future::ready(Err(status))),
            Ok(Decoded::Classify(r)) => {
                Either::Right(Either::Left(async move { Ok(answered(api.classify_call(r).await?)) }))
            }
            // Boxed: its future is 5 times Classify's.
            Ok(Decoded::ClassifyBatch(r)) => Either::Right(Either::Right(Either::Left(async move {
                Ok(answered(Box::pin(api.classify_batch_call(r)).await?))
            }))),
            Ok(Decoded::Admit(r)) => Either::Right(Either::Right(Either::Right(async move {
                // The generated trait's method; its message encoded here (small: no hold, or one).
                let (metadata, answer, extensions) = api.admit(r).await?.into_parts();
                Ok(answered(Response::from_parts(
                    metadata,
                    EncodedAdmit::encode(&answer),
                    extensions,
                )))
            }))),
        }
    }
}

/// The request of one of the three methods, decoded.
enum Decoded {
    Classify(Request<pb::ClassifyRequest>),
    /// Read in place when decided (its bytes, unframed).
    ClassifyBatch(Request<BatchRequest>),
    Admit(Request<pb::AdmitRequest>),
}

/// The request of `method` with head `parts` and bytes `framed`, refused
/// as tonic's `Grpc::unary` refuses it: compressed, not one message, over
/// `limit`, or not the method's message.
fn decoded(method: Method, parts: http::request::Parts, framed: &Bytes, limit: usize) -> Result<Decoded, Status> {
    refuse_compressed(&parts.headers)?;
    let message = one_message(framed, limit)?;
    Ok(match method {
        Method::Classify => Decoded::Classify(request(parts, message)?),
        Method::ClassifyBatch => {
            let message = BatchRequest::Bytes(framed.slice_ref(message));
            Decoded::ClassifyBatch(Request::from_http(http::Request::from_parts(parts, message)))
        }
        Method::Admit => Decoded::Admit(request(parts, message)?),
    })
}

/// `message` decoded into `U`, with the head `parts`.
fn request<U: Pooled>(parts: http::request::Parts, message: &[u8]) -> Result<Request<U>, Status> {
    let message = U::decode_pooled(message).map_err(invalid_message)?;
    Ok(Request::from_http(http::Request::from_parts(parts, message)))
}

/// A method's answer: its metadata and `content-type` as the headers, its
/// message framed.
fn answered<T: Encoded>(response: Response<T>) -> Answered {
    let (metadata, answer, extensions) = response.into_parts();
    let mut headers = metadata.into_headers();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    Answered {
        headers,
        extensions,
        message: answer.into_frame(),
    }
}

/// The generated server `S`, with Classify, ClassifyBatch and Admit served
/// ahead of it by [`Direct`] ([`RetryDecisionApi::classify_call`],
/// [`RetryDecisionApi::classify_batch_call`] and the generated trait's
/// `admit`): the same request decoding and size limit, answers that are
/// bytes.
#[derive(Debug, Clone)]
pub struct BytesFirst<S> {
    inner: S,
    direct: Direct,
}

impl<S> BytesFirst<S> {
    /// `inner` with `api` answering Classify, ClassifyBatch and Admit; requests
    /// over `max_decoding_message_size` bytes are refused as the generated
    /// server refuses them.
    pub fn new(inner: S, api: Arc<RetryDecisionApi>, max_decoding_message_size: usize) -> Self {
        BytesFirst {
            inner,
            direct: Direct::new(api, max_decoding_message_size),
        }
    }

    /// What serves the three methods, for a layer that has read the request
    /// already (the server's admission layer).
    pub fn direct(&self) -> Direct {
        self.direct.clone()
    }
}

impl<S: NamedService> NamedService for BytesFirst<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> tower::Service<http::Request<B>> for BytesFirst<S>
where
    S: tower::Service<
            http::Request<B>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
            Future = BoxFuture<http::Response<tonic::body::Body>, Infallible>,
        >,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        match Method::of(req.uri().path()) {
            Some(method) => {
                let direct = self.direct.clone();
                Box::pin(async move {
                    let served = async {
                        // Refused before the body is read, as tonic refuses it.
                        refuse_compressed(req.headers())?;
                        let (parts, body) = req.into_parts();
                        let framed = read_body(body, direct.limit).await?;
                        direct.serve(method, parts, framed).await
                    };
                    Ok(match served.await {
                        Ok(answered) => answered.into_response(),
                        Err(status) => status.into_http(),
                    })
                })
            }
            None => self.inner.call(req),
        }
    }
}

/// A request compressed (any `grpc-encoding` but `identity`) refused as
/// tonic refuses it when no compression is enabled.
fn refuse_compressed(headers: &http::HeaderMap) -> Result<(), Status> {
    let Some(encoding) = headers.get(&GRPC_ENCODING).filter(|v| v.as_bytes() != b"identity") else {
        return Ok(());
    };
    let mut status = Status::unimplemented(format!(
        "Content is compressed with `{}` which isn't supported",
        String::from_utf8_lossy(encoding.as_bytes())
    ));
    status.metadata_mut().insert(
        "grpc-accept-encoding",
        tonic::metadata::MetadataValue::from_static("identity"),
    );
    Err(status)
}

/// The request's bytes, read until the end or until past one message of
/// `limit` bytes. The server's admission layer has read the request
/// already and hands it over as one frame, kept as it is; only a request
/// in several frames is gathered into a buffer. Trailers of a request are
/// not read (the admission layer drops them too).
async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, Status>
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    use http_body_util::BodyExt as _;
    let mut body = pin!(body);
    let mut first = Bytes::new();
    let mut gathered: Option<bytes::BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Status::from_error(e.into()))?;
        let Ok(data) = frame.into_data().map(|mut d| d.copy_to_bytes(d.remaining())) else {
            continue;
        };
        let read = match gathered.as_mut() {
            Some(buf) => {
                buf.extend_from_slice(&data);
                buf.len()
            }
            None if first.is_empty() => {
                first = data;
                first.len()
            }
            None => {
                let mut buf = bytes::BytesMut::with_capacity(first.len() + data.len());
                buf.extend_from_slice(&first);
                buf.extend_from_slice(&data);
                gathered.insert(buf).len()
            }
        };
        if read > limit.saturating_add(FRAME_HEADER) {
            break; // enough to refuse it
        }
    }
    Ok(gathered.map_or(first, bytes::BytesMut::freeze))
}

/// The one message of a unary request's bytes.
fn one_message(framed: &[u8], limit: usize) -> Result<&[u8], Status> {
    let Some((header, rest)) = framed.split_first_chunk::<FRAME_HEADER>() else {
        return Err(if framed.is_empty() {
            Status::internal("Missing request message.")
        } else {
            Status::internal("Unexpected EOF decoding stream.")
        });
    };
    match header[0] {
        0 => {}
        1 => {
            return Err(Status::internal(
                "protocol error: received message with compressed-flag but no grpc-encoding was specified",
            ));
        }
        f => {
            return Err(Status::internal(format!(
                "protocol error: received message with invalid compression flag: {f} (valid flags are 0 and 1), while sending request"
            )));
        }
    }
    let len = message_len(header).unwrap_or(usize::MAX);
    if len > limit {
        return Err(Status::out_of_range(format!(
            "Error, decoded message length too large: found {len} bytes, the limit is: {limit} bytes"
        )));
    }
    match rest.len().cmp(&len) {
        std::cmp::Ordering::Less => Err(Status::internal("Unexpected EOF decoding stream.")),
        std::cmp::Ordering::Equal => Ok(rest),
        std::cmp::Ordering::Greater => Err(second_message()),
    }
}

/// The trailers of an OK status (`grpc-status: 0`).
pub fn ok_trailers() -> http::HeaderMap {
    let mut trailers = http::HeaderMap::with_capacity(1);
    trailers.insert(GRPC_STATUS.clone(), http::HeaderValue::from_static("0"));
    trailers
}

/// A unary gRPC answer already framed: the message (header and bytes, one
/// data frame, sent as it is), then the trailers of an OK status.
#[derive(Debug)]
pub struct AnswerBody {
    message: Option<Bytes>,
    trailers_sent: bool,
}

impl AnswerBody {
    /// The answer `message`, a whole gRPC message (header and bytes).
    pub fn new(message: Bytes) -> Self {
        AnswerBody {
            message: Some(message),
            trailers_sent: false,
        }
    }
}

impl Body for AnswerBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(message) = self.message.take() {
            return Poll::Ready(Some(Ok(Frame::data(message))));
        }
        if self.trailers_sent {
            return Poll::Ready(None);
        }
        self.trailers_sent = true;
        Poll::Ready(Some(Ok(Frame::trailers(ok_trailers()))))
    }

    fn is_end_stream(&self) -> bool {
        self.trailers_sent
    }
}

#[cfg(test)]
#[path = "first_tests.rs"]
mod tests;
