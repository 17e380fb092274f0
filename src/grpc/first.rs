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
//! The generated methods stay, for a server built without this layer and
//! for the library: they decode the same bytes into the message.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Buf as _;
use bytes::Bytes;
use http_body::Frame;
use tonic::codegen::{Body, BoxFuture, StdError};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

use super::pb::retry_decision_service_server::RetryDecisionService as _;
use super::service::RetryDecisionApi;
use super::wire::answer::FRAME_HEADER;
use super::wire::codec::{Pooled, invalid_message, message_len, second_message};
use super::wire::encoded::{Encoded, EncodedAdmit};
use super::wire::headers::{GRPC_ENCODING, GRPC_STATUS};

/// The path of ClassifyBatch, which [`BytesFirst`] serves.
pub const CLASSIFY_BATCH_PATH: &str = "/retryd.v1.RetryDecisionService/ClassifyBatch";

/// The path of Admit, which [`BytesFirst`] serves.
pub const ADMIT_PATH: &str = "/retryd.v1.RetryDecisionService/Admit";

/// The path of Classify, which [`BytesFirst`] serves.
pub const CLASSIFY_PATH: &str = "/retryd.v1.RetryDecisionService/Classify";

/// The generated server `S`, with Classify, ClassifyBatch and Admit served
/// ahead of it by [`RetryDecisionApi::classify_call`],
/// [`RetryDecisionApi::classify_batch_call`] and the generated trait's
/// `admit`: the same request decoding and size limit, answers that are
/// bytes.
#[derive(Debug, Clone)]
pub struct BytesFirst<S> {
    inner: S,
    api: Arc<RetryDecisionApi>,
    max_decoding_message_size: usize,
}

impl<S> BytesFirst<S> {
    /// `inner` with `api` answering Classify, ClassifyBatch and Admit; requests
    /// over `max_decoding_message_size` bytes are refused as the generated
    /// server refuses them.
    pub fn new(inner: S, api: Arc<RetryDecisionApi>, max_decoding_message_size: usize) -> Self {
        BytesFirst {
            inner,
            api,
            max_decoding_message_size,
        }
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
        let limit = self.max_decoding_message_size;
        match req.uri().path() {
            CLASSIFY_PATH => {
                let api = Arc::clone(&self.api);
                Box::pin(unary(move |r| async move { api.classify_call(r).await }, limit, req))
            }
            CLASSIFY_BATCH_PATH => {
                let api = Arc::clone(&self.api);
                Box::pin(unary(
                    move |r| async move { api.classify_batch_call(r).await },
                    limit,
                    req,
                ))
            }
            ADMIT_PATH => {
                let api = Arc::clone(&self.api);
                // The generated trait's method; its message encoded here (small: no hold, or one).
                Box::pin(unary(
                    move |r| async move {
                        let (metadata, answer, extensions) = api.admit(r).await?.into_parts();
                        Ok(Response::from_parts(
                            metadata,
                            EncodedAdmit::encode(&answer),
                            extensions,
                        ))
                    },
                    limit,
                    req,
                ))
            }
            _ => self.inner.call(req),
        }
    }
}

/// Serves `req` as the unary method `call`, as tonic's `Grpc::unary`
/// does with no compression enabled: a compressed request is refused as
/// tonic refuses it, the one message is decoded under `limit`, and any
/// error is a trailers-only answer. The answer is [`AnswerBody`].
async fn unary<T, U, B, F, Fut>(
    call: F,
    limit: usize,
    req: http::Request<B>,
) -> Result<http::Response<tonic::body::Body>, Infallible>
where
    T: Encoded,
    U: Pooled + Send + 'static,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
    F: FnOnce(Request<U>) -> Fut,
    Fut: Future<Output = Result<Response<T>, Status>>,
{
    let request = match decode::<U, B>(req, limit).await {
        Ok(r) => r,
        Err(status) => return Ok(status.into_http()),
    };
    let (metadata, answer, extensions) = match call(request).await {
        Ok(r) => r.into_parts(),
        Err(status) => return Ok(status.into_http()),
    };
    let mut response = http::Response::new(tonic::body::Body::new(AnswerBody::new(answer.into_frame())));
    *response.headers_mut() = metadata.into_headers();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    *response.extensions_mut() = extensions;
    Ok(response)
}

/// The request's one message and its metadata, refused as tonic's
/// `Grpc::unary` refuses (same codes, same texts).
async fn decode<U, B>(req: http::Request<B>, limit: usize) -> Result<Request<U>, Status>
where
    U: Pooled + Send + 'static,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    if let Some(encoding) = req
        .headers()
        .get(&GRPC_ENCODING)
        .filter(|v| v.as_bytes() != b"identity")
    {
        let mut status = Status::unimplemented(format!(
            "Content is compressed with `{}` which isn't supported",
            String::from_utf8_lossy(encoding.as_bytes())
        ));
        status.metadata_mut().insert(
            "grpc-accept-encoding",
            tonic::metadata::MetadataValue::from_static("identity"),
        );
        return Err(status);
    }
    let (parts, body) = req.into_parts();
    let framed = read_body(body, limit).await?;
    let message = one_message(&framed, limit)?;
    let message = U::decode_pooled(message).map_err(invalid_message)?;
    Ok(Request::from_http(http::Request::from_parts(parts, message)))
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
        let mut trailers = http::HeaderMap::with_capacity(1);
        trailers.insert(GRPC_STATUS.clone(), http::HeaderValue::from_static("0"));
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.trailers_sent
    }
}

#[cfg(test)]
#[path = "first_tests.rs"]
mod tests;
