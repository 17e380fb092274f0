//! Prometheus metrics: the recorder, the `GET /metrics` endpoint, and a tower
//! layer that counts and times every gRPC call (health and reflection too).
//!
//! Metrics:
//! - `grpc_server_started_total{grpc_service,grpc_method}`: calls received;
//! - `grpc_server_handled_total{grpc_service,grpc_method,grpc_code}`: calls finished;
//! - `grpc_server_handling_seconds{grpc_service,grpc_method}`: histogram, from
//!   the request to the end of the response (trailers);
//! - `retryd_decisions_total{catalog,verdict}` and `retryd_batch_items`
//!   (recorded by the service, see [`crate::grpc::service`]);
//! - `retryd_policy_reload_total{result}`, `retryd_policy_info{version}` and
//!   `retryd_policy_last_reload_successful` (see [`super::reload`]).
//!
//! Labels never carry client-chosen strings: a path that is not one of the
//! served methods is counted as `unknown`/`unknown`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Bytes;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tower::{Layer, Service};

use super::overload::SHED_TOTAL;
use super::reload::{LAST_RELOAD_SUCCESSFUL, POLICY_INFO, RELOAD_TOTAL};
use crate::grpc::service::{BATCH_ITEMS, DECISIONS_TOTAL};

/// Counter of calls received.
pub const STARTED_TOTAL: &str = "grpc_server_started_total";
/// Counter of calls finished, by status code.
pub const HANDLED_TOTAL: &str = "grpc_server_handled_total";
/// Histogram of call durations in seconds.
pub const HANDLING_SECONDS: &str = "grpc_server_handling_seconds";

const SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const ITEMS_BUCKETS: &[f64] = &[1.0, 10.0, 100.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 50000.0];

/// The methods served, as `(path, service, method)`; anything else is `unknown`.
const KNOWN_METHODS: &[(&str, &str, &str)] = &[
    (
        "/retryd.v1.RetryDecisionService/Classify",
        "retryd.v1.RetryDecisionService",
        "Classify",
    ),
    (
        "/retryd.v1.RetryDecisionService/ClassifyBatch",
        "retryd.v1.RetryDecisionService",
        "ClassifyBatch",
    ),
    (
        "/retryd.v1.RetryDecisionService/ListCatalogs",
        "retryd.v1.RetryDecisionService",
        "ListCatalogs",
    ),
    ("/grpc.health.v1.Health/Check", "grpc.health.v1.Health", "Check"),
    ("/grpc.health.v1.Health/Watch", "grpc.health.v1.Health", "Watch"),
    (
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        "grpc.reflection.v1.ServerReflection",
        "ServerReflectionInfo",
    ),
    (
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        "grpc.reflection.v1alpha.ServerReflection",
        "ServerReflectionInfo",
    ),
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once) and returns its handle.
///
/// If another recorder was installed first (e.g. by an embedding program),
/// the handle renders an empty page and retryd's metrics go to that recorder.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new();
            // Bucket lists are non-empty constants, so these cannot fail; on
            // the impossible error the metric is rendered as a summary.
            let builder = match builder.set_buckets_for_metric(Matcher::Full(HANDLING_SECONDS.into()), SECONDS_BUCKETS)
            {
                Ok(b) => b,
                Err(_) => PrometheusBuilder::new(),
            };
            let builder = match builder.set_buckets_for_metric(Matcher::Full(BATCH_ITEMS.into()), ITEMS_BUCKETS) {
                Ok(b) => b,
                Err(_) => PrometheusBuilder::new(),
            };
            let builder = match builder.set_buckets_for_metric(
                Matcher::Full(crate::http::door::DURATION_SECONDS.into()),
                SECONDS_BUCKETS,
            ) {
                Ok(b) => b,
                Err(_) => PrometheusBuilder::new(),
            };
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics will not show retryd's metrics");
            }
            describe();
            handle
        })
        .clone()
}

