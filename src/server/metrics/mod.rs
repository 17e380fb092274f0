//! Prometheus metrics: the recorder, the `GET /metrics` endpoint, and a tower
//! layer that counts and times every gRPC call (health and reflection too).
//!
//! Metrics (the gRPC ones by go-grpc-prometheus' names and labels, so stock
//! dashboards work):
//! - `grpc_server_started_total{grpc_type,grpc_service,grpc_method}`: calls received;
//! - `grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code}`: calls finished;
//! - `grpc_server_handling_seconds{grpc_type,grpc_service,grpc_method}`: histogram, from
//!   the request to the end of the response (trailers);
//! - `grpc_server_msg_received_total` / `grpc_server_msg_sent_total`
//!   `{grpc_type,grpc_service,grpc_method}`: messages, counted on the wire;
//! - `retryd_build_info{version,revision}`, `retryd_shutdown_abandoned_calls_total`;
//! - `process_*` (see [`process`]) and `retryd_pooled_*` (see [`pools`]),
//!   rendered at each scrape;
//! - `retryd_decisions_total{catalog,verdict}`, `retryd_unknown_codes_total{catalog}`
//!   and `retryd_batch_items`
//!   (recorded by the service, see [`crate::service::classify`]);
//! - `retryd_policy_reload_total{result}`, `retryd_policy_info{version}` and
//!   `retryd_policy_last_reload_successful` (see [`super::reload`]).
//!
//! Labels never carry client-chosen strings: a path that is not one of the
//! served methods is counted as `unknown`/`unknown`.

pub mod pools;
pub mod process;

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

use super::drain::{ABANDONED_TOTAL, InFlight, InFlightGuard};
use super::reload::{LAST_RELOAD_SUCCESSFUL, POLICY_INFO, RELOAD_TOTAL};
use crate::doors::overload::SHED_TOTAL;
use crate::grpc::wire::headers::GRPC_STATUS;
use crate::service::classify::{BATCH_ITEMS, DECISIONS_TOTAL, UNKNOWN_CODES_TOTAL};

/// Counter of calls received.
pub const STARTED_TOTAL: &str = "grpc_server_started_total";
/// Counter of calls finished, by status code.
pub const HANDLED_TOTAL: &str = "grpc_server_handled_total";
/// Histogram of call durations in seconds.
pub const HANDLING_SECONDS: &str = "grpc_server_handling_seconds";
/// Counter of request messages received (go-grpc-prometheus' name).
pub const MSG_RECEIVED_TOTAL: &str = "grpc_server_msg_received_total";
/// Counter of response messages sent (go-grpc-prometheus' name).
pub const MSG_SENT_TOTAL: &str = "grpc_server_msg_sent_total";
/// Gauge, 1, labelled with the version and the git revision built.
pub const BUILD_INFO: &str = "retryd_build_info";
/// The git revision built (`unknown` when built without git).
pub const REVISION: &str = env!("RETRYD_REVISION");

const SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const ITEMS_BUCKETS: &[f64] = &[1.0, 10.0, 100.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 50000.0];

/// The methods served, as `(path, service, method, type)`; anything else is
/// `unknown`. The type is go-grpc-prometheus' `grpc_type`.
const KNOWN_METHODS: &[(&str, &str, &str, &str)] = &[
    (
        "/retryd.v1.RetryDecisionService/Classify",
        "retryd.v1.RetryDecisionService",
        "Classify",
        UNARY,
    ),
    (
        "/retryd.v1.RetryDecisionService/ClassifyBatch",
        "retryd.v1.RetryDecisionService",
        "ClassifyBatch",
        UNARY,
    ),
    (
        "/retryd.v1.RetryDecisionService/ListCatalogs",
        "retryd.v1.RetryDecisionService",
        "ListCatalogs",
        UNARY,
    ),
    (
        "/retryd.v1.RetryDecisionService/Admit",
        "retryd.v1.RetryDecisionService",
        "Admit",
        UNARY,
    ),
    (
        "/retryd.v1.RetryDecisionService/ReportOutcomes",
        "retryd.v1.RetryDecisionService",
        "ReportOutcomes",
        UNARY,
    ),
    (
        "/retryd.v1.RetryDecisionService/ListHolds",
        "retryd.v1.RetryDecisionService",
        "ListHolds",
        UNARY,
    ),
    (
        "/retryd.v1.RetryDecisionService/ReleaseHold",
        "retryd.v1.RetryDecisionService",
        "ReleaseHold",
        UNARY,
    ),
    (
        "/retryd.v1.RetryDecisionService/WatchHolds",
        "retryd.v1.RetryDecisionService",
        "WatchHolds",
        SERVER_STREAM,
    ),
    ("/grpc.health.v1.Health/Check", "grpc.health.v1.Health", "Check", UNARY),
    (
        "/grpc.health.v1.Health/Watch",
        "grpc.health.v1.Health",
        "Watch",
        SERVER_STREAM,
    ),
    (
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        "grpc.reflection.v1.ServerReflection",
        "ServerReflectionInfo",
        BIDI_STREAM,
    ),
    (
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        "grpc.reflection.v1alpha.ServerReflection",
        "ServerReflectionInfo",
        BIDI_STREAM,
    ),
];

