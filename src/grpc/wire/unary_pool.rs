//! Storage reused from one Classify to the next, as [`super::pool`] does for
//! ClassifyBatch: the request's failure is decoded into a failure kept from an
//! earlier call, and the answer's bytes are written in an earlier answer's
//! buffer.
//!
//! A Classify decodes about six strings and builds about eight; allocating
//! and freeing them was a tenth of the call's own instructions (callgrind,
//! see docs/performance.md). Nothing of one call reaches another: a pooled
//! failure is `clear`ed before a request is merged into it (tests compare it
//! with fresh storage), and an answer buffer is cleared before it is written.

use bytes::Buf;
use prost::DecodeError;
use prost::Message as _;
use prost::encoding::{DecodeContext, WireType, decode_key, message};

use super::super::pb;
use super::pool::{POOLED_FAILURE_BYTES, Pool};

/// The `failure` field of `ClassifyRequest`.
const FAILURE_TAG: u32 = 1;

/// Most failures (and decisions) kept: more than the calls a server decodes
/// at the same instant, few enough to be nothing in memory.
pub const POOLED_UNARY: usize = 64;

static FAILURES: Pool<Box<pb::Failure>, POOLED_UNARY> = Pool::new();

/// Decodes a `ClassifyRequest` as prost does, its failure into one kept from
/// an earlier call (`Message::decode`'s own loop, as
/// [`super::pool::decode_batch_request`]). A failure field given twice is
/// merged, as prost merges it.
pub fn decode_classify_request(mut buf: impl Buf) -> Result<pb::ClassifyRequest, DecodeError> {
    let mut req = pb::ClassifyRequest::default();
    let ctx = DecodeContext::default();
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(&mut buf)?;
        if tag == FAILURE_TAG && wire_type == WireType::LengthDelimited {
            let failure = req.failure.get_or_insert_with(|| {
                let mut f = FAILURES.take().unwrap_or_default();
                f.clear();
                f
            });
            message::merge(wire_type, failure, &mut buf, ctx.clone())?;
        } else {
            req.merge_field(tag, wire_type, &mut buf, ctx.clone())?;
        }
    }
    Ok(req)
}

/// Gives a decided request's failure back for the next request to decode into.
pub fn recycle_request(req: pb::ClassifyRequest) {
    if let Some(failure) = req.failure {
        if super::pool::string_bytes(&failure) <= POOLED_FAILURE_BYTES {
            FAILURES.give(failure);
        }
    }
}

static ADMITS: Pool<pb::AdmitRequest, POOLED_UNARY> = Pool::new();

/// Decodes an `AdmitRequest` as prost does (a cleared message, merged),
/// into one kept from an earlier call: its four strings keep their storage.
pub fn decode_admit_request(buf: impl Buf) -> Result<pb::AdmitRequest, DecodeError> {
    let mut req = ADMITS.take().unwrap_or_default();
    req.clear();
    req.merge(buf)?;
    Ok(req)
}

/// Gives a decided Admit request back for the next one to decode into,
/// unless its strings hold more than a pooled failure may.
pub fn recycle_admit_request(req: pb::AdmitRequest) {
    if admit_bytes(&req) <= POOLED_FAILURE_BYTES {
        ADMITS.give(req);
    }
}

/// Most bytes a pooled Classify answer buffer keeps: a decision with a hold
/// and long reasons is under 2 KiB; a larger buffer is cut down to this.
pub const POOLED_CLASSIFY_ANSWER_BYTES: usize = 4_096;

static ANSWERS: Pool<Vec<u8>, POOLED_UNARY> = Pool::new();

/// A buffer to write a Classify answer's bytes in (empty, with the storage
/// of an earlier answer).
pub fn take_answer() -> Vec<u8> {
    let mut out = ANSWERS.take().unwrap_or_default();
    out.clear();
    out
}

/// Gives a Classify answer's buffer back once its bytes are sent (cut to
/// [`POOLED_CLASSIFY_ANSWER_BYTES`]).
pub fn recycle_answer(mut bytes: Vec<u8>) {
    bytes.clear();
    bytes.shrink_to(POOLED_CLASSIFY_ANSWER_BYTES);
    ANSWERS.give(bytes);
}

