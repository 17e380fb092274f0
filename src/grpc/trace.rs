//! The decision's attributes on the OpenTelemetry span of a gRPC call
//! (the span itself is [`crate::doors::traces`]'s). Verdicts are the core's
//! words (`retry_with_limit`), as in metrics and logs.

use tonic::Status;

use super::convert::verdict_from_proto;
use super::pb;
use crate::doors::traces::CallSpan;

/// The verdict's word (`unspecified` for a number this build does not know).
fn verdict_word(d: &pb::Decision) -> &'static str {
    verdict_from_proto(d.verdict).map_or("unspecified", |v| v.as_str())
}

/// The decision's attributes on a Classify span.
pub fn trace_decision(span: &mut CallSpan, d: &pb::Decision) {
    span.set("retryd.catalog", d.catalog.clone());
    span.set("retryd.code", d.code.clone());
    span.set("retryd.verdict", verdict_word(d));
    span.set("retryd.rule", d.rule.clone());
}

/// Batches up to this many items get one span event per decision.
const TRACED_BATCH_ITEMS: usize = 32;

/// A ClassifyBatch span: errors, the distinct catalogs and verdicts, and
/// for small batches one `decision` event per item (catalog, code, verdict, rule).
pub fn trace_batch(span: &mut CallSpan, result: &Result<pb::ClassifyBatchResponse, Status>) {
    let response = match result {
        Ok(r) => r,
        Err(status) => return span.fail(status),
    };
    let mut catalogs: Vec<String> = Vec::new();
    let mut verdicts: Vec<&'static str> = Vec::new();
    let mut errors = 0i64;
    for item in &response.results {
        match &item.outcome {
            Some(pb::batch_result::Outcome::Decision(d)) => {
                if !catalogs.contains(&d.catalog) {
                    catalogs.push(d.catalog.clone());
                }
                let verdict = verdict_word(d);
                if !verdicts.contains(&verdict) {
                    verdicts.push(verdict);
                }
                if response.results.len() <= TRACED_BATCH_ITEMS {
                    span.event(
                        "decision",
                        vec![
                            opentelemetry::KeyValue::new("retryd.index", i64::from(item.index)),
                            opentelemetry::KeyValue::new("retryd.catalog", d.catalog.clone()),
                            opentelemetry::KeyValue::new("retryd.code", d.code.clone()),
                            opentelemetry::KeyValue::new("retryd.verdict", verdict),
                            opentelemetry::KeyValue::new("retryd.rule", d.rule.clone()),
                        ],
                    );
                }
            }
            Some(pb::batch_result::Outcome::Error(_)) | None => errors += 1,
        }
    }
    span.set("retryd.errors", errors);
    span.set(
        "retryd.catalog",
        opentelemetry::Value::Array(
            catalogs
                .into_iter()
                .map(Into::into)
                .collect::<Vec<opentelemetry::StringValue>>()
                .into(),
        ),
    );
    span.set(
        "retryd.verdict",
        opentelemetry::Value::Array(
            verdicts
                .into_iter()
                .map(Into::into)
                .collect::<Vec<opentelemetry::StringValue>>()
                .into(),
        ),
    );
}

/// An Admit span: the catalog asked about, whether the call was admitted,
/// and the hold's code and rule when it was not.
pub fn trace_admit(span: &mut CallSpan, req: &pb::AdmitRequest, result: &Result<pb::AdmitResponse, Status>) {
    span.set("retryd.catalog", req.catalog.clone());
    match result {
        Ok(r) => {
            span.set("retryd.admitted", r.admitted);
            span.set("retryd.verdict", if r.admitted { "admitted" } else { "held" });
            if let Some(h) = &r.hold {
                span.set("retryd.code", h.code.clone());
                span.set("retryd.rule", h.rule.clone());
            }
        }
        Err(status) => span.fail(status),
    }
}
