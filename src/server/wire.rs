//! The request rules of gRPC over HTTP/2 (PROTOCOL-HTTP2.md) that tonic
//! leaves to the application, checked before anything else on every path
//! but the HTTP/JSON door's ([`crate::http::is_http_path`]):
//!
//! - a method other than POST: HTTP 405 (with `Allow: POST`);
//! - a content-type other than `application/grpc` or
//!   `application/grpc+proto` (the only codec served): HTTP 415, so that no
//!   HTTP client takes a gRPC error (HTTP 200) for a success;
//! - a malformed `grpc-timeout` (not 1 to 8 digits and a unit of
//!   `HMSmun`): INTERNAL "malformed grpc-timeout", as grpc-go answers it
//!   (tonic would ignore the header and run without a deadline);
//! - a well-formed `grpc-timeout` is the call's deadline: past it the call
//!   is dropped and answered CANCELLED "Timeout expired", as tonic's Server
//!   did (retryd serves connections itself, without tonic's layers).

use std::task::{Context, Poll};

use tower::{Layer, Service};

use crate::grpc::wire::headers::GRPC_TIMEOUT;

/// Layer applying [`Wire`].
#[derive(Debug, Clone, Copy, Default)]
pub struct WireLayer;

impl<S> Layer<S> for WireLayer {
    type Service = Wire<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Wire { inner }
    }
}

/// Answers requests that are not gRPC, or carry a malformed `grpc-timeout`.
#[derive(Debug, Clone)]
pub struct Wire<S> {
    inner: S,
}

impl<S, B, RB> Service<http::Request<B>> for Wire<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    RB: Default,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = futures_like::Either<S::Future, http::Response<RB>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if crate::http::is_http_path(req.uri().path()) {
            // The HTTP/JSON door's routes: JSON, GET and DELETE are theirs.
            return futures_like::Either::Inner {
                future: self.inner.call(req),
            };
        }
        match check(req.method(), req.headers()) {
            Ok(None) => futures_like::Either::Inner {
                future: self.inner.call(req),
            },
            Ok(Some(deadline)) => futures_like::Either::Deadline {
                future: self.inner.call(req),
                sleep: Box::pin(tokio::time::sleep(deadline)),
                expired: || tonic::Status::cancelled("Timeout expired").into_http(),
            },
            Err(response) => futures_like::Either::Answer {
                response: Some(response),
            },
        }
    }
}

/// `Ok` with the call's deadline, if it has one; else the answer.
fn check<RB: Default>(
    method: &http::Method,
    headers: &http::HeaderMap,
) -> Result<Option<std::time::Duration>, http::Response<RB>> {
    if method != http::Method::POST {
        let mut r = http::Response::new(RB::default());
        *r.status_mut() = http::StatusCode::METHOD_NOT_ALLOWED;
        r.headers_mut()
            .insert(http::header::ALLOW, http::HeaderValue::from_static("POST"));
        return Err(r);
    }
    let content_type = headers.get(http::header::CONTENT_TYPE).map(http::HeaderValue::as_bytes);
    if !content_type.is_some_and(is_grpc_proto) {
        let mut r = http::Response::new(RB::default());
        *r.status_mut() = http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
        return Err(r);
    }
    match headers.get(&GRPC_TIMEOUT).map(|t| parse_timeout(t.as_bytes())) {
        None => Ok(None),
        Some(Ok(deadline)) => Ok(Some(deadline)),
        Some(Err(e)) => Err(tonic::Status::internal(format!("malformed grpc-timeout: {e}")).into_http()),
    }
}

/// `application/grpc` or `application/grpc+proto`, optionally with parameters.
fn is_grpc_proto(value: &[u8]) -> bool {
    let media = value.split(|&b| b == b';').next().unwrap_or_default();
    let media = media.trim_ascii();
    media.eq_ignore_ascii_case(b"application/grpc") || media.eq_ignore_ascii_case(b"application/grpc+proto")
}

