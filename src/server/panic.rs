//! A tower layer that turns a panic in a handler into an INTERNAL answer
//! (and an error log line) instead of a dropped connection.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use tower::{Layer, Service};

/// Layer wrapping every call in [`CatchPanic`].
#[derive(Debug, Clone, Copy, Default)]
pub struct CatchPanicLayer;

impl<S> Layer<S> for CatchPanicLayer {
    type Service = CatchPanic<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CatchPanic { inner }
    }
}

/// Answers INTERNAL when the inner service panics, while making or polling
/// its response future.
#[derive(Debug, Clone)]
pub struct CatchPanic<S> {
    inner: S,
}

impl<S, B, RB> Service<http::Request<B>> for CatchPanic<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    RB: Default,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = CatchPanicFuture<S::Future, RB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let path = req.uri().path().to_owned();
        match catch_unwind(AssertUnwindSafe(|| self.inner.call(req))) {
            Ok(future) => CatchPanicFuture {
                state: State::Running(Box::pin(future)),
                path,
            },
            Err(panic) => CatchPanicFuture {
                state: State::Panicked(Some(internal(&path, &*panic))),
                path,
            },
        }
    }
}

enum State<F, RB> {
    Running(Pin<Box<F>>),
    Panicked(Option<http::Response<RB>>),
}

/// The response future of [`CatchPanic`].
pub struct CatchPanicFuture<F, RB> {
    state: State<F, RB>,
    path: String,
}

// Nothing is pinned in place: the inner future is boxed and the response is
// only moved out, never pinned.
impl<F, RB> Unpin for CatchPanicFuture<F, RB> {}

impl<F, RB> std::fmt::Debug for CatchPanicFuture<F, RB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchPanicFuture")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl<F, RB, E> Future for CatchPanicFuture<F, RB>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
    RB: Default,
{
    type Output = Result<http::Response<RB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Every field is Unpin (the inner future is boxed).
        let this = self.get_mut();
        match &mut this.state {
            State::Running(future) => match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
                Ok(poll) => poll,
                Err(panic) => {
                    // The panicked future is dropped and never polled again.
                    let response = internal(&this.path, &*panic);
                    this.state = State::Panicked(None);
                    Poll::Ready(Ok(response))
                }
            },
            State::Panicked(response) => match response.take() {
                Some(r) => Poll::Ready(Ok(r)),
                // Polled after completion: stay pending rather than panic.
                None => Poll::Pending,
            },
        }
    }
}

/// The INTERNAL answer to a call whose handler panicked (logged with its path and message).
pub(crate) fn internal<RB: Default>(path: &str, panic: &(dyn Any + Send)) -> http::Response<RB> {
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string panic payload)");
    tracing::error!(path, panic = message, "handler panicked; answered INTERNAL");
    tonic::Status::internal("internal error").into_http()
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;

    #[tokio::test]
    async fn a_panicking_handler_answers_internal() {
        let inner = tower::service_fn(|req: http::Request<()>| async move {
            if req.uri().path() == "/boom" {
                panic!("boom");
            }
            Ok::<_, Infallible>(http::Response::new(String::from("fine")))
        });
        let mut svc = CatchPanicLayer.layer(inner);
        let boom = http::Request::builder().uri("/boom").body(()).expect("request");
        let response = svc.call(boom).await.expect("infallible");
        assert_eq!(
            response.headers().get("grpc-status").map(|v| v.as_bytes()),
            Some(&b"13"[..])
        );
        let fine = http::Request::builder().uri("/ok").body(()).expect("request");
        let response = svc.call(fine).await.expect("infallible");
        assert_eq!(response.into_body(), "fine");
    }

    #[tokio::test]
    async fn a_panic_while_making_the_future_answers_internal() {
        #[derive(Clone)]
        struct PanicsInCall;
        impl Service<http::Request<()>> for PanicsInCall {
            type Response = http::Response<String>;
            type Error = Infallible;
            type Future = std::future::Ready<Result<Self::Response, Infallible>>;
            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
                Poll::Ready(Ok(()))
            }
            fn call(&mut self, _: http::Request<()>) -> Self::Future {
                panic!("in call")
            }
        }
        let mut svc = CatchPanicLayer.layer(PanicsInCall);
        let response = svc.call(http::Request::new(())).await.expect("infallible");
        assert_eq!(
            response.headers().get("grpc-status").map(|v| v.as_bytes()),
            Some(&b"13"[..])
        );
    }
}
