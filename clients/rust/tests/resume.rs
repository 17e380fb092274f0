//! The mirror resumes from its bucket digests against a real retryd: a hold
//! synced into the mirror, a reopen (widening) sends the digests, the new
//! SYNCED is resumed with nothing resent, and the hold still refuses locally.

use std::time::{Duration, SystemTime};

mod support;

use retryd_client::{Call, Client, DependencyError, Error};

async fn within<F: std::future::Future>(f: F) -> Result<F::Output, tokio::time::error::Elapsed> {
    tokio::time::timeout(Duration::from_secs(5), f).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mirror_resumes_after_widening_and_keeps_refusing() {
    let Some(bin) = support::binary() else { return };
    let server = support::start(&bin, "resume", "resume-operator-token-0123456789abcdef", None).await;
    let (dep, tenant) = ("d-resume-rust", "t-resume-rust");
    let c = Client::builder(&server.addr)
        .catalog("frontspin")
        .dependency(dep)
        .tenant(tenant)
        .timeout(Duration::from_secs(2))
        .connect()
        .await;
    let stop = support::quota_stop(tenant, dep, SystemTime::now() + Duration::from_secs(600));
    let placed = c.stub().classify(stop).await.unwrap();
    assert!(placed.into_inner().decision.unwrap().hold.is_some(), "no hold placed");
    within(c.watch([dep], [tenant])).await.unwrap().unwrap();
    within(async {
        while c.stats().holds == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the hold never reached the mirror");

    let before = c.stats();
    within(c.watch(["d-resume-rust-2"], Vec::<String>::new()))
        .await
        .unwrap()
        .unwrap(); // widening: a new stream
    let s = c.stats();
    assert_eq!(
        (s.resumed_syncs, s.resent_buckets, s.holds),
        (before.resumed_syncs + 1, before.resent_buckets, 1),
        "one more resumed SYNCED, nothing resent, the hold kept: {s:?}"
    );

    let got = c
        .call(
            Call::<String>::write("crm.deal.add").timeout(Duration::from_secs(1)),
            || async { Ok::<String, DependencyError>("called".into()) },
        )
        .await;
    assert!(matches!(got, Err(Error::Held { .. })), "{got:?}");
    let after = c.stats();
    assert_eq!(
        (after.local_refusals, after.admit_rpcs),
        (s.local_refusals + 1, s.admit_rpcs),
        "refused locally, no Admit"
    );
    c.close().await;
}
