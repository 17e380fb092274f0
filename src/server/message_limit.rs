//! RESOURCE_EXHAUSTED for a request message over `--max-message-bytes`.
//!
//! tonic enforces the limit (`max_decoding_message_size`) but answers
//! OUT_OF_RANGE; the gRPC spec says a message larger than the receive limit
//! is RESOURCE_EXHAUSTED, and clients retry-classify by that code. This
//! layer rewrites exactly that answer (a trailers-only response carrying
//! tonic's "decoded message length too large" error) and names the flag.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tower::{Layer, Service};

/// The start of tonic's error message for an oversize message.
const TONIC_TOO_LARGE: &str = "Error, decoded message length too large";

/// Layer applying [`MessageLimit`].
#[derive(Debug, Clone, Copy)]
pub struct MessageLimitLayer {
    max_message_bytes: usize,
}

impl MessageLimitLayer {
    /// For a server whose services decode at most `max_message_bytes`.
    pub fn new(max_message_bytes: usize) -> Self {
        MessageLimitLayer { max_message_bytes }
    }
}

impl<S> Layer<S> for MessageLimitLayer {
    type Service = MessageLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        MessageLimit {
            inner,
            max_message_bytes: self.max_message_bytes,
        }
    }
}

/// Turns tonic's OUT_OF_RANGE "message too large" into RESOURCE_EXHAUSTED.
#[derive(Debug, Clone)]
pub struct MessageLimit<S> {
    inner: S,
    max_message_bytes: usize,
}

impl<S, B, RB> Service<http::Request<B>> for MessageLimit<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    RB: Default,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = MessageLimitFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        MessageLimitFuture {
            inner: self.inner.call(req),
            max_message_bytes: self.max_message_bytes,
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`MessageLimit`].
    pub struct MessageLimitFuture<F> {
        #[pin]
        inner: F,
        max_message_bytes: usize,
    }
}

impl<F, RB, E> Future for MessageLimitFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
    RB: Default,
{
    type Output = Result<http::Response<RB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.inner.poll(cx))?;
        Poll::Ready(Ok(rewrite(response, *this.max_message_bytes)))
    }
}

fn rewrite<RB: Default>(response: http::Response<RB>, max_message_bytes: usize) -> http::Response<RB> {
    let Some(status) = tonic::Status::from_header_map(response.headers()) else {
        return response;
    };
    if status.code() != tonic::Code::OutOfRange || !status.message().starts_with(TONIC_TOO_LARGE) {
        return response;
    }
    let found = status
        .message()
        .split_once("found ")
        .and_then(|(_, rest)| rest.split_once(' '))
        .map_or("", |(n, _)| n);
    tonic::Status::resource_exhausted(format!(
        "request message is {found} bytes; the limit is {max_message_bytes} (--max-message-bytes)"
    ))
    .into_http()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_size_error_is_rewritten() {
        let too_large = tonic::Status::out_of_range(
            "Error, decoded message length too large: found 70028 bytes, the limit is: 65536 bytes",
        )
        .into_http::<String>();
        let out = rewrite(too_large, 65536);
        let status = tonic::Status::from_header_map(out.headers()).expect("status");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            status.message(),
            "request message is 70028 bytes; the limit is 65536 (--max-message-bytes)"
        );

        let other = tonic::Status::out_of_range("attempt out of range").into_http::<String>();
        let out = rewrite(other, 65536);
        assert_eq!(
            tonic::Status::from_header_map(out.headers()).expect("status").code(),
            tonic::Code::OutOfRange
        );
        let ok = http::Response::new(String::from("body"));
        assert_eq!(rewrite(ok, 1).into_body(), "body");
    }
}
