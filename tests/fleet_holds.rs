//! Fleet memory end to end: holds placed by decisions, Admit, WatchHolds,
//! ListHolds and ReleaseHold over a real socket. Every scenario runs on two
//! replicas: `--state memory` gives one server playing both roles (the same
//! answers on one replica), `--state redis://…` two servers sharing a real
//! redis-server (tests/fleet_redis_e2e.rs).

mod fleet_support;
mod grpc_support;
#[path = "grpc_support/raw.rs"]
mod raw;

use fleet_support::{scenarios, trust};
use grpc_support::{Server, TempDir};

/// One `--state memory` server with an operator token and the fast-probe catalog.
fn memory_server(dir: &TempDir) -> Server {
    let args = scenarios::server_args(dir, "memory");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start(&args)
}

#[tokio::test]
async fn memory_a_reset_admits_one_probe_and_tokens_cannot_be_forged() {
    let dir = scenarios::setup("reset");
    let s = memory_server(&dir);
    trust::one_probe_at_the_reset(&s, &s, false).await;
    trust::probe_tokens_cannot_be_forged(&s, &s).await;
}

#[tokio::test]
async fn memory_eviction_at_the_cap_favours_real_holds_over_floods() {
    let dir = scenarios::setup("evict");
    let base = scenarios::server_args(&dir, "memory");
    let with_cap = |cap: &'static str| {
        let mut args: Vec<&str> = base.iter().map(String::as_str).collect();
        args.extend(["--max-holds", cap]);
        Server::start(&args)
    };
    trust::a_real_quarantine_survives_a_dependency_hold_flood(&with_cap("50")).await;
    trust::a_real_quota_stop_survives_a_tenant_hold_flood(&with_cap("200")).await;
}

#[tokio::test]
async fn memory_quota_stop_refuses_the_tenant_until_released() {
    let dir = scenarios::setup("quota");
    let s = memory_server(&dir);
    scenarios::quota_stop(&s, &s).await;
}

#[tokio::test]
async fn memory_quarantine_refuses_every_tenant_of_the_dependency() {
    let dir = scenarios::setup("quarantine");
    let s = memory_server(&dir);
    scenarios::quarantine(&s, &s).await;
}

#[tokio::test]
async fn memory_circuit_admits_one_probe_per_interval_and_a_probe_closes_it() {
    let dir = scenarios::setup("circuit");
    let s = memory_server(&dir);
    scenarios::circuit(&s, &s).await;
}

#[tokio::test]
async fn memory_no_dependency_places_no_dependency_hold_and_absurd_delays_pause_nobody() {
    let dir = scenarios::setup("generic");
    let s = memory_server(&dir);
    scenarios::generic_and_past_the_cap(&s, &s).await;
}

#[tokio::test]
async fn memory_operators_only_release_and_see_tenants() {
    let dir = scenarios::setup("operators");
    let s = memory_server(&dir);
    scenarios::operators(&s, &s).await;
}

#[tokio::test]
async fn memory_bad_input_is_refused_naming_the_field_and_nothing_is_stored() {
    let dir = scenarios::setup("bad");
    let s = memory_server(&dir);
    scenarios::bad_input(&s).await;
}

#[tokio::test]
async fn memory_watch_holds_ends_unavailable_when_the_server_drains() {
    let dir = scenarios::setup("drain");
    let mut s = memory_server(&dir);
    scenarios::watch_ends_on_drain(&mut s).await;
}

#[tokio::test]
async fn a_server_without_fleet_flags_uses_memory_and_refuses_a_bad_state() {
    let (status, log) = grpc_support::serve_expecting_exit(&["--state", "mysql://x"]);
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(log.contains("--state"), "{log}");
    // A tenant hash key short enough to find offline from one known tenant.
    let dir = scenarios::setup("short-key");
    std::fs::write(dir.join("short"), "0123456789abcde").expect("key file");
    let short = dir.join("short").display().to_string();
    let (status, log) = grpc_support::serve_expecting_exit(&["--tenant-hash-key-file", &short]);
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.contains("--tenant-hash-key-file") && log.contains("at least 16"),
        "{log}"
    );
}

