//! ClassifyBatch: the batch decided by the service and its answer written
//! as protobuf bytes straight from the core's decisions
//! ([`wire::answer`](super::wire::answer)), never built as `pb` messages.
//!
//! The generated server's method can only answer a `ClassifyBatchResponse`
//! message, so [`super::first::BytesFirst`] serves the method's path itself
//! and sends the bytes as they are. The library call
//! [`RetryDecisionApi::classify_batch_at`] decodes the same bytes into the
//! message.

use tonic::{Request, Response, Status};

use super::convert::{failure_from_proto, failure_notes, violation_status};
use super::pb;
use super::service::RetryDecisionApi;
use super::trace::BatchTrace;
use super::wire::answer::AnswerWriter;
use super::wire::encoded::EncodedBatch;
use super::wire::pool;
use crate::core::{UnixMillis, Verdict};
use crate::service::Caller;
use crate::service::classify::{BLOCKING_BATCH, BatchSummary};

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
        mut trace: Option<&mut BatchTrace>,
    ) -> Result<EncodedBatch, Status> {
        // Refused before any storage is taken for the answer.
        self.service()
            .check_batch(req.failures.len(), &req.locale)
            .map_err(violation_status)?;
        let mut answer = AnswerWriter::new(pool::take_answer());
        // A hold's shown end and probe state, as of one instant per answer.
        let shown_at = UnixMillis::now();
        let failure = |i: usize| {
            let f = &req.failures[i];
            (failure_from_proto(f, &req.locale), failure_notes(f))
        };
        let summary =
            self.service()
                .classify_batch(&req.locale, req.failures.len(), failure, now, caller, |i, item| {
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
    /// pool, the request's failures given back to the pool once decided.
    pub async fn classify_batch_call(
        &self,
        request: Request<pb::ClassifyBatchRequest>,
    ) -> Result<Response<EncodedBatch>, Status> {
        let mut span = crate::doors::traces::start("ClassifyBatch", request.metadata());
        let now = UnixMillis::now();
        let caller = if self.service().has_fleet() {
            self.operators()
                .caller_of(request.metadata().as_ref(), request.extensions())
        } else {
            "local".to_owned()
        };
        let req = request.into_inner();
        let mut trace = None;
        if let Some(span) = span.as_mut() {
            span.set("retryd.items", i64::try_from(req.failures.len()).unwrap_or(i64::MAX));
            trace = Some(BatchTrace::new(req.failures.len()));
        }
        let (decided, trace) = if req.failures.len() <= BLOCKING_BATCH {
            let decided = self.classify_batch_encoded(&req, now, Caller::Named(&caller), trace.as_mut());
            pool::recycle_request(req);
            (decided, trace)
        } else {
            let this = self.clone();
            let current = tracing::Span::current();
            let decide = move || {
                let decided =
                    current.in_scope(|| this.classify_batch_encoded(&req, now, Caller::Named(&caller), trace.as_mut()));
                pool::recycle_request(req);
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
