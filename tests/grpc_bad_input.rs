//! Bad input against the real `retryd serve` binary over a real socket
//! (issue 6, "Reliability and security"). Every case gets either a sound
//! decision (with a warning where input was ignored) or INVALID_ARGUMENT with
//! a `google.rpc.BadRequest` naming the field — never a panic, a hang, or a
//! dead server: after each group a normal Classify still works and health is
//! SERVING. Every call has a client-side time limit.

mod grpc_support;
#[path = "grpc_support/raw.rs"]
mod raw;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use grpc_support::{Server, failure};
use prost::Message as _;
use prost_types::Timestamp;
use retryd::core::limits;
use retryd::grpc::pb::retry_decision_service_client::RetryDecisionServiceClient;
use retryd::grpc::pb::{self, batch_result::Outcome};
use tokio::io::AsyncWriteExt as _;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::{RpcStatusExt as _, StatusExt as _};

/// The longest any single call may take before the test calls it a hang.
const CALL: Duration = Duration::from_secs(10);

type Client = RetryDecisionServiceClient<Channel>;

/// `fut`, or a panic naming `what` if it takes longer than [`CALL`].
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(CALL, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {CALL:?} (the server hangs)"))
}

/// An HTTP 503 on a read: retried with backoff unless something stops it.
fn read_503() -> pb::Failure {
    failure("http", "503", pb::OperationKind::Read)
}

/// An HTTP 429 on a read: its wait comes from Retry-After.
fn read_429(retry_after: &str) -> pb::Failure {
    let mut f = failure("http", "429", pb::OperationKind::Read);
    f.retry_after = retry_after.into();
    f
}

async fn classify(client: &mut Client, what: &str, f: pb::Failure) -> Result<pb::Decision, Status> {
    let req = pb::ClassifyRequest {
        failure: Some(Box::new(f)),
        locale: String::new(),
    };
    within(what, client.classify(req))
        .await
        .map(|r| *r.into_inner().decision.expect("an OK Classify carries a decision"))
}

/// A decision, or a panic naming the case.
async fn decided(client: &mut Client, what: &str, f: pb::Failure) -> pb::Decision {
    let d = classify(client, what, f)
        .await
        .unwrap_or_else(|e| panic!("{what}: expected a decision, got {e:?}"));
    assert_sound(what, &d);
    d
}

/// The shape every decision must have, whatever the input.
fn assert_sound(what: &str, d: &pb::Decision) {
    assert_ne!(d.verdict(), pb::Verdict::Unspecified, "{what}: {d:?}");
    let retry = d.retry.as_ref().unwrap_or_else(|| panic!("{what}: no retry contract"));
    assert!(retry.after_ms <= retry.max_after_ms, "{what}: jitter window {retry:?}");
    assert!(retry.attempt >= 1, "{what}: attempt is 1-based: {retry:?}");
    if d.verdict() == pb::Verdict::RetryWithLimit {
        assert!(retry.retryable && retry.safe, "{what}: {retry:?}");
        assert!(
            retry.attempt < retry.max_attempts,
            "{what}: a retry within the limit: {retry:?}"
        );
    }
    assert!(!d.policy_version.is_empty(), "{what}");
    for w in &d.warnings {
        assert!(
            w.contains(": "),
            "{what}: warning without a machine-readable prefix: {w:?}"
        );
    }
}

fn has_warning(d: &pb::Decision, prefix: &str) -> bool {
    d.warnings.iter().any(|w| w.starts_with(prefix))
}

/// The first BadRequest violation's `(field, description)`.
fn violation(what: &str, status: &Status) -> (String, String) {
    let br = status
        .get_details_bad_request()
        .unwrap_or_else(|| panic!("{what}: no BadRequest detail in {status:?}"));
    let v = br
        .field_violations
        .first()
        .unwrap_or_else(|| panic!("{what}: BadRequest without a violation"));
    (v.field.clone(), v.description.clone())
}

