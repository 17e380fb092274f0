//! `retryd.v1.RetryDecisionService`: Classify and ClassifyBatch over the
//! decision core, and ListCatalogs.
//!
//! Every call loads the policy once, so it is decided wholly by one policy
//! even if the policy is swapped meanwhile. Bad input is answered with
//! INVALID_ARGUMENT carrying a `google.rpc.BadRequest` that names the field
//! (`failure.<field>`, or `failures[i].<field>` inside a batch result).

use std::sync::{Arc, OnceLock, Weak};

use arc_swap::ArcSwap;
use prost::Message as _;
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt as _};
use tracing::field::Empty;

use super::budgets;
use super::catalogs::list_catalogs;
use super::convert::{decision_into_proto, decision_to_proto, failure_from_proto, hold_to_proto};
use super::holds::{self, Caller, Operators};
use super::pb;
use super::pb::retry_decision_service_server::RetryDecisionService;
use super::pool;
use super::unary_pool;
use crate::core::hold::Hold;
use crate::core::limits::{self, FieldViolation};
use crate::core::{DecideError, Decision, Policy, UnixMillis, Verdict, Warning, decide, decide_held};
use crate::fleet::{Fleet, PlaceOutcome};
use crate::safety::observe::DecisionObserver;

/// Counter of decisions, labelled `catalog` (a loaded catalog's name) and
/// `verdict` (the fixed set of [`Verdict::as_str`]).
pub const DECISIONS_TOTAL: &str = "retryd_decisions_total";
/// Histogram of ClassifyBatch sizes (items per call).
pub const BATCH_ITEMS: &str = "retryd_batch_items";

/// Batches larger than this are decided on the blocking pool so they do not
/// hold up an async worker.
pub const BLOCKING_BATCH: usize = 256;

/// The policy in force, shared with whatever reloads it.
pub type PolicyHandle = Arc<ArcSwap<Policy>>;

/// Default of `--max-batch`: the most items whose worst-case answer (each
/// result at most [`crate::server::admission::ITEM_ANSWER_BYTES`], in any
/// embedded locale) fits the 4 MiB every gRPC client accepts by default;
/// tests/grpc_answer_size.rs checks it against every embedded code.
pub const DEFAULT_MAX_BATCH: usize = 1_600;

/// Limits of the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceConfig {
    /// Most failures one ClassifyBatch may carry (`--max-batch`).
    pub max_batch: usize,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            max_batch: DEFAULT_MAX_BATCH,
        }
    }
}

/// The implementation of `retryd.v1.RetryDecisionService`.
#[derive(Debug, Clone)]
pub struct RetryDecisionApi {
    policy: PolicyHandle,
    config: ServiceConfig,
    counters: Arc<ArcSwap<DecisionCounters>>,
    fleet: Option<Arc<Fleet>>,
    operators: Arc<Operators>,
    draining: tokio::sync::watch::Receiver<bool>,
    observer: Option<Arc<dyn DecisionObserver>>,
}

impl RetryDecisionApi {
    /// A service deciding by whatever policy `policy` holds at each call.
    pub fn new(policy: PolicyHandle, config: ServiceConfig) -> Self {
        RetryDecisionApi {
            policy,
            config,
            counters: Arc::new(ArcSwap::from_pointee(DecisionCounters::default())),
            fleet: None,
            operators: Arc::new(Operators::default()),
            draining: tokio::sync::watch::channel(false).1,
            observer: None,
        }
    }

    /// Shows every decision answered to `observer` (the shadow policy, the
    /// decision log), after it is made and before it is sent.
    pub fn with_observer(mut self, observer: Arc<dyn DecisionObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Decides with fleet memory: holds placed by decisions, Admit and the
    /// hold RPCs; `operators` may release holds and see tenants in clear;
    /// `draining` turning true ends WatchHolds streams.
    pub fn with_fleet(
        mut self,
        fleet: Arc<Fleet>,
        operators: Operators,
        draining: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        self.fleet = Some(fleet);
        self.operators = Arc::new(operators);
        self.draining = draining;
        self
    }

    /// The policy in force now.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.load_full()
    }

