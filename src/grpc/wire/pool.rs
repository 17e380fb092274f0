//! Storage reused from one ClassifyBatch to the next.
//!
//! A 1 000-item batch is about 5 000 strings decoded from the request;
//! allocating and freeing them (and the 6 000 an answer built as messages
//! had) was the largest cost of a batch (callgrind: malloc and free were 42%
//! of the instructions of decode → decide → encode). Decoded requests are
//! kept in a small bounded pool instead, and the next batch decodes into the
//! same strings; an answer is bytes (`super::answer`), written into the
//! buffer of an earlier answer.
//!
//! Nothing of one call may reach another: a decoded failure is `clear`ed
//! before it is reused, an answer buffer is cleared, and tests compare reused
//! storage with fresh storage field for field. What a pool keeps is bounded:
//! at most [`POOLED`] requests of at most [`POOLED_ITEMS`] items each (a
//! decoded failure whose strings hold more than [`POOLED_FAILURE_BYTES`] is
//! dropped rather than kept) and [`POOLED`] answer buffers of at most
//! [`POOLED_ANSWER_BYTES`].

use std::sync::Mutex;

use bytes::Buf;
use prost::DecodeError;
use prost::Message as _;
use prost::encoding::{DecodeContext, WireType, decode_key, message};

use super::super::pb;

/// Most requests (and most responses) a pool keeps.
pub const POOLED: usize = 8;
/// Most items a pooled request or response keeps; a larger batch is trimmed.
pub const POOLED_ITEMS: usize = 2_048;
/// A decoded failure whose strings hold more bytes than this is not kept.
/// Every field limit of `core::limits` together is under it, so this only
/// drops failures that were refused as too long.
pub const POOLED_FAILURE_BYTES: usize = 2_048;

/// Most bytes a pooled answer buffer keeps (a 1 000-item answer is about
/// 300 KB); a larger one's storage is cut down to this.
pub const POOLED_ANSWER_BYTES: usize = 1 << 20;

/// The `failures` field of `ClassifyBatchRequest`.
const FAILURES_TAG: u32 = 1;

/// A free list of at most `N` values.
pub(super) struct Pool<T, const N: usize = POOLED> {
    free: Mutex<Vec<T>>,
}

impl<T, const N: usize> Pool<T, N> {
    pub(super) const fn new() -> Self {
        Pool {
            free: Mutex::new(Vec::new()),
        }
    }

    pub(super) fn take(&self) -> Option<T> {
        self.free.lock().ok()?.pop()
    }

    pub(super) fn give(&self, value: T) {
        if let Ok(mut free) = self.free.lock() {
            if free.len() < N {
                free.push(value);
            }
        }
    }

    /// Values kept now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.kept(|_| 0).values
    }

    /// What the pool keeps now, `bytes` counting each value's heap.
    pub(super) fn kept(&self, bytes: impl Fn(&T) -> usize) -> super::Kept {
        self.free.lock().map_or(super::Kept::default(), |free| super::Kept {
            values: free.len(),
            bytes: free.iter().map(|v| std::mem::size_of::<T>() + bytes(v)).sum(),
        })
    }
}

static REQUESTS: Pool<Vec<pb::Failure>> = Pool::new();
static ANSWERS: Pool<Vec<u8>> = Pool::new();

/// Decodes a `ClassifyBatchRequest` as prost does, but into failures kept
/// from earlier requests. This is `Message::decode`'s own loop; only a
/// `failures` entry is merged into a reused failure instead of a new one.
/// Other fields go to prost's generated `merge_field` (a `#[doc(hidden)]`
/// method of `prost::Message`, pinned with prost 0.14), so unknown fields,
/// `locale` and wire-type errors behave exactly as prost's decode.
///
/// The server reads most batch requests in place instead
/// ([`super::view::BatchView`]); this serves those it leaves to prost (an
/// `upstream` contract, a field this build does not know, bytes that are
/// not a message) and the generated server's method.
pub fn decode_batch_request(mut buf: impl Buf) -> Result<pb::ClassifyBatchRequest, DecodeError> {
    // The vector too is reused: growing a new one item by item moved every
    // failure decoded so far at each doubling.
    let mut failures = REQUESTS.take().unwrap_or_default();
    let mut decoded = 0;
    let mut req = pb::ClassifyBatchRequest::default();
    let ctx = DecodeContext::default();
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(&mut buf)?;
        if tag == FAILURES_TAG && wire_type == WireType::LengthDelimited {
            if decoded == failures.len() {
                failures.push(pb::Failure::default());
            }
            let failure = &mut failures[decoded];
            failure.clear();
            message::merge(wire_type, failure, &mut buf, ctx.clone())?;
            decoded += 1;
        } else {
            // Also a `failures` key of the wrong wire type: prost's error.
            req.merge_field(tag, wire_type, &mut buf, ctx.clone())?;
        }
    }
    failures.truncate(decoded);
    req.failures = failures;
    Ok(req)
}

