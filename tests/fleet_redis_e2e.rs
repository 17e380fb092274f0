//! Fleet memory across replicas: two `retryd serve --state redis://…`
//! processes sharing one real redis-server run every scenario of
//! tests/fleet_holds.rs, with the hold placed through one replica and obeyed,
//! watched and released through the other; then Redis killed under load
//! (zero failed calls) and restarted (the replicas resync).

mod fleet_support;
mod grpc_support;
#[path = "grpc_support/raw.rs"]
mod raw;
mod redis_support;

use std::time::Duration;

use fleet_support::{scenarios, trust};
use grpc_support::{Server, TempDir, eventually, failure};
use redis_support::RedisServer as Redis;
use retryd::grpc::pb;

/// Two replicas sharing `redis`.
fn replicas(dir: &TempDir, redis: &Redis) -> (Server, Server) {
    let args = scenarios::server_args(dir, &redis.url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (Server::start(&args), Server::start(&args))
}

#[tokio::test]
async fn redis_a_reset_admits_one_probe_not_forty_polling_or_honouring_retry_at() {
    let redis = Redis::start();
    let dir = scenarios::setup("r-reset");
    let (a, b) = replicas(&dir, &redis);
    trust::one_probe_at_the_reset(&a, &b, false).await;
    trust::one_probe_at_the_reset(&a, &b, true).await;
}

#[tokio::test]
async fn redis_slow_at_the_reset_admits_no_probe_on_either_replica_then_one() {
    let redis = Redis::start();
    let dir = scenarios::setup("r-slow-probe");
    let (a, b) = replicas(&dir, &redis);
    trust::a_slow_store_admits_no_second_probe(&a, &b, || redis.pause(), || redis.resume()).await;
}

#[tokio::test]
async fn redis_a_probe_success_lifts_the_stop_for_every_worker() {
    let redis = Redis::start();
    let dir = scenarios::setup("r-lift");
    let (a, b) = replicas(&dir, &redis);
    trust::the_probe_success_lifts_for_everyone(&a, &b, false).await;
    trust::the_probe_success_lifts_for_everyone(&a, &b, true).await;
}

#[tokio::test]
async fn redis_probe_tokens_cannot_be_forged_reused_or_outlived_on_any_replica() {
    let redis = Redis::start();
    let dir = scenarios::setup("r-forge");
    let (a, b) = replicas(&dir, &redis);
    trust::probe_tokens_cannot_be_forged(&a, &b).await;
}

#[tokio::test]
async fn redis_a_watch_sends_a_snapshot_then_synced_then_changes_within_its_cap() {
    let redis = Redis::start();
    let dir = scenarios::setup("r-watch");
    let (a, b) = replicas(&dir, &redis);
    trust::watch_protocol(&a, &b, scenarios::WATCH_STREAMS_PER_CALLER).await;
}

#[tokio::test]
async fn redis_quota_stop_placed_on_one_replica_refuses_on_the_other_until_released() {
    let redis = Redis::start();
    let dir = scenarios::setup("r-quota");
    let (a, b) = replicas(&dir, &redis);
    scenarios::quota_stop(&a, &b).await;
}

#[tokio::test]
async fn redis_quarantine_refuses_every_tenant_on_every_replica() {
    let redis = Redis::start();
    let dir = scenarios::setup("r-quarantine");
    let (a, b) = replicas(&dir, &redis);
    scenarios::quarantine(&a, &b).await;
}

#[tokio::test]
async fn redis_circuit_admits_one_probe_per_interval_across_both_replicas() {
    let redis = Redis::start();
    let dir = scenarios::setup("r-circuit");
    let (a, b) = replicas(&dir, &redis);
    scenarios::circuit(&a, &b).await;
}

#[tokio::test]
async fn redis_generic_failures_hold_nobody_and_absurd_delays_pause_nobody() {
    let redis = Redis::start();
    let dir = scenarios::setup("r-generic");
    let (a, b) = replicas(&dir, &redis);
    scenarios::generic_and_past_the_cap(&a, &b).await;
}

#[tokio::test]
async fn redis_operators_only_release_and_see_tenants() {
    let redis = Redis::start();
    let dir = scenarios::setup("r-operators");
    let (a, b) = replicas(&dir, &redis);
    scenarios::operators(&a, &b).await;
}

/// Redis killed under load: not one call fails and health stays SERVING;
/// a hold placed meanwhile is still obeyed by its replica. Redis restarted
/// (empty): the replicas reconnect, write their holds through and see each
/// other's again.
#[tokio::test]
async fn redis_down_fails_no_call_and_a_restart_resyncs_the_replicas() {
    let mut redis = Redis::start();
    let dir = scenarios::setup("r-down");
    let (a, b) = replicas(&dir, &redis);
    let load = grpc_support::Load::start(
        &a,
        8,
        pb::ClassifyRequest {
            failure: Some(Box::new(pb::Failure {
                dependency: "portal-load".into(),
                retry_after: "2".into(),
                ..failure("vibecode", "QUEUE_OVERFLOW", pb::OperationKind::Read)
            })),
            locale: String::new(),
        },
    )
    .await;
    load.more_calls(200).await;
    redis.kill();
    load.more_calls(2_000).await;

    // A quarantine placed on A while Redis is down is obeyed on A.
    let mut ca = a.client().await;
    let mut q = failure("vibecode", "TIMEOUT_QUARANTINE", pb::OperationKind::Read);
    q.dependency = "portal-during-outage".into();
    q.retry_after = "60".into();
    let d = ca
        .classify(pb::ClassifyRequest {
            failure: Some(Box::new(q)),
            locale: String::new(),
        })
        .await
        .expect("decided while Redis is down")
        .into_inner()
        .decision
        .expect("decision");
    assert!(d.hold.is_some(), "the hold is placed locally: {d:?}");
    let admit = pb::AdmitRequest {
        catalog: "vibecode".into(),
        dependency: "portal-during-outage".into(),
        tenant: "t".into(),
        attempt: 1,
        ..Default::default()
    };
    assert!(!ca.admit(admit.clone()).await.expect("admit").into_inner().admitted);
    a.until_logged(&["shared state store:"]).await;
    let scrape = a.scrape();
    assert_eq!(
        grpc_support::sample(&scrape, "retryd_state_connected"),
        Some(0.0),
        "{scrape}"
    );

    redis.restart();
    load.more_calls(500).await;
    let report = load.stop().await;
    report.assert_clean(&[d.policy_version.as_str()]);
    assert!(report.calls() > 2_700, "{} calls", report.calls());

    // After the resync, B sees the hold A placed while Redis was away.
    let cb = b.client().await;
    eventually(
        Duration::from_secs(15),
        "B obeys the hold placed on A during the outage",
        || {
            let mut cb = cb.clone();
            let admit = admit.clone();
            async move { (!cb.admit(admit).await.expect("admit").into_inner().admitted).then_some(()) }
        },
    )
    .await;
    eventually(Duration::from_secs(15), "A reports Redis connected again", || async {
        (grpc_support::sample(&a.scrape(), "retryd_state_connected") == Some(1.0)).then_some(())
    })
    .await;
}
