use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use prost::Message as _;

use super::*;
use crate::core::Policy;
use crate::grpc::wire::view::BLOCKING_BATCH_BYTES;
use crate::service::ServiceConfig;

const NOW: UnixMillis = UnixMillis(1_786_190_700_000);

fn api() -> RetryDecisionApi {
    let policy = Policy::embedded().expect("embedded policy");
    RetryDecisionApi::new(Arc::new(ArcSwap::from_pointee(policy)), ServiceConfig::default())
}

/// `n` failures of several codes, operations and catalogs; with an
/// upstream contract on one of them when `upstream` (the request is then
/// left to prost).
fn request(n: usize, upstream: bool) -> pb::ClassifyBatchRequest {
    let codes = [
        "BITRIX_TIMEOUT",
        "QUERY_LIMIT_EXCEEDED",
        "",
        "NO_SUCH_CODE",
        "INVALID_TOKEN",
    ];
    let failures = (0..n)
        .map(|i| pb::Failure {
            catalog: if i % 7 == 0 { "nope".into() } else { String::new() },
            code: codes[i % codes.len()].into(),
            operation: (i % 3) as i32,
            method: "crm.deal.add".into(),
            attempt: 1 + (i % 4) as u32,
            idempotency_key: if i % 2 == 0 { format!("idem-{i}") } else { String::new() },
            request_id: format!("req-{i}"),
            upstream: (upstream && i == n / 2).then(|| pb::RetryContract {
                retryable: true,
                idempotency_key: Some("up".into()),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    pb::ClassifyBatchRequest {
        failures,
        locale: "ru".into(),
    }
}

fn answer(result: Result<EncodedBatch, Status>) -> Vec<u8> {
    result.expect("decided").bytes().to_vec()
}

#[test]
fn read_in_place_or_by_prost_the_answer_is_the_messages() {
    let api = api();
    for upstream in [false, true] {
        let req = request(40, upstream);
        let wire = req.encode_to_vec();
        let in_place = answer(api.classify_batch_bytes(&wire, NOW, Caller::Named("t"), None));
        let decoded = answer(api.classify_batch_encoded(&req, NOW, Caller::Named("t"), None));
        assert_eq!(in_place, decoded, "upstream: {upstream}");
        assert_eq!(BatchView::read(&wire).is_some(), !upstream);
    }
}

#[test]
fn a_request_that_is_not_a_message_is_refused_as_the_decoder_refuses_it() {
    // failures[0] says it has 5 bytes; 1 follows.
    let wire = [0x0A, 0x05, 0x01];
    let status = api()
        .classify_batch_bytes(&wire, NOW, Caller::Named("t"), None)
        .expect_err("refused");
    let decoder = pb::ClassifyBatchRequest::decode_pooled(wire.as_slice()).expect_err("the decoder refuses it too");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(status.message(), invalid_message(decoder).message());
    assert!(status.message().contains("buffer underflow"), "{}", status.message());
}

#[tokio::test]
async fn a_large_request_is_decided_off_the_async_workers_alike() {
    let api = api();
    let req = request(800, false);
    let wire = Bytes::from(req.encode_to_vec());
    assert!(wire.len() > BLOCKING_BATCH_BYTES, "{} bytes", wire.len());
    let bytes = api
        .classify_batch_call(Request::new(BatchRequest::Bytes(wire)))
        .await
        .expect("decided")
        .into_inner()
        .into_message()
        .expect("decodes");
    let message = api
        .classify_batch_call(Request::new(BatchRequest::Decoded(req)))
        .await
        .expect("decided")
        .into_inner()
        .into_message()
        .expect("decodes");
    assert_eq!(bytes.results.len(), 800);
    let summary = bytes.summary.expect("summary");
    assert!(summary.errors > 0 && summary.errors < 800, "{summary:?}");
    // Decided at the call's own instant each: compare what does not move with it.
    let shape = |r: &pb::ClassifyBatchResponse| {
        r.results
            .iter()
            .map(|r| match &r.outcome {
                Some(pb::batch_result::Outcome::Decision(d)) => (r.index, d.verdict, d.rule.clone()),
                _ => (r.index, -1, String::new()),
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&bytes), shape(&message));
    assert_eq!(bytes.summary, message.summary);
}