/// Gives a decided request's failures back for the next request to decode into.
pub fn recycle_request(req: pb::ClassifyBatchRequest) {
    let mut failures = req.failures;
    failures.truncate(POOLED_ITEMS);
    // A 10 000-item batch left a vector with room for 10 000.
    failures.shrink_to(POOLED_ITEMS);
    for failure in &mut failures {
        if string_bytes(failure) > POOLED_FAILURE_BYTES {
            *failure = pb::Failure::default();
        }
    }
    REQUESTS.give(failures);
}

/// What the ClassifyBatch pools keep now: decoded requests, answer buffers.
pub(super) fn kept() -> [(&'static str, super::Kept); 2] {
    let failures = |v: &Vec<pb::Failure>| {
        v.capacity() * std::mem::size_of::<pb::Failure>() + v.iter().map(string_bytes).sum::<usize>()
    };
    [
        ("batch_requests", REQUESTS.kept(failures)),
        ("batch_answers", ANSWERS.kept(Vec::capacity)),
    ]
}

/// The buffer of an earlier answer, to write the next one's bytes into.
pub fn take_answer() -> Vec<u8> {
    ANSWERS.take().unwrap_or_default()
}

/// Gives an answer's bytes back once they are sent (see [`POOLED_ANSWER_BYTES`]).
pub fn recycle_answer(mut bytes: Vec<u8>) {
    bytes.clear();
    bytes.shrink_to(POOLED_ANSWER_BYTES);
    ANSWERS.give(bytes);
}

/// Bytes held by the strings of a decoded failure.
pub(super) fn string_bytes(f: &pb::Failure) -> usize {
    let upstream = f.upstream.as_ref().map_or(0, |c| {
        c.idempotency_key.as_ref().map_or(0, String::capacity)
            + c.reconciliation_action.as_ref().map_or(0, String::capacity)
    });
    [
        &f.catalog,
        &f.code,
        &f.method,
        &f.retry_after,
        &f.idempotency_key,
        &f.request_id,
        &f.tenant,
        &f.dependency,
        &f.probe_token,
    ]
    .iter()
    .map(|s| s.capacity())
    .sum::<usize>()
        + upstream
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;

    /// What a pooled decoder made of `bytes` is what prost makes of them:
    /// the same refusal, or the same message.
    pub(in crate::grpc) fn same_as_prost<M>(ours: Result<M, DecodeError>, bytes: &[u8]) -> Result<(), TestCaseError>
    where
        M: prost::Message + Default + PartialEq + std::fmt::Debug,
    {
        let prost = M::decode(bytes);
        prop_assert_eq!(ours.is_ok(), prost.is_ok(), "{:?} vs {:?}", ours, prost);
        if let (Ok(ours), Ok(prost)) = (ours, prost) {
            prop_assert_eq!(ours, prost);
        }
        Ok(())
    }

    fn failure(n: usize, key: &str) -> pb::Failure {
        pb::Failure {
            catalog: "vibecode".into(),
            code: format!("CODE_{n}"),
            operation: (n % 3) as i32,
            method: "crm.deal.add".into(),
            attempt: n as u32,
            retry_after: if n.is_multiple_of(2) { "5".into() } else { String::new() },
            retry_after_ms: n.is_multiple_of(4).then_some(n as u64),
            idempotency_key: key.into(),
            request_id: format!("req-{n}"),
            tenant: "t".repeat(n % 5),
            upstream: n.is_multiple_of(3).then(|| pb::RetryContract {
                idempotency_key: Some(key.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn request(n: usize, key: &str) -> pb::ClassifyBatchRequest {
        pb::ClassifyBatchRequest {
            failures: (0..n).map(|i| failure(i, key)).collect(),
            locale: if n.is_multiple_of(2) {
                "ru".into()
            } else {
                String::new()
            },
        }
    }

    #[test]
    fn reused_failures_carry_nothing_of_the_earlier_request() {
        // A long request with every field set, then a short one with fewer:
        // the second must decode exactly as prost decodes it fresh.
        let first = request(40, "secret-key-of-another-caller");
        let decoded = decode_batch_request(first.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(decoded, first);
        recycle_request(decoded);

        let second = pb::ClassifyBatchRequest {
            failures: vec![pb::Failure::default(), failure(1, "")],
            locale: String::new(),
        };
        let decoded = decode_batch_request(second.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(decoded, second);
    }

    #[test]
    fn malformed_strings_get_prosts_refusal() {
        // failures[0] = { catalog: <varint 7> }, { code: <invalid UTF-8> },
        // { method: <length past the end> }, { catalog: C3, code: A9 } (each
        // half of "é": valid together, not alone): each refused as the
        // plain merge refuses it, with the same message.
        for body in [
            vec![0x08, 0x07],
            vec![0x12, 0x02, 0xC3, 0x28],
            vec![0x22, 0x05, b'a'],
            vec![0x0A, 0x01, 0xC3, 0x12, 0x01, 0xA9],
        ] {
            let mut wire = vec![0x0A, body.len() as u8];
            wire.extend_from_slice(&body);
            let ours = decode_batch_request(wire.as_slice()).expect_err("refused");
            let mut plain = pb::Failure::default();
            let theirs = message::merge(
                WireType::LengthDelimited,
                &mut plain,
                &mut &wire[1..],
                DecodeContext::default(),
            )
            .expect_err("refused");
            assert_eq!(ours.to_string(), theirs.to_string());
        }
    }

    #[test]
    fn repeated_string_fields_decode_as_prost_does() {
        // Fields given again and again: the last one wins.
        for repeats in [2, 17] {
            let mut body = Vec::new();
            for i in 0..repeats {
                body.extend_from_slice(&[0x0A, 0x02, b'c', b'0' + (i % 10) as u8, 0x12, 0x01, b'x']);
            }
            let mut wire = vec![0x0A];
            prost::encoding::encode_varint(body.len() as u64, &mut wire);
            wire.extend_from_slice(&body);
            let ours = decode_batch_request(wire.as_slice()).expect("decodes");
            assert_eq!(
                ours,
                pb::ClassifyBatchRequest::decode(wire.as_slice()).expect("decodes")
            );
            assert_eq!(ours.failures[0].code, "x");
        }
    }

    #[test]
    fn oversize_failures_are_not_kept_and_pools_are_bounded() {
        let mut big = failure(1, "k");
        big.method = "m".repeat(1 << 20);
        assert!(string_bytes(&big) > POOLED_FAILURE_BYTES);
        let pool: Pool<u8> = Pool::new();
        for i in 0..=POOLED {
            pool.give(i as u8);
        }
        assert_eq!(pool.free.lock().expect("lock").len(), POOLED);
        assert!(string_bytes(&failure(4, &"k".repeat(256))) <= POOLED_FAILURE_BYTES);
    }

    #[test]
    fn a_huge_batch_leaves_no_more_than_pooled_items_behind() {
        let req = request(POOLED_ITEMS * 3, "k");
        let decoded = decode_batch_request(req.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(decoded.failures.len(), POOLED_ITEMS * 3);
        recycle_request(decoded);
        recycle_answer(vec![0; POOLED_ANSWER_BYTES * 3]);
        // Other tests share the pools: every vector in them must be within bounds.
        for failures in REQUESTS.free.lock().expect("lock").iter() {
            assert!(failures.len() <= POOLED_ITEMS && failures.capacity() <= 2 * POOLED_ITEMS);
        }
        for bytes in ANSWERS.free.lock().expect("lock").iter() {
            assert!(bytes.is_empty() && bytes.capacity() <= 2 * POOLED_ANSWER_BYTES);
        }
    }

    #[test]
    fn answer_buffers_past_the_bound_are_dropped_and_the_rest_cut_down() {
        // Three times as many buffers as kept, each three times the size kept.
        for _ in 0..POOLED * 3 {
            recycle_answer(Vec::with_capacity(POOLED_ANSWER_BYTES * 3));
        }
        let kept = ANSWERS.kept(Vec::capacity);
        assert!(kept.values <= POOLED, "{kept:?}");
        // `shrink_to` may leave an allocator's rounding, never the 3 MiB.
        assert!(kept.bytes <= POOLED * (2 * POOLED_ANSWER_BYTES + 64), "{kept:?}");
        // What the metric reports is what the pool holds.
        let reported = kept_bytes("batch_answers");
        assert!(reported <= POOLED * (2 * POOLED_ANSWER_BYTES + 64), "{reported}");
        let next = take_answer();
        assert!(next.is_empty(), "a reused buffer starts empty");
        recycle_answer(next);
    }

    fn kept_bytes(pool: &str) -> usize {
        super::super::pooled()
            .into_iter()
            .find(|(n, _)| *n == pool)
            .map_or(usize::MAX, |(_, k)| k.bytes)
    }

    proptest! {
        /// Any bytes: the pooled decoder accepts exactly what prost accepts
        /// and yields the same message, whatever the pool held before.
        #[test]
        fn decodes_as_prost_does(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            earlier in 0usize..50,
        ) {
            if let Ok(d) = decode_batch_request(request(earlier, "old").encode_to_vec().as_slice()) {
                recycle_request(d);
            }
            same_as_prost(decode_batch_request(bytes.as_slice()), &bytes)?;
        }

        /// Well-formed requests of any size, decoded after any other.
        #[test]
        fn round_trips_after_any_earlier_request(n in 0usize..60, earlier in 0usize..60) {
            recycle_request(decode_batch_request(request(earlier, "old").encode_to_vec().as_slice()).expect("decodes"));
            let req = request(n, "new");
            prop_assert_eq!(decode_batch_request(req.encode_to_vec().as_slice()).expect("decodes"), req);
        }

        /// String fields given in any number and order, of any length, with
        /// any Unicode or a raw byte anywhere: the same message or refusal
        /// as prost.
        #[test]
        fn many_and_long_strings_decode_as_prost_does(
            fields in proptest::collection::vec(
                (prop::sample::select(vec![1u8, 2, 4, 7, 10, 14, 15, 17, 19]), ".{0,150}", any::<bool>(), any::<u8>()),
                0..40,
            ),
        ) {
            let mut body = Vec::new();
            for (tag, text, raw, byte) in &fields {
                prost::encoding::encode_varint(u64::from((tag << 3) | 2), &mut body);
                let mut value = text.as_bytes().to_vec();
                if *raw {
                    // Often not UTF-8 then, or only with its neighbour.
                    let at = usize::from(*byte) % (value.len() + 1);
                    value.insert(at, *byte);
                }
                prost::encoding::encode_varint(value.len() as u64, &mut body);
                body.extend_from_slice(&value);
            }
            let mut wire = vec![0x0A];
            prost::encoding::encode_varint(body.len() as u64, &mut wire);
            wire.extend_from_slice(&body);
            same_as_prost(decode_batch_request(wire.as_slice()), &wire)?;
        }

        /// Failures with any strings (any Unicode, empty or not) and any
        /// numbers, whole, cut anywhere, or split across two chunks: the
        /// same message or the same refusal as prost.
        #[test]
        fn any_failure_decodes_as_prost_does(
            texts in proptest::collection::vec(".{0,12}", 11),
            numbers in proptest::collection::vec(any::<u32>(), 6),
            cut in any::<prop::sample::Index>(),
            split in any::<prop::sample::Index>(),
        ) {
            let f = pb::Failure {
                catalog: texts[0].clone(),
                code: texts[1].clone(),
                operation: numbers[0] as i32,
                method: texts[2].clone(),
                attempt: numbers[1],
                max_attempts: numbers[2],
                retry_after: texts[3].clone(),
                retry_after_ms: (numbers[3] % 2 == 0).then_some(u64::from(numbers[3])),
                deadline: (numbers[4] % 3 == 0).then(|| prost_types::Timestamp { seconds: i64::from(numbers[4]), nanos: 5 }),
                idempotency_key: texts[4].clone(),
                idempotency_key_enforced: numbers[5] % 2 == 0,
                read_back: numbers[5] as i32,
                cannot_verify_effect: numbers[5] % 3 == 0,
                request_id: texts[5].clone(),
                tenant: texts[6].clone(),
                upstream: (numbers[0] % 2 == 0).then(|| pb::RetryContract {
                    idempotency_key: Some(texts[7].clone()),
                    reconciliation_action: (numbers[1] % 2 == 0).then(|| texts[8].clone()),
                    after_ms: u64::from(numbers[2]),
                    ..Default::default()
                }),
                dependency: texts[9].clone(),
                quota_resets_at: (numbers[4] % 2 == 0).then_some(prost_types::Timestamp { seconds: -1, nanos: 0 }),
                probe_token: texts[10].clone(),
            };
            let req = pb::ClassifyBatchRequest {
                failures: vec![f.clone(), pb::Failure::default(), f],
                locale: texts[0].clone(),
            };
            let wire = req.encode_to_vec();
            prop_assert_eq!(&decode_batch_request(wire.as_slice()).expect("decodes"), &req);
            let at = split.index(wire.len() + 1);
            let chained = bytes::Buf::chain(&wire[..at], &wire[at..]);
            prop_assert_eq!(&decode_batch_request(chained).expect("decodes in two chunks"), &req);
            let short = &wire[..cut.index(wire.len() + 1)];
            let ours = decode_batch_request(short);
            let prost = pb::ClassifyBatchRequest::decode(short);
            prop_assert_eq!(ours.is_ok(), prost.is_ok(), "{:?} vs {:?}", ours, prost);
            if let (Ok(ours), Ok(prost)) = (ours, prost) {
                prop_assert_eq!(ours, prost);
            }
        }
    }
}