/// `grpc_type` of a unary method.
pub const UNARY: &str = "unary";
/// `grpc_type` of a server-streaming method.
pub const SERVER_STREAM: &str = "server_stream";
/// `grpc_type` of a bidirectional-streaming method.
pub const BIDI_STREAM: &str = "bidi_stream";

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
    metrics::describe_counter!(MSG_RECEIVED_TOTAL, "gRPC request messages received.");
    metrics::describe_counter!(MSG_SENT_TOTAL, "gRPC response messages sent.");
    metrics::describe_counter!(
        ABANDONED_TOTAL,
        "Unary calls still in flight when the shutdown grace ran out (the process then exits 1)."
    );
    metrics::describe_gauge!(
        BUILD_INFO,
        "1, labelled with the retryd version and git revision running."
    );
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION"), "revision" => REVISION).set(1.0);
    metrics::counter!(ABANDONED_TOTAL).increment(0);
    metrics::describe_counter!(HANDLED_TOTAL, "gRPC calls finished, by status code.");
    metrics::describe_histogram!(HANDLING_SECONDS, metrics::Unit::Seconds, "Time to answer a gRPC call.");
    metrics::describe_counter!(DECISIONS_TOTAL, "Retry decisions, by catalog and verdict.");
    metrics::describe_counter!(
        UNKNOWN_CODES_TOTAL,
        "Failures whose code their catalog does not know (decided by the unknown-code rule), by catalog."
    );
    metrics::describe_counter!(
        SHED_TOTAL,
        "Calls answered RESOURCE_EXHAUSTED at once because --max-concurrent-calls were in flight."
    );
    metrics::describe_counter!(
        crate::doors::answer::STALLED_TOTAL,
        "Answers dropped because their client read nothing of them for --stall-timeout."
    );
    {
        use crate::doors::ledger::{BYTES_HELD, BYTES_PEAK, CALLS_HELD, QUEUED_BYTES};
        metrics::describe_gauge!(CALLS_HELD, "Call slots held now (--max-concurrent-calls).");
        metrics::describe_gauge!(
            BYTES_HELD,
            metrics::Unit::Bytes,
            "Request, answer and queued watch-event bytes held now (--max-buffered-bytes)."
        );
        metrics::describe_gauge!(
            BYTES_PEAK,
            metrics::Unit::Bytes,
            "Most request, answer and queued watch-event bytes held at once since the start."
        );
        metrics::describe_gauge!(
            QUEUED_BYTES,
            metrics::Unit::Bytes,
            "Bytes of watch events queued and not yet taken by their connection (at most half of --max-buffered-bytes)."
        );
    }
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
        (&http::Method::GET | &http::Method::HEAD, "/metrics") => {
            (http::StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", {
                let mut page = handle.render();
                process::render(&mut page);
                pools::render(&mut page);
                page
            })
        }
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
    let h = method_handles(path);
    (h.service, h.method)
}

/// The `grpc_code` labels (the names gRPC implementations use, e.g. `OK`,
/// `InvalidArgument`), indexed by status code number.
const CODE_LABELS: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];
const CANCELLED: usize = 1;
const UNKNOWN: usize = 2;

/// The index in [`CODE_LABELS`] of a `grpc-status` header value; anything
/// that is not a known code is `Unknown`.
fn code_index(grpc_status: Option<&http::HeaderValue>) -> usize {
    grpc_status
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|&i| i < CODE_LABELS.len())
        .unwrap_or(UNKNOWN)
}

/// The `grpc_code` label of a `grpc-status` header value.
pub fn code_label(grpc_status: Option<&http::HeaderValue>) -> &'static str {
    CODE_LABELS[code_index(grpc_status)]
}

