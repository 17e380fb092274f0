//! The tower::retry::Policy adapter against the real retryd: it retries
//! what retryd says to retry, stops where it says stop, and refuses a write
//! of unknown outcome.
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retryd_client::tower_retry::{AdapterError, Attempt, RetrydPolicy, UnknownOutcomeWrite};
use retryd_client::{Client, DependencyError, Error, IntoFailure, Operation, Verdict};
use tower::ServiceExt;
use tower::retry::Retry;

/// A dependency failing with `code` `fails` times, then answering its request.
fn dependency(
    code: &'static str,
    fails: u32,
) -> (
    Arc<AtomicU32>,
    impl tower::Service<u32, Response = u32, Error = DependencyError, Future: Send> + Clone + Send + 'static,
) {
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let svc = tower::service_fn(move |req: u32| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        async move {
            if n < fails {
                Err(DependencyError::new(code))
            } else {
                Ok(req)
            }
        }
    });
    (calls, svc)
}

fn map(e: &DependencyError) -> Option<retryd_client::Failure> {
    e.to_failure()
}

async fn client(addr: &str, dep: &str) -> Client {
    Client::builder(addr)
        .catalog("vibecode")
        .dependency(dep)
        .tenant("tower-t")
        .timeout(Duration::from_secs(2))
        .connect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_what_retryd_says_and_stops_where_it_says_stop() {
    let Some(bin) = support::binary() else { return };
    let server = support::start(&bin, "tower", "tower-operator-token-0123456789abcdef", None).await;

    // A read failing twice with a retryable code, then answering: 3 calls, the answer.
    let c = client(&server.addr, "tower-read").await;
    let (calls, dep) = dependency("BITRIX_UNAVAILABLE", 2);
    let svc = c.classified(dep, Operation::Read, "crm.deal.get", None, map).unwrap();
    let got = Retry::new(RetrydPolicy::new(5), svc).oneshot(Attempt::new(41)).await;
    assert_eq!(got.unwrap(), 41);
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // The policy's own limit: 2 attempts, the last verdict (retry) is the error.
    let (calls, dep) = dependency("BITRIX_UNAVAILABLE", 100);
    let svc = c.classified(dep, Operation::Read, "crm.deal.get", None, map).unwrap();
    match Retry::new(RetrydPolicy::new(2), svc).oneshot(Attempt::new(1)).await {
        Err(AdapterError::Retry { decision, .. }) => assert_eq!(decision.verdict, Verdict::RetryWithLimit),
        other => panic!("want the last retry advice, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // A key-enforced write retryd says to fix first: one call, the verdict, the dependency's error chained.
    let w = client(&server.addr, "tower-write").await;
    let (calls, dep) = dependency("TOKEN_REFRESH_FAILED", 100);
    let svc = w
        .classified(dep, Operation::Write, "crm.deal.add", Some("deal-key-1"), map)
        .unwrap();
    match Retry::new(RetrydPolicy::new(5), svc).oneshot(Attempt::new(1)).await {
        Err(e @ AdapterError::Stop(Error::Refused { .. })) => {
            let AdapterError::Stop(Error::Refused { decision, .. }) = &e else {
                unreachable!()
            };
            assert_eq!(decision.verdict, Verdict::FixBeforeRetry);
            let source = std::error::Error::source(&e).map(|s| s.to_string());
            assert_eq!(source.as_deref(), Some("dependency failed: TOKEN_REFRESH_FAILED"));
        }
        other => panic!("want fix_before_retry, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A write of unknown outcome (no enforced key) is refused before any call.
    let (calls, dep) = dependency("BITRIX_TIMEOUT", 1);
    assert_eq!(
        w.classified(dep.clone(), Operation::Write, "crm.deal.add", None, map)
            .err(),
        Some(UnknownOutcomeWrite)
    );
    assert_eq!(
        w.classified(dep, Operation::Unspecified, "crm.deal.add", None, map)
            .err(),
        Some(UnknownOutcomeWrite)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    c.close().await;
    w.close().await;
}
