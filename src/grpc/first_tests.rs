//! The routes served ahead of the generated server, called in process as
//! the server calls them: the answer's frames, and tonic's refusals kept.

use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use prost::Message as _;
use tonic::Code;

use super::*;
use crate::core::Policy;
use crate::grpc::pb;
use crate::service::ServiceConfig;
use futures_util::StreamExt as _;

const LIMIT: usize = 64 * 1024;

fn api() -> Arc<RetryDecisionApi> {
    let policy = Policy::embedded().expect("embedded policy");
    Arc::new(RetryDecisionApi::new(
        Arc::new(ArcSwap::from_pointee(policy)),
        ServiceConfig::default(),
    ))
}

/// Every other path: a 404 that says it was not ours.
type Inner =
    tower::util::ServiceFn<fn(http::Request<Full<Bytes>>) -> BoxFuture<http::Response<tonic::body::Body>, Infallible>>;

fn first(api: Arc<RetryDecisionApi>) -> BytesFirst<Inner> {
    fn not_ours(_: http::Request<Full<Bytes>>) -> BoxFuture<http::Response<tonic::body::Body>, Infallible> {
        Box::pin(async {
            let mut r = http::Response::new(tonic::body::Body::empty());
            *r.status_mut() = http::StatusCode::NOT_FOUND;
            Ok(r)
        })
    }
    BytesFirst::new(tower::service_fn(not_ours as _), api, LIMIT)
}

fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    out.extend_from_slice(message);
    out
}

fn request(path: &str, body: Vec<u8>) -> http::Request<Full<Bytes>> {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// The answer's data frames and trailers, in order.
async fn call(
    api: Arc<RetryDecisionApi>,
    req: http::Request<Full<Bytes>>,
) -> (http::response::Parts, Vec<Bytes>, Option<http::HeaderMap>) {
    use tower::Service as _;
    let response = first(api).call(req).await.expect("infallible");
    let (parts, mut body) = response.into_parts();
    let (mut data, mut trailers) = (Vec::new(), None);
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("body frame");
        match frame.into_data() {
            Ok(d) => {
                assert!(trailers.is_none(), "data after the trailers");
                data.push(d);
            }
            Err(frame) => trailers = Some(frame.into_trailers().expect("data or trailers")),
        }
    }
    (parts, data, trailers)
}

fn classify_request() -> pb::ClassifyRequest {
    pb::ClassifyRequest {
        failure: Some(Box::new(pb::Failure {
            catalog: "vibecode".into(),
            code: "BITRIX_TIMEOUT".into(),
            operation: pb::OperationKind::Write as i32,
            attempt: 1,
            ..Default::default()
        })),
        locale: String::new(),
    }
}

/// The message header and the answer's bytes as one frame, then
/// `grpc-status: 0`; the bytes are the library's answer.
#[tokio::test]
async fn classify_is_answered_as_header_bytes_and_ok_trailers() {
    let api = api();
    let req = classify_request();
    let (parts, data, trailers) = call(Arc::clone(&api), request(CLASSIFY_PATH, framed(&req.encode_to_vec()))).await;
    assert_eq!(parts.status, http::StatusCode::OK);
    assert_eq!(parts.headers["content-type"], "application/grpc");
    assert_eq!(data.len(), 1, "one frame: {data:?}");
    let len = u32::from_be_bytes(data[0][1..5].try_into().unwrap()) as usize;
    assert_eq!((data[0][0], len), (0, data[0].len() - 5));
    let answer = pb::ClassifyResponse::decode(data[0].slice(5..)).expect("decodes");
    let decision = answer.decision.expect("decision");
    assert_eq!(decision.verdict, pb::Verdict::StateVerificationRequired as i32);
    assert_eq!(decision.rule, "vibecode/BITRIX_TIMEOUT/write");
    let trailers = trailers.expect("trailers");
    assert_eq!(trailers.len(), 1, "{trailers:?}");
    assert_eq!(trailers["grpc-status"], "0");
}