/// Tower layer recording `grpc_server_*` metrics for every call, and
/// counting unary calls in flight for the drain (see [`super::drain`]).
#[derive(Debug, Clone, Default)]
pub struct GrpcMetricsLayer {
    unary: InFlight,
}

impl GrpcMetricsLayer {
    /// A layer counting its unary calls in flight in `unary`.
    pub fn new(unary: InFlight) -> Self {
        GrpcMetricsLayer { unary }
    }
}

impl<S> Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetrics {
            inner,
            unary: self.unary.clone(),
        }
    }
}

/// The service made by [`GrpcMetricsLayer`].
#[derive(Debug, Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
    unary: InFlight,
}

impl<S, RB> Service<http::Request<tonic::body::Body>> for GrpcMetrics<S>
where
    S: Service<http::Request<tonic::body::Body>, Response = http::Response<RB>>,
{
    type Response = http::Response<MeteredBody<RB>>;
    type Error = S::Error;
    type Future = MeteredFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        if crate::http::is_http_path(req.uri().path()) {
            // Counted by the HTTP door (http_server_requests_total).
            return MeteredFuture {
                inner: self.inner.call(req),
                pending: Pending(None),
                sent: None,
            };
        }
        let handles = method_handles(req.uri().path());
        handles.started.increment(1);
        let received = MessageCounter::new(handles.received.clone());
        let req = req.map(|inner| tonic::body::Body::new(CountedBody { inner, received }));
        let pending = Pending(Some(CallLabels {
            handles,
            start: Instant::now(),
            _in_flight: (handles.kind == UNARY).then(|| self.unary.enter()),
        }));
        MeteredFuture {
            inner: self.inner.call(req),
            pending,
            sent: Some(MessageCounter::new(handles.sent.clone())),
        }
    }
}

/// The metric handles of one method, looked up in the registry once (a
/// lookup hashes and compares the labels: about 2 k instructions a call).
#[derive(Debug)]
struct MethodHandles {
    service: &'static str,
    method: &'static str,
    kind: &'static str,
    started: metrics::Counter,
    received: metrics::Counter,
    sent: metrics::Counter,
    seconds: metrics::Histogram,
    /// `grpc_server_handled_total` by code, registered on first use so the
    /// page shows only the codes that happened.
    handled: [OnceLock<metrics::Counter>; CODE_LABELS.len()],
}

impl MethodHandles {
    fn new(service: &'static str, method: &'static str, kind: &'static str) -> Self {
        let labels = [("grpc_type", kind), ("grpc_service", service), ("grpc_method", method)];
        MethodHandles {
            service,
            method,
            kind,
            started: metrics::counter!(STARTED_TOTAL, &labels),
            received: metrics::counter!(MSG_RECEIVED_TOTAL, &labels),
            sent: metrics::counter!(MSG_SENT_TOTAL, &labels),
            seconds: metrics::histogram!(HANDLING_SECONDS, &labels),
            handled: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    fn handled(&self, code: usize) -> &metrics::Counter {
        self.handled[code].get_or_init(|| {
            metrics::counter!(HANDLED_TOTAL, "grpc_type" => self.kind, "grpc_service" => self.service, "grpc_method" => self.method, "grpc_code" => CODE_LABELS[code])
        })
    }
}

/// The handles of every known method, then `unknown`'s; made on the first
/// call, which comes after [`install`] (handles bind to the recorder
/// installed when they are made).
static METHOD_HANDLES: OnceLock<Vec<MethodHandles>> = OnceLock::new();

fn method_handles(path: &str) -> &'static MethodHandles {
    let all = METHOD_HANDLES.get_or_init(|| {
        KNOWN_METHODS
            .iter()
            .map(|(_, s, m, t)| MethodHandles::new(s, m, t))
            .chain(std::iter::once(MethodHandles::new("unknown", "unknown", "unknown")))
            .collect()
    });
    let i = KNOWN_METHODS
        .iter()
        .position(|(p, _, _, _)| *p == path)
        .unwrap_or(KNOWN_METHODS.len());
    &all[i]
}

#[derive(Debug)]
struct CallLabels {
    handles: &'static MethodHandles,
    start: Instant,
    /// Counts a unary call in flight until the call is recorded.
    _in_flight: Option<InFlightGuard>,
}

/// A call not yet recorded as handled; dropped unfinished, it counts as
/// cancelled (the client went away).
#[derive(Debug)]
struct Pending(Option<CallLabels>);

impl Pending {
    fn finish(&mut self, code: usize) {
        if let Some(c) = self.0.take() {
            c.handles.handled(code).increment(1);
            c.handles.seconds.record(c.start.elapsed().as_secs_f64());
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.finish(CANCELLED);
    }
}

/// Counts the gRPC messages in a stream of body bytes (each is a 5-byte
/// header, flag and big-endian length, then that many bytes).
#[derive(Debug)]
pub struct MessageCounter {
    counter: metrics::Counter,
    header: [u8; 5],
    header_len: usize,
    remaining: usize,
}

impl MessageCounter {
    /// A counter adding each whole message to `counter`.
    pub fn new(counter: metrics::Counter) -> Self {
        MessageCounter {
            counter,
            header: [0; 5],
            header_len: 0,
            remaining: 0,
        }
    }

