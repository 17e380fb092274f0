//! The decision's attributes on the OpenTelemetry span of a gRPC call
//! (the span itself is [`crate::doors::traces`]'s). Verdicts are the core's
//! words (`retry_with_limit`), as in metrics and logs.

use opentelemetry::KeyValue;
use tonic::Status;

use super::pb;
use crate::core::Decision;
use crate::doors::traces::CallSpan;

/// The decision's attributes on a Classify span.
pub fn trace_decision(span: &mut CallSpan, d: &Decision<'_>) {
    span.set("retryd.catalog", d.catalog.to_owned());
    span.set("retryd.code", d.code.to_owned());
    span.set("retryd.verdict", d.verdict.as_str());
    span.set("retryd.rule", d.rule.to_owned());
}

/// Batches up to this many items get one span event per decision.
const TRACED_BATCH_ITEMS: usize = 32;

/// What a ClassifyBatch span says, gathered while the items are decided
/// (the answer is bytes by then): errors, the distinct catalogs and
/// verdicts, and for small batches one `decision` event per item (catalog,
/// code, verdict, rule).
#[derive(Debug, Default)]
pub struct BatchTrace {
    items: usize,
    catalogs: Vec<String>,
    verdicts: Vec<&'static str>,
    errors: i64,
    events: Vec<Vec<KeyValue>>,
}

impl BatchTrace {
    /// The batch has `items` items (known once its request is read).
    pub fn set_items(&mut self, items: usize) {
        self.items = items;
    }

    /// Item `index` was decided `d`.
    pub fn decision(&mut self, index: usize, d: &Decision<'_>) {
        if !self.catalogs.iter().any(|c| c == d.catalog) {
            self.catalogs.push(d.catalog.to_owned());
        }
        let verdict = d.verdict.as_str();
        if !self.verdicts.contains(&verdict) {
            self.verdicts.push(verdict);
        }
        if self.items <= TRACED_BATCH_ITEMS {
            self.events.push(vec![
                KeyValue::new("retryd.index", i64::try_from(index).unwrap_or(i64::MAX)),
                KeyValue::new("retryd.catalog", d.catalog.to_owned()),
                KeyValue::new("retryd.code", d.code.to_owned()),
                KeyValue::new("retryd.verdict", verdict),
                KeyValue::new("retryd.rule", d.rule.to_owned()),
            ]);
        }
    }

    /// An item was refused with a field error.
    pub fn error(&mut self) {
        self.errors += 1;
    }

    /// Sets the span's attributes for the call's `result`.
    pub fn finish<T>(self, span: &mut CallSpan, result: &Result<T, Status>) {
        span.set("retryd.items", i64::try_from(self.items).unwrap_or(i64::MAX));
        if let Err(status) = result {
            return span.fail(status);
        }
        for event in self.events {
            span.event("decision", event);
        }
        span.set("retryd.errors", self.errors);
        let array = |values: Vec<opentelemetry::StringValue>| opentelemetry::Value::Array(values.into());
        span.set(
            "retryd.catalog",
            array(self.catalogs.into_iter().map(Into::into).collect()),
        );
        span.set(
            "retryd.verdict",
            array(self.verdicts.into_iter().map(Into::into).collect()),
        );
    }
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
