//! OpenTelemetry traces against a real OTLP/gRPC receiver started here (the
//! `TraceService` server of opentelemetry-proto): the server's spans for
//! Classify, ClassifyBatch and Admit arrive over the protocol, continue the
//! caller's W3C `traceparent`, and carry the decision's attributes.

mod grpc_support;

use std::collections::BTreeMap;
use std::time::Duration;

use grpc_support::{PATIENCE, Server, failure};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use retryd::grpc::pb;
use tokio::sync::mpsc;

/// The receiver: every span exported, with its resource's `service.name`.
struct Receiver(mpsc::UnboundedSender<(String, Span)>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for rs in request.into_inner().resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref())
                .map(|v| format!("{:?}", v.value))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for span in ss.spans {
                    let _ = self.0.send((service.clone(), span));
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn attributes(span: &Span) -> BTreeMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::IntValue(i)) => i.to_string(),
                Some(Value::BoolValue(b)) => b.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

fn with_traceparent<T>(message: T, traceparent: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().expect("ascii"));
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_continue_the_callers_trace_over_otlp() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let otlp = listener.local_addr().expect("addr");
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Receiver(tx)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    // The environment variable every OpenTelemetry SDK reads, and a short
    // batch delay so the test does not wait the default 5 s.
    let server = Server::start_with_env(
        &["--trace-sample-ratio", "0"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("http://{otlp}")),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_SERVICE_NAME", "retryd-under-test"),
        ],
    );
    let mut client = server.client().await;

    // The caller's trace (sampled flag 01): kept although the ratio is 0.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let traceparent = format!("00-{trace_id}-{parent}-01");
    client
        .classify(with_traceparent(
            pb::ClassifyRequest {
                failure: Some(Box::new(failure(
                    "vibecode",
                    "BITRIX_TIMEOUT",
                    pb::OperationKind::Write,
                ))),
                locale: String::new(),
            },
            &traceparent,
        ))
        .await
        .expect("classify");
    client
        .classify_batch(with_traceparent(
            pb::ClassifyBatchRequest {
                failures: vec![failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Read); 2],
                locale: String::new(),
            },
            &traceparent,
        ))
        .await
        .expect("batch");
    let _ = client
        .admit(with_traceparent(
            pb::AdmitRequest {
                catalog: "vibecode".into(),
                dependency: "bitrix".into(),
                tenant: "t1".into(),
                method: String::new(),
                operation: pb::OperationKind::Write as i32,
                attempt: 1,
            },
            &traceparent,
        ))
        .await;
    // The caller's own fault, under another parent: a span whose status
    // the conventions leave unset, with its code.
    let bad_parent = "00f067aa0ba902b8";
    let _ = client
        .classify(with_traceparent(
            pb::ClassifyRequest {
                failure: Some(Box::new(failure("no-such-catalog", "X", pb::OperationKind::Read))),
                locale: String::new(),
            },
            &format!("00-{trace_id}-{bad_parent}-01"),
        ))
        .await
        .expect_err("unknown catalog");
    // The HTTP door: the same trace continued from its header.
    let http_parent = "00f067aa0ba902b9";
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/classify", server.url()))
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{trace_id}-{http_parent}-01"))
        .body(r#"{"failure": {"catalog": "vibecode", "code": "BITRIX_TIMEOUT", "operation": "write"}}"#)
        .send()
        .await
        .expect("POST");
    assert_eq!(answer.status().as_u16(), 200);
    // Not sampled by the caller (flag 00) and ratio 0: no span.
    client
        .classify(with_traceparent(
            pb::ClassifyRequest {
                failure: Some(Box::new(failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Read))),
                locale: String::new(),
            },
            "00-11111111111111111111111111111111-2222222222222222-00",
        ))
        .await
        .expect("classify");

    // By name, and by parent for the two Classify spans.
    let mut spans: BTreeMap<String, (String, Span)> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while spans.len() < 5 {
        let Ok(Some((service, span))) = tokio::time::timeout_at(deadline, rx.recv()).await else {
            panic!("spans received: {:?}\nlog:\n{}", spans.keys(), server.log());
        };
        let key = if hex(&span.parent_span_id) == bad_parent {
            "bad Classify".to_owned()
        } else {
            span.name.clone()
        };
        spans.insert(key, (service, span));
    }
    // Anything else that arrives shortly must not be the unsampled call's.
    while let Ok(Some((_, span))) = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await {
        assert_ne!(
            hex(&span.trace_id),
            "11111111111111111111111111111111",
            "an unsampled call was exported"
        );
    }

    for name in ["Classify", "ClassifyBatch", "Admit"] {
        let full = format!("retryd.v1.RetryDecisionService/{name}");
        let (service, span) = spans
            .get(&full)
            .unwrap_or_else(|| panic!("no {full} span: {:?}", spans.keys()));
        assert!(
            service.contains("retryd-under-test"),
            "OTEL_SERVICE_NAME: service.name {service}"
        );
        assert_eq!(hex(&span.trace_id), trace_id, "{name} continues the caller's trace");
        assert_eq!(
            hex(&span.parent_span_id),
            parent,
            "{name}'s parent is the caller's span"
        );
        assert_eq!(span.kind, 2, "{name}: SPAN_KIND_SERVER");
        let attrs = attributes(span);
        assert_eq!(attrs.get("rpc.method").map(String::as_str), Some(name), "{attrs:?}");
        assert!(
            attrs.get("retryd.catalog").is_some_and(|c| c.contains("vibecode")),
            "{name}: {attrs:?}"
        );
        assert!(attrs.contains_key("retryd.verdict"), "{name}: {attrs:?}");
    }
    let classify = attributes(&spans["retryd.v1.RetryDecisionService/Classify"].1);
    assert_eq!(classify["retryd.code"], "BITRIX_TIMEOUT");
    assert_eq!(
        // The core's word, as metrics and logs spell it.
        classify["retryd.verdict"],
        "state_verification_required",
        "{classify:?}"
    );
    assert!(!classify["retryd.rule"].is_empty(), "{classify:?}");
    // A successful call's code is set too; the caller's fault leaves the status unset.
    assert_eq!(classify["rpc.grpc.status_code"], "0", "{classify:?}");
    let bad = &spans["bad Classify"].1;
    assert_eq!(attributes(bad)["rpc.grpc.status_code"], "3");
    assert_eq!(
        bad.status.as_ref().map_or(0, |s| s.code),
        0,
        "INVALID_ARGUMENT is not a server error: {bad:?}"
    );
    let http = &spans["POST /v1/classify"];
    assert!(http.0.contains("retryd-under-test"), "{}", http.0);
    assert_eq!(
        (hex(&http.1.trace_id), hex(&http.1.parent_span_id)),
        (trace_id.to_owned(), http_parent.to_owned())
    );
    assert_eq!(http.1.kind, 2, "SPAN_KIND_SERVER");
    let http_attrs = attributes(&http.1);
    assert_eq!(http_attrs["http.route"], "/v1/classify", "{http_attrs:?}");
    assert_eq!(http_attrs["http.request.method"], "POST");
    assert_eq!(http_attrs["http.response.status_code"], "200");
    let batch = &spans["retryd.v1.RetryDecisionService/ClassifyBatch"].1;
    assert_eq!(attributes(batch)["retryd.items"], "2");
    assert_eq!(batch.events.iter().filter(|e| e.name == "decision").count(), 2);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Tracing off (the default): starting a span is one check of an unset
/// cell. Measured here; docs/operations.md quotes it.
#[test]
fn tracing_off_costs_nothing_measurable() {
    let metadata = tonic::metadata::MetadataMap::new();
    let n = 1_000_000u32;
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(retryd::doors::traces::start(
            "Classify",
            std::hint::black_box(&metadata),
        ));
    }
    let per_call = t.elapsed() / n;
    eprintln!("traces::start with tracing off: {per_call:?} per call");
    assert!(per_call < Duration::from_micros(1), "{per_call:?}");
}
