//! OpenTelemetry traces: one server span per Classify, ClassifyBatch and
//! Admit call, and per HTTP door request, continuing the caller's trace
//! from the W3C `traceparent` (and `tracestate`) of the gRPC metadata or
//! HTTP headers, exported over OTLP/gRPC. `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES` and the exporter's `OTEL_EXPORTER_OTLP_*`
//! variables are honoured.
//!
//! Off by default, and then free: [`start`] is one load of an unset
//! `OnceLock`. On (`--otlp-endpoint`, or `OTEL_EXPORTER_OTLP_ENDPOINT`),
//! spans are sampled (parent-based: a caller's sampling decision is kept;
//! root spans by `--trace-sample-ratio`), queued to a batch processor that
//! exports from its own thread, and dropped rather than waited for when the
//! queue (2 048 spans) is full: a call never blocks on tracing.
//!
//! Attributes: `rpc.system`, `rpc.service`, `rpc.method`, and the
//! decision's `retryd.catalog`, `retryd.code`, `retryd.verdict`,
//! `retryd.rule` (a batch: `retryd.items`, `retryd.errors`; Admit:
//! `retryd.admitted`, and the hold's code and rule when held).

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};

static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// The exporter could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("--otlp-endpoint: {0}")]
pub struct TraceError(String);

/// The running exporter; [`Exporter::shutdown`] flushes it.
#[derive(Debug)]
pub struct Exporter(SdkTracerProvider);

impl Exporter {
    /// Exports the spans still queued (for at most a few seconds) and stops.
    /// Blocking: call it off the async runtime's threads, runtime alive.
    pub fn shutdown(self) {
        if let Err(e) = self.0.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(error = %e, "traces: shutdown");
        }
    }
}

/// Starts exporting to `endpoint` (`http://collector:4317`), sampling root
/// spans at `ratio`. Must run inside the tokio runtime. Only the first call
/// takes effect for the process.
pub fn init(endpoint: &str, ratio: f64) -> Result<Exporter, TraceError> {
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint);
    // 5 s unless the environment names a timeout (an explicit one would override it).
    if ["OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"]
        .iter()
        .all(|k| std::env::var_os(k).is_none())
    {
        exporter = exporter.with_timeout(Duration::from_secs(5));
    }
    let exporter = exporter.build().map_err(|e| TraceError(e.to_string()))?;
    let provider = SdkTracerProvider::builder()
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio))))
        .with_batch_exporter(exporter)
        .with_resource(resource())
        .build();
    let _ = TRACER.set(provider.tracer("retryd"));
    Ok(Exporter(provider))
}

/// The spans' resource: `service.name` from `OTEL_SERVICE_NAME` or
/// `OTEL_RESOURCE_ATTRIBUTES` (the SDK's environment detector), else
/// `retryd`; `service.version` this build's.
fn resource() -> opentelemetry_sdk::Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
            .is_ok_and(|v| v.split(',').any(|kv| kv.trim().starts_with("service.name=")));
    let builder = opentelemetry_sdk::Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if named {
        builder.build()
    } else {
        builder.with_service_name("retryd").build()
    }
}

/// How a call ended, for its span.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// A gRPC call's status code (`rpc.grpc.status_code`, always set).
    Grpc(tonic::Code),
    /// An HTTP request's status (`http.response.status_code`).
    Http(u16),
}

/// One call's span; ended when dropped, with its status code set and its
/// span status as the OpenTelemetry conventions say: ERROR only for a
/// server fault (gRPC UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL,
/// UNAVAILABLE, DATA_LOSS; HTTP 5xx), unset for the caller's own faults.
#[derive(Debug)]
pub struct CallSpan {
    span: opentelemetry_sdk::trace::Span,
    outcome: Outcome,
    message: String,
}

impl CallSpan {
    /// Records an attribute.
    pub fn set(&mut self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        self.span.set_attribute(KeyValue::new(key, value.into()));
    }

    /// Adds an event with attributes.
    pub fn event(&mut self, name: &'static str, attributes: Vec<KeyValue>) {
        self.span.add_event(name, attributes);
    }

    /// Marks the call failed with `status`.
    pub fn fail(&mut self, status: &tonic::Status) {
        self.outcome = Outcome::Grpc(status.code());
        status.message().clone_into(&mut self.message);
    }

    /// An HTTP request's answer status.
    pub fn answered(&mut self, status: u16) {
        self.outcome = Outcome::Http(status);
    }
}

/// Whether a gRPC server span ends in ERROR (the RPC semantic conventions).
pub fn grpc_server_error(code: tonic::Code) -> bool {
    use tonic::Code::{DataLoss, DeadlineExceeded, Internal, Unavailable, Unimplemented, Unknown};
    matches!(
        code,
        Unknown | DeadlineExceeded | Unimplemented | Internal | Unavailable | DataLoss
    )
}

impl Drop for CallSpan {
    fn drop(&mut self) {
        let error = match self.outcome {
            Outcome::Grpc(code) => {
                self.set("rpc.grpc.status_code", i64::from(code as i32));
                grpc_server_error(code)
            }
            Outcome::Http(status) => {
                self.set("http.response.status_code", i64::from(status));
                status >= 500
            }
        };
        if error {
            self.span.set_status(Status::error(std::mem::take(&mut self.message)));
        }
        self.span.end();
    }
}

/// A request's headers (gRPC metadata is HTTP/2 headers) as the propagator reads them.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The service the spans are of (`rpc.service`; the gRPC adapter's
/// `SERVICE_NAME`, checked equal by a test there).
pub const RPC_SERVICE: &str = "retryd.v1.RetryDecisionService";

/// Starts the span of `method` (of [`RPC_SERVICE`]) as a child of the
/// caller's trace, if tracing is on.
pub fn start(method: &'static str, metadata: &tonic::metadata::MetadataMap) -> Option<CallSpan> {
    let tracer = TRACER.get()?;
    let parent: Context = TraceContextPropagator::new().extract(&Headers(metadata.as_ref()));
    let span = tracer
        .span_builder(format!("{RPC_SERVICE}/{method}"))
        .with_kind(SpanKind::Server)
        .with_attributes([
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", RPC_SERVICE),
            KeyValue::new("rpc.method", method),
        ])
        .start_with_context(tracer, &parent);
    Some(CallSpan {
        span,
        outcome: Outcome::Grpc(tonic::Code::Ok),
        message: String::new(),
    })
}

/// Starts the span of an HTTP door request to `route` (a template of the
/// routes) as a child of the caller's trace, if tracing is on: named
/// `{method} {route}` with the HTTP server conventions' attributes.
pub fn start_http(method: &http::Method, route: &'static str, headers: &http::HeaderMap) -> Option<CallSpan> {
    let tracer = TRACER.get()?;
    let parent: Context = TraceContextPropagator::new().extract(&Headers(headers));
    let span = tracer
        .span_builder(format!("{method} {route}"))
        .with_kind(SpanKind::Server)
        .with_attributes([
            KeyValue::new("http.request.method", method.as_str().to_owned()),
            KeyValue::new("http.route", route),
            KeyValue::new("url.scheme", "http"),
        ])
        .start_with_context(tracer, &parent);
    Some(CallSpan {
        span,
        outcome: Outcome::Http(200),
        message: String::new(),
    })
}