    /// Who counts as an operator.
    pub fn operators(&self) -> &Operators {
        &self.operators
    }

    /// The fleet memory, or FAILED_PRECONDITION when the server runs without it.
    pub fn fleet(&self) -> Result<&Arc<Fleet>, Status> {
        self.fleet
            .as_ref()
            .ok_or_else(|| Status::failed_precondition("this server runs without fleet state"))
    }

    /// The `retryd_decisions_total` handles of `policy`'s catalogs, rebuilt
    /// (once, by whichever call sees it first) after a policy swap.
    fn with_counters(&self, policy: &Arc<Policy>, f: impl FnOnce(&DecisionCounters)) {
        let current = self.counters.load();
        if current.is_for(policy) {
            return f(&current);
        }
        drop(current);
        let fresh = Arc::new(DecisionCounters::for_policy(policy));
        f(&fresh);
        self.counters.store(fresh);
    }

    /// Decides one request as of `now` (the synchronous body of Classify).
    pub fn classify_at(&self, req: &pb::ClassifyRequest, now: UnixMillis) -> Result<pb::ClassifyResponse, Status> {
        self.classify_for(req, now, "local")
    }

    /// Decides one request of `caller` (who places any hold) as of `now`.
    pub fn classify_for<'c>(
        &self,
        req: &pb::ClassifyRequest,
        now: UnixMillis,
        caller: impl Into<Caller<'c>>,
    ) -> Result<pb::ClassifyResponse, Status> {
        self.decide_one(req, now, caller, |d, hold| {
            // Written over a decision of an earlier answer (see unary_pool).
            let mut decision = unary_pool::take_decision();
            decision_into_proto(d, &mut decision);
            decision.hold = hold.map(|h| hold_to_proto(h, h.key.tenant()));
            pb::ClassifyResponse {
                decision: Some(decision),
            }
        })
        .map_err(Violation::into_status)
    }

    /// Decides one request of `caller` as of `now` and hands the decision,
    /// with the fleet hold in force on its scope, to `answer`: the one body
    /// of Classify, shared by gRPC (which encodes a proto) and the HTTP door
    /// (which writes JSON). Validation, metrics and holds happen here only.
    pub fn decide_one<'c, R>(
        &self,
        req: &pb::ClassifyRequest,
        now: UnixMillis,
        caller: impl Into<Caller<'c>>,
        answer: impl FnOnce(&Decision<'_>, Option<&Hold>) -> R,
    ) -> Result<R, Violation> {
        // One span per call at debug level: under the default `info` filter it
        // is disabled, and a disabled span costs a cached callsite check
        // instead of a registry slot and three field records per call.
        let span = tracing::debug_span!("Classify", catalog = Empty, code = Empty, verdict = Empty);
        let _entered = span.enter();
        let policy = self.policy.load();
        let fleet = FleetCtx::new(self.fleet.as_deref(), caller.into(), self.observer.as_deref());
        let decided = classify_one(&policy, req, now, &fleet);
        match &decided {
            Ok((d, _)) => {
                if !span.is_disabled() {
                    span.record("catalog", d.catalog);
                    span.record("code", d.code);
                    span.record("verdict", d.verdict.as_str());
                }
                self.with_counters(&policy, |c| c.increment(d.catalog, d.verdict, 1));
                tracing::debug!("decided");
            }
            Err(v) => tracing::debug!(field = %v.field, "invalid argument"),
        }
        decided.map(|(d, hold)| answer(&d, hold.as_ref()))
    }

    /// Decides a batch as of `now` (the synchronous body of ClassifyBatch).
    pub fn classify_batch_at(
        &self,
        req: &pb::ClassifyBatchRequest,
        now: UnixMillis,
    ) -> Result<pb::ClassifyBatchResponse, Status> {
        self.classify_batch_for(req, now, "local")
    }

    /// Decides a batch of `caller` (who places any hold) as of `now`.
    pub fn classify_batch_for(
        &self,
        req: &pb::ClassifyBatchRequest,
        now: UnixMillis,
        caller: &str,
    ) -> Result<pb::ClassifyBatchResponse, Status> {
        // Refused before any storage is taken for the answer.
        self.check_batch(req).map_err(Violation::into_status)?;
        // Slots of an earlier response: each is overwritten whole.
        let mut results = pool::take_results();
        results.truncate(req.failures.len());
        results.reserve(req.failures.len().saturating_sub(results.len()));
        let summary = self.decide_batch(req, now, caller, |i, item| {
            if i == results.len() {
                results.push(pb::BatchResult::default());
            }
            let slot = &mut results[i];
            slot.index = u32::try_from(i).unwrap_or(u32::MAX);
            match item {
                Ok((d, hold)) => {
                    let (out, earlier_hold) = match &mut slot.outcome {
                        Some(pb::batch_result::Outcome::Decision(reused)) => {
                            // Kept for its strings when a hold is written over it.
                            let earlier_hold = if hold.is_some() { reused.hold.take() } else { None };
                            decision_into_proto(d, reused);
                            (reused, earlier_hold)
                        }
                        other => match other.insert(pb::batch_result::Outcome::Decision(decision_to_proto(d))) {
                            pb::batch_result::Outcome::Decision(fresh) => (fresh, None),
                            pb::batch_result::Outcome::Error(_) => (unreachable_decision(), None),
                        },
                    };
                    out.hold = hold.map(|h| {
                        let mut slot = earlier_hold.unwrap_or_default();
                        hold_into_proto(h, h.key.tenant(), &mut slot);
                        slot
                    });
                }
                Err(v) => slot.outcome = Some(pb::batch_result::Outcome::Error(v.to_rpc_status())),
            }
        });
        match summary {
            Ok(summary) => Ok(pb::ClassifyBatchResponse {
                results,
                summary: Some(summary),
            }),
            Err(v) => {
                pool::recycle_response(pb::ClassifyBatchResponse { results, summary: None });
                Err(v.into_status())
            }
        }
    }

    /// Decides every failure of a batch of `caller` as of `now`, in order,
    /// handing each item's decision (with the hold in force) or its field
    /// error to `item`, and returns the summary: the one body of
    /// ClassifyBatch, shared by gRPC and the HTTP door. A whole-call error
    /// (too many items, a bad locale) comes back before any item.
    pub fn decide_batch(
        &self,
        req: &pb::ClassifyBatchRequest,
        now: UnixMillis,
        caller: &str,
        mut item: impl FnMut(usize, Result<(&Decision<'_>, Option<&Hold>), &Violation>),
    ) -> Result<pb::BatchSummary, Violation> {
        let span = tracing::info_span!("ClassifyBatch", items = req.failures.len(), errors = Empty);
        let _entered = span.enter();
        metrics::histogram!(BATCH_ITEMS).record(req.failures.len() as f64);
        if let Err(v) = self.check_batch(req) {
            tracing::debug!(field = %v.field, "invalid argument");
            return Err(v);
        }

        let policy = self.policy.load();
        let fleet = FleetCtx::new(self.fleet.as_deref(), caller.into(), self.observer.as_deref());
        let mut summary = pb::BatchSummary::default();
        let mut tally = Tally::default();
        for (i, failure) in req.failures.iter().enumerate() {
            match decide_failure(&policy, failure, &req.locale, now, &fleet, |f| {
                format!("failures[{i}].{f}")
            }) {
                Ok((d, hold)) => {
                    count(&mut summary, d.verdict);
                    tally.add(d.catalog, d.verdict);
                    item(i, Ok((&d, hold.as_ref())));
                }
                Err(v) => {
                    summary.errors += 1;
                    item(i, Err(&v));
                }
            }
        }
        self.with_counters(&policy, |c| tally.emit(c));
        span.record("errors", summary.errors);
        tracing::debug!(
            retry_with_limit = summary.retry_with_limit,
            state_verification_required = summary.state_verification_required,
            fix_before_retry = summary.fix_before_retry,
            do_not_retry = summary.do_not_retry,
            already_applied = summary.already_applied,
            "decided batch"
        );
        Ok(summary)
    }
}

impl RetryDecisionApi {
    /// The whole-call limits of a batch: its size and its locale.
    fn check_batch(&self, req: &pb::ClassifyBatchRequest) -> Result<(), Violation> {
        if req.failures.len() > self.config.max_batch {
            return Err(Violation::new(
                "failures".to_owned(),
                format!(
                    "{} items; the limit is {} (--max-batch)",
                    req.failures.len(),
                    self.config.max_batch
                ),
            ));
        }
        check_locale(&req.locale)
    }

    /// Lists the catalogs of the policy in force (the body of ListCatalogs),
    /// all from one policy snapshot.
    pub fn list_catalogs_now(&self, req: &pb::ListCatalogsRequest) -> Result<pb::ListCatalogsResponse, Status> {
        let span = tracing::info_span!("ListCatalogs", policy_version = Empty);
        let _entered = span.enter();
        check_locale(&req.locale).map_err(Violation::into_status)?;
        let policy = self.policy.load();
        span.record("policy_version", policy.version());
        Ok(list_catalogs(&policy, &req.locale))
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

    type WatchHoldsStream = holds::WatchStream;

    async fn admit(&self, request: Request<pb::AdmitRequest>) -> Result<Response<pb::AdmitResponse>, Status> {
        let mut span = crate::traces::start("Admit", request.metadata());
        let fleet = self.fleet()?;
        let policy = self.policy.load();
        let result = holds::admit(fleet, &policy, request.get_ref()).await;
        if let Some(span) = span.as_mut() {
            trace_admit(span, request.get_ref(), &result);
        }
        result.map(Response::new)
    }

    async fn report_outcomes(
        &self,
        request: Request<pb::ReportOutcomesRequest>,
    ) -> Result<Response<pb::ReportOutcomesResponse>, Status> {
        let fleet = self.fleet()?;
        let policy = self.policy.load();
        holds::report_outcomes(fleet, &policy, request.get_ref()).map(Response::new)
    }

    async fn list_budgets(
        &self,
        request: Request<pb::ListBudgetsRequest>,
    ) -> Result<Response<pb::ListBudgetsResponse>, Status> {
        let fleet = self.fleet()?;
        budgets::list_budgets(fleet, request.get_ref()).map(Response::new)
    }

    async fn list_holds(
        &self,
        request: Request<pb::ListHoldsRequest>,
    ) -> Result<Response<pb::ListHoldsResponse>, Status> {
        let fleet = self.fleet()?;
        let operator = self.operators.allows(&request);
        holds::list_holds(fleet, request.get_ref(), operator).map(Response::new)
    }

    async fn release_hold(
        &self,
        request: Request<pb::ReleaseHoldRequest>,
    ) -> Result<Response<pb::ReleaseHoldResponse>, Status> {
        let fleet = self.fleet()?;
        if !self.operators.allows(&request) {
            return Err(holds::release_denied());
        }
        holds::release_hold(fleet, request.get_ref()).map(Response::new)
    }

    async fn watch_holds(
        &self,
        request: Request<pb::WatchHoldsRequest>,
    ) -> Result<Response<Self::WatchHoldsStream>, Status> {
        let fleet = Arc::clone(self.fleet()?);
        let operator = self.operators.allows(&request);
        holds::watch_holds(fleet, request.into_inner(), operator, self.draining.clone()).map(Response::new)
    }

    async fn classify(&self, request: Request<pb::ClassifyRequest>) -> Result<Response<pb::ClassifyResponse>, Status> {
        let mut span = crate::traces::start("Classify", request.metadata());
        let now = UnixMillis::now();
        let caller = match self.fleet {
            Some(_) => Caller::Connection(request.extensions()),
            None => Caller::Named("local"),
        };
        let result = self.classify_for(request.get_ref(), now, caller);
        unary_pool::recycle_request(request.into_inner());
        if let Some(span) = span.as_mut() {
            match &result {
                Ok(r) => {
                    if let Some(d) = &r.decision {
                        trace_decision(span, d);
                    }
                }
                Err(status) => span.fail(status),
            }
        }
        result.map(Response::new)
    }

    async fn classify_batch(
        &self,
        request: Request<pb::ClassifyBatchRequest>,
    ) -> Result<Response<pb::ClassifyBatchResponse>, Status> {
        let mut span = crate::traces::start("ClassifyBatch", request.metadata());
        let now = UnixMillis::now();
        let caller = self
            .fleet
            .as_ref()
            .map_or_else(|| "local".to_owned(), |_| holds::caller_of(&request));
        let req = request.into_inner();
        if let Some(span) = span.as_mut() {
            span.set("retryd.items", i64::try_from(req.failures.len()).unwrap_or(i64::MAX));
        }
        // Decided, the request's failures are given back for the next request
        // to decode into (see `pool`).
        if req.failures.len() <= BLOCKING_BATCH {
            let decided = self.classify_batch_for(&req, now, &caller);
            pool::recycle_request(req);
            if let Some(span) = span.as_mut() {
                trace_batch(span, &decided);
            }
            return decided.map(Response::new);
        }
        let this = self.clone();
        let current = tracing::Span::current();
        let decide = move || {
            let decided = current.in_scope(|| this.classify_batch_for(&req, now, &caller));
            pool::recycle_request(req);
            decided
        };
        match tokio::task::spawn_blocking(decide).await {
            Ok(result) => {
                if let Some(span) = span.as_mut() {
                    trace_batch(span, &result);
                }
                result.map(Response::new)
            }
            Err(e) => {
                tracing::error!(error = %e, "ClassifyBatch worker failed");
                Err(Status::internal("internal error"))
            }
        }
    }
}

/// The decision's attributes on a Classify span.
fn trace_decision(span: &mut crate::traces::CallSpan, d: &pb::Decision) {
    span.set("retryd.catalog", d.catalog.clone());
    span.set("retryd.code", d.code.clone());
    span.set("retryd.verdict", d.verdict().as_str_name());
    span.set("retryd.rule", d.rule.clone());
}

/// Batches up to this many items get one span event per decision.
const TRACED_BATCH_ITEMS: usize = 32;

/// A ClassifyBatch span: errors, the distinct catalogs and verdicts, and
/// for small batches one `decision` event per item (catalog, code, verdict, rule).
fn trace_batch(span: &mut crate::traces::CallSpan, result: &Result<pb::ClassifyBatchResponse, Status>) {
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
                let verdict = d.verdict().as_str_name();
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
fn trace_admit(span: &mut crate::traces::CallSpan, req: &pb::AdmitRequest, result: &Result<pb::AdmitResponse, Status>) {
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

/// One field violation, named as the client sees it (INVALID_ARGUMENT).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The field's path in the request, e.g. `failure.code` or `failures[3].catalog`.
    pub field: String,
    /// What is wrong with it.
    pub description: String,
}

impl Violation {
    fn new(field: String, description: String) -> Self {
        Violation { field, description }
    }

    /// `field: description`, the status message.
    pub fn message(&self) -> String {
        format!("{}: {}", self.field, self.description)
    }

    /// INVALID_ARGUMENT with a BadRequest detail, for a whole call.
    pub fn into_status(self) -> Status {
        let message = self.message();
        Status::with_error_details(
            Code::InvalidArgument,
            message,
            ErrorDetails::with_bad_request_violation(self.field, self.description),
        )
    }

    /// The same as a `google.rpc.Status` message, for one batch item.
    fn to_rpc_status(&self) -> tonic_types::Status {
        let message = self.message();
        let bad_request = tonic_types::pb::BadRequest::from(tonic_types::BadRequest::with_violation(
            self.field.clone(),
            self.description.clone(),
        ));
        tonic_types::Status {
            code: Code::InvalidArgument as i32,
            message,
            details: vec![prost_types::Any {
                type_url: tonic_types::BadRequest::TYPE_URL.to_owned(),
                value: bad_request.encode_to_vec(),
            }],
        }
    }
}

/// The locale is a request field, checked once per call.
fn check_locale(locale: &str) -> Result<(), Violation> {
    if locale.len() > limits::MAX_LOCALE {
        return Err(Violation::new(
            "locale".to_owned(),
            format!("is {} bytes; the limit is {}", locale.len(), limits::MAX_LOCALE),
        ));
    }
    Ok(())
}

fn classify_one<'a>(
    policy: &'a Policy,
    req: &'a pb::ClassifyRequest,
    now: UnixMillis,
    fleet: &FleetCtx<'_>,
) -> Result<(Decision<'a>, Option<Hold>), Violation> {
    check_locale(&req.locale)?;
    let Some(failure) = &req.failure else {
        return Err(Violation::new("failure".to_owned(), "is required".to_owned()));
    };
    decide_failure(policy, failure, &req.locale, now, fleet, |f| format!("failure.{f}"))
}

/// The fleet memory a call decides with, and who is calling.
struct FleetCtx<'f> {
    fleet: Option<&'f Fleet>,
    caller: Caller<'f>,
    observer: Option<&'f dyn DecisionObserver>,
}

impl<'f> FleetCtx<'f> {
    fn new(fleet: Option<&'f Fleet>, caller: Caller<'f>, observer: Option<&'f dyn DecisionObserver>) -> Self {
        FleetCtx {
            fleet,
            caller,
            observer,
        }
    }
}

/// Writes `h` over `out` as [`hold_to_proto`] builds it, reusing the
/// capacity of `out`'s strings: a batch answer's holds are written into the
/// holds of an earlier answer's slots (with fleet memory, a hold in force on
/// an item's scope was 8 strings allocated and freed per item). Every field
/// is written: the destructuring names them all.
fn hold_into_proto(h: &Hold, tenant: &str, out: &mut pb::Hold) {
    let pb::Hold {
        id,
        catalog,
        dependency,
        tenant: tenant_out,
        method,
        scope,
        kind,
        since,
        until,
        code,
        rule,
        reason,
    } = out;
    let overwrite = |slot: &mut String, value: &str| {
        slot.clear();
        slot.push_str(value);
    };
    overwrite(id, &h.id);
    overwrite(catalog, &h.key.catalog);
    overwrite(dependency, &h.key.dependency);
    overwrite(tenant_out, tenant);
    overwrite(method, h.key.method());
    *scope = super::convert::hold_scope_to_proto(h.key.scope) as i32;
    *kind = super::convert::hold_kind_to_proto(h.kind) as i32;
    *since = Some(super::convert::timestamp_from_millis(h.since));
    *until = Some(super::convert::timestamp_from_millis(h.until));
    overwrite(code, &h.code);
    overwrite(rule, &h.rule);
    overwrite(reason, &h.reason);
}

fn unreachable_decision() -> &'static mut pb::Decision {
    // `Option::insert` just stored a Decision; kept total without a panic.
    Box::leak(Box::default())
}

