//! ClassifyBatch: the request read in place from its bytes
//! ([`wire::view`](super::wire::view)), the batch decided by the service
//! and its answer written as protobuf bytes straight from the core's
//! decisions ([`wire::answer`](super::wire::answer)), never built as `pb`
//! messages.
//!
//! The generated server's method can only answer a `ClassifyBatchResponse`
//! message, so [`super::first::BytesFirst`] serves the method's path itself
//! and sends the bytes as they are. The library call
//! [`RetryDecisionApi::classify_batch_at`] decodes the same bytes into the
//! message.

use std::borrow::Borrow;

use tonic::{Request, Response, Status};

use super::convert::{failure_from_proto, failure_notes, violation_status};
use super::pb;
use super::service::RetryDecisionApi;
use super::trace::BatchTrace;
use super::wire::answer::AnswerWriter;
use super::wire::codec::{Pooled as _, invalid_message};
use super::wire::encoded::EncodedBatch;
use super::wire::pool;
use super::wire::view::{BatchRequest, BatchView};
use crate::core::{UnixMillis, Verdict};
use crate::service::Caller;
use crate::service::classify::{BatchItem, BatchSummary};

impl RetryDecisionApi {
    /// Decides a batch as of `now` (the synchronous body of ClassifyBatch),
    /// as the message: the answer's bytes, decoded.
    pub fn classify_batch_at(
        &self,
        req: &pb::ClassifyBatchRequest,
        now: UnixMillis,
    ) -> Result<pb::ClassifyBatchResponse, Status> {
        self.classify_batch_for(req, now, Caller::Named("local"))
    }

    /// Decides a batch of `caller` (who places any hold) as of `now`, as the message.
    pub fn classify_batch_for(
        &self,
        req: &pb::ClassifyBatchRequest,
        now: UnixMillis,
        caller: Caller<'_>,
    ) -> Result<pb::ClassifyBatchResponse, Status> {
        self.classify_batch_encoded(req, now, caller, None)?.into_message()
    }

    /// Decides a batch of `caller` as of `now` and writes its answer's
    /// bytes (in a buffer of the pool); `trace` gathers what the call's
    /// span says.
    pub fn classify_batch_encoded(
        &self,
        req: &pb::ClassifyBatchRequest,
        now: UnixMillis,
        caller: Caller<'_>,
        trace: Option<&mut BatchTrace>,
    ) -> Result<EncodedBatch, Status> {
        let failure = |i: usize| {
            let f = &req.failures[i];
            (failure_from_proto(f, &req.locale), failure_notes(f))
        };
        self.encode_batch(&req.locale, req.failures.len(), failure, now, caller, trace)
    }

    /// Decides the batch whose request is the bytes `message` (one
    /// `ClassifyBatchRequest`, not framed) as [`Self::classify_batch_encoded`]
    /// does: read in place ([`BatchView`]) or, when it holds what only
    /// prost reads, decoded into pooled failures (and refused in prost's
    /// words, as the generated server refuses it).
    pub fn classify_batch_bytes(
        &self,
        message: &[u8],
        now: UnixMillis,
        caller: Caller<'_>,
        trace: Option<&mut BatchTrace>,
    ) -> Result<EncodedBatch, Status> {
        match BatchView::read(message) {
            Some(view) => {
                let decided = self.encode_batch(view.locale(), view.len(), |i| view.item(i), now, caller, trace);
                view.recycle();
                decided
            }
            None => {
                let req = pb::ClassifyBatchRequest::decode_pooled(message).map_err(invalid_message)?;
                let decided = self.classify_batch_encoded(&req, now, caller, trace);
                pool::recycle_request(req);
                decided
            }
        }
    }

