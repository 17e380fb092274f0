//! bytes → prost decode of `ClassifyRequest`, and the service's pooled
//! decode of `ClassifyBatchRequest` → the service's synchronous classify (a
//! fixed `now`; a batch's answer written as bytes and decoded back) →
//! encode the response → give the request back to the pool, as the server
//! does. Whatever the bytes, nothing may panic, the
//! pooled decode accepts exactly what prost accepts and yields the same
//! message (whatever earlier inputs left in the pool), an error is only ever
//! INVALID_ARGUMENT, and what is encoded decodes back to the same message.
//! The server's own batch path (the request read in place from its bytes,
//! `BatchView`, or left to the pooled decoder) answers exactly what the
//! decoded message is answered, and whatever the in-place reader reads,
//! prost decodes, failure for failure.
#![no_main]

use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwap;
use libfuzzer_sys::fuzz_target;
use prost::Message as _;
use retryd::core::{Policy, UnixMillis};
use retryd::grpc::convert::{failure_from_proto, failure_notes};
use retryd::grpc::wire::pool;
use retryd::grpc::wire::view::BatchView;
use retryd::grpc::{RetryDecisionApi, pb};
use retryd::service::{Caller, ServiceConfig};
use tonic::Code;

/// 2026-08-08T12:05:00Z, the instant the service's own unit tests use.
const NOW: UnixMillis = UnixMillis(1_786_190_700_000);

static API: LazyLock<RetryDecisionApi> = LazyLock::new(|| {
    let policy = Policy::embedded().expect("embedded policy");
    // A small batch limit so the over-limit branch is reachable with small inputs.
    RetryDecisionApi::new(
        Arc::new(ArcSwap::from_pointee(policy)),
        ServiceConfig {
            max_batch: 64,
            ..Default::default()
        },
    )
});

fn check_decision(d: &pb::Decision) {
    assert_ne!(d.verdict, pb::Verdict::Unspecified as i32, "{d:?}");
    let retry = d.retry.as_ref().expect("every decision carries a contract");
    assert!(retry.after_ms <= retry.max_after_ms, "jitter window: {retry:?}");
}

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = pb::ClassifyRequest::decode(data) {
        match API.classify_at(&req, NOW) {
            Ok(resp) => {
                check_decision(resp.decision.as_ref().expect("a decision"));
                let bytes = resp.encode_to_vec();
                let back = pb::ClassifyResponse::decode(bytes.as_slice()).expect("response decodes");
                assert_eq!(back, resp);
            }
            Err(status) => assert_eq!(status.code(), Code::InvalidArgument, "{status:?}"),
        }
    }
    if let Some(view) = BatchView::read(data) {
        let req = pb::ClassifyBatchRequest::decode(data).expect("what the view reads, prost decodes");
        assert_eq!(view.len(), req.failures.len());
        for (i, f) in req.failures.iter().enumerate() {
            let (ours, notes) = *view.item(i);
            let theirs = failure_from_proto(f, &req.locale);
            assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "item {i}");
            assert_eq!(notes, failure_notes(f), "item {i}");
        }
        view.recycle();
    }
    let in_place = API
        .classify_batch_bytes(data, NOW, Caller::Named("local"), None)
        .map(|answer| answer.into_message().expect("the answer decodes"));
    let pooled = pool::decode_batch_request(data);
    let fresh = pb::ClassifyBatchRequest::decode(data);
    assert_eq!(
        pooled.as_ref().ok(),
        fresh.as_ref().ok(),
        "pooled decode differs from prost's"
    );
    if let Ok(req) = pooled {
        let decided = API.classify_batch_at(&req, NOW);
        match &decided {
            Ok(resp) => {
                assert_eq!(resp.results.len(), req.failures.len());
                for r in &resp.results {
                    if let Some(pb::batch_result::Outcome::Decision(d)) = &r.outcome {
                        check_decision(d);
                    }
                }
                let bytes = resp.encode_to_vec();
                let back = pb::ClassifyBatchResponse::decode(bytes.as_slice()).expect("response decodes");
                assert_eq!(&back, resp);
            }
            Err(status) => assert_eq!(status.code(), Code::InvalidArgument, "{status:?}"),
        }
        match (&in_place, &decided) {
            (Ok(ours), Ok(theirs)) => assert_eq!(ours, theirs, "the in-place path answered otherwise"),
            (Err(ours), Err(theirs)) => assert_eq!(ours.message(), theirs.message()),
            _ => panic!("one path failed: {in_place:?} vs {decided:?}"),
        }
        pool::recycle_request(req);
    } else {
        let status = in_place.expect_err("a request prost refuses is refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    }
});