/// `retryd holds list|release` against a running server: JSON lines with the
/// tenant hashed unless the operator's token is given; release refused
/// without it (exit 1), done with it (exit 0); a bad address exits 2.
#[tokio::test]
async fn the_holds_cli_lists_and_releases_as_the_rpc_does() {
    use retryd::grpc::pb;
    let dir = scenarios::setup("cli");
    let s = memory_server(&dir);
    let mut c = s.client().await;
    let mut f = grpc_support::failure("frontspin", "RATE_LIMITED", pb::OperationKind::Read);
    f.tenant = "acme".into();
    f.dependency = "fs-cli".into();
    let d = c
        .classify(pb::ClassifyRequest {
            failure: Some(Box::new(f)),
            locale: String::new(),
        })
        .await
        .expect("classify")
        .into_inner();
    let id = d.decision.and_then(|d| d.hold).expect("a hold").id;
    let token = dir.join("token").display().to_string();
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_retryd"))
            .arg("holds")
            .args(args)
            .output()
            .expect("run retryd holds");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let url = s.url();
    let (code, out, err) = cli(&["list", "--addr", &url, "--format", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let line: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON line");
    assert_eq!(line["id"], id.as_str());
    assert_eq!(line["kind"], "quota_stop");
    assert!(line["tenant"].as_str().is_some_and(|t| t.starts_with("h:")), "{line}");
    let (_, out, _) = cli(&["list", "--addr", &url, "--token-file", &token, "--format", "json"]);
    assert!(out.contains("\"tenant\":\"acme\""), "{out}");
    let (code, _, err) = cli(&["release", "--addr", &url, &id]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("PermissionDenied"), "{err}");
    let (code, out, err) = cli(&["release", "--addr", &url, "--token-file", &token, &id]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("released "), "{out}");
    let (code, out, _) = cli(&["list", "--addr", &url]);
    assert_eq!((code, out.as_str()), (Some(0), ""), "nothing left");
    let (code, _, err) = cli(&["list", "--addr", "http://[::bad"]);
    assert_eq!(code, Some(2), "{err}");
}

/// ClassifyBatch decides with fleet memory as Classify does (one decision
/// path): an item's hold is placed and floors the retries of the items
/// after it on the same dependency, each answer carries the hold in force,
/// and a budgeted dependency's retries carry their budget.
#[tokio::test]
async fn a_batch_places_holds_floors_retries_and_reports_budgets() {
    use retryd::grpc::pb;
    let dir = scenarios::setup("batch");
    let s = memory_server(&dir);
    let mut client = s.client().await;
    // First attempts on a budgeted dependency (grpc: 20 % + 10/s over 10 s).
    client
        .admit(pb::AdmitRequest {
            catalog: "grpc".into(),
            dependency: "inventory-1".into(),
            attempt: 1,
            ..Default::default()
        })
        .await
        .expect("admit");
    let item = |catalog: &str, code: &str, op: pb::OperationKind, dependency: &str, retry_after: &str| pb::Failure {
        catalog: catalog.into(),
        code: code.into(),
        operation: op as i32,
        attempt: 1,
        dependency: dependency.into(),
        retry_after: retry_after.into(),
        ..Default::default()
    };
    let answer = client
        .classify_batch(pb::ClassifyBatchRequest {
            failures: vec![
                // No hold yet on portal-batch: an ordinary backoff.
                item(
                    "vibecode",
                    "BITRIX_TIMEOUT",
                    pb::OperationKind::Read,
                    "portal-batch",
                    "",
                ),
                // A queue overflow with a Retry-After pauses the dependency for everyone.
                item(
                    "vibecode",
                    "QUEUE_OVERFLOW",
                    pb::OperationKind::Write,
                    "portal-batch",
                    "30",
                ),
                // Now held: the read's retry waits for the pause.
                item(
                    "vibecode",
                    "BITRIX_TIMEOUT",
                    pb::OperationKind::Read,
                    "portal-batch",
                    "",
                ),
                item("grpc", "UNAVAILABLE", pb::OperationKind::Read, "inventory-1", ""),
            ],
            locale: String::new(),
        })
        .await
        .expect("batch")
        .into_inner();
    let decision = |i: usize| match &answer.results[i].outcome {
        Some(pb::batch_result::Outcome::Decision(d)) => d.clone(),
        other => panic!("item {i}: {other:?}"),
    };
    let (before, placed, after, budgeted) = (decision(0), decision(1), decision(2), decision(3));
    assert!(before.hold.is_none(), "{before:?}");
    let pause = placed.hold.as_ref().expect("the overflow's own pause is in force");
    assert_eq!(
        (pause.kind(), pause.dependency.as_str()),
        (pb::HoldKind::Pause, "portal-batch")
    );
    let held = after.hold.as_ref().expect("the pause covers the read after it");
    assert_eq!(held.id, pause.id);
    let retry = after.retry.as_ref().expect("retry");
    assert_eq!(retry.strategy(), pb::Strategy::Hold, "{after:?}");
    assert!(retry.after_ms >= 29_000, "{retry:?}");
    let budget = budgeted.budget.as_ref().expect("the budgeted dependency's standing");
    assert_eq!((budget.requests, budget.retries), (1, 1), "{budget:?}");
    assert!(budget.scope_key.contains("inventory-1"), "{budget:?}");
    // The hold is the fleet's: ListHolds shows it.
    let holds = client
        .list_holds(pb::ListHoldsRequest {
            dependency: "portal-batch".into(),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner()
        .holds;
    assert_eq!(
        holds.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
        [pause.id.as_str()]
    );
}