    /// The `n` items (`failure(i)` gives item `i`) of a batch in `locale`
    /// decided and their answer written as bytes.
    fn encode_batch<'a, I: Borrow<BatchItem<'a>>>(
        &self,
        locale: &str,
        n: usize,
        failure: impl Fn(usize) -> I,
        now: UnixMillis,
        caller: Caller<'_>,
        mut trace: Option<&mut BatchTrace>,
    ) -> Result<EncodedBatch, Status> {
        if let Some(t) = trace.as_deref_mut() {
            t.set_items(n);
        }
        // Refused before any storage is taken for the answer.
        self.service().check_batch(n, locale).map_err(violation_status)?;
        let mut answer = AnswerWriter::new(pool::take_answer());
        // A hold's shown end and probe state, as of one instant per answer.
        let shown_at = UnixMillis::now();
        let summary = self
            .service()
            .classify_batch(locale, n, failure, now, caller, |i, item| {
                let index = u32::try_from(i).unwrap_or(u32::MAX);
                match item {
                    Ok((d, hold)) => {
                        answer.decision(index, d, hold, shown_at);
                        if let Some(t) = trace.as_deref_mut() {
                            t.decision(i, d);
                        }
                    }
                    Err(v) => {
                        answer.error(index, v);
                        if let Some(t) = trace.as_deref_mut() {
                            t.error();
                        }
                    }
                }
            });
        match summary {
            Ok(s) => Ok(EncodedBatch::from_framed(answer.finish(&summary_to_proto(&s)))),
            Err(v) => {
                pool::recycle_answer(answer.into_bytes());
                Err(violation_status(v))
            }
        }
    }

    /// The RPC: its span, the caller, a large batch decided on the blocking
    /// pool, the request's storage given back to its pool once decided.
    pub async fn classify_batch_call(&self, request: Request<BatchRequest>) -> Result<Response<EncodedBatch>, Status> {
        let mut span = crate::doors::traces::start("ClassifyBatch", request.metadata());
        let now = UnixMillis::now();
        let caller = if self.service().has_fleet() {
            self.operators()
                .caller_of(request.metadata().as_ref(), request.extensions())
        } else {
            "local".to_owned()
        };
        let req = request.into_inner();
        let mut trace = span.is_some().then(BatchTrace::default);
        let (decided, trace) = if !req.is_large() {
            let decided = self.decide_request(req, now, Caller::Named(&caller), trace.as_mut());
            (decided, trace)
        } else {
            let this = self.clone();
            let current = tracing::Span::current();
            let decide = move || {
                let decided =
                    current.in_scope(|| this.decide_request(req, now, Caller::Named(&caller), trace.as_mut()));
                (decided, trace)
            };
            match tokio::task::spawn_blocking(decide).await {
                Ok(done) => done,
                Err(e) => {
                    tracing::error!(error = %e, "ClassifyBatch worker failed");
                    (Err(Status::internal("internal error")), None)
                }
            }
        };
        if let (Some(span), Some(trace)) = (span.as_mut(), trace) {
            trace.finish(span, &decided);
        }
        decided.map(Response::new)
    }

    /// `req` decided, its storage given back to its pool.
    fn decide_request(
        &self,
        req: BatchRequest,
        now: UnixMillis,
        caller: Caller<'_>,
        trace: Option<&mut BatchTrace>,
    ) -> Result<EncodedBatch, Status> {
        match req {
            BatchRequest::Decoded(req) => {
                let decided = self.classify_batch_encoded(&req, now, caller, trace);
                pool::recycle_request(req);
                decided
            }
            BatchRequest::Bytes(message) => self.classify_batch_bytes(&message, now, caller, trace),
        }
    }
}

fn summary_to_proto(s: &BatchSummary) -> pb::BatchSummary {
    pb::BatchSummary {
        retry_with_limit: s.count(Verdict::RetryWithLimit),
        state_verification_required: s.count(Verdict::StateVerificationRequired),
        fix_before_retry: s.count(Verdict::FixBeforeRetry),
        do_not_retry: s.count(Verdict::DoNotRetry),
        already_applied: s.count(Verdict::AlreadyApplied),
        errors: s.errors,
    }
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
