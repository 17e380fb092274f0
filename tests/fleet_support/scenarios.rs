//! The fleet-memory scenarios, each run against two replicas `a` and `b`
//! (one server twice under `--state memory`; two servers sharing Redis).
//! Every scenario uses its own dependency names, so scenarios never see each
//! other's holds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use retryd::grpc::pb::{self, retry_decision_service_client::RetryDecisionServiceClient};
use tokio_stream::StreamExt as _;
use tonic::transport::Channel;
use tonic::{Code, Request};
use tonic_types::StatusExt as _;

use crate::grpc_support::{Server, TempDir, eventually};

/// The operators' bearer token every test server reads from its token file.
pub const TOKEN: &str = "operator-token-for-tests-0123456789";
/// How long a hold may take to reach the other replica in these tests
/// (the goal is 100 ms; this is the patience of a loaded CI machine).
pub const SPREAD: Duration = Duration::from_secs(5);

/// `--max-watch-streams-per-caller` of every test replica.
pub const WATCH_STREAMS_PER_CALLER: usize = 4;

/// A catalog whose circuit probes every 400 ms (the embedded one waits 30 s).
const PROBES: &str = r#"
name = "probes"
description = "A circuit breaker with fast probes, for tests"
max_attempts = 3
[backoff]
base_ms = 100
multiplier = 2.0
cap_ms = 1000
[operations]
read = ["get"]
write = ["add"]
[[codes]]
code = "LOOP"
target_reached = "no"
condition.en = "The circuit breaker stopped the call; one probe per interval may pass."
read = { verdict = "fix_before_retry", required_transition = "cause_resolved", hold = { scope = "dependency", kind = "circuit_open", probe_every_ms = 400 } }
write = { verdict = "fix_before_retry", required_transition = "cause_resolved", hold = { scope = "dependency", kind = "circuit_open", probe_every_ms = 400 } }
[unknown]
target_reached = "unknown"
condition.en = "Unknown."
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }
[no_envelope]
target_reached = "unknown"
condition.en = "No envelope."
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }
"#;

/// A temp dir with the token file and the probes catalog.
pub fn setup(name: &str) -> TempDir {
    let dir = TempDir::new(&format!("fleet-{name}"));
    std::fs::write(dir.join("token"), TOKEN).expect("token file");
    std::fs::create_dir_all(dir.join("policy")).expect("policy dir");
    std::fs::write(dir.join("policy/probes.toml"), PROBES).expect("probes catalog");
    std::fs::write(dir.join("hash-key"), "the fleet's tenant hash key").expect("hash key");
    dir
}