/// INVALID_ARGUMENT naming `field`; returns the description.
async fn rejected(client: &mut Client, what: &str, f: pb::Failure, field: &str) -> String {
    let err = match classify(client, what, f).await {
        Ok(d) => panic!("{what}: expected INVALID_ARGUMENT naming {field}, got a decision {d:?}"),
        Err(e) => e,
    };
    assert_eq!(err.code(), Code::InvalidArgument, "{what}: {err:?}");
    let (named, description) = violation(what, &err);
    assert_eq!(named, field, "{what}: {err:?}");
    description
}

/// A normal Classify works and health is SERVING, for the server as a whole
/// and for the service.
async fn assert_alive(server: &Server, after: &str) {
    let channel = within(after, server.channel()).await;
    let mut client = RetryDecisionServiceClient::new(channel.clone());
    let d = classify(
        &mut client,
        after,
        failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Write),
    )
    .await
    .unwrap_or_else(|e| panic!("after {after}: a normal Classify failed: {e:?}\nlog:\n{}", server.log()));
    assert_eq!(d.verdict(), pb::Verdict::StateVerificationRequired, "after {after}");
    let mut health = HealthClient::new(channel);
    for service in ["", retryd::grpc::SERVICE_NAME] {
        let status = within(
            after,
            health.check(HealthCheckRequest {
                service: service.into(),
            }),
        )
        .await
        .unwrap_or_else(|e| panic!("after {after}: health {service:?}: {e:?}"))
        .into_inner()
        .status();
        assert_eq!(status, ServingStatus::Serving, "after {after}: health {service:?}");
    }
    assert!(
        !server.log().contains("panicked"),
        "after {after}: the server logged a panic:\n{}",
        server.log()
    );
}

#[tokio::test]
async fn extreme_attempts_and_odd_retry_after_get_sound_decisions() {
    let server = Server::start(&[]);
    let mut client = server.client().await;

    let mut f = read_503();
    f.attempt = 0;
    let d = decided(&mut client, "attempt 0", f).await;
    assert!(has_warning(&d, "attempt_zero:"), "{:?}", d.warnings);
    assert_eq!(d.verdict(), pb::Verdict::RetryWithLimit);
    assert_eq!(d.retry.as_ref().unwrap().attempt, 1);

    let mut f = read_503();
    f.attempt = u32::MAX;
    let d = decided(&mut client, "attempt u32::MAX", f).await;
    assert_ne!(
        d.verdict(),
        pb::Verdict::RetryWithLimit,
        "attempts are exhausted: {d:?}"
    );
    let retry = d.retry.as_ref().unwrap();
    assert_eq!(
        (retry.after_ms, retry.max_after_ms),
        (0, 0),
        "a stop has no wait: {retry:?}"
    );

    let mut f = read_503();
    f.max_attempts = 0;
    let d = decided(&mut client, "max_attempts 0", f).await;
    assert!(d.warnings.is_empty(), "0 means the catalog's: {:?}", d.warnings);
    let catalogs_limit = d.retry.as_ref().unwrap().max_attempts;
    assert!(catalogs_limit >= 2, "{d:?}");

    let mut f = read_503();
    f.max_attempts = u32::MAX;
    let d = decided(&mut client, "max_attempts u32::MAX", f).await;
    assert!(has_warning(&d, "max_attempts_capped:"), "{:?}", d.warnings);
    assert_eq!(d.retry.as_ref().unwrap().max_attempts, catalogs_limit);

    for raw in ["-1", "1e9", "tomorrow", "5s", "\u{0}"] {
        let what = format!("retry_after {raw:?}");
        let d = decided(&mut client, &what, read_429(raw)).await;
        assert!(has_warning(&d, "retry_after_unparseable:"), "{what}: {:?}", d.warnings);
        assert_eq!(d.verdict(), pb::Verdict::RetryWithLimit, "{what}");
    }
    // A date in the past is a wait of 0, not an error.
    let d = decided(&mut client, "past HTTP-date", read_429("Fri, 31 Dec 1999 23:59:59 GMT")).await;
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(d.verdict(), pb::Verdict::RetryWithLimit);
    // 64 digits: at the limit, a delay that saturates rather than overflows;
    // past the catalog's cap (25 h), so not waited for and holding nobody.
    let d = decided(
        &mut client,
        "64-digit retry_after",
        read_429(&"9".repeat(limits::MAX_RETRY_AFTER)),
    )
    .await;
    assert_eq!(d.verdict(), pb::Verdict::DoNotRetry, "{d:?}");
    assert!(d.reason.contains("max_delay_ms"), "{}", d.reason);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let r = d.retry.as_ref().unwrap();
    assert_eq!((r.retryable, r.after_ms, r.max_after_ms), (false, 0, 0));
    // A 1 MiB Retry-After is under the default 4 MiB message limit, so the
    // field limit names it.
    let description = rejected(
        &mut client,
        "1 MiB retry_after",
        read_429(&"1".repeat(1 << 20)),
        "failure.retry_after",
    )
    .await;
    assert!(
        description.contains(&format!("the limit is {}", limits::MAX_RETRY_AFTER)),
        "{description}"
    );

    assert_alive(&server, "extreme attempts and Retry-After").await;
}

