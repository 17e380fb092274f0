//! Classify: the failure decided by the service and its answer written as
//! protobuf bytes straight from the core's decision
//! ([`wire::answer::classify_answer`](super::wire::answer::classify_answer)),
//! never built as a `pb::Decision`: building one copied every string of the
//! decision, then prost measured and wrote it again. Served by
//! [`super::first::BytesFirst`]; the generated method decodes the same bytes.

use tonic::{Request, Response, Status};

use super::convert::{failure_from_proto, failure_notes, violation_status};
use super::pb;
use super::service::RetryDecisionApi;
use super::trace::trace_decision;
use super::wire::answer::classify_answer;
use super::wire::encoded::EncodedClassify;
use super::wire::unary_pool;
use crate::core::UnixMillis;
use crate::doors::traces::CallSpan;
use crate::service::Caller;

impl RetryDecisionApi {
    /// Decides one request of `caller` as of `now` and writes its answer's
    /// bytes (in a buffer of the unary pool; a hold is shown as of `now`);
    /// `span`, if any, gets the decision's attributes.
    pub fn classify_encoded(
        &self,
        req: &pb::ClassifyRequest,
        now: UnixMillis,
        caller: Caller<'_>,
        span: Option<&mut CallSpan>,
    ) -> Result<EncodedClassify, Status> {
        let failure = req
            .failure
            .as_ref()
            .map(|f| (failure_from_proto(f, &req.locale), failure_notes(f)));
        self.service()
            .classify(&req.locale, failure, now, caller, |d, hold| {
                if let Some(span) = span {
                    trace_decision(span, d);
                }
                let mut out = unary_pool::take_answer();
                classify_answer(&mut out, d, hold, now);
                EncodedClassify::from_framed(out)
            })
            .map_err(violation_status)
    }

    /// The RPC: its span, the caller, the answer's bytes, the request's
    /// failure given back to the pool once decided.
    pub async fn classify_call(
        &self,
        request: Request<pb::ClassifyRequest>,
    ) -> Result<Response<EncodedClassify>, Status> {
        let mut span = crate::doors::traces::start("Classify", request.metadata());
        let now = UnixMillis::now();
        let extensions = request.extensions();
        let metadata = request.metadata().as_ref();
        let caller_name = || self.operators().caller_of(metadata, extensions);
        let caller = if self.service().has_fleet() {
            Caller::Lazy(&caller_name)
        } else {
            Caller::Named("local")
        };
        let result = self.classify_encoded(request.get_ref(), now, caller, span.as_mut());
        unary_pool::recycle_request(request.into_inner());
        if let (Some(span), Err(status)) = (span.as_mut(), &result) {
            span.fail(status);
        }
        result.map(Response::new)
    }
}