/// Checks and decides one failure; `name` turns a field of the failure into
/// its name in the request.
fn decide_failure<'a>(
    policy: &'a Policy,
    failure: &'a pb::Failure,
    locale: &'a str,
    now: UnixMillis,
    ctx: &FleetCtx<'_>,
    name: impl Fn(&str) -> String,
) -> Result<(Decision<'a>, Option<Hold>), Violation> {
    let f = failure_from_proto(failure, locale);
    let decided = decide_checked(policy, failure, &f, now, ctx, name);
    if let (Some(observer), Ok((d, hold))) = (ctx.observer, &decided) {
        observer.observe(&f, d, hold.as_ref(), now);
    }
    decided
}

fn decide_checked<'a>(
    policy: &'a Policy,
    failure: &pb::Failure,
    f: &crate::core::Failure<'a>,
    now: UnixMillis,
    ctx: &FleetCtx<'_>,
    name: impl Fn(&str) -> String,
) -> Result<(Decision<'a>, Option<Hold>), Violation> {
    limits::check(f).map_err(|FieldViolation { field, description }| Violation::new(name(field), description))?;
    let unknown_catalog = |e: DecideError| match e {
        DecideError::UnknownCatalog { .. } => Violation::new(name("catalog"), e.to_string()),
    };
    let mut d = decide(policy, f, now).map_err(unknown_catalog)?;
    // A Timestamp outside 0001-01-01..9999-12-31 (or with bad nanos) is
    // clamped on the way in and out: say so rather than clamp silently.
    let stamps = [failure.deadline.as_ref(), failure.quota_resets_at.as_ref()];
    let out_of_range = stamps
        .into_iter()
        .flatten()
        .any(|t| !super::convert::timestamp_in_range(t))
        || failure
            .upstream
            .as_ref()
            .and_then(|u| u.deadline.as_ref())
            .is_some_and(|t| !super::convert::timestamp_in_range(t));
    if out_of_range {
        d.warnings.add(Warning::TimestampOutOfRange);
    }
    let Some(fleet) = ctx.fleet else {
        return Ok((d, None));
    };
    if !f.probe_token.is_empty() {
        // A probe that failed: the circuit stays open until its next slot.
        fleet.report_probe(f.probe_token, false, now);
    }
    let rate_limited = d
        .hold_plan
        .is_some_and(|plan| fleet.place(&plan, &ctx.caller.name(), now) == PlaceOutcome::RateLimited);
    let hold = fleet.in_force(d.catalog, f.dependency, f.tenant, f.method, now);
    let hold_floor = hold
        .as_ref()
        .filter(|_| d.retry.retryable)
        .map(|h| Fleet::retry_floor(h, now));
    let d = match hold_floor {
        Some(floor) => decide_held(policy, f, now, Some(floor)).map_err(unknown_catalog)?,
        None => d,
    };
    // The fleet retry budget judges what is still a retry (see grpc::budgets).
    let mut d = budgets::apply(policy, fleet, f, d, hold_floor, now).map_err(unknown_catalog)?;
    if rate_limited {
        d.warnings.add(Warning::HoldRateLimited);
    }
    if out_of_range {
        d.warnings.add(Warning::TimestampOutOfRange);
    }
    Ok((d, hold))
}