#[tokio::test]
async fn deadlines_past_far_future_and_out_of_range_timestamps() {
    let server = Server::start(&[]);
    let mut client = server.client().await;

    // A deadline in the past: the wait would pass it, so no plain retry.
    let mut f = read_503();
    f.deadline = Some(Timestamp { seconds: 0, nanos: 0 });
    let d = decided(&mut client, "deadline 1970", f).await;
    assert_ne!(d.verdict(), pb::Verdict::RetryWithLimit, "{d:?}");

    // 9999-12-31T23:59:59Z: far, but a valid Timestamp; echoed in the contract.
    let year_9999 = Timestamp {
        seconds: 253_402_300_799,
        nanos: 0,
    };
    let mut f = read_503();
    f.deadline = Some(year_9999);
    let d = decided(&mut client, "deadline 9999", f).await;
    assert_eq!(d.verdict(), pb::Verdict::RetryWithLimit, "{d:?}");
    assert_eq!(d.retry.as_ref().unwrap().deadline, Some(year_9999));
    assert!(
        !has_warning(&d, "timestamp_out_of_range:"),
        "in range: {:?}",
        d.warnings
    );

    // Out of Timestamp's range, nanos negative or too large: read (saturated,
    // clamped), never a panic or overflow.
    for (seconds, nanos) in [
        (i64::MAX, -1),
        (i64::MAX, i32::MAX),
        (i64::MIN, i32::MIN),
        (-62_135_596_801, 999_999_999),
        (1_786_190_700, 2_000_000_000),
    ] {
        let what = format!("deadline seconds {seconds} nanos {nanos}");
        let mut f = read_503();
        f.deadline = Some(Timestamp { seconds, nanos });
        // Clamped, and said so: never silently.
        let d = decided(&mut client, &what, f.clone()).await;
        assert!(has_warning(&d, "timestamp_out_of_range:"), "{what}: {:?}", d.warnings);
        // And the same in the dependency's own contract.
        f.deadline = None;
        f.upstream = Some(pb::RetryContract {
            retryable: true,
            safe: true,
            deadline: Some(Timestamp { seconds, nanos }),
            ..Default::default()
        });
        let d = decided(&mut client, &format!("upstream {what}"), f).await;
        assert!(
            has_warning(&d, "timestamp_out_of_range:"),
            "upstream {what}: {:?}",
            d.warnings
        );
    }

    assert_alive(&server, "deadlines").await;
}

