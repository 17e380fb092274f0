//! The client's RPCs besides admission: `Classify` (not sent while retryd
//! advises waiting) and the batched outcome reports (kept while it does,
//! and put back when shed).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::{Inner, pb};

/// Why a `Classify` (or `Admit`) got no answer.
pub(crate) enum NotAnswered {
    /// Not sent: retryd advised waiting.
    Busy(String),
    /// retryd answered this error.
    Status(tonic::Status),
    /// Timed out.
    Failed(String),
}

impl NotAnswered {
    pub(crate) fn why(&self) -> String {
        match self {
            NotAnswered::Busy(w) | NotAnswered::Failed(w) => w.clone(),
            NotAnswered::Status(s) => s.message().to_string(),
        }
    }
}

impl Inner {
    pub(crate) fn count(&self, method: &str, i: usize) {
        let key = (
            self.catalog.clone(),
            self.dependency.clone(),
            self.tenant.clone(),
            method.to_string(),
        );
        if let Ok(mut m) = self.counts.lock() {
            m.entry(key).or_default()[i] += 1;
        }
    }

    pub(crate) async fn flush(&self, timeout: Duration) {
        if !self.busy.remaining().is_zero() {
            return; // kept for a flush after retryd's advice passes
        }
        let counts: Vec<pb::OutcomeCount> = match self.counts.lock() {
            Ok(mut m) => m
                .keys()
                .take(1000)
                .cloned()
                .collect::<Vec<_>>()
                .into_iter()
                .filter_map(|k| m.remove_entry(&k))
                .map(|((catalog, dependency, tenant, method), c)| pb::OutcomeCount {
                    catalog,
                    dependency,
                    tenant,
                    method,
                    requests: c[0],
                    successes: c[1],
                    failures: c[2],
                })
                .collect(),
            Err(_) => return,
        };
        if counts.is_empty() {
            return;
        }
        let mut stub = self.stub.clone();
        let n: u64 = counts.iter().map(|c| c.requests).sum();
        self.counters.report_rpcs.fetch_add(1, Ordering::Relaxed);
        self.counters.reported_requests.fetch_add(n, Ordering::Relaxed);
        let req = pb::ReportOutcomesRequest {
            counts,
            ..Default::default()
        };
        if let Ok(Err(s)) = tokio::time::timeout(timeout, stub.report_outcomes(req.clone())).await {
            self.busy.note(&s);
            // Shed or away: the call was not started; the batch goes back
            // for the next flush (summed into the counts, whose bound it keeps).
            if matches!(s.code(), tonic::Code::ResourceExhausted | tonic::Code::Unavailable) {
                if let Ok(mut m) = self.counts.lock() {
                    for c in req.counts {
                        let e = m.entry((c.catalog, c.dependency, c.tenant, c.method)).or_default();
                        e[0] += c.requests;
                        e[1] += c.successes;
                        e[2] += c.failures;
                    }
                }
            }
        }
    }

    /// retryd advised waiting: the RPC is not sent; counted (and as a
    /// fallback: the client decides alone), not said per call.
    pub(crate) fn skip_busy(&self) -> Option<Duration> {
        let left = self.busy.remaining();
        if left.is_zero() {
            return None;
        }
        self.busy.skips.fetch_add(1, Ordering::Relaxed);
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        Some(left)
    }

    /// `Classify` within the RPC timeout: `Err(why)` when it was not
    /// answered (`busy`: not sent, retryd advised waiting; else it failed or
    /// timed out), a shed answer noted.
    pub(crate) async fn classify(
        &self,
        req: pb::ClassifyRequest,
        deadline: Option<Instant>,
    ) -> Result<pb::Decision, NotAnswered> {
        if let Some(left) = self.skip_busy() {
            return Err(NotAnswered::Busy(format!(
                "retryd busy: it advised waiting {left:?}; not asked"
            )));
        }
        let mut stub = self.stub.clone();
        match tokio::time::timeout(self.rpc_timeout(deadline), stub.classify(req)).await {
            Ok(Ok(r)) => Ok(r.into_inner().decision.unwrap_or_default()),
            Ok(Err(s)) => {
                self.busy.note(&s);
                Err(NotAnswered::Status(s))
            }
            Err(_) => Err(NotAnswered::Failed("timed out".into())),
        }
    }
}