/// What the Classify and Admit pools keep now.
pub(super) fn kept() -> [(&'static str, super::Kept); 3] {
    [
        // Boxed: the box's own size is a pointer, its failure is heap.
        (
            "classify_failures",
            FAILURES.kept(|f| size_of::<pb::Failure>() + super::pool::string_bytes(f)),
        ),
        ("admit_requests", ADMITS.kept(admit_bytes)),
        ("classify_answers", ANSWERS.kept(Vec::capacity)),
    ]
}

/// Bytes held by an Admit request's strings.
fn admit_bytes(r: &pb::AdmitRequest) -> usize {
    r.catalog.capacity() + r.dependency.capacity() + r.tenant.capacity() + r.method.capacity()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn request(n: usize, key: &str) -> pb::ClassifyRequest {
        pb::ClassifyRequest {
            failure: (!n.is_multiple_of(7)).then(|| {
                Box::new(pb::Failure {
                    catalog: "vibecode".into(),
                    code: format!("CODE_{n}"),
                    operation: (n % 3) as i32,
                    method: "crm.deal.add".into(),
                    attempt: n as u32,
                    retry_after: if n.is_multiple_of(2) { "5".into() } else { String::new() },
                    idempotency_key: key.into(),
                    request_id: format!("req-{n}"),
                    tenant: "t".repeat(n % 5),
                    dependency: "d".repeat(n % 3),
                    upstream: n.is_multiple_of(3).then(|| pb::RetryContract {
                        idempotency_key: Some(key.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
            }),
            locale: if n.is_multiple_of(2) {
                "ru".into()
            } else {
                String::new()
            },
        }
    }

    #[test]
    fn a_reused_failure_carries_nothing_of_the_earlier_request() {
        let first = request(3, "secret-key-of-another-caller");
        let decoded = decode_classify_request(first.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(decoded, first);
        recycle_request(decoded);
        for second in [
            pb::ClassifyRequest::default(),
            pb::ClassifyRequest {
                failure: Some(Box::default()),
                locale: String::new(),
            },
            request(1, ""),
        ] {
            let decoded = decode_classify_request(second.encode_to_vec().as_slice()).expect("decodes");
            assert_eq!(decoded, second);
            recycle_request(decoded);
        }
    }

    #[test]
    fn a_failure_given_twice_is_merged_as_prost_merges_it() {
        let mut bytes = request(4, "a").encode_to_vec();
        bytes.extend(request(5, "").encode_to_vec());
        let ours = decode_classify_request(bytes.as_slice()).expect("decodes");
        assert_eq!(ours, pb::ClassifyRequest::decode(bytes.as_slice()).expect("decodes"));
    }

    #[test]
    fn pools_are_bounded() {
        for _ in 0..POOLED_UNARY * 2 {
            recycle_request(request(1, "k"));
        }
        assert!(FAILURES.len() <= POOLED_UNARY);
        // Past the bound, with the largest failure a pool keeps and a larger one: the gauge shows the bound.
        for n in 0..POOLED_UNARY * 3 {
            let mut r = request(1, "k");
            if let Some(f) = r.failure.as_mut() {
                f.method = "m".repeat(if n % 2 == 0 { POOLED_FAILURE_BYTES / 2 } else { 1 << 16 });
            }
            recycle_request(r);
            let mut a = admit(n);
            a.tenant = "t".repeat(if n % 2 == 0 { POOLED_FAILURE_BYTES / 2 } else { 1 << 16 });
            recycle_admit_request(a);
            // Answer buffers of 1 KiB and of 64 KiB (a buffer regrown by a huge answer).
            let mut answer = take_answer();
            assert!(answer.is_empty(), "a reused answer buffer starts empty");
            answer.resize(if n % 2 == 0 { 1 << 10 } else { 1 << 16 }, 7);
            recycle_answer(answer);
        }
        let kept = super::super::pooled();
        for (pool, most) in [
            ("classify_failures", size_of::<pb::Failure>() + POOLED_FAILURE_BYTES),
            ("admit_requests", size_of::<pb::AdmitRequest>() + POOLED_FAILURE_BYTES),
            // `shrink_to` may leave an allocator's rounding, never the 64 KiB.
            (
                "classify_answers",
                size_of::<Vec<u8>>() + 2 * POOLED_CLASSIFY_ANSWER_BYTES,
            ),
        ] {
            let k = kept
                .iter()
                .find(|(n, _)| *n == pool)
                .map(|(_, k)| *k)
                .expect("pool reported");
            assert!(
                k.values <= POOLED_UNARY && k.bytes <= POOLED_UNARY * most,
                "{pool}: {k:?}"
            );
        }
        let mut big = request(1, "k");
        if let Some(f) = big.failure.as_mut() {
            f.method = "m".repeat(1 << 20);
        }
        let before = FAILURES.len();
        recycle_request(big);
        assert!(
            FAILURES.len() <= before.max(POOLED_UNARY),
            "an oversize failure is not kept"
        );
    }

    fn admit(n: usize) -> pb::AdmitRequest {
        pb::AdmitRequest {
            catalog: if n.is_multiple_of(2) {
                "vibecode".into()
            } else {
                String::new()
            },
            dependency: "d".repeat(n % 4),
            tenant: format!("tenant-{n}"),
            method: if n.is_multiple_of(3) {
                String::new()
            } else {
                "crm.deal.add".into()
            },
            operation: (n % 3) as i32,
            attempt: n as u32,
        }
    }

    #[test]
    fn a_reused_admit_request_carries_nothing_of_the_earlier_one() {
        for (earlier, n) in [(1, 0), (4, 3), (5, 6), (0, 7)] {
            recycle_admit_request(decode_admit_request(admit(earlier).encode_to_vec().as_slice()).expect("decodes"));
            let req = admit(n);
            assert_eq!(
                decode_admit_request(req.encode_to_vec().as_slice()).expect("decodes"),
                req
            );
        }
        let mut big = admit(1);
        big.tenant = "t".repeat(1 << 20);
        recycle_admit_request(big);
        assert!(
            (0..POOLED_UNARY * 2).all(|_| ADMITS.take().is_none_or(|r| r.tenant.capacity() < 1 << 20)),
            "an oversize request is not kept"
        );
    }

    proptest! {
        /// Any bytes: an Admit request is accepted exactly when prost accepts it.
        #[test]
        fn admit_decodes_as_prost_does(bytes in proptest::collection::vec(any::<u8>(), 0..120), earlier in 0usize..20) {
            recycle_admit_request(admit(earlier));
            let ours = decode_admit_request(bytes.as_slice());
            let prost = pb::AdmitRequest::decode(bytes.as_slice());
            prop_assert_eq!(ours.is_ok(), prost.is_ok());
            if let (Ok(a), Ok(b)) = (ours, prost) {
                prop_assert_eq!(a, b);
            }
        }

        /// Any bytes: accepted exactly when prost accepts them, and the same
        /// message, whatever the pool held before.
        #[test]
        fn decodes_as_prost_does(bytes in proptest::collection::vec(any::<u8>(), 0..200), earlier in 0usize..50) {
            if let Ok(d) = decode_classify_request(request(earlier, "old").encode_to_vec().as_slice()) {
                recycle_request(d);
            }
            crate::grpc::wire::pool::tests::same_as_prost(decode_classify_request(bytes.as_slice()), &bytes)?;
        }

        /// Well-formed requests, decoded after any other.
        #[test]
        fn round_trips_after_any_earlier_request(n in 0usize..60, earlier in 0usize..60) {
            recycle_request(decode_classify_request(request(earlier, "old").encode_to_vec().as_slice()).expect("decodes"));
            let req = request(n, "new");
            prop_assert_eq!(decode_classify_request(req.encode_to_vec().as_slice()).expect("decodes"), req);
        }
    }
}
