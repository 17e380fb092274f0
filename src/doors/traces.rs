//! OpenTelemetry traces: one server span per Classify, ClassifyBatch and
//! Admit call, continuing the caller's trace from the W3C `traceparent`
//! (and `tracestate`) of the gRPC metadata, exported over OTLP/gRPC.
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
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| TraceError(e.to_string()))?;
    let provider = SdkTracerProvider::builder()
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio))))
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("retryd")
                .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                .build(),
        )
        .build();
    let _ = TRACER.set(provider.tracer("retryd"));
    Ok(Exporter(provider))
}

/// One call's span; ended when dropped.
#[derive(Debug)]
pub struct CallSpan(opentelemetry_sdk::trace::Span);

impl CallSpan {
    /// Records an attribute.
    pub fn set(&mut self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        self.0.set_attribute(KeyValue::new(key, value.into()));
    }

    /// Adds an event with attributes.
    pub fn event(&mut self, name: &'static str, attributes: Vec<KeyValue>) {
        self.0.add_event(name, attributes);
    }

    /// Marks the call failed with `status`.
    pub fn fail(&mut self, status: &tonic::Status) {
        self.set("rpc.grpc.status_code", i64::from(status.code() as i32));
        self.0.set_status(Status::error(status.message().to_owned()));
    }
}

impl Drop for CallSpan {
    fn drop(&mut self) {
        self.0.end();
    }
}

struct Metadata<'a>(&'a tonic::metadata::MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// The service the spans are of (`rpc.service`; the gRPC adapter's
/// `SERVICE_NAME`, checked equal by a test there).
pub const RPC_SERVICE: &str = "retryd.v1.RetryDecisionService";

/// Starts the span of `method` (of [`RPC_SERVICE`]) as a child of the
/// caller's trace, if tracing is on.
pub fn start(method: &'static str, metadata: &tonic::metadata::MetadataMap) -> Option<CallSpan> {
    let tracer = TRACER.get()?;
    let parent: Context = TraceContextPropagator::new().extract(&Metadata(metadata));
    let span = tracer
        .span_builder(format!("{RPC_SERVICE}/{method}"))
        .with_kind(SpanKind::Server)
        .with_attributes([
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", RPC_SERVICE),
            KeyValue::new("rpc.method", method),
        ])
        .start_with_context(tracer, &parent);
    Some(CallSpan(span))
}
