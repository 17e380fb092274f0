//! Fleet memory under time and a hostile caller (issue 22), each run
//! against two replicas `a` and `b`: a stop's end admits one probe, not a
//! stampede; probe tokens cannot be forged, reused or outlived; a watch
//! streams a snapshot, `synced`, then changes, within its limits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use retryd::grpc::pb::{self, retry_decision_service_client::RetryDecisionServiceClient};
use tokio_stream::StreamExt as _;
use tonic::Code;
use tonic::transport::Channel;

use super::scenarios::{ms, now_ms};
use crate::grpc_support::{Server, eventually};

fn ts(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// FrontSpin's RATE_LIMITED for `tenant`, the allowance coming back at `reset`.
fn rate_limited(dep: &str, tenant: &str, reset: i64, token: &str) -> pb::ClassifyRequest {
    pb::ClassifyRequest {
        failure: Some(Box::new(pb::Failure {
            catalog: "frontspin".into(),
            code: "RATE_LIMITED".into(),
            operation: pb::OperationKind::Write as i32,
            attempt: 1,
            dependency: dep.into(),
            tenant: tenant.into(),
            quota_resets_at: Some(ts(reset)),
            probe_token: token.into(),
            ..Default::default()
        })),
        locale: String::new(),
    }
}

fn admit_req(dep: &str, tenant: &str) -> pb::AdmitRequest {
    pb::AdmitRequest {
        catalog: "frontspin".into(),
        dependency: dep.into(),
        tenant: tenant.into(),
        method: "deal.sync".into(),
        operation: pb::OperationKind::Write as i32,
        attempt: 1,
    }
}

/// One admitted call: when, by which worker, with which token.
#[derive(Debug, Clone)]
struct Call {
    at: i64,
    worker: usize,
    token: String,
}

/// 40 workers, half on each replica, ask Admit for a tenant under a quota
/// stop ending at `reset` (polling every 10 ms, or sleeping until the
/// `retry_at` they are given); an admitted call takes 150 ms, then fails
/// again (a Classify placing the stop until `reset + 60 s`, with the
/// probe's token) or succeeds (its token reported). Returns every admitted
/// call and when the probe's success was reported.
async fn reset_with_workers(
    a: &Server,
    b: &Server,
    dep: &str,
    honour_retry_at: bool,
    probe_succeeds: bool,
) -> (Vec<Call>, Option<i64>, i64) {
    let (ca, cb) = (a.client().await, b.client().await);
    let reset = now_ms() + 1_500;
    let mut c = ca.clone();
    let placed = c
        .classify(rate_limited(dep, "acme", reset, ""))
        .await
        .expect("classify")
        .into_inner()
        .decision
        .expect("decision");
    let hold = placed.hold.expect("the quota stop");
    assert_eq!(ms(&hold.until), reset);
    assert_eq!(ms(&hold.next_probe_at), reset, "the probe phase starts at the reset");
    // Both replicas refuse before the workers start.
    for c in [&ca, &cb] {
        eventually(Duration::from_secs(5), "the stop reaches both replicas", || {
            let mut c = c.clone();
            async move { (!c.admit(admit_req(dep, "acme")).await.ok()?.into_inner().admitted).then_some(()) }
        })
        .await;
    }
    let calls = Arc::new(Mutex::new(Vec::<Call>::new()));
    let success_at = Arc::new(Mutex::new(None::<i64>));
    let end = reset + 3_000;
    let mut workers = Vec::new();
    for worker in 0..40 {
        let mut c: RetryDecisionServiceClient<Channel> = if worker % 2 == 0 { ca.clone() } else { cb.clone() };
        let (calls, success_at, dep) = (Arc::clone(&calls), Arc::clone(&success_at), dep.to_owned());
        workers.push(tokio::spawn(async move {
            while now_ms() < end {
                let r = c.admit(admit_req(&dep, "acme")).await.expect("admit").into_inner();
                if r.admitted {
                    let at = now_ms();
                    calls.lock().unwrap().push(Call {
                        at,
                        worker,
                        token: r.probe_token.clone(),
                    });
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    if probe_succeeds {
                        if !r.probe_token.is_empty() {
                            let rep = c
                                .report_outcomes(pb::ReportOutcomesRequest {
                                    counts: Vec::new(),
                                    probe_token: r.probe_token.clone(),
                                    probe_succeeded: true,
                                })
                                .await
                                .expect("report")
                                .into_inner();
                            assert!(rep.probe_accepted, "the probe's own token counts");
                            *success_at.lock().unwrap() = Some(now_ms());
                        }
                        // After the success each worker's first admission is what counts.
                        return;
                    }
                    c.classify(rate_limited(&dep, "acme", now_ms() + 60_000, &r.probe_token))
                        .await
                        .expect("classify the failed probe");
                } else if honour_retry_at {
                    let wait = (ms(&r.retry_at) - now_ms()).clamp(1, 5_000);
                    tokio::time::sleep(Duration::from_millis(wait as u64)).await;
                } else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }));
    }
    for w in workers {
        w.await.expect("worker");
    }
    let calls = calls.lock().unwrap().clone();
    let success = *success_at.lock().unwrap();
    (calls, success, reset)
}

/// A slow store is not an absent one: when the probe slot's script does
/// not answer in time (Redis frozen just before the reset), neither
/// replica admits a probe on its own — each could, and two would go — and
/// once the store answers again exactly one probe goes.
pub async fn a_slow_store_admits_no_second_probe(a: &Server, b: &Server, freeze: impl FnOnce(), thaw: impl FnOnce()) {
    let dep = "fs-reset-slow-store";
    let (ca, cb) = (a.client().await, b.client().await);
    let reset = now_ms() + 1_500;
    ca.clone()
        .classify(rate_limited(dep, "acme", reset, ""))
        .await
        .expect("classify");
    for c in [&ca, &cb] {
        eventually(Duration::from_secs(5), "the stop reaches both replicas", || {
            let mut c = c.clone();
            async move { (!c.admit(admit_req(dep, "acme")).await.ok()?.into_inner().admitted).then_some(()) }
        })
        .await;
    }
    tokio::time::sleep(Duration::from_millis((reset - 50 - now_ms()).max(0) as u64)).await;
    freeze();
    tokio::time::sleep(Duration::from_millis((reset + 5 - now_ms()).max(0) as u64)).await;
    // Well inside the store's ping timeout: it is slow, not yet away.
    let (mut xa, mut xb) = (ca.clone(), cb.clone());
    let (ra, rb) = tokio::join!(xa.admit(admit_req(dep, "acme")), xb.admit(admit_req(dep, "acme")));
    thaw();
    let (ra, rb) = (ra.expect("admit a").into_inner(), rb.expect("admit b").into_inner());
    assert!(
        !ra.admitted && !rb.admitted,
        "no probe admitted while the store was slow: {ra:?} {rb:?}"
    );
    let mut admitted = 0;
    let end = now_ms() + 2_500;
    while now_ms() < end {
        for c in [&ca, &cb] {
            if c.clone()
                .admit(admit_req(dep, "acme"))
                .await
                .expect("admit")
                .into_inner()
                .admitted
            {
                admitted += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(admitted, 1, "one probe once the store answers again");
}

/// Seed 003: at the reset, one wasted request, not forty — whether the
/// workers poll or honour `retry_at`.
pub async fn one_probe_at_the_reset(a: &Server, b: &Server, honour_retry_at: bool) {
    let dep = if honour_retry_at {
        "fs-reset-honour"
    } else {
        "fs-reset-poll"
    };
    let (calls, _, reset) = reset_with_workers(a, b, dep, honour_retry_at, false).await;
    let in_window: Vec<&Call> = calls
        .iter()
        .filter(|c| c.at >= reset - 50 && c.at <= reset + 3_000)
        .collect();
    assert_eq!(
        in_window.len(),
        1,
        "one call admitted in the 3 s after the reset: {calls:?}"
    );
    assert!(!in_window[0].token.is_empty(), "admitted as the probe: {calls:?}");
}

/// The probe succeeds: the stop lifts for everyone, polling workers are
/// admitted at once and those honouring `retry_at` within 2 s.
pub async fn the_probe_success_lifts_for_everyone(a: &Server, b: &Server, honour_retry_at: bool) {
    let dep = if honour_retry_at {
        "fs-lift-honour"
    } else {
        "fs-lift-poll"
    };
    let (calls, success, _) = reset_with_workers(a, b, dep, honour_retry_at, true).await;
    let success = success.expect("the probe's success was reported");
    let probes = calls.iter().filter(|c| !c.token.is_empty()).count();
    assert_eq!(probes, 1, "one probe: {calls:?}");
    // Every worker was admitted after the success, within the bound.
    // The figure for polling workers is 100 ms; the test allows 250
    // for a loaded CI machine and prints what it saw (bench/RESULTS.md).
    let bound = if honour_retry_at { 2_000 } else { 250 };
    let mut slowest = 0;
    for worker in 0..40 {
        let first = calls
            .iter()
            .filter(|c| c.worker == worker && c.token.is_empty())
            .map(|c| c.at)
            .min();
        let probe = calls.iter().any(|c| c.worker == worker && !c.token.is_empty());
        if probe {
            continue;
        }
        let first = first.unwrap_or_else(|| panic!("worker {worker} never admitted: {calls:?}"));
        assert!(
            first - success <= bound,
            "worker {worker} admitted {} ms after the success (bound {bound})",
            first - success
        );
        slowest = slowest.max(first - success);
    }
    eprintln!(
        "probe success: every {} worker admitted within {slowest} ms of it",
        if honour_retry_at {
            "retry_at-honouring"
        } else {
            "polling"
        }
    );
}

/// A probe token is accepted once, for its own slot, on any replica; a
/// forged, reused or superseded one changes nothing and says so.
pub async fn probe_tokens_cannot_be_forged(a: &Server, b: &Server) {
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let dep = "svc-forge";
    let circuit = ca
        .classify(pb::ClassifyRequest {
            failure: Some(Box::new(pb::Failure {
                catalog: "probes".into(),
                code: "LOOP".into(),
                operation: pb::OperationKind::Write as i32,
                attempt: 1,
                dependency: dep.into(),
                ..Default::default()
            })),
            locale: String::new(),
        })
        .await
        .expect("classify")
        .into_inner()
        .decision
        .expect("decision")
        .hold
        .expect("circuit");
    let req = pb::AdmitRequest {
        catalog: "probes".into(),
        dependency: dep.into(),
        method: "x.add".into(),
        operation: pb::OperationKind::Write as i32,
        attempt: 1,
        ..Default::default()
    };
    let probe = |c: RetryDecisionServiceClient<Channel>| {
        let req = req.clone();
        async move {
            eventually(Duration::from_secs(5), "a probe slot", || {
                let mut c = c.clone();
                let req = req.clone();
                async move {
                    let r = c.admit(req).await.ok()?.into_inner();
                    (!r.probe_token.is_empty()).then_some(r.probe_token)
                }
            })
            .await
        }
    };
    let report = |c: &mut RetryDecisionServiceClient<Channel>, token: String, ok: bool| {
        let mut c = c.clone();
        async move {
            c.report_outcomes(pb::ReportOutcomesRequest {
                counts: Vec::new(),
                probe_token: token,
                probe_succeeded: ok,
            })
            .await
        }
    };
    let t1 = probe(ca.clone()).await;
    let (prefix, _) = t1.rsplit_once('.').expect("token");
    // Forged: the hold id and slot everyone can see, any nonce.
    for forged in [
        format!("{prefix}.{}", "0".repeat(32)),
        format!("{}.0.{}", circuit.id, "0".repeat(32)),
        format!("{}.3.{}", circuit.id, "f".repeat(32)),
    ] {
        let r = report(&mut cb, forged.clone(), true)
            .await
            .expect("a forged token is answered OK")
            .into_inner();
        assert!(!r.probe_accepted, "{forged}");
    }
    assert!(
        !cb.admit(req.clone()).await.expect("admit").into_inner().admitted,
        "still open"
    );
    // Malformed: INVALID_ARGUMENT naming the field.
    let err = report(&mut cb, format!("{}.1.0000000000000000", circuit.id), true)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("probe_token"), "{}", err.message());
    // The genuine failure counts on the other replica; then its token is spent.
    let r = report(&mut cb, t1.clone(), false).await.expect("report").into_inner();
    assert!(r.probe_accepted, "the real token, reported on the other replica");
    let r = report(&mut ca, t1.clone(), true).await.expect("report").into_inner();
    assert!(!r.probe_accepted, "a token counts once");
    // Superseded: slot n's token after slot n+1's was issued.
    let t2 = probe(cb.clone()).await;
    let t3 = probe(ca.clone()).await;
    assert_ne!(t2, t3);
    let r = report(&mut ca, t2, true).await.expect("report").into_inner();
    assert!(!r.probe_accepted, "superseded by the next slot's token");
    assert!(
        !cb.admit(req.clone()).await.expect("admit").into_inner().admitted,
        "still open"
    );
    let r = report(&mut cb, t3, true).await.expect("report").into_inner();
    assert!(r.probe_accepted, "the latest slot's token closes it");
    for c in [&ca, &cb] {
        eventually(Duration::from_secs(5), "closed on both replicas", || {
            let mut c = c.clone();
            let req = req.clone();
            async move { c.admit(req).await.ok()?.into_inner().admitted.then_some(()) }
        })
        .await;
    }
    // Three forged (a slot never issued counts as superseded when a later
    // one was), one reused, one superseded.
    let mut rejected = 0.0;
    for server in [a, b] {
        let scrape = server.scrape();
        for reason in ["forged", "reused", "superseded"] {
            let series = format!("retryd_probe_tokens_rejected_total{{reason=\"{reason}\"}}");
            rejected += crate::grpc_support::sample(&scrape, &series).unwrap_or(0.0);
        }
    }
    let rejected = if std::ptr::eq(a, b) { rejected / 2.0 } else { rejected };
    assert_eq!(rejected, 5.0, "rejected tokens counted by reason");
}

/// A watch over several dependencies: the holds in force, then SYNCED,
/// then changes, each with the server's time; a caller's streams are capped.
pub async fn watch_protocol(a: &Server, b: &Server, per_caller: usize) {
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let reset = now_ms() + 3_600_000;
    for dep in ["w-one", "w-two", "w-other"] {
        ca.classify(rate_limited(dep, "acme", reset, ""))
            .await
            .expect("classify");
    }
    let watch = |c: &mut RetryDecisionServiceClient<Channel>| {
        let mut c = c.clone();
        async move {
            c.watch_holds(pb::WatchHoldsRequest {
                catalog: "frontspin".into(),
                dependencies: vec!["w-one".into()],
                dependency: "w-two".into(),
                ..Default::default()
            })
            .await
        }
    };
    let mut stream = eventually(Duration::from_secs(5), "both holds in b's snapshot", || {
        let mut cb = cb.clone();
        async move {
            let mut s = watch(&mut cb).await.ok()?.into_inner();
            let mut seen = Vec::new();
            loop {
                let ev = tokio::time::timeout(Duration::from_secs(5), s.next())
                    .await
                    .ok()??
                    .ok()?;
                assert!(ev.server_time.is_some(), "every event carries the server's time");
                if ev.kind() == pb::HoldEventKind::Synced {
                    assert!(ev.hold.is_none());
                    break;
                }
                assert_eq!(ev.kind(), pb::HoldEventKind::Placed);
                let h = ev.hold.expect("hold");
                assert_eq!(h.tenant.len(), 18, "a non-operator sees tenants hashed: {}", h.tenant);
                seen.push(h.dependency);
            }
            seen.sort();
            (seen == ["w-one", "w-two"]).then_some(s)
        }
    })
    .await;
    // A change after the snapshot arrives; one on an unwatched dependency does not.
    ca.classify(rate_limited("w-other", "globex", reset, ""))
        .await
        .expect("classify");
    ca.classify(rate_limited("w-two", "globex", reset, ""))
        .await
        .expect("classify");
    let ev = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("an event")
        .expect("open")
        .expect("event");
    assert_eq!(ev.kind(), pb::HoldEventKind::Placed);
    assert_eq!(ev.hold.expect("hold").dependency, "w-two");
    // The caller's cap: `per_caller` streams in all (this one counts), then refused.
    let mut open = vec![stream];
    while open.len() < per_caller {
        open.push(watch(&mut cb).await.expect("under the cap").into_inner());
    }
    let err = watch(&mut cb).await.expect_err("over the cap");
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(
        err.message().contains("--max-watch-streams-per-caller"),
        "{}",
        err.message()
    );
    // Another replica is another server: its own cap.
    watch(&mut ca).await.expect("a's cap is its own");
    // Closing one gives its place back.
    open.pop();
    eventually(Duration::from_secs(5), "a place freed", || {
        let mut cb = cb.clone();
        async move { watch(&mut cb).await.ok().map(|_| ()) }
    })
    .await;
    // A client mirror names its tenants: theirs in clear, no other tenant's.
    // (Once the freed place is seen: the caller is at its cap until then.)
    let mut mirror = eventually(Duration::from_secs(5), "a mirror's watch", || {
        let mut cb = cb.clone();
        async move {
            cb.watch_holds(pb::WatchHoldsRequest {
                catalog: "frontspin".into(),
                dependencies: vec!["w-two".into()],
                tenants: vec!["acme".into()],
                ..Default::default()
            })
            .await
            .ok()
        }
    })
    .await
    .into_inner();
    let mut tenants = Vec::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), mirror.next())
            .await
            .expect("an event")
            .expect("open")
            .expect("event");
        if ev.kind() == pb::HoldEventKind::Synced {
            break;
        }
        tenants.push(ev.hold.expect("hold").tenant);
    }
    assert_eq!(tenants, ["acme"], "acme's stop in clear; globex's not sent");
}

/// A client whose connection comes from `source` (a 127.0.0.x address):
/// another caller, as the server counts callers.
pub async fn client_from(server: &Server, source: std::net::Ipv4Addr) -> RetryDecisionServiceClient<Channel> {
    let target = server.addr;
    let connector = tower::service_fn(move |_: tonic::transport::Uri| async move {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(std::net::SocketAddr::from((source, 0)))?;
        let stream = socket.connect(target).await?;
        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
    });
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .expect("endpoint")
        .connect_with_connector(connector)
        .await
        .expect("connect from a source address");
    RetryDecisionServiceClient::new(channel)
}

fn quarantine(dep: &str, retry_after_s: u64) -> pb::ClassifyRequest {
    pb::ClassifyRequest {
        failure: Some(Box::new(pb::Failure {
            catalog: "vibecode".into(),
            code: "TIMEOUT_QUARANTINE".into(),
            operation: pb::OperationKind::Read as i32,
            attempt: 1,
            dependency: dep.into(),
            tenant: "t".into(),
            retry_after: retry_after_s.to_string(),
            ..Default::default()
        })),
        locale: String::new(),
    }
}

/// Waits until the server's `retryd_holds_evicted_total` (refreshed with
/// the gauges, once a second) shows the flood went past the cap.
async fn evictions_counted(s: &Server) {
    eventually(Duration::from_secs(5), "retryd_holds_evicted_total > 0", || async {
        let n = crate::grpc_support::sample(&s.scrape(), "retryd_holds_evicted_total").unwrap_or(0.0);
        (n > 0.0).then_some(())
    })
    .await;
}

async fn refused(c: &mut RetryDecisionServiceClient<Channel>, req: pb::AdmitRequest) -> bool {
    !c.admit(req).await.expect("admit").into_inner().admitted
}

/// At `--max-holds 50`: a real 10-minute quarantine survives 6 other
/// addresses placing 10 dependency holds of 25 h each (the old order, the
/// soonest end first, evicted the real one).
pub async fn a_real_quarantine_survives_a_dependency_hold_flood(s: &Server) {
    let mut real = client_from(s, [127, 0, 0, 2].into()).await;
    real.classify(quarantine("portal-real", 600)).await.expect("classify");
    for a in 0..6u8 {
        let mut c = client_from(s, [127, 0, 1, 10 + a].into()).await;
        for i in 0..10 {
            let d = c
                .classify(quarantine(&format!("flood-{a}-{i}"), 90_000))
                .await
                .expect("classify")
                .into_inner()
                .decision
                .expect("decision");
            assert!(d.hold.is_some() || !d.warnings.is_empty(), "{d:?}");
        }
    }
    evictions_counted(s).await;
    let req = pb::AdmitRequest {
        catalog: "vibecode".into(),
        dependency: "portal-real".into(),
        tenant: "t".into(),
        ..Default::default()
    };
    assert!(refused(&mut real, req).await, "the real quarantine was evicted");
}

/// A real quota stop survives a tenant-hold flood from 50 addresses at the
/// default rates, with a cap the flood exceeds.
pub async fn a_real_quota_stop_survives_a_tenant_hold_flood(s: &Server) {
    let reset = now_ms() + 3_600_000;
    let mut real = client_from(s, [127, 0, 0, 3].into()).await;
    real.classify(rate_limited("fs-real", "real-tenant", reset, ""))
        .await
        .expect("classify");
    let mut flood = Vec::new();
    for a in 0..50u8 {
        let mut c = client_from(s, [127, 0, 2, 10 + a].into()).await;
        flood.push(tokio::spawn(async move {
            for i in 0..20 {
                let _ = c
                    .classify(rate_limited("fs-flood", &format!("t-{a}-{i}"), reset, ""))
                    .await;
            }
        }));
    }
    for f in flood {
        f.await.expect("flood");
    }
    evictions_counted(s).await;
    assert!(
        refused(&mut real, admit_req("fs-real", "real-tenant")).await,
        "the real quota stop was evicted"
    );
}
