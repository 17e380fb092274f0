//! `--max-concurrent-calls`: load shedding over all connections.
//!
//! A call takes a permit from one semaphore shared by every connection; when
//! none is left it is answered RESOURCE_EXHAUSTED at once (a trailers-only
//! response; the handler never runs and the request body is not read), so an
//! overload turns into fast, retryable refusals instead of a queue growing
//! without bound. Health checks (`grpc.health.v1.Health/*`) take no permit:
//! an overloaded server is busy, not unhealthy, and must not be restarted for
//! it.
//!
//! RESOURCE_EXHAUSTED rather than UNAVAILABLE so that clients (and retryd's
//! own metrics) can tell "shed by overload, back off" from "shutting down,
//! go to another replica"; the call was not started, so retrying it is safe.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service};

/// Counter of calls refused by `--max-concurrent-calls`.
pub const SHED_TOTAL: &str = "retryd_calls_shed_total";

/// Paths that are never shed.
const EXEMPT_PREFIX: &str = "/grpc.health.v1.Health/";
/// WatchHolds is a long-lived stream, like health Watch: it takes no slot.
const WATCH_HOLDS: &str = "/retryd.v1.RetryDecisionService/WatchHolds";

/// Layer applying [`Shed`]; `None` limit: every call passes.
#[derive(Debug, Clone)]
pub struct ShedLayer {
    permits: Option<Arc<Semaphore>>,
    limit: usize,
}

impl ShedLayer {
    /// At most `limit` calls at once; 0 means no limit.
    pub fn new(limit: usize) -> Self {
        ShedLayer {
            permits: (limit > 0).then(|| Arc::new(Semaphore::new(limit.min(Semaphore::MAX_PERMITS)))),
            limit,
        }
    }
}

impl ShedLayer {
    /// The call slots, shared with the HTTP door (`None`: no limit).
    pub fn permits(&self) -> Option<Arc<Semaphore>> {
        self.permits.clone()
    }
}

impl<S> Layer<S> for ShedLayer {
    type Service = Shed<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Shed {
            inner,
            permits: self.permits.clone(),
            limit: self.limit,
        }
    }
}

/// Answers RESOURCE_EXHAUSTED when the server already handles its limit of calls.
#[derive(Debug, Clone)]
pub struct Shed<S> {
    inner: S,
    permits: Option<Arc<Semaphore>>,
    limit: usize,
}

impl<S, B, RB> Service<http::Request<B>> for Shed<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    RB: Default,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = ShedFuture<S::Future, RB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let Some(permits) = &self.permits else {
            return ShedFuture::admitted(self.inner.call(req), None);
        };
        // The HTTP door takes its slot itself and refuses in JSON (429).
        let path = req.uri().path();
        if path.starts_with(EXEMPT_PREFIX) || path == WATCH_HOLDS || crate::http::is_http_path(path) {
            return ShedFuture::admitted(self.inner.call(req), None);
        }
        match Arc::clone(permits).try_acquire_owned() {
            Ok(permit) => ShedFuture::admitted(self.inner.call(req), Some(permit)),
            Err(_) => {
                metrics::counter!(SHED_TOTAL).increment(1);
                ShedFuture::refused(
                    tonic::Status::resource_exhausted(format!(
                        "server overloaded: {} calls in flight (--max-concurrent-calls); retry with backoff",
                        self.limit
                    ))
                    .into_http(),
                )
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`Shed`]: the inner call, holding its permit
    /// until the response is ready (or the call is dropped), or the refusal.
    pub struct ShedFuture<F, RB> {
        #[pin]
        inner: Option<F>,
        permit: Option<OwnedSemaphorePermit>,
        refusal: Option<http::Response<RB>>,
    }
}

impl<F, RB> ShedFuture<F, RB> {
    fn admitted(inner: F, permit: Option<OwnedSemaphorePermit>) -> Self {
        ShedFuture {
            inner: Some(inner),
            permit,
            refusal: None,
        }
    }

    fn refused(response: http::Response<RB>) -> Self {
        ShedFuture {
            inner: None,
            permit: None,
            refusal: Some(response),
        }
    }
}

impl<F, RB, E> Future for ShedFuture<F, RB>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
{
    type Output = Result<http::Response<RB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.inner.as_pin_mut() {
            Some(inner) => {
                let out = std::task::ready!(inner.poll(cx));
                // The answer is complete (a unary body is already encoded):
                // the permit goes back now, not when hyper drops the future.
                this.permit.take();
                Poll::Ready(out)
            }
            None => match this.refusal.take() {
                Some(r) => Poll::Ready(Ok(r)),
                // Polled again after completion: stay pending, as futures may.
                None => Poll::Pending,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;

    type Pending = std::future::Pending<Result<http::Response<String>, Infallible>>;

    fn service(limit: usize) -> Shed<tower::util::ServiceFn<impl FnMut(http::Request<()>) -> Pending>> {
        ShedLayer::new(limit).layer(tower::service_fn(|_req: http::Request<()>| std::future::pending()))
    }

    fn request(path: &str) -> http::Request<()> {
        http::Request::builder().uri(path).body(()).unwrap()
    }

    fn shed_code<F: Future<Output = Result<http::Response<String>, Infallible>>>(f: F) -> Option<tonic::Code> {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(r)) => tonic::Status::from_header_map(r.headers()).map(|s| s.code()),
            _ => None,
        }
    }

    #[test]
    fn over_the_limit_is_shed_and_health_never() {
        let mut svc = service(2);
        let a = svc.call(request("/retryd.v1.RetryDecisionService/Classify"));
        let b = svc.call(request("/retryd.v1.RetryDecisionService/Classify"));
        let c = svc.call(request("/retryd.v1.RetryDecisionService/Classify"));
        assert_eq!(shed_code(c), Some(tonic::Code::ResourceExhausted));
        let h = svc.call(request("/grpc.health.v1.Health/Check"));
        assert_eq!(shed_code(h), None, "health is not shed");
        drop(a);
        let d = svc.call(request("/retryd.v1.RetryDecisionService/Classify"));
        assert_eq!(shed_code(d), None, "a finished call frees its permit");
        drop(b);
    }

    #[test]
    fn zero_means_no_limit() {
        let mut svc = service(0);
        let calls: Vec<_> = (0..100)
            .map(|_| svc.call(request("/retryd.v1.RetryDecisionService/Classify")))
            .collect();
        for c in calls {
            assert_eq!(shed_code(c), None);
        }
    }
}