#[tokio::test]
async fn a_batch_is_answered_whole() {
    let api = api();
    let item = *classify_request().failure.unwrap();
    let req = pb::ClassifyBatchRequest {
        failures: vec![item; 300],
        locale: String::new(),
    };
    let (_, data, trailers) = call(
        Arc::clone(&api),
        request(CLASSIFY_BATCH_PATH, framed(&req.encode_to_vec())),
    )
    .await;
    assert_eq!(trailers.expect("trailers")["grpc-status"], "0");
    assert_eq!(data.len(), 1, "one frame");
    let answer = pb::ClassifyBatchResponse::decode(data[0].slice(5..)).expect("decodes");
    assert_eq!(answer.results.len(), 300);
    assert_eq!(answer.summary.expect("summary").state_verification_required, 300);
}

/// Status of a trailers-only answer.
fn status_of(parts: &http::response::Parts, data: &[Bytes]) -> tonic::Status {
    assert!(data.is_empty(), "a refusal has no message: {data:?}");
    tonic::Status::from_header_map(&parts.headers).expect("grpc-status in the headers")
}

/// What tonic's `Grpc::unary` answers, answered the same: a compressed
/// request, no message, a message over the limit, a message that does not
/// decode (named INVALID_ARGUMENT by our decoder), a compressed flag with no
/// encoding.
#[tokio::test]
async fn refusals_are_tonics() {
    let api = api();
    let mut gz = request(CLASSIFY_PATH, framed(&classify_request().encode_to_vec()));
    gz.headers_mut()
        .insert("grpc-encoding", http::HeaderValue::from_static("gzip"));
    let (parts, data, _) = call(Arc::clone(&api), gz).await;
    let status = status_of(&parts, &data);
    assert_eq!(status.code(), Code::Unimplemented);
    assert_eq!(
        status.message(),
        "Content is compressed with `gzip` which isn't supported"
    );
    assert_eq!(parts.headers["grpc-accept-encoding"], "identity");

    let mut identity = request(CLASSIFY_PATH, framed(&classify_request().encode_to_vec()));
    identity
        .headers_mut()
        .insert("grpc-encoding", http::HeaderValue::from_static("identity"));
    let (_, _, trailers) = call(Arc::clone(&api), identity).await;
    assert_eq!(
        trailers.expect("trailers")["grpc-status"],
        "0",
        "identity is no compression"
    );

    let (parts, data, _) = call(Arc::clone(&api), request(CLASSIFY_PATH, Vec::new())).await;
    let status = status_of(&parts, &data);
    assert_eq!(
        (status.code(), status.message()),
        (Code::Internal, "Missing request message.")
    );

    let huge = vec![0u8; LIMIT + 1];
    let (parts, data, _) = call(Arc::clone(&api), request(CLASSIFY_BATCH_PATH, framed(&huge))).await;
    let status = status_of(&parts, &data);
    assert_eq!(status.code(), Code::OutOfRange);
    assert!(
        status.message().starts_with("Error, decoded message length too large"),
        "{status:?}"
    );

    let (parts, data, _) = call(Arc::clone(&api), request(CLASSIFY_PATH, framed(&[0xff, 0xff, 0xff]))).await;
    assert_eq!(status_of(&parts, &data).code(), Code::InvalidArgument);

    let mut flagged = framed(&classify_request().encode_to_vec());
    flagged[0] = 1;
    let (parts, data, _) = call(Arc::clone(&api), request(CLASSIFY_PATH, flagged.clone())).await;
    let status = status_of(&parts, &data);
    assert_eq!(status.code(), Code::Internal);
    assert!(status.message().contains("compressed-flag"), "{status:?}");
    flagged[0] = 2;
    let (parts, data, _) = call(Arc::clone(&api), request(CLASSIFY_PATH, flagged)).await;
    let status = status_of(&parts, &data);
    assert!(status.message().contains("invalid compression flag: 2"), "{status:?}");

    // Cut short: in the header, and in the message.
    for cut in [3, 5 + 4] {
        let mut short = framed(&classify_request().encode_to_vec());
        short.truncate(cut);
        let (parts, data, _) = call(Arc::clone(&api), request(CLASSIFY_PATH, short)).await;
        let status = status_of(&parts, &data);
        assert_eq!(
            (status.code(), status.message()),
            (Code::Internal, "Unexpected EOF decoding stream.")
        );
    }
    // A second message after the first (the admission layer refuses it first, in the same words).
    let mut two = framed(&classify_request().encode_to_vec());
    two.extend(framed(&classify_request().encode_to_vec()));
    let (parts, data, _) = call(Arc::clone(&api), request(CLASSIFY_PATH, two)).await;
    assert_eq!(status_of(&parts, &data).code(), Code::Unimplemented);
}