/// Parses `grpc-timeout` as grpc-go does: 1 to 8 ASCII digits, then one of
/// `H M S m u n`.
pub fn parse_timeout(value: &[u8]) -> Result<std::time::Duration, String> {
    let shown = String::from_utf8_lossy(value);
    let Some((&unit, digits)) = value.split_last() else {
        return Err("empty".into());
    };
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(format!("{shown:?} is not 1 to 8 digits and a unit"));
    }
    let n: u64 = digits.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0'));
    use std::time::Duration;
    match unit {
        b'H' => Ok(Duration::from_secs(n * 3600)),
        b'M' => Ok(Duration::from_secs(n * 60)),
        b'S' => Ok(Duration::from_secs(n)),
        b'm' => Ok(Duration::from_millis(n)),
        b'u' => Ok(Duration::from_micros(n)),
        b'n' => Ok(Duration::from_nanos(n)),
        _ => Err(format!("{shown:?}: unknown unit (H, M, S, m, u or n)")),
    }
}

/// A two-armed response future (tower's `Either` would need its feature).
mod futures_like {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    pin_project_lite::pin_project! {
        /// The inner call (within its deadline), or an answer ready now.
        #[project = EitherProj]
        pub enum Either<F, R> {
            /// The request passed: the inner service's future.
            Inner { #[pin] future: F },
            /// The same, answered with `expired()` past its deadline.
            Deadline { #[pin] future: F, sleep: Pin<Box<tokio::time::Sleep>>, expired: fn() -> R },
            /// The request was answered here.
            Answer { response: Option<R> },
        }
    }

    impl<F, R, E> Future for Either<F, R>
    where
        F: Future<Output = Result<R, E>>,
    {
        type Output = Result<R, E>;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            match self.project() {
                EitherProj::Inner { future } => future.poll(cx),
                EitherProj::Deadline { future, sleep, expired } => match future.poll(cx) {
                    Poll::Ready(r) => Poll::Ready(r),
                    Poll::Pending => sleep.as_mut().poll(cx).map(|()| Ok(expired())),
                },
                EitherProj::Answer { response } => match response.take() {
                    Some(r) => Poll::Ready(Ok(r)),
                    None => Poll::Pending,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn timeouts_as_grpc_go_reads_them() {
        assert_eq!(parse_timeout(b"1S"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_timeout(b"99999999H"), Ok(Duration::from_secs(99_999_999 * 3600)));
        assert_eq!(parse_timeout(b"250m"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_timeout(b"0n"), Ok(Duration::ZERO));
        for bad in ["abc", "-1S", "1.5S", "99999999999H", "S", "", "1s", "1 S", "+1S"] {
            assert!(parse_timeout(bad.as_bytes()).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn content_types() {
        for ok in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC; charset=utf-8",
        ] {
            assert!(is_grpc_proto(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "application/json",
            "application/grpc+json",
            "application/grpc-web",
            "text/plain",
            "",
        ] {
            assert!(!is_grpc_proto(bad.as_bytes()), "{bad}");
        }
    }

    fn status_of(method: http::Method, headers: &[(&'static str, &'static str)]) -> Option<(u16, Option<i32>)> {
        let mut map = http::HeaderMap::new();
        for (k, v) in headers {
            map.insert(*k, http::HeaderValue::from_static(v));
        }
        check::<String>(&method, &map).err().map(|r| {
            let grpc = tonic::Status::from_header_map(r.headers()).map(|s| s.code() as i32);
            (r.status().as_u16(), grpc)
        })
    }

    #[test]
    fn requests_that_are_not_grpc() {
        let grpc = ("content-type", "application/grpc");
        assert_eq!(status_of(http::Method::POST, &[grpc]), None);
        assert_eq!(
            check::<String>(&http::Method::POST, &{
                let mut m = http::HeaderMap::new();
                m.insert("content-type", http::HeaderValue::from_static("application/grpc"));
                m.insert("grpc-timeout", http::HeaderValue::from_static("250m"));
                m
            })
            .ok(),
            Some(Some(Duration::from_millis(250))),
            "a deadline"
        );
        assert_eq!(status_of(http::Method::GET, &[grpc]), Some((405, None)));
        assert_eq!(
            status_of(http::Method::POST, &[("content-type", "application/json")]),
            Some((415, None))
        );
        assert_eq!(status_of(http::Method::POST, &[]), Some((415, None)));
        assert_eq!(
            status_of(http::Method::POST, &[grpc, ("grpc-timeout", "1.5S")]),
            Some((200, Some(tonic::Code::Internal as i32)))
        );
        assert_eq!(status_of(http::Method::POST, &[grpc, ("grpc-timeout", "20S")]), None);
    }
}
