//! Fleet retry budgets end to end: two `retryd serve --state redis://…`
//! replicas sharing one real redis-server. First attempts are deposited
//! through Admit on both replicas, failures classified on both, and the
//! retries answered without deferral are counted over both together.

mod fleet_support;
mod grpc_support;
#[path = "grpc_support/raw.rs"]
mod raw;
mod redis_support;

use std::time::Duration;

use fleet_support::budgets::{admit, classify, deferred, retry};
use fleet_support::scenarios;
use grpc_support::{Server, TempDir, failure};
use redis_support::RedisServer as Redis;
use retryd::grpc::pb;

/// A catalog with a 2 s budget window, so the window-passing test is fast.
const SHORT: &str = r#"
name = "short"
description = "A 2 s retry budget, for tests"
max_attempts = 5
[backoff]
base_ms = 100
multiplier = 2.0
cap_ms = 1000
[operations]
read = ["get"]
write = ["add"]
[[codes]]
code = "SLOW"
target_reached = "no"
condition.en = "Slow."
read = { verdict = "retry_with_limit" }
write = { verdict = "retry_with_limit" }
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
[[budgets]]
scope = "dependency"
window = "2s"
retry_percent = 20
min_retries_per_sec = 5
"#;

fn replicas(name: &str, redis: &Redis) -> (TempDir, Server, Server) {
    let dir = scenarios::setup(name);
    std::fs::write(dir.join("policy/short.toml"), SHORT).expect("short catalog");
    let args = scenarios::server_args(&dir, &redis.url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (a, b) = (Server::start(&args), Server::start(&args));
    (dir, a, b)
}

/// The issue's scenario: 1 000 first attempts and 600 failures of one
/// dependency split over two replicas; then a second dependency and an
/// unrecorded one.
#[tokio::test]
async fn redis_budget_bounds_retries_across_both_replicas() {
    let redis = Redis::start();
    let (_dir, a, b) = replicas("b-share", &redis);
    let mut clients = [a.client().await, b.client().await];
    // 1 000 first attempts, 500 through each replica, from 10 tasks at once
    // (well inside the 10 s window even on a loaded machine).
    let tasks: Vec<_> = (0..10)
        .map(|t| {
            let mut c = clients[t % 2].clone();
            tokio::spawn(async move {
                for _ in 0..100 {
                    assert!(admit(&mut c, "vibecode", "portal-budget", "").await);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("admits");
    }
    for i in 0..10 {
        assert!(admit(&mut clients[i % 2], "vibecode", "portal-other", "").await);
    }
    // Let both flushes carry the deposits to the other replica.
    tokio::time::sleep(Duration::from_millis(400)).await;
    // 600 failures, 300 through each replica at once, each stream paced 3 ms
    // apart.
    let began = std::time::Instant::now();
    let streams: Vec<_> = (0..2)
        .map(|r| {
            let mut c = clients[r].clone();
            tokio::spawn(async move {
                let (mut undeferred, mut last) = (0u64, None);
                for _ in 0..300 {
                    let d = classify(&mut c, retry("vibecode", "BITRIX_TIMEOUT", "portal-budget", "")).await;
                    if !deferred(&d) {
                        undeferred += 1;
                    }
                    last = Some(d);
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
                (undeferred, last)
            })
        })
        .collect();
    let mut undeferred = 0u64;
    let mut last = None;
    for s in streams {
        let (n, l) = s.await.expect("failures");
        undeferred += n;
        last = l;
    }
    let took = began.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "the failures took {took:?}: not one 10 s window"
    );
    // Budget: 20 % × 1 000 + 100 = 300. Near exhaustion the replicas
    // approve only from leases of the room granted atomically by Redis, so
    // the fleet stays within max(2, 2 %) of it (issue 23, item 4).
    let budget = 300i64;
    let overshoot = undeferred as i64 - budget;
    println!("undeferred retries: {undeferred} of 600 in {took:?} (budget {budget}, overshoot {overshoot})");
    assert!(overshoot.abs() <= 6, "undeferred {undeferred}, budget {budget}");
    assert!(last.is_some());
    // Once both replicas' counts are flushed, one more failure sees them all.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let last = classify(
        &mut clients[0],
        retry("vibecode", "BITRIX_TIMEOUT", "portal-budget", ""),
    )
    .await;
    assert!(deferred(&last), "{last:?}");
    let r = last.retry.as_ref().expect("contract");
    // Paced: about k / (r / 2 replicas) with r = 30/s and k ≤ 301 this
    // replica's deferrals, ±20 %.
    assert!(
        r.after_ms > 0 && r.after_ms <= 25_000 && r.max_after_ms >= r.after_ms,
        "{r:?}"
    );
    let budget_seen = last.budget.as_ref().expect("Decision.budget");
    assert_eq!(budget_seen.scope_key, "d:vibecode:portal-budget");
    assert_eq!(
        (budget_seen.requests, budget_seen.allowed),
        (1_000, 300),
        "{budget_seen:?}"
    );
    // Only approved retries withdraw: the deferred ones are advice, counted apart.
    assert_eq!(budget_seen.retries, undeferred, "{budget_seen:?}");
    assert!(
        budget_seen.deferred > 0 && budget_seen.next_room_at.is_some(),
        "{budget_seen:?}"
    );

    // A second dependency is unaffected; an unrecorded one is not budgeted.
    let d = classify(&mut clients[1], retry("vibecode", "BITRIX_TIMEOUT", "portal-other", "")).await;
    assert!(!deferred(&d));
    assert_eq!(d.budget.as_ref().map(|b| (b.requests, b.retries)), Some((10, 1)));
    let d = classify(
        &mut clients[0],
        retry("vibecode", "BITRIX_TIMEOUT", "portal-unrecorded", ""),
    )
    .await;
    assert!(!deferred(&d) && d.budget.is_none(), "{d:?}");

    // ListBudgets shows the busiest scope first.
    let listed = clients[0]
        .list_budgets(pb::ListBudgetsRequest::default())
        .await
        .expect("list")
        .into_inner();
    assert_eq!(
        listed.budgets[0].budget.as_ref().expect("budget").scope_key,
        "d:vibecode:portal-budget"
    );
    assert!(
        grpc_support::sample(&a.scrape(), "retryd_budget_exhausted_total{catalog=\"vibecode\"}").unwrap_or(0.0) > 0.0
    );
}

/// A 2 s window: spent, then undeferred again once the window has passed.
#[tokio::test]
async fn redis_budget_has_room_again_after_the_window() {
    let redis = Redis::start();
    let (_dir, a, b) = replicas("b-window", &redis);
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    for _ in 0..5 {
        assert!(admit(&mut ca, "short", "dep", "").await);
        assert!(admit(&mut cb, "short", "dep", "").await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // 20 % × 10 + 5/s × 2 s = 12 retries.
    let mut undeferred = 0;
    let mut spent = None;
    for _ in 0..30 {
        let d = classify(&mut cb, retry("short", "SLOW", "dep", "")).await;
        if deferred(&d) {
            spent.get_or_insert(d);
        } else {
            undeferred += 1;
        }
    }
    assert_eq!(undeferred, 12);
    let spent = spent.expect("spent");
    assert!(spent.retry.as_ref().expect("contract").after_ms <= 2_000, "{spent:?}");
    tokio::time::sleep(Duration::from_millis(2_400)).await;
    assert!(admit(&mut ca, "short", "dep", "").await);
    let d = classify(&mut cb, retry("short", "SLOW", "dep", "")).await;
    assert!(!deferred(&d), "{d:?}");
}

/// FrontSpin's allowance: retries of one tenant stop at 20 % of 500 a day
/// (100) while its first attempts go on being admitted; another tenant is
/// not touched.
#[tokio::test]
async fn redis_frontspin_allowance_keeps_four_fifths_for_first_attempts() {
    let redis = Redis::start();
    let (_dir, a, b) = replicas("b-allowance", &redis);
    let mut clients = [a.client().await, b.client().await];
    for i in 0..300 {
        assert!(admit(&mut clients[i % 2], "frontspin", "fs-portal", "acme").await);
    }
    assert!(admit(&mut clients[0], "frontspin", "fs-portal", "globex").await);
    tokio::time::sleep(Duration::from_millis(400)).await;
    // 200 retries alternating between the replicas: at most 102 of them
    // approved (the allowance, + max(2, 2 %)); the room is spent, not lost.
    let mut undeferred = 0;
    for i in 0..200 {
        let d = classify(&mut clients[i % 2], retry("frontspin", "TIMEOUT", "fs-portal", "acme")).await;
        if !deferred(&d) {
            undeferred += 1;
        }
        tokio::time::sleep(Duration::from_millis(4)).await;
    }
    println!("frontspin allowance: {undeferred} of 200 retries approved (allowance 100)");
    assert!((98..=102).contains(&undeferred), "undeferred {undeferred}");
    assert!(
        admit(&mut clients[1], "frontspin", "fs-portal", "acme").await,
        "first attempts continue"
    );
    let d = classify(&mut clients[1], retry("frontspin", "TIMEOUT", "fs-portal", "acme")).await;
    let key = &d.budget.as_ref().expect("budget").scope_key;
    assert!(
        key.starts_with("t:frontspin:fs-portal:h:") && !key.contains("acme"),
        "{key}"
    );
    // Another tenant of the same portal still has its own allowance (the
    // dependency budget, 20 % × 301 + 100 = 160, is not spent either).
    let d = classify(&mut clients[0], retry("frontspin", "TIMEOUT", "fs-portal", "globex")).await;
    assert!(!deferred(&d), "{d:?}");
}

/// Redis killed mid-run: no call fails, budgets fall back to local counts
/// scaled by the replica count (never "no budget").
#[tokio::test]
async fn redis_down_budgets_degrade_without_a_failed_call() {
    let mut redis = Redis::start();
    let (_dir, a, b) = replicas("b-down", &redis);
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    for _ in 0..50 {
        assert!(admit(&mut ca, "vibecode", "portal-down", "").await);
        assert!(admit(&mut cb, "vibecode", "portal-down", "").await);
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let load = grpc_support::Load::start(
        &a,
        4,
        pb::ClassifyRequest {
            failure: Some(Box::new(retry("vibecode", "BITRIX_TIMEOUT", "portal-down", ""))),
            locale: String::new(),
        },
    )
    .await;
    load.more_calls(100).await;
    redis.kill();
    load.more_calls(1_000).await;
    grpc_support::eventually(
        Duration::from_secs(10),
        "A falls back to scaled local counts",
        || async { (grpc_support::sample(&a.scrape(), "retryd_budget_fallback") == Some(1.0)).then_some(()) },
    )
    .await;
    // Scaled by the two replicas last seen: 50 first attempts here read as 100.
    let d = classify(&mut ca, retry("vibecode", "BITRIX_TIMEOUT", "portal-down", "")).await;
    let seen = d.budget.as_ref().expect("still budgeted");
    assert_eq!(seen.requests, 100, "{seen:?}");
    assert!(deferred(&d), "the storm is still deferred: {d:?}");
    let report = load.stop().await;
    report.assert_clean(&[d.policy_version.as_str()]);
}

/// `--state memory`: the same budget on one replica, exactly.
#[tokio::test]
async fn memory_budget_is_exact_on_one_replica() {
    let dir = scenarios::setup("b-memory");
    let args = scenarios::server_args(&dir, "memory");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::start(&args);
    let mut c = s.client().await;
    for _ in 0..100 {
        assert!(admit(&mut c, "vibecode", "portal-mem", "").await);
    }
    let mut undeferred = 0;
    for _ in 0..200 {
        if !deferred(&classify(&mut c, retry("vibecode", "BITRIX_TIMEOUT", "portal-mem", "")).await) {
            undeferred += 1;
        }
    }
    // 20 % × 100 + 100.
    assert_eq!(undeferred, 120);
    // A write of unknown outcome is still a verification, never a deferred retry.
    let d = classify(
        &mut c,
        pb::Failure {
            dependency: "portal-mem".into(),
            attempt: 2,
            ..failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Write)
        },
    )
    .await;
    assert_eq!(d.verdict(), pb::Verdict::StateVerificationRequired);
    assert!(d.budget.is_none() && !d.warnings.iter().any(|w| w.starts_with("budget_exhausted")));
}

/// One ReportOutcomes of 1 000 entries × (2⁶⁴−1) for one scope, after 100
/// Admits, raises its first attempts by at most one second of
/// `--max-reported-requests-per-sec` (50 000), and the cut is counted.
#[tokio::test]
async fn one_hostile_report_is_cut_to_the_callers_rate() {
    let dir = scenarios::setup("b-report");
    let args = scenarios::server_args(&dir, "memory");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::start(&args);
    let mut c = s.client().await;
    for _ in 0..100 {
        assert!(admit(&mut c, "vibecode", "portal-report", "").await);
    }
    let entry = pb::OutcomeCount {
        catalog: "vibecode".into(),
        dependency: "portal-report".into(),
        requests: u64::MAX,
        ..Default::default()
    };
    c.report_outcomes(pb::ReportOutcomesRequest {
        counts: vec![entry; 1_000],
        ..Default::default()
    })
    .await
    .expect("a valid report");
    let listed = c
        .list_budgets(pb::ListBudgetsRequest {
            dependency: "portal-report".into(),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    let b = listed.budgets[0].budget.as_ref().expect("budget");
    assert!(b.requests > 100 && b.requests <= 50_100, "{b:?}");
    let cut = grpc_support::sample(&s.scrape(), "retryd_reported_requests_clamped_total").unwrap_or(0.0);
    assert!(cut > 1e18, "cut {cut}");
    // Admits stay uncapped: each is one real call.
    for _ in 0..10 {
        assert!(admit(&mut c, "vibecode", "portal-report", "").await);
    }
    let d = classify(&mut c, retry("vibecode", "BITRIX_TIMEOUT", "portal-report", "")).await;
    assert_eq!(d.budget.as_ref().map(|b| b.requests), Some(b.requests + 10));
}

/// Admit's first attempts add budget scopes under the same per-caller
/// bound as Classify and ReportOutcomes (`--budget-scopes-per-sec-per-caller`):
/// one caller admitting 200 new dependencies at once adds about the burst
/// (twice the rate), the rest are refused and counted; every call is still
/// admitted (the bound is on budget scopes, not on calls).
#[tokio::test]
async fn admit_adds_new_scopes_at_the_callers_rate() {
    let dir = scenarios::setup("b-admit-rate");
    let mut args = scenarios::server_args(&dir, "memory");
    args.extend(["--budget-scopes-per-sec-per-caller".to_owned(), "10".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::start(&args);
    let mut c = s.client().await;
    let began = std::time::Instant::now();
    for i in 0..200 {
        assert!(admit(&mut c, "vibecode", &format!("admit-flood-{i}"), "").await);
    }
    let secs = began.elapsed().as_secs_f64();
    let listed = c
        .list_budgets(pb::ListBudgetsRequest {
            limit: 1_000,
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    let added = listed.budgets.len() as f64;
    // Burst 20, then 10 per second.
    let bound = 20.0 + 10.0 * secs + 1.0;
    println!("admit flood: {added} scopes added in {secs:.2} s (bound {bound:.0})");
    assert!(added >= 20.0 && added <= bound, "added {added}, bound {bound}");
    let refused = grpc_support::sample(&s.scrape(), "retryd_budget_scopes_refused_total").unwrap_or(0.0);
    assert_eq!(refused, 200.0 - added, "refused {refused}, added {added}");
}