/// `serve` flags for a replica with fleet state `state`.
pub fn server_args(dir: &TempDir, state: &str) -> Vec<String> {
    [
        "--state",
        state,
        "--operator-token-file",
        &dir.join("token").display().to_string(),
        "--tenant-hash-key-file",
        &dir.join("hash-key").display().to_string(),
        "--policy",
        &dir.join("policy").display().to_string(),
        "--max-watch-streams-per-caller",
        &WATCH_STREAMS_PER_CALLER.to_string(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// `req` with the operator's token.
pub fn as_operator<T>(msg: T) -> Request<T> {
    let mut req = Request::new(msg);
    req.metadata_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().expect("metadata"));
    req
}

/// Now, in ms since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// A timestamp in ms since the epoch.
pub fn ms(t: &Option<prost_types::Timestamp>) -> i64 {
    let t = t.as_ref().expect("a timestamp");
    t.seconds * 1000 + i64::from(t.nanos) / 1_000_000
}

/// The next midnight UTC after now, in ms.
fn next_utc_midnight() -> i64 {
    let day = 86_400_000;
    (now_ms() / day + 1) * day
}

fn failure(catalog: &str, code: &str, op: pb::OperationKind, dependency: &str, tenant: &str) -> pb::Failure {
    pb::Failure {
        catalog: catalog.into(),
        code: code.into(),
        operation: op as i32,
        attempt: 1,
        dependency: dependency.into(),
        tenant: tenant.into(),
        ..Default::default()
    }
}

async fn classify(c: &mut RetryDecisionServiceClient<Channel>, f: pb::Failure) -> pb::Decision {
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

fn admit_req(catalog: &str, dependency: &str, tenant: &str, method: &str) -> pb::AdmitRequest {
    pb::AdmitRequest {
        catalog: catalog.into(),
        dependency: dependency.into(),
        tenant: tenant.into(),
        method: method.into(),
        operation: pb::OperationKind::Write as i32,
        attempt: 1,
    }
}

async fn admit(c: &mut RetryDecisionServiceClient<Channel>, req: pb::AdmitRequest) -> pb::AdmitResponse {
    c.admit(req).await.expect("admit").into_inner()
}

/// Waits until Admit on `c` answers `admitted` for `req`.
async fn until_admitted(
    c: &RetryDecisionServiceClient<Channel>,
    req: &pb::AdmitRequest,
    admitted: bool,
) -> pb::AdmitResponse {
    eventually(SPREAD, &format!("admit {req:?} == {admitted}"), || {
        let mut c = c.clone();
        let req = req.clone();
        async move {
            let r = admit(&mut c, req).await;
            (r.admitted == admitted).then_some(r)
        }
    })
    .await
}

/// Reads events from a WatchHolds stream until one of `kind` arrives.
async fn next_event(stream: &mut tonic::Streaming<pb::WatchHoldsResponse>, kind: pb::HoldEventKind) -> pb::Hold {
    loop {
        let ev = tokio::time::timeout(SPREAD, stream.next())
            .await
            .unwrap_or_else(|_| panic!("no {kind:?} event within {SPREAD:?}"))
            .expect("stream open")
            .expect("event");
        if ev.kind() == kind {
            return ev.hold.expect("hold");
        }
    }
}

/// FrontSpin's quota stop: a RATE_LIMITED for tenant `acme` on `a` makes `b`
/// refuse `acme` until the reset while `globex` goes ahead; another failure
/// of `acme` on `b` carries the hold; an operator's release on `b` lifts it
/// for `a`; a watch on `a` sees it placed and lifted.
pub async fn quota_stop(a: &Server, b: &Server) {
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let dep = "frontspin-eu";
    let mut watch = ca
        .watch_holds(as_operator(pb::WatchHoldsRequest {
            catalog: "frontspin".into(),
            dependency: dep.into(),
            tenant: String::new(),
            ..Default::default()
        }))
        .await
        .expect("watch")
        .into_inner();

    let d = classify(
        &mut ca,
        failure("frontspin", "RATE_LIMITED", pb::OperationKind::Write, dep, "acme"),
    )
    .await;
    let hold = d.hold.clone().expect("the decision carries the hold it placed");
    assert_eq!(
        (hold.kind(), hold.scope()),
        (pb::HoldKind::QuotaStop, pb::Scope::Tenant)
    );
    assert_eq!(hold.tenant, "acme");
    let reset = next_utc_midnight();
    assert_eq!(ms(&hold.until), reset, "until the next daily reset (00:00 UTC)");
    let retry = d.retry.expect("contract");
    // Within FrontSpin's first schedule step (15 min) of the reset, the
    // schedule outlasts the stop and sets the wait: the hold is met below.
    let far_from_reset = reset - now_ms() > 16 * 60_000;
    if far_from_reset {
        assert_eq!(retry.strategy(), pb::Strategy::Hold, "{retry:?}");
    }
    assert!(retry.after_ms as i64 >= reset - now_ms() - 1_000, "{retry:?}");

    let placed = next_event(&mut watch, pb::HoldEventKind::Placed).await;
    assert_eq!((placed.id.as_str(), placed.tenant.as_str()), (hold.id.as_str(), "acme"));

    let refused = until_admitted(&cb, &admit_req("frontspin", dep, "acme", "deal.sync"), false).await;
    let on_b = refused.hold.expect("the hold refusing it");
    assert_eq!(on_b.kind(), pb::HoldKind::QuotaStop);
    assert_eq!(ms(&refused.retry_at), reset);
    assert!(
        admit(&mut cb, admit_req("frontspin", dep, "globex", "deal.sync"))
            .await
            .admitted
    );

    // Another failure for acme on b: the stop is in force there too.
    let other = classify(
        &mut cb,
        failure(
            "frontspin",
            "FRONTSPIN_SERVER_ERROR",
            pb::OperationKind::Read,
            dep,
            "acme",
        ),
    )
    .await;
    assert_eq!(other.hold.as_ref().map(|h| h.id.as_str()), Some(hold.id.as_str()));
    let r = other.retry.expect("contract");
    assert!(
        r.after_ms as i64 >= reset - now_ms() - 1_000,
        "after_ms reaches the reset: {r:?}"
    );

    let released = cb
        .release_hold(as_operator(pb::ReleaseHoldRequest { id: on_b.id.clone() }))
        .await
        .expect("an operator releases it")
        .into_inner();
    assert_eq!(released.hold.expect("hold").id, hold.id);
    until_admitted(&ca, &admit_req("frontspin", dep, "acme", "deal.sync"), true).await;
    let lifted = next_event(&mut watch, pb::HoldEventKind::Lifted).await;
    assert_eq!(lifted.id, hold.id);
}

/// Vibecode's quarantine: a TIMEOUT_QUARANTINE with Retry-After 30 refuses
/// every tenant of that portal, and no other portal.
pub async fn quarantine(a: &Server, b: &Server) {
    let (mut ca, cb) = (a.client().await, b.client().await);
    let mut f = failure(
        "vibecode",
        "TIMEOUT_QUARANTINE",
        pb::OperationKind::Read,
        "portal-q.bitrix24.ru",
        "t1",
    );
    f.retry_after = "30".into();
    let d = classify(&mut ca, f).await;
    let hold = d.hold.expect("quarantine");
    assert_eq!(
        (hold.kind(), hold.scope()),
        (pb::HoldKind::Quarantine, pb::Scope::Dependency)
    );
    let left = ms(&hold.until) - now_ms();
    assert!((28_000..=30_500).contains(&left), "the full Retry-After: {left} ms");
    for tenant in ["t2", "", "t1"] {
        let r = until_admitted(
            &cb,
            &admit_req("vibecode", "portal-q.bitrix24.ru", tenant, "crm.deal.add"),
            false,
        )
        .await;
        assert_eq!(r.hold.expect("hold").kind(), pb::HoldKind::Quarantine);
    }
    let mut cb = cb;
    assert!(
        admit(
            &mut cb,
            admit_req("vibecode", "portal-other.bitrix24.ru", "t2", "crm.deal.add")
        )
        .await
        .admitted
    );
}

/// An open circuit admits exactly one probe per interval across both
/// replicas; an ordinary success leaves it open, the probe's success closes it.
pub async fn circuit(a: &Server, b: &Server) {
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let dep = "svc-loop";
    let d = classify(&mut ca, failure("probes", "LOOP", pb::OperationKind::Write, dep, "")).await;
    assert_eq!(d.verdict(), pb::Verdict::FixBeforeRetry);
    let hold = d.hold.expect("circuit");
    assert_eq!(hold.kind(), pb::HoldKind::CircuitOpen);
    let req = admit_req("probes", dep, "", "x.add");
    let first = until_admitted(&cb, &req, false).await;
    let slot = ms(&first.retry_at);
    assert!(slot <= ms(&hold.since) + 400, "the first probe slot: {slot}");

    // Exactly one probe in the slot, across both replicas, however many ask.
    let wait = (slot - now_ms()).max(0) as u64 + 20;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let mut calls = Vec::new();
    for i in 0..12 {
        let mut c = if i % 2 == 0 { ca.clone() } else { cb.clone() };
        let req = req.clone();
        calls.push(tokio::spawn(async move { admit(&mut c, req).await }));
    }
    let mut tokens = Vec::new();
    for call in calls {
        let r = call.await.expect("join");
        if r.admitted {
            assert!(
                !r.probe_token.is_empty(),
                "admitted under an open circuit only as its probe"
            );
            tokens.push(r.probe_token);
        }
    }
    assert_eq!(tokens.len(), 1, "one probe per slot across the fleet: {tokens:?}");

    // An ordinary success (no token) leaves the circuit open.
    ca.report_outcomes(pb::ReportOutcomesRequest {
        counts: vec![pb::OutcomeCount {
            catalog: "probes".into(),
            dependency: dep.into(),
            requests: 10,
            successes: 10,
            ..Default::default()
        }],
        probe_token: String::new(),
        probe_succeeded: false,
    })
    .await
    .expect("report");
    assert!(!admit(&mut ca, req.clone()).await.admitted);

    // The probe's success closes it for both replicas.
    let closed = cb
        .report_outcomes(pb::ReportOutcomesRequest {
            counts: Vec::new(),
            probe_token: tokens[0].clone(),
            probe_succeeded: true,
        })
        .await
        .expect("report the probe")
        .into_inner();
    assert_eq!(closed.hold.expect("the circuit").id, hold.id);
    until_admitted(&ca, &req, true).await;
    until_admitted(&cb, &req, true).await;
}

/// No dependency: no dependency-wide hold (and a warning). A Retry-After of
/// 99 999 999 s (past the cap) is not retried and pauses nobody.
pub async fn generic_and_past_the_cap(a: &Server, b: &Server) {
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let mut f = failure("vibecode", "QUEUE_OVERFLOW", pb::OperationKind::Read, "", "t1");
    f.retry_after = "5".into();
    let d = classify(&mut ca, f).await;
    assert!(d.hold.is_none(), "{d:?}");
    assert!(
        d.warnings.iter().any(|w| w.starts_with("hold_needs_dependency")),
        "{:?}",
        d.warnings
    );
    let listed = cb
        .list_holds(as_operator(pb::ListHoldsRequest {
            catalog: "vibecode".into(),
            ..Default::default()
        }))
        .await
        .expect("list")
        .into_inner();
    assert!(listed.holds.iter().all(|h| !h.dependency.is_empty()), "{listed:?}");

    let mut huge = failure(
        "vibecode",
        "TIMEOUT_QUARANTINE",
        pb::OperationKind::Read,
        "portal-cap",
        "t1",
    );
    huge.retry_after = "99999999".into();
    let d = classify(&mut ca, huge).await;
    assert_eq!(d.verdict(), pb::Verdict::DoNotRetry, "{d:?}");
    assert!(d.hold.is_none(), "advice past the cap holds nobody: {d:?}");
    let retry = d.retry.expect("contract");
    assert_eq!((retry.retryable, retry.after_ms), (false, 0));
    let r = b
        .client()
        .await
        .admit(admit_req("vibecode", "portal-cap", "t9", ""))
        .await;
    assert!(r.expect("admit").into_inner().admitted, "the dependency is not paused");
}

/// ReleaseHold is for operators; others see tenants hashed.
pub async fn operators(a: &Server, b: &Server) {
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let d = classify(
        &mut ca,
        failure(
            "frontspin",
            "RATE_LIMITED",
            pb::OperationKind::Read,
            "fs-ops",
            "secret-tenant",
        ),
    )
    .await;
    let id = d.hold.expect("hold").id;
    let denied = cb
        .release_hold(pb::ReleaseHoldRequest { id: id.clone() })
        .await
        .expect_err("not an operator");
    assert_eq!(denied.code(), Code::PermissionDenied);
    let mut bad_token = Request::new(pb::ReleaseHoldRequest { id: id.clone() });
    bad_token.metadata_mut().insert(
        "authorization",
        "Bearer not-the-token-at-all".parse().expect("metadata"),
    );
    assert_eq!(
        cb.release_hold(bad_token).await.expect_err("wrong token").code(),
        Code::PermissionDenied
    );

    let plain = eventually(SPREAD, "b lists the hold", || {
        let mut cb = cb.clone();
        async move {
            let r = cb
                .list_holds(pb::ListHoldsRequest {
                    dependency: "fs-ops".into(),
                    ..Default::default()
                })
                .await
                .expect("list")
                .into_inner();
            r.holds.into_iter().next()
        }
    })
    .await;
    assert!(
        plain.tenant.starts_with("h:") && !plain.tenant.contains("secret"),
        "{plain:?}"
    );
    let by_raw = cb
        .list_holds(pb::ListHoldsRequest {
            tenant: "secret-tenant".into(),
            ..Default::default()
        })
        .await
        .expect("non-operators may filter by the raw tenant")
        .into_inner();
    assert_eq!(by_raw.holds.len(), 1);
    let clear = cb
        .list_holds(as_operator(pb::ListHoldsRequest {
            dependency: "fs-ops".into(),
            ..Default::default()
        }))
        .await
        .expect("list")
        .into_inner();
    assert_eq!(clear.holds[0].tenant, "secret-tenant");
    cb.release_hold(as_operator(pb::ReleaseHoldRequest { id }))
        .await
        .expect("an operator may");
}

/// Unknown catalogs, over-long ids and junk bytes: INVALID_ARGUMENT naming
/// the field, and nothing stored.
pub async fn bad_input(s: &Server) {
    let mut c = s.client().await;
    let field = |st: &tonic::Status| {
        assert_eq!(st.code(), Code::InvalidArgument, "{st:?}");
        st.get_details_bad_request()
            .and_then(|b| b.field_violations.first().map(|v| v.field.clone()))
            .unwrap_or_else(|| panic!("no BadRequest in {st:?}"))
    };
    let e = c
        .admit(admit_req("nope", "d", "t", ""))
        .await
        .expect_err("unknown catalog");
    assert_eq!(field(&e), "catalog");
    let long = "d".repeat(300);
    let e = c
        .admit(admit_req("", &long, "t", ""))
        .await
        .expect_err("long dependency");
    assert_eq!(field(&e), "dependency");
    let mut f = failure("vibecode", "TIMEOUT_QUARANTINE", pb::OperationKind::Read, &long, "t");
    f.retry_after = "30".into();
    let e = c
        .classify(pb::ClassifyRequest {
            failure: Some(Box::new(f)),
            locale: String::new(),
        })
        .await
        .expect_err("long dependency");
    assert_eq!(field(&e), "failure.dependency");
    let e = c
        .release_hold(as_operator(pb::ReleaseHoldRequest { id: "x".repeat(500) }))
        .await
        .expect_err("long id");
    assert_eq!(field(&e), "id");
    let e = c
        .list_holds(pb::ListHoldsRequest {
            page_token: "not-a-token".into(),
            ..Default::default()
        })
        .await
        .expect_err("bad token");
    assert_eq!(field(&e), "page_token");
    // Junk bytes as the dependency: ClassifyRequest.failure (1, LEN 5)
    // holding Failure.dependency (17 → key 0x8a 0x01, LEN 2) = ff fe.
    let junk = bytes::Bytes::from_static(&[0x0a, 0x05, 0x8a, 0x01, 0x02, 0xff, 0xfe]);
    let e = crate::raw::unary(s.channel().await, crate::raw::CLASSIFY, junk, Duration::from_secs(10))
        .await
        .expect_err("junk bytes");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("dependency"), "names the field: {e:?}");
    let all = c
        .list_holds(as_operator(pb::ListHoldsRequest::default()))
        .await
        .expect("list")
        .into_inner();
    assert!(all.holds.is_empty(), "nothing stored: {all:?}");
}

/// A WatchHolds stream is ended with UNAVAILABLE when the drain begins, and
/// does not hold the server up.
pub async fn watch_ends_on_drain(s: &mut Server) {
    let mut c = s.client().await;
    let mut watch = c
        .watch_holds(pb::WatchHoldsRequest::default())
        .await
        .expect("watch")
        .into_inner();
    // An empty snapshot: SYNCED at once.
    let synced = tokio::time::timeout(Duration::from_secs(10), watch.next()).await;
    let synced = synced.expect("synced").expect("open").expect("event");
    assert_eq!(synced.kind(), pb::HoldEventKind::Synced);
    s.terminate();
    let end = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("the stream ends within the grace");
    match end {
        Some(Err(st)) => assert_eq!(st.code(), Code::Unavailable, "{st:?}"),
        other => panic!("expected UNAVAILABLE, got {other:?}"),
    }
    let status = s.wait_exit().await;
    assert!(status.success(), "exit {status:?}; log:\n{}", s.log());
}