/// google.protobuf.Timestamp is valid from 0001-01-01 to 9999-12-31; a
/// deadline outside it should either be refused (INVALID_ARGUMENT naming
/// `failure.deadline`) or never be echoed outside it, since protojson
/// (grpcurl, Go's `protojson`, Java's `JsonFormat`) refuses to print such a
/// response. Today the saturated value is echoed in `retry.deadline`.
#[tokio::test]
async fn out_of_range_deadline_is_not_echoed_out_of_range() {
    const MIN: i64 = -62_135_596_800; // 0001-01-01T00:00:00Z
    const MAX: i64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    let server = Server::start(&[]);
    let mut client = server.client().await;
    let mut wrong = Vec::new();
    for seconds in [i64::MAX, MAX + 1] {
        let mut f = read_503();
        f.deadline = Some(Timestamp { seconds, nanos: 0 });
        match classify(&mut client, "deadline out of range", f).await {
            Ok(d) => {
                let echoed = d.retry.and_then(|r| r.deadline);
                if echoed.is_some_and(|t| !(MIN..=MAX).contains(&t.seconds)) {
                    wrong.push(format!("deadline seconds {seconds} echoed as {echoed:?}"));
                }
            }
            Err(e) => {
                assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
                assert_eq!(violation("deadline", &e).0, "failure.deadline");
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
}

#[tokio::test]
async fn unknown_enum_numbers_on_the_wire_are_not_given() {
    let server = Server::start(&[]);
    let mut client = server.client().await;

    let mut f = failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Unspecified);
    f.operation = 99;
    f.read_back = -5;
    f.method = "crm.deal.add".into();
    f.upstream = Some(pb::RetryContract {
        retryable: true,
        safe: true,
        strategy: 1000,
        side_effect_state: 42,
        ..Default::default()
    });
    let d = decided(
        &mut client,
        "operation 99, read_back -5, side_effect_state 42",
        f.clone(),
    )
    .await;
    assert!(d.operation_inferred, "99 is 'not given', so the method decides: {d:?}");
    assert_eq!(d.operation(), pb::OperationKind::Write);
    // -5 is "no read-back": the unknown write outcome still needs verification.
    assert_eq!(d.verdict(), pb::Verdict::StateVerificationRequired, "{d:?}");
    assert!(!d.retry.as_ref().unwrap().safe);

    // The same numbers inside a batch item.
    let resp = within(
        "batch with unknown enums",
        client.classify_batch(pb::ClassifyBatchRequest {
            failures: vec![f],
            locale: String::new(),
        }),
    )
    .await
    .expect("ClassifyBatch")
    .into_inner();
    let Some(Outcome::Decision(bd)) = &resp.results[0].outcome else {
        panic!("{resp:?}")
    };
    assert_eq!(bd.verdict, d.verdict);

    assert_alive(&server, "unknown enum numbers").await;
}

/// Every string field: at its limit (answered) and one byte over it
/// (INVALID_ARGUMENT naming `failure.<field>`).
#[tokio::test]
async fn string_fields_at_their_limit_and_one_byte_over() {
    type Set = fn(&mut pb::Failure, String);
    let fields: [(&str, usize, Set); 8] = [
        ("code", limits::MAX_CODE, |f, s| f.code = s),
        ("method", limits::MAX_METHOD, |f, s| f.method = s),
        ("retry_after", limits::MAX_RETRY_AFTER, |f, s| f.retry_after = s),
        ("idempotency_key", limits::MAX_IDEMPOTENCY_KEY, |f, s| {
            f.idempotency_key = s
        }),
        ("request_id", limits::MAX_REQUEST_ID, |f, s| f.request_id = s),
        ("tenant", limits::MAX_TENANT, |f, s| f.tenant = s),
        ("upstream.idempotency_key", limits::MAX_IDEMPOTENCY_KEY, |f, s| {
            f.upstream.get_or_insert_with(Default::default).idempotency_key = Some(s)
        }),
        ("upstream.reconciliation_action", limits::MAX_ACTION, |f, s| {
            f.upstream.get_or_insert_with(Default::default).reconciliation_action = Some(s)
        }),
    ];
    let server = Server::start(&[]);
    let mut client = server.client().await;

    for (field, max, set) in fields {
        let mut f = read_503();
        set(&mut f, "x".repeat(max));
        let d = decided(&mut client, &format!("{field} at {max} bytes"), f).await;
        if field == "request_id" {
            assert_eq!(d.request_id.len(), max, "echoed whole");
        }
        let mut f = read_503();
        set(&mut f, "x".repeat(max + 1));
        let what = format!("{field} at {} bytes", max + 1);
        let description = rejected(&mut client, &what, f, &format!("failure.{field}")).await;
        assert!(
            description.contains(&format!("is {} bytes; the limit is {max}", max + 1)),
            "{what}: {description}"
        );
    }

    // Limits are in bytes, not characters: 64 two-byte letters are at the
    // code's 128, one more ASCII byte is over it.
    let mut f = read_503();
    f.code = "я".repeat(limits::MAX_CODE / 2);
    let d = decided(&mut client, "code of 64 Cyrillic letters", f).await;
    assert!(!d.known_code);
    let mut f = read_503();
    f.code = format!("{}x", "я".repeat(limits::MAX_CODE / 2));
    rejected(&mut client, "code of 129 bytes in letters", f, "failure.code").await;

    // The catalog at its limit is simply not a loaded catalog (named as
    // such); over it, the length is named.
    let description = rejected(
        &mut client,
        "catalog at 64 bytes",
        failure(&"c".repeat(limits::MAX_CATALOG), "X", pb::OperationKind::Read),
        "failure.catalog",
    )
    .await;
    assert!(
        description.contains("vibecode"),
        "lists the catalogs there are: {description}"
    );
    let description = rejected(
        &mut client,
        "catalog at 65 bytes",
        failure(&"c".repeat(limits::MAX_CATALOG + 1), "X", pb::OperationKind::Read),
        "failure.catalog",
    )
    .await;
    assert!(description.contains("the limit is 64"), "{description}");

    // The locale is a request field.
    for (len, ok) in [(limits::MAX_LOCALE, true), (limits::MAX_LOCALE + 1, false)] {
        let what = format!("locale of {len} bytes");
        let answer = within(
            &what,
            client.classify(pb::ClassifyRequest {
                failure: Some(Box::new(read_503())),
                locale: "x".repeat(len),
            }),
        )
        .await;
        match (answer, ok) {
            (Ok(r), true) => {
                let d = r.into_inner().decision.expect("decision");
                assert!(has_warning(&d, "locale_unsupported:"), "{what}: {:?}", d.warnings);
            }
            (Err(e), false) => {
                assert_eq!(e.code(), Code::InvalidArgument, "{what}");
                assert_eq!(violation(&what, &e).0, "locale", "{what}");
            }
            (answer, _) => panic!("{what}: {answer:?}"),
        }
    }

    // Inside a batch the item is named by its index and the others are decided.
    let mut bad = read_503();
    bad.tenant = "t".repeat(limits::MAX_TENANT + 1);
    let resp = within(
        "batch with one oversize tenant",
        client.classify_batch(pb::ClassifyBatchRequest {
            failures: vec![read_503(), bad],
            locale: String::new(),
        }),
    )
    .await
    .expect("ClassifyBatch")
    .into_inner();
    assert!(
        matches!(resp.results[0].outcome, Some(Outcome::Decision(_))),
        "{resp:?}"
    );
    let Some(Outcome::Error(status)) = &resp.results[1].outcome else {
        panic!("item 1 should be an error: {resp:?}")
    };
    assert_eq!(status.code, Code::InvalidArgument as i32);
    let br = status.get_details_bad_request().expect("BadRequest in the item");
    assert_eq!(br.field_violations[0].field, "failures[1].tenant");
    assert_eq!(resp.summary.expect("summary").errors, 1);

    assert_alive(&server, "string limits").await;
}

#[tokio::test]
async fn nul_bytes_inside_strings_are_plain_characters() {
    let server = Server::start(&[]);
    let mut client = server.client().await;

    let mut f = failure("vibecode", "BITRIX\0TIMEOUT", pb::OperationKind::Unspecified);
    f.method = "crm.deal.get\0".into();
    f.idempotency_key = "\0key\0".into();
    f.request_id = "req\0-1".into();
    f.tenant = "\0".into();
    f.retry_after = "5\0".into();
    let d = decided(&mut client, "NUL bytes", f).await;
    assert_eq!(d.request_id, "req\0-1", "echoed byte for byte");
    assert_eq!(d.code, "BITRIX\0TIMEOUT");
    assert!(!d.known_code, "a NUL makes it another code, not a truncated known one");
    // "crm.deal.get\0" ends in "get\0", not a read word: a write, and an
    // unknown write outcome is verified, never retried blindly.
    assert_ne!(d.verdict(), pb::Verdict::RetryWithLimit, "{d:?}");
    assert!(has_warning(&d, "retry_after_unparseable:"), "{:?}", d.warnings);

    // A NUL in the catalog name does not reach another catalog.
    rejected(
        &mut client,
        "catalog with NUL",
        failure("vibecode\0", "BITRIX_TIMEOUT", pb::OperationKind::Write),
        "failure.catalog",
    )
    .await;

    assert_alive(&server, "NUL bytes").await;
}

/// Bodies that are not a valid `ClassifyRequest`.
fn not_protobuf() -> Vec<(&'static str, Vec<u8>)> {
    let valid = pb::ClassifyRequest {
        failure: Some(Box::new(failure(
            "vibecode",
            "BITRIX_TIMEOUT",
            pb::OperationKind::Write,
        ))),
        locale: "en".into(),
    }
    .encode_to_vec();
    vec![
        ("0xff bytes", vec![0xff; 16]),
        ("plain text", b"this is not a protobuf message at all".to_vec()),
        ("JSON", br#"{"failure": {"code": "BITRIX_TIMEOUT"}}"#.to_vec()),
        ("truncated by one byte", valid[..valid.len() - 1].to_vec()),
        ("truncated in the middle", valid[..valid.len() / 2].to_vec()),
        // ClassifyRequest.failure (1, LEN) holding Failure.code (2, LEN) = ff fe
        (
            "invalid UTF-8 in failure.code",
            vec![0x0a, 0x04, 0x12, 0x02, 0xff, 0xfe],
        ),
        // ClassifyRequest.locale (2, LEN) = c3 28
        ("invalid UTF-8 in locale", vec![0x12, 0x02, 0xc3, 0x28]),
        // failure as a varint instead of a message
        ("wrong wire type", vec![0x08, 0x01]),
        // a length far past the end of the message
        ("length past the end", vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]),
        // an 11-byte varint
        (
            "overlong varint",
            vec![0x28, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
        ),
        // field number 0
        ("field number 0", vec![0x00, 0x01]),
        // unknown field 100 as a group nested 200 deep (past prost's recursion limit)
        ("deeply nested groups", {
            let mut b = [0xa3, 0x06].repeat(200);
            b.extend([0xa4, 0x06].repeat(200));
            b
        }),
    ]
}

/// What a body that is not protobuf gets today, per case.
/// Each body to Classify and to ClassifyBatch (whose request has the same
/// shape on the wire, and is decoded by the pooled decoder instead of prost's).
async fn send_not_protobuf(server: &Server) -> Vec<(String, Status)> {
    let channel = server.channel().await;
    let mut out = Vec::new();
    for (what, body) in not_protobuf() {
        for method in [raw::CLASSIFY, raw::CLASSIFY_BATCH] {
            let what = format!("{what} to {method}");
            match raw::unary(channel.clone(), method, Bytes::from(body.clone()), CALL).await {
                Ok(bytes) => panic!("{what}: answered OK with {bytes:?}"),
                Err(status) => out.push((what, status)),
            }
        }
    }
    out
}

#[tokio::test]
async fn bytes_that_are_not_protobuf_fail_the_call_not_the_server() {
    let server = Server::start(&[]);
    let answers = send_not_protobuf(&server).await;
    for (what, status) in &answers {
        // This call's error, naming the decode failure (its code is
        // `bad_protobuf_is_invalid_argument`'s subject).
        assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
        assert!(
            status.message().to_lowercase().contains("decod") || status.message().contains("invalid"),
            "{what}: {status:?}"
        );
    }
    // Valid bytes with an unknown field are answered (unknown fields are skipped).
    let mut body = pb::ClassifyRequest {
        failure: Some(Box::new(read_503())),
        locale: String::new(),
    }
    .encode_to_vec();
    body.extend([0xa0, 0x06, 0x07]); // field 100, varint 7
    let bytes = raw::unary(server.channel().await, raw::CLASSIFY, Bytes::from(body), CALL)
        .await
        .expect("an unknown field is skipped");
    let resp = pb::ClassifyResponse::decode(bytes).expect("a ClassifyResponse");
    assert_eq!(resp.decision.expect("decision").verdict(), pb::Verdict::RetryWithLimit);
    // An empty body is a valid, empty request: the failure is required.
    let err = raw::unary(server.channel().await, raw::CLASSIFY, Bytes::new(), CALL)
        .await
        .expect_err("an empty request has no failure");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(violation("empty body", &err).0, "failure");

    assert_alive(&server, "bytes that are not protobuf").await;
}

/// The issue asks for no INTERNAL for bad input. tonic-prost's codec maps
/// every `prost::DecodeError` to INTERNAL (`tonic-prost` `codec.rs`,
/// `from_decode_error`); the service's own codec (`grpc::wire::codec`) answers
/// INVALID_ARGUMENT, for Classify and for the pooled ClassifyBatch decode.
#[tokio::test]
async fn bad_protobuf_is_invalid_argument() {
    let server = Server::start(&[]);
    let wrong: Vec<String> = send_not_protobuf(&server)
        .await
        .into_iter()
        .filter(|(_, s)| s.code() != Code::InvalidArgument)
        .map(|(what, s)| format!("{what}: {:?} {}", s.code(), s.message()))
        .collect();
    assert!(wrong.is_empty(), "not INVALID_ARGUMENT:\n{}", wrong.join("\n"));
}

#[tokio::test]
async fn message_and_batch_limits() {
    let server = Server::start(&["--max-batch", "5", "--max-message-bytes", "65536"]);
    let mut client = server.client().await;

    let batch = |n: usize| pb::ClassifyBatchRequest {
        failures: vec![read_503(); n],
        locale: String::new(),
    };
    let resp = within("empty batch", client.classify_batch(batch(0)))
        .await
        .expect("an empty batch is answered")
        .into_inner();
    assert!(resp.results.is_empty());
    assert_eq!(resp.summary.unwrap_or_default(), pb::BatchSummary::default());

    let resp = within("batch at the limit", client.classify_batch(batch(5)))
        .await
        .expect("5 items with --max-batch 5")
        .into_inner();
    assert_eq!(resp.results.len(), 5);
    assert_eq!(resp.summary.expect("summary").retry_with_limit, 5);

    let err = within("batch over the limit", client.classify_batch(batch(6)))
        .await
        .expect_err("6 items with --max-batch 5");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let (field, description) = violation("batch of 6", &err);
    assert_eq!(field, "failures");
    assert!(description.contains("the limit is 5"), "{description}");

    // Over --max-message-bytes: RESOURCE_EXHAUSTED, as docs/limits.md documents,
    // for one big field and for the 1 MiB Retry-After alike.
    let mut f = read_503();
    f.method = "m".repeat(70_000);
    let err = classify(&mut client, "70 kB request", f)
        .await
        .expect_err("over 64 KiB");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("65536"), "names the limit: {err:?}");
    let err = classify(&mut client, "1 MiB retry_after", read_429(&"1".repeat(1 << 20)))
        .await
        .expect_err("over 64 KiB");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    // Just under the limit the field limits apply instead.
    let mut f = read_503();
    f.method = "m".repeat(60_000);
    rejected(&mut client, "60 kB method", f, "failure.method").await;

    assert_alive(&server, "message and batch limits").await;
}

/// VmRSS of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/<pid>/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_disconnect_mid_call_do_not_hurt_others() {
    const ROUNDS: usize = 100;
    let server = Server::start(&[]);
    // 1 600 items (the default --max-batch, about 50 kB) decided on the blocking pool: long enough
    // to drop the client while it is uploaded or decided.
    let mut item = failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Write);
    item.method = "crm.deal.add".into();
    item.idempotency_key = "deal-42".into();
    let big = Bytes::from(
        pb::ClassifyBatchRequest {
            failures: vec![item; 1_600],
            locale: "ru".into(),
        }
        .encode_to_vec(),
    );

    // Warm up: one big batch answered in full, so the baseline includes the
    // allocator's working set for it.
    let full = raw::unary(server.channel().await, raw::CLASSIFY_BATCH, big.clone(), CALL)
        .await
        .expect("a whole big batch");
    assert_eq!(
        pb::ClassifyBatchResponse::decode(full).expect("decodes").results.len(),
        1_600
    );

    // A well-behaved client on its own connection, all along.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let good = {
        let (stop, ok, failed) = (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&failed));
        let mut client = server.client().await;
        tokio::spawn(async move {
            let mut errors = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match classify(&mut client, "the well-behaved client", read_503()).await {
                    Ok(d) if d.verdict() == pb::Verdict::RetryWithLimit => ok.fetch_add(1, Ordering::Relaxed),
                    other => {
                        errors.push(format!("{other:?}"));
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            errors
        })
    };

    let mut rss = Vec::new();
    let mut answered_anyway = 0;
    for round in 0..ROUNDS {
        // A new connection each time, dropped with the call in flight:
        // sometimes mid-upload, sometimes while the batch is decided.
        let channel = Endpoint::from_shared(server.url())
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let call = tokio::spawn(raw::unary(channel, raw::CLASSIFY_BATCH, big.clone(), CALL));
        tokio::time::sleep(Duration::from_millis((round % 8) as u64)).await;
        if call.is_finished() {
            answered_anyway += 1;
        }
        call.abort();
        let _ = call.await;
        // And a raw TCP client that sends part of the HTTP/2 preface and leaves.
        if round % 5 == 0 {
            let mut tcp = tokio::net::TcpStream::connect(server.addr).await.expect("tcp connect");
            tcp.write_all(b"PRI * HTTP/2.0\r\n").await.expect("write");
        }
        if round % 10 == 9 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            rss.push(rss_kib(server.pid()));
        }
    }
    // Let the server finish the abandoned work.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let errors = within("the well-behaved client", good).await.expect("good client task");
    rss.push(rss_kib(server.pid()));

    assert!(
        errors.is_empty(),
        "the well-behaved client saw {} failures (and {} successes): {errors:?}",
        failed.load(Ordering::Relaxed),
        ok.load(Ordering::Relaxed)
    );
    assert!(ok.load(Ordering::Relaxed) >= 10, "the well-behaved client was served");
    assert!(
        answered_anyway < ROUNDS,
        "every call finished before it was dropped; the test did not disconnect mid-call"
    );
    // Memory plateaus rather than growing with every dropped call. The
    // allocator (mimalloc in the binary) holds and releases pages in bursts,
    // so single samples swing by tens of MiB (300 rounds measured: 70–118
    // MiB, no trend); a leak of each dropped call's ~2 MB response would add
    // ~100 MiB over the second half.
    let half = rss.len() / 2;
    let first_half = *rss[..half].iter().max().expect("samples");
    let second_half = *rss[half..].iter().max().expect("samples");
    eprintln!("VmRSS KiB every 10 rounds: {rss:?}; {answered_anyway}/{ROUNDS} answered before the drop");
    assert!(
        second_half < first_half + 48 * 1024,
        "VmRSS peaked at {first_half} KiB in the first {} rounds and {second_half} KiB after: {rss:?}",
        half * 10
    );
    let last = *rss.last().expect("samples");
    assert!(last < 256 * 1024, "VmRSS {last} KiB: {rss:?}");

    assert_alive(&server, "clients that disconnect mid-call").await;
}
