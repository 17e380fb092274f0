//! `retryd.v1.RetryDecisionService` over the [`Service`]: each method maps
//! its proto request to domain types, calls the service, and maps the
//! answer (or the refusal) back. Nothing is decided here.
//!
//! Bad input is answered with INVALID_ARGUMENT carrying a
//! `google.rpc.BadRequest` that names the field (`failure.<field>`, or
//! `failures[i].<field>` inside a batch result).

use std::sync::Arc;

use tokio_stream::StreamExt as _;
use tonic::{Request, Response, Status};

use super::catalogs::list_catalogs;
use super::convert::{judged_to_proto, shown_to_proto, status_of, timestamp_from_millis, violation_status};
use super::pb;
use super::pb::retry_decision_service_server::RetryDecisionService;
use super::trace::trace_admit;
use super::wire::unary_pool;
use crate::core::UnixMillis;
use crate::doors::peers::Operators;
use crate::doors::watch_bytes::StreamAccount;
use crate::fleet::Fleet;
use crate::service::holds::{AdmitAsk, HoldFilter, OutcomeCount};
use crate::service::observe::DecisionObserver;
use crate::service::watch::WatchFilter;
use crate::service::{Caller, PolicyHandle, Service, ServiceConfig};

/// The stream type of WatchHolds.
pub type WatchStream =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::WatchHoldsResponse, Status>> + Send + 'static>>;

/// The implementation of `retryd.v1.RetryDecisionService`.
#[derive(Debug, Clone)]
pub struct RetryDecisionApi {
    service: Service,
    operators: Arc<Operators>,
}

impl RetryDecisionApi {
    /// A gRPC door onto `service`; `operators` may release holds and see
    /// tenants in clear.
    pub fn from_service(service: Service, operators: Arc<Operators>) -> Self {
        RetryDecisionApi { service, operators }
    }

    /// A door onto a service of its own deciding by whatever policy
    /// `policy` holds at each call, without fleet memory.
    pub fn new(policy: PolicyHandle, config: ServiceConfig) -> Self {
        RetryDecisionApi::from_service(Service::new(policy, config), Arc::default())
    }

    /// The same, deciding with fleet memory (see [`Service::with_fleet`]).
    pub fn with_fleet(
        self,
        fleet: Arc<Fleet>,
        operators: Operators,
        draining: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        RetryDecisionApi {
            service: self.service.with_fleet(fleet, draining),
            operators: Arc::new(operators),
        }
    }

    /// The same, showing every decision to `observer`.
    pub fn with_observer(self, observer: Arc<dyn DecisionObserver>) -> Self {
        RetryDecisionApi {
            service: self.service.with_observer(observer),
            ..self
        }
    }

    /// The service behind this door.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// Decides one request as of `now` (the synchronous body of Classify).
    pub fn classify_at(&self, req: &pb::ClassifyRequest, now: UnixMillis) -> Result<pb::ClassifyResponse, Status> {
        self.classify_for(req, now, Caller::Named("local"))
    }

    /// Decides one request of `caller` (who places any hold) as of `now`.
    pub fn classify_for(
        &self,
        req: &pb::ClassifyRequest,
        now: UnixMillis,
        caller: Caller<'_>,
    ) -> Result<pb::ClassifyResponse, Status> {
        // The server's answer, decoded: one encoding of a Classify answer.
        self.classify_encoded(req, now, caller, None)?.into_message()
    }

    /// Lists the catalogs of the policy in force (the body of ListCatalogs),
    /// all from one policy snapshot.
    pub fn list_catalogs_now(&self, req: &pb::ListCatalogsRequest) -> Result<pb::ListCatalogsResponse, Status> {
        let list = self.service.list_catalogs(&req.locale).map_err(violation_status)?;
        Ok(list_catalogs(&list))
    }

    /// Who may release holds and see tenants in clear.
    pub(super) fn operators(&self) -> &Operators {
        &self.operators
    }

