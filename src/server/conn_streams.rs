//! Open streams per connection, for `--idle-connection-timeout`: a request
//! is a stream from when it arrives until its response body is done (a
//! WatchHolds stream is open as long as it runs). The connection is found
//! by its peer address in the [`Registry`] of [`super::conns`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http_body::{Body, Frame, SizeHint};
use tower::{Layer, Service};

use super::conns::{Registry, StreamGuard};

/// Layer counting each connection's open streams.
#[derive(Debug, Clone)]
pub struct StreamCountLayer {
    registry: Arc<Registry>,
}

impl StreamCountLayer {
    /// Counts into `registry`.
    pub fn new(registry: Arc<Registry>) -> Self {
        StreamCountLayer { registry }
    }
}

impl<S> Layer<S> for StreamCountLayer {
    type Service = StreamCount<S>;

    fn layer(&self, inner: S) -> Self::Service {
        StreamCount {
            inner,
            registry: Arc::clone(&self.registry),
        }
    }
}

/// See [`StreamCountLayer`].
#[derive(Debug, Clone)]
pub struct StreamCount<S> {
    inner: S,
    registry: Arc<Registry>,
}

impl<S, B, RB> Service<http::Request<B>> for StreamCount<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
{
    type Response = http::Response<CountedBody<RB>>;
    type Error = S::Error;
    type Future = CountedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let guard = crate::doors::peers::remote_addr(req.extensions()).and_then(|p| self.registry.stream_opened(p));
        CountedFuture {
            inner: self.inner.call(req),
            guard,
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`StreamCount`]: the stream stays counted
    /// in its body.
    pub struct CountedFuture<F> {
        #[pin]
        inner: F,
        guard: Option<StreamGuard>,
    }
}

impl<F, RB, E> Future for CountedFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
{
    type Output = Result<http::Response<CountedBody<RB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        let guard = this.guard.take();
        Poll::Ready(result.map(|r| r.map(|inner| CountedBody { inner, guard })))
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its stream counted until it is done or
    /// dropped.
    pub struct CountedBody<B> {
        #[pin]
        inner: B,
        guard: Option<StreamGuard>,
    }
}

impl<B: Body> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) {
            this.guard.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
