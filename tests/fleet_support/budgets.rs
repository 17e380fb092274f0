//! Retry-budget helpers shared by tests/fleet_budgets_e2e.rs and
//! tests/fleet_budgets_exact.rs: first attempts through Admit, failures
//! through Classify, and whether an answer was a deferral.

use retryd::grpc::pb::{self, retry_decision_service_client::RetryDecisionServiceClient};
use tonic::transport::Channel;

use crate::grpc_support::failure;

/// One first attempt (Admit, attempt 1): whether it was admitted.
pub async fn admit(c: &mut RetryDecisionServiceClient<Channel>, catalog: &str, dependency: &str, tenant: &str) -> bool {
    c.admit(pb::AdmitRequest {
        catalog: catalog.into(),
        dependency: dependency.into(),
        tenant: tenant.into(),
        attempt: 1,
        ..Default::default()
    })
    .await
    .expect("admit")
    .into_inner()
    .admitted
}

/// One failure classified: the decision.
pub async fn classify(c: &mut RetryDecisionServiceClient<Channel>, f: pb::Failure) -> pb::Decision {
    *c.classify(pb::ClassifyRequest {
        failure: Some(Box::new(f)),
        locale: String::new(),
    })
    .await
    .expect("classify")
    .into_inner()
    .decision
    .expect("decision")
}

/// A failed read of `dependency` (attempt 2: a retry is asked about).
pub fn retry(catalog: &str, code: &str, dependency: &str, tenant: &str) -> pb::Failure {
    pb::Failure {
        dependency: dependency.into(),
        tenant: tenant.into(),
        attempt: 2,
        ..failure(catalog, code, pb::OperationKind::Read)
    }
}

/// Whether the budget deferred the retry (checking the answer stays a retry).
pub fn deferred(d: &pb::Decision) -> bool {
    let r = d.retry.as_ref().expect("contract");
    assert_eq!(
        d.verdict(),
        pb::Verdict::RetryWithLimit,
        "a budget defers, never refuses: {d:?}"
    );
    assert!(r.retryable && d.terminal_state.is_empty(), "{d:?}");
    let warned = d.warnings.iter().any(|w| w.starts_with("budget_exhausted: retries "));
    // A spent budget's room may come before the retry's own backoff ends:
    // then the backoff still decides the wait, and the warning says why the
    // budget did not let it go sooner.
    assert!(warned || r.strategy() != pb::Strategy::Budget, "{d:?}");
    warned
}