fn describe() {
    crate::fleet::redis::describe_metrics();
    crate::fleet::describe_metrics();
    metrics::describe_counter!(STARTED_TOTAL, "gRPC calls received.");
    metrics::describe_counter!(HANDLED_TOTAL, "gRPC calls finished, by status code.");
    metrics::describe_histogram!(HANDLING_SECONDS, metrics::Unit::Seconds, "Time to answer a gRPC call.");
    metrics::describe_counter!(DECISIONS_TOTAL, "Retry decisions, by catalog and verdict.");
    metrics::describe_counter!(
        SHED_TOTAL,
        "Calls answered RESOURCE_EXHAUSTED at once because --max-concurrent-calls were in flight."
    );
    metrics::describe_histogram!(BATCH_ITEMS, metrics::Unit::Count, "Failures per ClassifyBatch call.");
    metrics::describe_counter!(
        RELOAD_TOTAL,
        "Policy reload attempts, by result: ok (a new version is in force), unchanged, error (refused; the old policy keeps serving)."
    );
    metrics::describe_gauge!(
        POLICY_INFO,
        "1 for the policy version in force; 0 for versions in force earlier."
    );
    metrics::describe_gauge!(LAST_RELOAD_SUCCESSFUL, "1 unless the latest policy reload was refused.");
}

/// Runs the recorder's periodic upkeep (every 5 s) until dropped or aborted.
///
/// Needed whether or not the endpoint is on: the recorder keeps every
/// histogram sample until upkeep (or a scrape) folds it into the buckets, so
/// without it memory grows with every call (with `--metrics-listen off`
/// about 3 MB per 10 s at 14 000 calls/s, found by bench/soak.sh).
pub async fn upkeep(handle: PrometheusHandle) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        handle.run_upkeep();
    }
}

/// Serves `GET /metrics` on `listener` until the task is dropped or aborted
/// (the upkeep is [`upkeep`]'s, run by the server whether or not this is).
pub async fn serve_endpoint(listener: TcpListener, handle: PrometheusHandle) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // e.g. out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let response = respond(&handle, req.method(), req.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(error = %e, "metrics endpoint: connection error");
            }
        });
    }
}

fn respond(handle: &PrometheusHandle, method: &http::Method, path: &str) -> http::Response<Full<Bytes>> {
    let (status, content_type, body) = match (method, path) {
        (&http::Method::GET | &http::Method::HEAD, "/metrics") => (
            http::StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            handle.render(),
        ),
        (_, "/metrics") => (
            http::StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "use GET\n".to_owned(),
        ),
        _ => (
            http::StatusCode::NOT_FOUND,
            "text/plain",
            "not found; metrics are at /metrics\n".to_owned(),
        ),
    };
    let mut response = http::Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    response
}

/// The fixed `(grpc_service, grpc_method)` labels of a request path.
pub fn method_labels(path: &str) -> (&'static str, &'static str) {
    KNOWN_METHODS
        .iter()
        .find(|(p, _, _)| *p == path)
        .map_or(("unknown", "unknown"), |(_, s, m)| (*s, *m))
}

/// The `grpc_code` label of a `grpc-status` header value (the names gRPC
/// implementations use, e.g. `OK`, `InvalidArgument`).
pub fn code_label(grpc_status: Option<&http::HeaderValue>) -> &'static str {
    let code = grpc_status
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<i32>().ok())
        .map_or(tonic::Code::Unknown, tonic::Code::from_i32);
    match code {
        tonic::Code::Ok => "OK",
        tonic::Code::Cancelled => "Canceled",
        tonic::Code::Unknown => "Unknown",
        tonic::Code::InvalidArgument => "InvalidArgument",
        tonic::Code::DeadlineExceeded => "DeadlineExceeded",
        tonic::Code::NotFound => "NotFound",
        tonic::Code::AlreadyExists => "AlreadyExists",
        tonic::Code::PermissionDenied => "PermissionDenied",
        tonic::Code::ResourceExhausted => "ResourceExhausted",
        tonic::Code::FailedPrecondition => "FailedPrecondition",
        tonic::Code::Aborted => "Aborted",
        tonic::Code::OutOfRange => "OutOfRange",
        tonic::Code::Unimplemented => "Unimplemented",
        tonic::Code::Internal => "Internal",
        tonic::Code::Unavailable => "Unavailable",
        tonic::Code::DataLoss => "DataLoss",
        tonic::Code::Unauthenticated => "Unauthenticated",
    }
}