fn count(summary: &mut pb::BatchSummary, verdict: Verdict) {
    let slot = match verdict {
        Verdict::RetryWithLimit => &mut summary.retry_with_limit,
        Verdict::StateVerificationRequired => &mut summary.state_verification_required,
        Verdict::FixBeforeRetry => &mut summary.fix_before_retry,
        Verdict::DoNotRetry => &mut summary.do_not_retry,
        Verdict::AlreadyApplied => &mut summary.already_applied,
    };
    *slot += 1;
}

/// Decisions per catalog and verdict within one batch, so the counters are
/// touched once per (catalog, verdict) rather than once per item.
#[derive(Default)]
struct Tally<'a> {
    per_catalog: Vec<(&'a str, [u64; Verdict::ALL.len()])>,
}

impl<'a> Tally<'a> {
    fn add(&mut self, catalog: &'a str, verdict: Verdict) {
        let slot = verdict.index();
        match self.per_catalog.iter_mut().find(|(c, _)| *c == catalog) {
            Some((_, counts)) => counts[slot] += 1,
            None => {
                let mut counts = [0; Verdict::ALL.len()];
                counts[slot] = 1;
                self.per_catalog.push((catalog, counts));
            }
        }
    }

    fn emit(&self, counters: &DecisionCounters) {
        for (catalog, counts) in &self.per_catalog {
            for (verdict, n) in Verdict::ALL.iter().zip(counts).filter(|(_, n)| **n > 0) {
                counters.increment(catalog, *verdict, *n);
            }
        }
    }
}