    fn operator<T>(&self, request: &Request<T>) -> bool {
        self.operators
            .allows_parts(request.metadata().as_ref(), request.extensions())
    }
}

#[tonic::async_trait]
impl RetryDecisionService for RetryDecisionApi {
    async fn list_catalogs(
        &self,
        request: Request<pb::ListCatalogsRequest>,
    ) -> Result<Response<pb::ListCatalogsResponse>, Status> {
        self.list_catalogs_now(request.get_ref()).map(Response::new)
    }

    type WatchHoldsStream = WatchStream;

    async fn admit(&self, request: Request<pb::AdmitRequest>) -> Result<Response<pb::AdmitResponse>, Status> {
        let mut span = crate::doors::traces::start("Admit", request.metadata());
        let req = request.get_ref();
        let caller_name = || {
            self.operators
                .caller_of(request.metadata().as_ref(), request.extensions())
        };
        let ask = AdmitAsk {
            catalog: &req.catalog,
            dependency: &req.dependency,
            tenant: &req.tenant,
            method: &req.method,
            attempt: req.attempt,
            caller: Some(Caller::Lazy(&caller_name)),
        };
        let result = self
            .service
            .admit(ask)
            .await
            .map_err(status_of)
            .map(|(out, hold)| pb::AdmitResponse {
                admitted: out.admitted,
                hold: hold.as_ref().map(|h| Box::new(shown_to_proto(h))),
                retry_at: out.retry_at.map(timestamp_from_millis),
                probe_token: out.probe_token.unwrap_or_default(),
            });
        if let Some(span) = span.as_mut() {
            trace_admit(span, req, &result);
        }
        // Its strings are decoded into by a later Admit (see unary_pool).
        unary_pool::recycle_admit_request(request.into_inner());
        result.map(Response::new)
    }

    async fn report_outcomes(
        &self,
        request: Request<pb::ReportOutcomesRequest>,
    ) -> Result<Response<pb::ReportOutcomesResponse>, Status> {
        let req = request.get_ref();
        let counts: Vec<OutcomeCount<'_>> = req
            .counts
            .iter()
            .map(|c| OutcomeCount {
                catalog: &c.catalog,
                dependency: &c.dependency,
                tenant: &c.tenant,
                method: &c.method,
                requests: c.requests,
            })
            .collect();
        let metadata = request.metadata().as_ref();
        let extensions = request.extensions();
        let caller_name = || self.operators.caller_of(metadata, extensions);
        let probe = self
            .service
            .report_outcomes(
                Caller::Lazy(&caller_name),
                &counts,
                &req.probe_token,
                req.probe_succeeded,
            )
            .await
            .map_err(status_of)?;
        Ok(Response::new(pb::ReportOutcomesResponse {
            hold: probe.hold.as_ref().map(shown_to_proto),
            probe_accepted: probe.accepted,
        }))
    }

    async fn list_budgets(
        &self,
        request: Request<pb::ListBudgetsRequest>,
    ) -> Result<Response<pb::ListBudgetsResponse>, Status> {
        let req = request.get_ref();
        let budgets = self
            .service
            .list_budgets(&req.catalog, &req.dependency, req.limit)
            .map_err(status_of)?
            .into_iter()
            .map(|b| pb::BudgetStanding {
                catalog: b.catalog,
                scope: b.judged.rule.scope.as_str().to_owned(),
                rule: b.judged.rule.describe(),
                deferred: b.judged.standing.deferred,
                next_room_at: Some(timestamp_from_millis(b.judged.standing.room_at)),
                budget: Some(judged_to_proto(&b.judged)),
            })
            .collect();
        Ok(Response::new(pb::ListBudgetsResponse { budgets }))
    }