    /// Feeds the next bytes of the body; returns the messages completed.
    pub fn feed(&mut self, mut bytes: &[u8]) -> u64 {
        let mut done = 0;
        while !bytes.is_empty() {
            if self.remaining > 0 {
                let take = self.remaining.min(bytes.len());
                self.remaining -= take;
                bytes = &bytes[take..];
                if self.remaining == 0 {
                    done += 1;
                }
                continue;
            }
            let take = (5 - self.header_len).min(bytes.len());
            self.header[self.header_len..self.header_len + take].copy_from_slice(&bytes[..take]);
            self.header_len += take;
            bytes = &bytes[take..];
            if self.header_len == 5 {
                self.header_len = 0;
                let len = u32::from_be_bytes([self.header[1], self.header[2], self.header[3], self.header[4]]);
                self.remaining = usize::try_from(len).unwrap_or(usize::MAX);
                if self.remaining == 0 {
                    done += 1;
                }
            }
        }
        if done > 0 {
            self.counter.increment(done);
        }
        done
    }
}

pin_project_lite::pin_project! {
    /// A request body that counts the messages read from it.
    struct CountedBody {
        #[pin]
        inner: tonic::body::Body,
        received: MessageCounter,
    }
}

impl Body for CountedBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        if let Some(data) = frame.as_ref().and_then(|f| f.as_ref().ok()).and_then(Frame::data_ref) {
            this.received.feed(data);
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

pin_project_lite::pin_project! {
    /// The response future of [`GrpcMetrics`].
    pub struct MeteredFuture<F> {
        #[pin]
        inner: F,
        pending: Pending,
        sent: Option<MessageCounter>,
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
                if let Some(status) = response.headers().get(&GRPC_STATUS) {
                    pending.finish(code_index(Some(status)));
                }
                let sent = this.sent.take();
                Ok(response.map(|inner| MeteredBody { inner, pending, sent }))
            }
            Err(e) => {
                this.pending.finish(UNKNOWN);
                Err(e)
            }
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that counts its messages and records the call when
    /// its trailers go out.
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        pending: Pending,
        sent: Option<MessageCounter>,
    }
}

impl<B> Body for MeteredBody<B>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        match &frame {
            Some(Ok(f)) => {
                if let (Some(data), Some(sent)) = (f.data_ref(), this.sent.as_mut()) {
                    sent.feed(data.as_ref());
                }
                if let Some(trailers) = f.trailers_ref() {
                    this.pending.finish(code_index(trailers.get(&GRPC_STATUS)));
                }
            }
            Some(Err(_)) | None => this.pending.finish(UNKNOWN),
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
        for bad in ["17", "-1", "99999999999999999999", ""] {
            assert_eq!(
                code_label(Some(&http::HeaderValue::from_static(bad))),
                "Unknown",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn code_labels_follow_the_status_numbers() {
        // The table is indexed by number: each entry must be that code's name.
        for (i, label) in CODE_LABELS.iter().enumerate() {
            let code = tonic::Code::from_i32(i as i32);
            assert_eq!(code as usize, i, "{label}");
            let expected = match code {
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
            };
            assert_eq!(*label, expected);
        }
    }

    #[test]
    fn each_known_method_has_its_own_handles() {
        for (path, service, method, kind) in KNOWN_METHODS {
            let h = method_handles(path);
            assert_eq!((h.service, h.method, h.kind), (*service, *method, *kind));
        }
        let h = method_handles("/evil/\u{1F600}");
        assert_eq!((h.service, h.method, h.kind), ("unknown", "unknown", "unknown"));
    }
}