/// Tower layer recording `grpc_server_*` metrics for every call.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcMetricsLayer;

impl<S> Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetrics { inner }
    }
}

/// The service made by [`GrpcMetricsLayer`].
#[derive(Debug, Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
}

impl<S, B, RB> Service<http::Request<B>> for GrpcMetrics<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
{
    type Response = http::Response<MeteredBody<RB>>;
    type Error = S::Error;
    type Future = MeteredFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if crate::http::is_http_path(req.uri().path()) {
            // Counted by the HTTP door (http_server_requests_total).
            return MeteredFuture {
                inner: self.inner.call(req),
                pending: Pending(None),
            };
        }
        let (service, method) = method_labels(req.uri().path());
        metrics::counter!(STARTED_TOTAL, "grpc_service" => service, "grpc_method" => method).increment(1);
        let pending = Pending(Some(CallLabels {
            service,
            method,
            start: Instant::now(),
        }));
        MeteredFuture {
            inner: self.inner.call(req),
            pending,
        }
    }
}

#[derive(Debug)]
struct CallLabels {
    service: &'static str,
    method: &'static str,
    start: Instant,
}

/// A call not yet recorded as handled; dropped unfinished, it counts as
/// cancelled (the client went away).
#[derive(Debug)]
struct Pending(Option<CallLabels>);

impl Pending {
    fn finish(&mut self, code: &'static str) {
        if let Some(c) = self.0.take() {
            metrics::counter!(HANDLED_TOTAL, "grpc_service" => c.service, "grpc_method" => c.method, "grpc_code" => code)
                .increment(1);
            metrics::histogram!(HANDLING_SECONDS, "grpc_service" => c.service, "grpc_method" => c.method)
                .record(c.start.elapsed().as_secs_f64());
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.finish("Canceled");
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`GrpcMetrics`].
    pub struct MeteredFuture<F> {
        #[pin]
        inner: F,
        pending: Pending,
    }
}

impl<F, RB, E> Future for MeteredFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
{
    type Output = Result<http::Response<MeteredBody<RB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        Poll::Ready(match result {
            Ok(response) => {
                let mut pending = Pending(this.pending.0.take());
                // A trailers-only response (an error) carries the status in its headers.
                if let Some(status) = response.headers().get("grpc-status") {
                    pending.finish(code_label(Some(status)));
                }
                Ok(response.map(|inner| MeteredBody { inner, pending }))
            }
            Err(e) => {
                this.pending.finish("Unknown");
                Err(e)
            }
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that records the call when its trailers go out.
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        pending: Pending,
    }
}

impl<B: Body> Body for MeteredBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        match &frame {
            Some(Ok(f)) => {
                if let Some(trailers) = f.trailers_ref() {
                    this.pending.finish(code_label(trailers.get("grpc-status")));
                }
            }
            Some(Err(_)) | None => this.pending.finish("Unknown"),
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

/// Binds the metrics listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_a_fixed_set() {
        assert_eq!(
            method_labels("/retryd.v1.RetryDecisionService/Classify"),
            ("retryd.v1.RetryDecisionService", "Classify")
        );
        assert_eq!(method_labels("/evil/\u{1F600}"), ("unknown", "unknown"));
        assert_eq!(
            code_label(Some(&http::HeaderValue::from_static("3"))),
            "InvalidArgument"
        );
        assert_eq!(code_label(Some(&http::HeaderValue::from_static("0"))), "OK");
        assert_eq!(code_label(Some(&http::HeaderValue::from_static("x"))), "Unknown");
        assert_eq!(code_label(None), "Unknown");
    }
}