/// The `retryd_decisions_total` counter handles of one policy: one slot per
/// (loaded catalog, verdict), registered on first use (so the exposition
/// shows only series that were counted, as before) and then reused, so a
/// decision costs no registry lookup and no label allocation. Label values
/// stay bounded: only the names of the policy's catalogs.
#[derive(Default)]
struct DecisionCounters {
    /// The policy these are for (a `Weak` keeps its address from being reused).
    policy: Weak<Policy>,
    catalogs: Vec<(Box<str>, [OnceLock<metrics::Counter>; Verdict::ALL.len()])>,
}

impl std::fmt::Debug for DecisionCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionCounters")
            .field("catalogs", &self.catalogs.iter().map(|(c, _)| c).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl DecisionCounters {
    fn for_policy(policy: &Arc<Policy>) -> Self {
        DecisionCounters {
            policy: Arc::downgrade(policy),
            catalogs: policy
                .catalogs()
                .iter()
                .map(|c| (Box::from(&*c.name), Default::default()))
                .collect(),
        }
    }

    fn is_for(&self, policy: &Arc<Policy>) -> bool {
        std::ptr::eq(self.policy.as_ptr(), Arc::as_ptr(policy))
    }

    fn increment(&self, catalog: &str, verdict: Verdict, n: u64) {
        let v = verdict.index();
        // A handful of catalogs: a scan beats hashing the name.
        match self.catalogs.iter().find(|(c, _)| **c == *catalog) {
            Some((name, slots)) => slots[v]
                .get_or_init(
                    || metrics::counter!(DECISIONS_TOTAL, "catalog" => name.to_string(), "verdict" => verdict.as_str()),
                )
                .increment(n),
            // Not reached: a decision names a catalog of the policy that made it.
            None => metrics::counter!(DECISIONS_TOTAL, "catalog" => catalog.to_owned(), "verdict" => verdict.as_str())
                .increment(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use tonic_types::RpcStatusExt as _;

    use super::*;

    fn api(max_batch: usize) -> RetryDecisionApi {
        let policy = Policy::embedded().expect("embedded policy");
        RetryDecisionApi::new(Arc::new(ArcSwap::from_pointee(policy)), ServiceConfig { max_batch })
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
    fn decision_counters_follow_the_policy() {
        let api = api(10);
        let first = api.policy.load_full();
        api.with_counters(&first, |c| assert!(c.is_for(&first)));
        assert!(api.counters.load().is_for(&first));
        assert_eq!(api.counters.load().catalogs.len(), first.catalogs().len());
        api.policy.store(Arc::new(Policy::embedded().expect("embedded policy")));
        let second = api.policy.load_full();
        api.with_counters(&second, |c| assert!(c.is_for(&second)));
        assert!(!api.counters.load().is_for(&first));
    }

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
                    failure: Some(f),
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

    /// A hold written over an earlier answer's hold equals the hold built
    /// fresh: nothing of the earlier one survives.
    #[test]
    fn a_reused_hold_keeps_nothing_of_the_earlier_one() {
        use crate::core::hold::{HoldKey, HoldKind, HoldScope};
        let hold = |scope, kind, text: &str| Hold {
            id: format!("id-{text}"),
            key: HoldKey {
                scope,
                catalog: "vibecode".into(),
                dependency: format!("dep-{text}"),
                subject: text.into(),
            },
            kind,
            since: UnixMillis(1_000),
            until: UnixMillis(9_000_000),
            probe_every_ms: 5,
            code: text.repeat(3),
            rule: format!("rule/{text}"),
            reason: text.repeat(40),
        };
        let holds = [
            hold(HoldScope::Tenant, HoldKind::Pause, "a"),
            hold(
                HoldScope::Dependency,
                HoldKind::QuotaStop,
                "longer-text-of-another-tenant",
            ),
            hold(HoldScope::Method, HoldKind::CircuitOpen, ""),
        ];
        let earlier: Vec<pb::Hold> = holds
            .iter()
            .map(|h| hold_to_proto(h, "seen-tenant"))
            .chain([pb::Hold {
                scope: 99,
                kind: 99,
                since: Some(prost_types::Timestamp { seconds: 1, nanos: 1 }),
                ..Default::default()
            }])
            .collect();
        for h in &holds {
            for tenant in ["", h.key.tenant(), "h:0123456789abcdef"] {
                for before in &earlier {
                    let mut slot = before.clone();
                    hold_into_proto(h, tenant, &mut slot);
                    assert_eq!(slot, hold_to_proto(h, tenant));
                }
            }
        }
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
                    failure: Some(failure("", "BITRIX_TIMEOUT", pb::OperationKind::Write)),
                    locale: String::new(),
                },
                NOW,
            )
            .expect("decided");
        let d = resp.decision.expect("decision");
        assert_eq!(d.catalog, "vibecode");
        assert_eq!(d.policy_version, a.policy.load().version());
    }
}