/// A request in many frames (not what the admission layer hands over, but
/// what a client sends) is gathered; one far over the limit is not read
/// past the limit: the stream of frames is endless here.
#[tokio::test]
async fn a_request_in_many_frames_is_gathered_and_bounded() {
    use futures_util::stream;
    use http_body_util::StreamBody;
    let whole = framed(&classify_request().encode_to_vec());
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = whole
        .chunks(3)
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    let read = read_body(StreamBody::new(stream::iter(frames)), LIMIT)
        .await
        .expect("read");
    let decoded = pb::ClassifyRequest::decode_pooled(one_message(&read, LIMIT).expect("one message")).expect("decoded");
    assert_eq!(decoded, classify_request());

    let mut header = vec![0];
    header.extend_from_slice(&u32::MAX.to_be_bytes());
    let endless =
        stream::iter(std::iter::once(Bytes::from(header)).chain(std::iter::repeat(Bytes::from(vec![0; 1024]))))
            .map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let read = read_body(StreamBody::new(endless), LIMIT)
        .await
        .expect("read up to the limit");
    assert!(read.len() <= LIMIT + FRAME_HEADER + 1024, "read {} bytes", read.len());
    let status = one_message(&read, LIMIT).expect_err("too large");
    assert_eq!(status.code(), Code::OutOfRange);
}

/// A field error of the decision path is the method's status, trailers-only.
#[tokio::test]
async fn a_method_error_is_its_status() {
    let mut req = classify_request();
    req.failure.as_mut().unwrap().catalog = "no-such-catalog".into();
    let (parts, data, _) = call(api(), request(CLASSIFY_PATH, framed(&req.encode_to_vec()))).await;
    let status = status_of(&parts, &data);
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("catalog"), "{status:?}");
}

/// Admit's answer is the generated method's message, framed as tonic would.
#[tokio::test]
async fn admit_answers_the_generated_methods_message() {
    use crate::grpc::pb::retry_decision_service_server::RetryDecisionService as _;
    let api = api();
    let ask = pb::AdmitRequest {
        catalog: "vibecode".into(),
        dependency: "portal-1".into(),
        method: "crm.deal.add".into(),
        attempt: 1,
        ..Default::default()
    };
    let (parts, data, trailers) = call(Arc::clone(&api), request(ADMIT_PATH, framed(&ask.encode_to_vec()))).await;
    let expected = api.admit(tonic::Request::new(ask.clone())).await;
    match expected {
        Ok(message) => {
            assert_eq!(trailers.expect("trailers")["grpc-status"], "0");
            assert_eq!(data.len(), 1);
            assert_eq!(data[0][..], framed(&message.into_inner().encode_to_vec())[..]);
        }
        Err(status) => {
            let got = status_of(&parts, &data);
            assert_eq!((got.code(), got.message()), (status.code(), status.message()));
        }
    }
    let mut bad = ask;
    bad.catalog = "x".repeat(100_000);
    let (parts, data, _) = call(api, request(ADMIT_PATH, framed(&bad.encode_to_vec()))).await;
    assert_ne!(status_of(&parts, &data).code(), Code::Ok, "a field past its limit");
}

#[tokio::test]
async fn other_paths_go_to_the_generated_server() {
    let (parts, _, _) = call(
        api(),
        request("/retryd.v1.RetryDecisionService/ListCatalogs", framed(&[])),
    )
    .await;
    assert_eq!(parts.status, http::StatusCode::NOT_FOUND);
}
