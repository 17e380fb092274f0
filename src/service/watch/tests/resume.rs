//! A mirror that reconnects with its digests is sent only what differs.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::StreamExt as _;

use super::service;
use crate::core::UnixMillis;
use crate::core::hold::{Hold, RESUME_BUCKETS, bucket, bucket_digests};
use crate::fleet::HoldEventKind;
use crate::service::error::ErrorKind;
use crate::service::watch::{Plain, WatchEvents, WatchFilter};
use crate::service::watch_snapshot::RESUME_CACHE_FILTERS;

/// The holds a stream sends before SYNCED, and SYNCED's resent buckets.
async fn until_synced(events: &mut WatchEvents<Plain>) -> (Vec<Hold>, Option<Vec<u32>>) {
    let mut holds = Vec::new();
    loop {
        let ev = events.next().await.expect("open").expect("event");
        if ev.kind == HoldEventKind::Synced {
            return (holds, ev.resent_buckets);
        }
        holds.push(ev.hold.expect("hold").hold);
    }
}

fn digests_of(holds: &[Hold]) -> Vec<u64> {
    let now = UnixMillis::now();
    bucket_digests(holds.iter().map(|h| h.resume_digest(now)))
}

fn resume(digests: Vec<u64>) -> WatchFilter {
    WatchFilter {
        resume: digests,
        ..WatchFilter::default()
    }
}

#[tokio::test]
async fn a_mirror_that_is_right_is_sent_synced_alone() {
    let (s, _fleet, _drain) = service(300, Duration::from_secs(10));
    let mut first = s
        .watch_holds(WatchFilter::default(), true, "c", Arc::new(Plain))
        .expect("watch");
    let (holds, resent) = until_synced(&mut first).await;
    assert_eq!((holds.len(), resent), (300, None), "a full snapshot names no buckets");
    drop(first);
    let mut again = s
        .watch_holds(resume(digests_of(&holds)), true, "c", Arc::new(Plain))
        .expect("resume");
    let (sent, resent) = until_synced(&mut again).await;
    assert!(
        sent.is_empty(),
        "{} holds sent to a mirror that had them all",
        sent.len()
    );
    assert_eq!(resent, Some(vec![]));
}

#[tokio::test]
async fn only_the_buckets_that_differ_are_sent_whole() {
    let (s, fleet, _drain) = service(300, Duration::from_secs(10));
    let mut first = s
        .watch_holds(WatchFilter::default(), true, "c", Arc::new(Plain))
        .expect("watch");
    let (mut mirror, _) = until_synced(&mut first).await;
    drop(first);
    // The server lifts one hold the mirror has; the mirror missed that.
    let lifted = mirror[7].clone();
    fleet.mirror().lift(&lifted.id).expect("lifted");
    // The mirror lost one hold the server still has.
    let lost = mirror.remove(100);
    let mut again = s
        .watch_holds(resume(digests_of(&mirror)), true, "c", Arc::new(Plain))
        .expect("resume");
    let (sent, resent) = until_synced(&mut again).await;
    let now = UnixMillis::now();
    let want: BTreeSet<u32> = [&lifted, &lost]
        .iter()
        .map(|h| bucket(h.resume_digest(now)) as u32)
        .collect();
    let resent: BTreeSet<u32> = resent.expect("resumed").into_iter().collect();
    assert_eq!(resent, want);
    // Every hold the server has in those buckets, and nothing else.
    let server = fleet.mirror().snapshot(now);
    let expected: BTreeSet<String> = server
        .iter()
        .filter(|h| resent.contains(&(bucket(h.resume_digest(now)) as u32)))
        .map(|h| h.id.clone())
        .collect();
    let got: BTreeSet<String> = sent.iter().map(|h| h.id.clone()).collect();
    assert_eq!(got, expected);
    assert!(got.contains(&lost.id) && !got.contains(&lifted.id));
    assert!(got.len() < 300 / 4, "{} holds sent for 2 buckets", got.len());
}

#[tokio::test]
async fn a_resume_is_256_digests_or_none() {
    let (s, _fleet, _drain) = service(0, Duration::from_secs(1));
    for n in [1, RESUME_BUCKETS - 1, RESUME_BUCKETS + 1] {
        let err = s
            .watch_holds(resume(vec![0; n]), false, "a", Arc::new(Plain))
            .expect_err("wrong length");
        assert_eq!(err.kind, ErrorKind::InvalidArgument);
        assert!(err.to_string().contains("resume_digests"), "{err}");
    }
    // 256 zeros: a mirror with no hold, on a server with none.
    let mut events = s
        .watch_holds(resume(vec![0; RESUME_BUCKETS]), false, "a", Arc::new(Plain))
        .expect("256");
    assert_eq!(until_synced(&mut events).await, (vec![], Some(vec![])));
}

#[tokio::test]
async fn a_change_after_a_resume_is_seen_by_the_next_one() {
    let (s, fleet, _drain) = service(50, Duration::from_secs(10));
    let mut first = s
        .watch_holds(WatchFilter::default(), true, "c", Arc::new(Plain))
        .expect("watch");
    let (mirror, _) = until_synced(&mut first).await;
    drop(first);
    let digests = digests_of(&mirror);
    for _ in 0..2 {
        let mut again = s
            .watch_holds(resume(digests.clone()), true, "c", Arc::new(Plain))
            .expect("resume");
        assert_eq!(until_synced(&mut again).await, (vec![], Some(vec![])));
    }
    // The digests were cached; a lift moves the mirror on, and the next
    // resume sees it.
    fleet.mirror().lift(&mirror[3].id).expect("lifted");
    let mut after = s
        .watch_holds(resume(digests), true, "c", Arc::new(Plain))
        .expect("resume");
    let (_, resent) = until_synced(&mut after).await;
    let b = bucket(mirror[3].resume_digest(UnixMillis::now())) as u32;
    assert_eq!(resent, Some(vec![b]));
}

#[tokio::test]
async fn the_resume_cache_keeps_at_most_its_bound_of_filters() {
    let (s, _fleet, _drain) = service(10, Duration::from_secs(10));
    for i in 0..RESUME_CACHE_FILTERS + 44 {
        let filter = WatchFilter {
            dependencies: vec![format!("dependency-{i}")],
            resume: vec![0; RESUME_BUCKETS],
            ..WatchFilter::default()
        };
        let mut events = s.watch_holds(filter, true, "c", Arc::new(Plain)).expect("resume");
        until_synced(&mut events).await;
        assert!(s.watchers.resumes.len() <= RESUME_CACHE_FILTERS);
    }
    assert!(s.watchers.resumes.len() >= 1, "filters are cached");
}
