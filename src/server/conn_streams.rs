//! The service of one connection: what tonic's Server added to each
//! request (the connection's address and TLS certificates in the request's
//! extensions), the count of its open streams for
//! `--idle-connection-timeout` (a request is a stream from when it arrives
//! until its response body is done or dropped; a WatchHolds stream is open
//! as long as it runs), and the hand-over of a stalled stream's alarm to its
//! task ([`super::stream_task`]).
//!
//! The connection is known when its service is made, so counting a stream
//! costs two atomic operations: no lookup by address, no lock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http_body::{Body, Frame, SizeHint};
use tower::Service;

use super::conns::{Entry, Registry, StreamGuard};
use crate::service::stall::StallAlarm;

/// The service of one connection over the shared stack `S`; `I` is the
/// connection's info (tonic's `TcpConnectInfo` or `TlsConnectInfo`).
#[derive(Debug, Clone)]
pub struct ConnService<S, I> {
    inner: S,
    info: I,
    entry: Arc<Entry>,
    registry: Arc<Registry>,
}

impl<S, I> ConnService<S, I> {
    /// The service of the connection `entry` of `registry`, described by `info`.
    pub(super) fn new(inner: S, info: I, entry: Arc<Entry>, registry: Arc<Registry>) -> Self {
        ConnService {
            inner,
            info,
            entry,
            registry,
        }
    }
}

impl<S, I, RB> Service<http::Request<hyper::body::Incoming>> for ConnService<S, I>
where
    S: Service<http::Request<tonic::body::Body>, Response = http::Response<RB>>,
    I: Clone + Send + Sync + 'static,
{
    type Response = http::Response<CountedBody<RB>>;
    type Error = S::Error;
    type Future = CountedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let mut req = req.map(tonic::body::Body::new);
        req.extensions_mut().insert(self.info.clone());
        let guard = self.registry.stream_opened(&self.entry);
        CountedFuture {
            inner: self.inner.call(req),
            guard: Some(guard),
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`ConnService`]: the stream stays counted
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
        if let Ok(response) = &result {
            if let Some(alarm) = response.extensions().get::<StallAlarm>() {
                super::stream_task::hand(alarm.clone());
            }
        }
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