    async fn list_holds(
        &self,
        request: Request<pb::ListHoldsRequest>,
    ) -> Result<Response<pb::ListHoldsResponse>, Status> {
        let operator = self.operator(&request);
        let req = request.get_ref();
        let filter = HoldFilter {
            catalog: &req.catalog,
            dependency: &req.dependency,
            tenant: &req.tenant,
        };
        let page = self
            .service
            .list_holds(filter, req.page_size, &req.page_token, operator)
            .map_err(status_of)?;
        Ok(Response::new(pb::ListHoldsResponse {
            holds: page.holds.iter().map(shown_to_proto).collect(),
            next_page_token: page.next_page_token,
        }))
    }

    async fn release_hold(
        &self,
        request: Request<pb::ReleaseHoldRequest>,
    ) -> Result<Response<pb::ReleaseHoldResponse>, Status> {
        let operator = self.operator(&request);
        let released = self
            .service
            .release_hold(&request.get_ref().id, operator)
            .map_err(|e| status_of(self.operators.explain(request.metadata().as_ref(), e)))?;
        Ok(Response::new(pb::ReleaseHoldResponse {
            hold: Some(shown_to_proto(&released)),
        }))
    }

    async fn watch_holds(
        &self,
        request: Request<pb::WatchHoldsRequest>,
    ) -> Result<Response<Self::WatchHoldsStream>, Status> {
        let operator = self.operator(&request);
        let caller = self
            .operators
            .caller_of(request.metadata().as_ref(), request.extensions());
        // Put there by the admission layer: where the queued events are charged.
        let account = request.extensions().get::<StreamAccount>().cloned();
        let req = request.into_inner();
        let mut dependencies = req.dependencies;
        if !req.dependency.is_empty() {
            dependencies.push(req.dependency);
        }
        let filter = WatchFilter {
            catalog: req.catalog,
            dependencies,
            tenant: req.tenant,
            tenants: req.tenants,
            resume: req.resume_digests,
        };
        let wire = super::watch::GrpcWire {
            bytes: account.as_ref().map(StreamAccount::open),
        };
        let events = self
            .service
            .watch_holds(filter, operator, &caller, Arc::new(wire))
            .map_err(status_of)?;
        // The server resets the stream when it stalls (its end may never be taken).
        let alarm = events.stall_alarm();
        let stream = events.map(|e| e.map_err(status_of));
        let mut response = Response::new(Box::pin(stream) as Self::WatchHoldsStream);
        response.extensions_mut().insert(alarm);
        Ok(response)
    }

    /// Served by [`super::first::BytesFirst`] ahead of this method; here
    /// for a server built without it, the same answer decoded.
    async fn classify(&self, request: Request<pb::ClassifyRequest>) -> Result<Response<pb::ClassifyResponse>, Status> {
        let encoded = self.classify_call(request).await?.into_inner();
        encoded.into_message().map(Response::new)
    }

    /// Served by [`super::first::BytesFirst`] ahead of this method; here
    /// for a server built without it, the same answer decoded.
    async fn classify_batch(
        &self,
        request: Request<pb::ClassifyBatchRequest>,
    ) -> Result<Response<pb::ClassifyBatchResponse>, Status> {
        let encoded = self
            .classify_batch_call(request.map(super::wire::view::BatchRequest::Decoded))
            .await?
            .into_inner();
        encoded.into_message().map(Response::new)
    }
}

#[cfg(test)]
mod tests {
    use arc_swap::ArcSwap;
    use tonic::Code;
    use tonic_types::{RpcStatusExt as _, StatusExt as _};

    use super::*;
    use crate::core::Policy;
    use crate::core::limits;

    fn api(max_batch: usize) -> RetryDecisionApi {
        let policy = Policy::embedded().expect("embedded policy");
        RetryDecisionApi::new(
            Arc::new(ArcSwap::from_pointee(policy)),
            ServiceConfig {
                max_batch,
                ..Default::default()
            },
        )
    }

