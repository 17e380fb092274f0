//! A client mirror resumes its watch after a restart (issue 22's reconnect
//! storm): two replicas over a real Redis; a mirror watches replica B, B
//! is killed and a new replica C reads the holds back from Redis; the
//! mirror's watch on C, resumed from its 256 bucket digests, is answered
//! SYNCED alone. A hold placed since then is sent with the rest of its
//! bucket, and nothing else.

mod fleet_support;
mod grpc_support;
#[path = "grpc_support/raw.rs"]
mod raw;
mod redis_support;

use std::collections::BTreeSet;
use std::time::Duration;

use fleet_support::budgets::classify;
use fleet_support::scenarios::{self, as_operator, ms};
use grpc_support::{Server, eventually};
use redis_support::RedisServer as Redis;
use retryd::core::UnixMillis;
use retryd::core::hold::{bucket, bucket_digests, digest};
use retryd::grpc::pb;
use tokio_stream::StreamExt as _;

const DEP: &str = "frontspin-resume";

fn stop(tenant: &str) -> pb::Failure {
    pb::Failure {
        catalog: "frontspin".into(),
        code: "RATE_LIMITED".into(),
        operation: pb::OperationKind::Write as i32,
        attempt: 1,
        dependency: DEP.into(),
        tenant: tenant.into(),
        ..Default::default()
    }
}

fn digest_of(h: &pb::Hold) -> u64 {
    digest(&h.id, UnixMillis(ms(&h.until)))
}

/// Watches `s` (resumed from `digests` if any): the holds sent before
/// SYNCED, and SYNCED itself.
async fn watch(s: &Server, digests: Vec<u64>) -> (Vec<pb::Hold>, pb::WatchHoldsResponse) {
    let mut c = s.client().await;
    let mut stream = c
        .watch_holds(as_operator(pb::WatchHoldsRequest {
            dependencies: vec![DEP.into()],
            resume_digests: digests,
            ..Default::default()
        }))
        .await
        .expect("watch")
        .into_inner();
    let mut holds = Vec::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("an event in time")
            .expect("open")
            .expect("event");
        if ev.kind() == pb::HoldEventKind::Synced {
            return (holds, ev);
        }
        holds.push(ev.hold.expect("hold"));
    }
}

#[tokio::test]
async fn a_mirror_resumed_after_a_restart_is_sent_only_what_changed() {
    let redis = Redis::start();
    let dir = scenarios::setup("resume");
    let args = scenarios::server_args(&dir, &redis.url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (a, b) = (Server::start(&args), Server::start(&args));
    let mut ca = a.client().await;
    for t in 0..40 {
        classify(&mut ca, stop(&format!("tenant-{t}"))).await;
    }
    // The mirror: B's snapshot, once B has every hold A placed.
    let mirror = eventually(Duration::from_secs(10), "B has every hold A placed", || async {
        let (holds, _) = watch(&b, Vec::new()).await;
        (holds.len() == 40).then_some(holds)
    })
    .await;
    let (_, synced) = watch(&b, Vec::new()).await;
    assert!(!synced.resumed, "a watch without digests is a full snapshot");
    let digests = bucket_digests(mirror.iter().map(digest_of));

    // B restarts: C, a new replica, reads the holds back from Redis.
    drop(b);
    let c = Server::start(&args);
    let (sent, synced) = watch(&c, digests.clone()).await;
    assert!(synced.resumed);
    assert_eq!(
        (sent.len(), synced.resent_buckets.len()),
        (0, 0),
        "the mirror was right"
    );

    // A hold placed meanwhile: its bucket is sent whole, and only it.
    let new = classify(&mut ca, stop("tenant-new")).await.hold.expect("placed");
    eventually(Duration::from_secs(10), "C has the new hold", || async {
        (watch(&c, Vec::new()).await.0.len() == 41).then_some(())
    })
    .await;
    let (sent, synced) = watch(&c, digests).await;
    let b = bucket(digest_of(&new)) as u32;
    assert_eq!(synced.resent_buckets, vec![b]);
    let got: BTreeSet<String> = sent.iter().map(|h| h.id.clone()).collect();
    let want: BTreeSet<String> = mirror
        .iter()
        .chain([&new])
        .filter(|h| bucket(digest_of(h)) as u32 == b)
        .map(|h| h.id.clone())
        .collect();
    assert_eq!(got, want);
}