    fn failure(catalog: &str, code: &str, op: pb::OperationKind) -> pb::Failure {
        pb::Failure {
            catalog: catalog.into(),
            code: code.into(),
            operation: op as i32,
            attempt: 1,
            ..Default::default()
        }
    }

    const NOW: UnixMillis = UnixMillis(1_786_190_700_000);

    #[test]
    fn classify_requires_failure() {
        let err = api(10).classify_at(&pb::ClassifyRequest::default(), NOW).unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        let br = err.get_details_bad_request().expect("BadRequest detail");
        assert_eq!(br.field_violations[0].field, "failure");
    }

    #[test]
    fn oversize_field_is_named_with_its_prefix() {
        let mut f = failure("", "X", pb::OperationKind::Write);
        f.idempotency_key = "k".repeat(limits::MAX_IDEMPOTENCY_KEY + 1);
        let err = api(10)
            .classify_at(
                &pb::ClassifyRequest {
                    failure: Some(Box::new(f)),
                    locale: String::new(),
                },
                NOW,
            )
            .unwrap_err();
        let br = err.get_details_bad_request().expect("BadRequest detail");
        assert_eq!(br.field_violations[0].field, "failure.idempotency_key");
    }

    #[test]
    fn long_locale_is_a_request_field() {
        let req = pb::ClassifyBatchRequest {
            failures: vec![],
            locale: "x".repeat(100),
        };
        let err = api(10).classify_batch_at(&req, NOW).unwrap_err();
        assert_eq!(
            err.get_details_bad_request().expect("detail").field_violations[0].field,
            "locale"
        );
    }

    #[test]
    fn batch_errors_stay_per_item_and_are_counted() {
        let req = pb::ClassifyBatchRequest {
            failures: vec![
                failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Write),
                failure("nope", "X", pb::OperationKind::Read),
                failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Read),
            ],
            locale: "en".into(),
        };
        let resp = api(10).classify_batch_at(&req, NOW).expect("batch answered");
        assert_eq!(resp.results.len(), 3);
        assert_eq!(resp.results.iter().map(|r| r.index).collect::<Vec<_>>(), [0, 1, 2]);
        let Some(pb::batch_result::Outcome::Error(status)) = &resp.results[1].outcome else {
            panic!("item 1 should be an error: {:?}", resp.results[1]);
        };
        assert_eq!(status.code, Code::InvalidArgument as i32);
        let br = status.get_details_bad_request().expect("BadRequest in Any");
        assert_eq!(br.field_violations[0].field, "failures[1].catalog");
        assert!(br.field_violations[0].description.contains("vibecode"), "{:?}", br);
        let summary = resp.summary.expect("summary");
        assert_eq!(summary.errors, 1);
        assert_eq!(
            summary.retry_with_limit
                + summary.state_verification_required
                + summary.fix_before_retry
                + summary.do_not_retry
                + summary.already_applied,
            2
        );
    }

    #[test]
    fn over_max_batch_fails_the_call() {
        let req = pb::ClassifyBatchRequest {
            failures: vec![pb::Failure::default(); 3],
            locale: String::new(),
        };
        let err = api(2).classify_batch_at(&req, NOW).unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert_eq!(err.message(), "failures: 3 items; the limit is 2 (--max-batch)");
    }

    #[test]
    fn a_call_is_decided_by_one_policy_snapshot() {
        let a = api(10);
        let resp = a
            .classify_at(
                &pb::ClassifyRequest {
                    failure: Some(Box::new(failure("", "BITRIX_TIMEOUT", pb::OperationKind::Write))),
                    locale: String::new(),
                },
                NOW,
            )
            .expect("decided");
        let d = resp.decision.expect("decision");
        assert_eq!(d.catalog, "vibecode");
        assert_eq!(d.policy_version, a.service.policy().version());
    }

    #[test]
    fn the_spans_name_this_service() {
        assert_eq!(crate::doors::traces::RPC_SERVICE, crate::grpc::SERVICE_NAME);
    }
}
