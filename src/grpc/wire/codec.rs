//! The protobuf codec of retryd's services: prost, as in tonic-prost's codec,
//! except that
//! - a request that does not decode is the caller's error (INVALID_ARGUMENT
//!   with a BadRequest naming the request), not INTERNAL as tonic-prost
//!   answers: bad bytes are input like any other; INTERNAL is kept for our own
//!   faults;
//! - ClassifyBatch requests are decoded into, and its responses given back
//!   to, the pools of [`super::pool`], Classify's those of
//!   [`super::unary_pool`] ([`Pooled`]);
//! - ClassifyBatch responses are encoded by [`encode_batch_response`], which
//!   writes prost's bytes but measures each decision once instead of four times.

use bytes::{Buf, BufMut};
use prost::encoding::{WireType, bool, encode_varint, encoded_len_varint, int32, key_len, message, string, uint32};
use prost::{DecodeError, Message};
use tonic::Status;
use tonic::codec::{BufferSettings, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic_types::{ErrorDetails, StatusExt as _};

use super::super::pb;
use super::{pool, unary_pool};

/// How a message of the service is decoded, and what happens to it once it
/// is encoded: by default prost's decode, and nothing.
pub trait Pooled: Message + Default + Sized {
    /// Decodes a message (into pooled storage where the type has a pool).
    fn decode_pooled(buf: impl Buf) -> Result<Self, DecodeError> {
        Self::decode(buf)
    }

    /// Encodes the message into `buf`, room for all of it reserved first
    /// unless it is [`Self::SMALL`] (by default prost's `encoded_len` and
    /// `encode_raw`), then gives it back to its pool.
    ///
    /// `encode_raw` rather than `encode`: `encode` computes the whole
    /// message's length again only to check that the buffer has room, which
    /// has just been reserved. `encode_raw` is a `#[doc(hidden)]` method of
    /// `prost::Message`; prost is pinned to 0.14 in Cargo.toml.
    fn encode_pooled(self, buf: &mut impl Reserve) {
        // Room for the whole message at once: tonic's buffer starts at 8 KiB,
        // and regrowing it under a 300 KB batch answer as prost writes copied
        // the answer several times over (callgrind: realloc 8% of a batch).
        if !Self::SMALL {
            buf.reserve_bytes(self.encoded_len());
        }
        self.encode_raw(buf);
        self.recycle();
    }

    /// Gives an encoded message back to its pool, if it has one.
    fn recycle(self) {}

    /// Whether the message is always small next to tonic's 8 KiB encode
    /// buffer, so reserving its length first (one more pass over every
    /// nested message to size it) buys nothing. Only an optimisation: the
    /// buffer grows as it is written either way.
    const SMALL: bool = false;
}

impl Pooled for pb::ClassifyRequest {
    fn decode_pooled(buf: impl Buf) -> Result<Self, DecodeError> {
        unary_pool::decode_classify_request(buf)
    }
}

impl Pooled for pb::ClassifyResponse {
    fn recycle(self) {
        unary_pool::recycle_response(self);
    }

    // One decision: under 1 KiB, a few with a hold and long reasons.
    const SMALL: bool = true;
}

/// A buffer that grows as it is written and can make room ahead of a write:
/// tonic's [`EncodeBuf`], or a `Vec<u8>` (benches, tests).
pub trait Reserve: BufMut {
    /// Makes room for at least `additional` more bytes.
    fn reserve_bytes(&mut self, additional: usize);
}

impl Reserve for EncodeBuf<'_> {
    fn reserve_bytes(&mut self, additional: usize) {
        self.reserve(additional);
    }
}

impl Reserve for Vec<u8> {
    fn reserve_bytes(&mut self, additional: usize) {
        self.reserve(additional);
    }
}

impl Pooled for pb::ListCatalogsRequest {}
impl Pooled for pb::ListCatalogsResponse {}
impl Pooled for pb::AdmitRequest {
    fn decode_pooled(buf: impl Buf) -> Result<Self, DecodeError> {
        unary_pool::decode_admit_request(buf)
    }
}
impl Pooled for pb::AdmitResponse {}
impl Pooled for pb::ReportOutcomesRequest {}
impl Pooled for pb::ReportOutcomesResponse {}
impl Pooled for pb::ListHoldsRequest {}
impl Pooled for pb::ListHoldsResponse {}
impl Pooled for pb::ListBudgetsRequest {}
impl Pooled for pb::ListBudgetsResponse {}
impl Pooled for pb::ReleaseHoldRequest {}
impl Pooled for pb::ReleaseHoldResponse {}
impl Pooled for pb::WatchHoldsRequest {}
impl Pooled for pb::WatchHoldsResponse {}

impl Pooled for pb::ClassifyBatchRequest {
    fn decode_pooled(buf: impl Buf) -> Result<Self, DecodeError> {
        pool::decode_batch_request(buf)
    }
}

impl Pooled for pb::ClassifyBatchResponse {
    fn encode_pooled(self, buf: &mut impl Reserve) {
        encode_batch_response(&self, buf);
        self.recycle();
    }

    fn recycle(self) {
        pool::recycle_response(self);
    }
}

/// A prost codec, as tonic-prost's, with decode errors answered
/// INVALID_ARGUMENT and ClassifyBatch's messages pooled.
#[derive(Debug, Clone)]
pub struct Codec<T, U>(std::marker::PhantomData<(T, U)>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Codec(std::marker::PhantomData)
    }
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: Pooled + Send + 'static,
    U: Pooled + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = PooledEncoder<T>;
    type Decoder = InvalidArgumentDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        PooledEncoder(std::marker::PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        InvalidArgumentDecoder(std::marker::PhantomData)
    }
}

/// Encodes with prost, then recycles the message.
#[derive(Debug)]
pub struct PooledEncoder<T>(std::marker::PhantomData<T>);

impl<T: Pooled> Encoder for PooledEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode_pooled(buf);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// Encodes `item` into `buf` as the server's codec does (room reserved
/// first, the batch encoder for ClassifyBatch answers), then recycles it.
pub fn encode_and_recycle<T: Pooled>(item: T, buf: &mut impl Reserve) {
    item.encode_pooled(buf);
}

/// The `results` field of `ClassifyBatchResponse`.
const RESULTS_TAG: u32 = 1;
/// The `summary` field of `ClassifyBatchResponse`.
const SUMMARY_TAG: u32 = 2;
/// The `index` field of `BatchResult`.
const INDEX_TAG: u32 = 1;
/// The `decision` and `error` fields of `BatchResult.outcome`.
const DECISION_TAG: u32 = 2;
const ERROR_TAG: u32 = 3;

/// Writes `resp` into `buf` byte for byte as prost's `encode_raw` does, with
/// room for all of it reserved first.
///
/// prost writes a nested message's length before the message, and computes
/// that length afresh at every level: a batch answer's decisions were
/// measured three times and their retry contracts four (once more for the
/// buffer's reservation), 45% of the encoding's instructions (callgrind).
/// Here every decision and contract is measured once, the lengths kept for
/// the writing pass; and a decision's keys and short lengths are written as
/// bytes rather than through prost's out-of-line `encode_varint` (a call per
/// key and per length, another 11%). Holds, budgets, contracts and errors
/// are written by prost's own generated code.
pub fn encode_batch_response(resp: &pb::ClassifyBatchResponse, buf: &mut impl Reserve) {
    let pb::ClassifyBatchResponse { results, summary } = resp;
    let mut lens = Vec::with_capacity(results.len());
    let mut total = summary.as_ref().map_or(0, |s| message::encoded_len(SUMMARY_TAG, s));
    for result in results {
        let outcome = outcome_len(result);
        let len = result_len(result, outcome.outcome);
        total += key_len(RESULTS_TAG) + encoded_len_varint(len as u64) + len;
        lens.push(outcome);
    }
    buf.reserve_bytes(total);
    for (result, lens) in results.iter().zip(&lens) {
        let pb::BatchResult { index, outcome } = result;
        put_len(key_byte(RESULTS_TAG), result_len(result, lens.outcome), buf);
        if *index != 0 {
            uint32::encode(INDEX_TAG, index, buf);
        }
        match outcome {
            Some(pb::batch_result::Outcome::Decision(d)) => {
                put_len(key_byte(DECISION_TAG), lens.outcome, buf);
                put_decision(d, lens.contract, buf);
            }
            Some(pb::batch_result::Outcome::Error(e)) => {
                put_len(key_byte(ERROR_TAG), lens.outcome, buf);
                e.encode_raw(buf);
            }
            None => {}
        }
    }
    if let Some(s) = summary {
        message::encode(SUMMARY_TAG, s, buf);
    }
}

/// The lengths of one result's parts, measured once.
struct OutcomeLens {
    /// The decision or error message (0 for none).
    outcome: usize,
    /// The decision's retry contract, if it has one.
    contract: Option<usize>,
}

fn outcome_len(result: &pb::BatchResult) -> OutcomeLens {
    match &result.outcome {
        Some(pb::batch_result::Outcome::Decision(d)) => {
            let contract = d.retry.as_ref().map(Message::encoded_len);
            OutcomeLens {
                outcome: decision_len(d, contract),
                contract,
            }
        }
        Some(pb::batch_result::Outcome::Error(e)) => OutcomeLens {
            outcome: e.encoded_len(),
            contract: None,
        },
        None => OutcomeLens {
            outcome: 0,
            contract: None,
        },
    }
}

/// The length of a `BatchResult` whose outcome message is `outcome` bytes long.
fn result_len(result: &pb::BatchResult, outcome: usize) -> usize {
    let index = if result.index == 0 {
        0
    } else {
        uint32::encoded_len(INDEX_TAG, &result.index)
    };
    let tag = match result.outcome {
        Some(pb::batch_result::Outcome::Decision(_)) => DECISION_TAG,
        Some(pb::batch_result::Outcome::Error(_)) => ERROR_TAG,
        None => return index,
    };
    let outcome = key_len(tag) + encoded_len_varint(outcome as u64) + outcome;
    index + outcome
}

// The fields of `retryd.v1.Decision`, by number.
const VERDICT: u32 = 1;
const RETRY: u32 = 2;
const TARGET_REACHED: u32 = 3;
const CATALOG: u32 = 4;
const CODE: u32 = 5;
const KNOWN_CODE: u32 = 6;
const OPERATION: u32 = 7;
const OPERATION_INFERRED: u32 = 8;
const REASON: u32 = 9;
const RULE: u32 = 10;
const POLICY_VERSION: u32 = 11;
const REQUIRED_TRANSITION: u32 = 12;
const SCOPE: u32 = 13;
const REQUEST_ID: u32 = 14;
const TERMINAL_STATE: u32 = 15;
const WARNINGS: u32 = 16;
const HOLD: u32 = 17;
const BUDGET: u32 = 18;

/// The encoded length of a decision whose contract is `contract` bytes long,
/// as prost's generated `encoded_len` computes it. The destructuring names
/// every field: a field added to the proto does not compile until it is
/// measured here and written in [`put_decision`].
fn decision_len(d: &pb::Decision, contract: Option<usize>) -> usize {
    let pb::Decision {
        verdict,
        retry: _,
        target_reached,
        catalog,
        code,
        known_code,
        operation,
        operation_inferred,
        reason,
        rule,
        policy_version,
        required_transition,
        scope,
        request_id,
        terminal_state,
        warnings,
        hold,
        budget,
    } = d;
    let enum_len = |tag, v: &i32| if *v == 0 { 0 } else { int32::encoded_len(tag, v) };
    let str_len = |tag, s: &String| if s.is_empty() { 0 } else { string::encoded_len(tag, s) };
    let bool_len = |tag, b: &bool| if *b { bool::encoded_len(tag, b) } else { 0 };
    enum_len(VERDICT, verdict)
        + contract.map_or(0, |n| key_len(RETRY) + encoded_len_varint(n as u64) + n)
        + enum_len(TARGET_REACHED, target_reached)
        + str_len(CATALOG, catalog)
        + str_len(CODE, code)
        + bool_len(KNOWN_CODE, known_code)
        + enum_len(OPERATION, operation)
        + bool_len(OPERATION_INFERRED, operation_inferred)
        + str_len(REASON, reason)
        + str_len(RULE, rule)
        + str_len(POLICY_VERSION, policy_version)
        + str_len(REQUIRED_TRANSITION, required_transition)
        + enum_len(SCOPE, scope)
        + str_len(REQUEST_ID, request_id)
        + str_len(TERMINAL_STATE, terminal_state)
        + string::encoded_len_repeated(WARNINGS, warnings)
        + hold.as_ref().map_or(0, |h| message::encoded_len(HOLD, h))
        + budget.as_ref().map_or(0, |b| message::encoded_len(BUDGET, b))
}

/// Writes a decision's fields as prost's generated `encode_raw` does: in
/// field order, defaults skipped; `contract` is its contract's length.
fn put_decision(d: &pb::Decision, contract: Option<usize>, buf: &mut impl BufMut) {
    let pb::Decision {
        verdict,
        retry,
        target_reached,
        catalog,
        code,
        known_code,
        operation,
        operation_inferred,
        reason,
        rule,
        policy_version,
        required_transition,
        scope,
        request_id,
        terminal_state,
        warnings,
        hold,
        budget,
    } = d;
    put_enum(VERDICT, *verdict, buf);
    if let (Some(c), Some(len)) = (retry, contract) {
        put_len(key_byte(RETRY), len, buf);
        put_contract(c, buf);
    }
    put_enum(TARGET_REACHED, *target_reached, buf);
    put_str(CATALOG, catalog, buf);
    put_str(CODE, code, buf);
    put_bool(KNOWN_CODE, *known_code, buf);
    put_enum(OPERATION, *operation, buf);
    put_bool(OPERATION_INFERRED, *operation_inferred, buf);
    put_str(REASON, reason, buf);
    put_str(RULE, rule, buf);
    put_str(POLICY_VERSION, policy_version, buf);
    put_str(REQUIRED_TRANSITION, required_transition, buf);
    put_enum(SCOPE, *scope, buf);
    put_str(REQUEST_ID, request_id, buf);
    put_str(TERMINAL_STATE, terminal_state, buf);
    // Fields 16 and up have two-byte keys: prost's writers.
    string::encode_repeated(WARNINGS, warnings, buf);
    if let Some(h) = hold {
        message::encode(HOLD, h, buf);
    }
    if let Some(b) = budget {
        message::encode(BUDGET, b, buf);
    }
}

/// Writes a retry contract's fields as prost's generated `encode_raw` does
/// (the destructuring names every field, as in [`put_decision`]).
fn put_contract(c: &pb::RetryContract, buf: &mut impl BufMut) {
    let pb::RetryContract {
        retryable,
        safe,
        after_ms,
        max_after_ms,
        strategy,
        attempt,
        max_attempts,
        deadline,
        idempotency_key,
        side_effect_state,
        reconciliation_action,
    } = c;
    put_bool(1, *retryable, buf);
    put_bool(2, *safe, buf);
    put_uint(3, *after_ms, buf);
    put_uint(4, *max_after_ms, buf);
    put_enum(5, *strategy, buf);
    put_uint(6, u64::from(*attempt), buf);
    put_uint(7, u64::from(*max_attempts), buf);
    if let Some(t) = deadline {
        message::encode(8, t, buf);
    }
    // `optional string`: written when set, even empty.
    if let Some(k) = idempotency_key {
        put_len(key_byte(9), k.len(), buf);
        buf.put_slice(k.as_bytes());
    }
    put_enum(10, *side_effect_state, buf);
    if let Some(a) = reconciliation_action {
        put_len(key_byte(11), a.len(), buf);
        buf.put_slice(a.as_bytes());
    }
}

/// A `uint32` or `uint64` field.
#[inline]
fn put_uint(tag: u32, v: u64, buf: &mut impl BufMut) {
    if v == 0 {
    } else if v < 0x80 {
        buf.put_slice(&[(tag << 3) as u8, v as u8]);
    } else {
        buf.put_u8((tag << 3) as u8);
        encode_varint(v, buf);
    }
}

/// The one-byte key of a length-delimited field numbered below 16.
const fn key_byte(tag: u32) -> u8 {
    assert!(tag < 16);
    ((tag << 3) as u8) | WireType::LengthDelimited as u8
}

/// A length-delimited key and its length; the length is one byte below 128.
#[inline]
fn put_len(key: u8, len: usize, buf: &mut impl BufMut) {
    if len < 0x80 {
        buf.put_slice(&[key, len as u8]);
    } else {
        buf.put_u8(key);
        encode_varint(len as u64, buf);
    }
}

#[inline]
fn put_str(tag: u32, s: &str, buf: &mut impl BufMut) {
    if !s.is_empty() {
        put_len(key_byte(tag), s.len(), buf);
        buf.put_slice(s.as_bytes());
    }
}

/// An enum field (an `int32` on the wire: a negative number is ten bytes).
#[inline]
fn put_enum(tag: u32, v: i32, buf: &mut impl BufMut) {
    if (1..0x80).contains(&v) {
        buf.put_slice(&[(tag << 3) as u8, v as u8]);
    } else if v != 0 {
        int32::encode(tag, &v, buf);
    }
}

#[inline]
fn put_bool(tag: u32, b: bool, buf: &mut impl BufMut) {
    if b {
        buf.put_slice(&[(tag << 3) as u8, 1]);
    }
}

/// Decodes with prost (or the pool); errors are INVALID_ARGUMENT.
#[derive(Debug)]
pub struct InvalidArgumentDecoder<U>(std::marker::PhantomData<U>);

impl<U: Pooled> Decoder for InvalidArgumentDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode_pooled(buf).map(Some).map_err(|e| {
            let description = format!("the request is not a valid protobuf message: {e}");
            Status::with_error_details(
                tonic::Code::InvalidArgument,
                description.clone(),
                ErrorDetails::with_bad_request_violation("request", description),
            )
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Results of every shape: decisions of the engine (warnings, contracts
    /// with and without optional fields), junk numbers (negative enums are
    /// ten bytes on the wire), holds, budgets, errors, no outcome at all.
    fn shapes() -> Vec<pb::BatchResult> {
        use crate::grpc::convert::{decision_to_proto, failure_from_proto};
        let policy = crate::core::Policy::embedded().expect("embedded policy");
        let now = crate::core::UnixMillis(1_786_190_400_000);
        let failures = [
            pb::Failure {
                code: "QUERY_LIMIT_EXCEEDED".into(),
                operation: pb::OperationKind::Write as i32,
                idempotency_key: "order-1".into(),
                request_id: "r-1".into(),
                retry_after: "tomorrow".into(),
                ..Default::default()
            },
            pb::Failure {
                catalog: "asc".into(),
                code: "RESULT_STATE_UNKNOWN".into(),
                operation: pb::OperationKind::Write as i32,
                idempotency_key: "k".into(),
                idempotency_key_enforced: true,
                ..Default::default()
            },
            pb::Failure {
                code: "BITRIX_TIMEOUT".into(),
                method: "crm.deal.get".into(),
                deadline: Some(prost_types::Timestamp {
                    seconds: 1_786_190_500,
                    nanos: 0,
                }),
                ..Default::default()
            },
            pb::Failure::default(),
        ];
        let mut decisions: Vec<pb::Decision> = failures
            .iter()
            .map(|f| {
                decision_to_proto(&crate::core::decide(&policy, &failure_from_proto(f, "ru"), now).expect("decides"))
            })
            .collect();
        let mut junk = decisions[0].clone();
        junk.verdict = -1;
        junk.scope = i32::MIN;
        junk.hold = Some(pb::Hold {
            id: "h".into(),
            since: Some(prost_types::Timestamp { seconds: 1, nanos: 2 }),
            ..Default::default()
        });
        junk.budget = Some(pb::RetryBudget::default());
        junk.reason = "é".repeat(200);
        decisions.push(junk);
        let mut full = decisions[1].clone();
        full.required_transition = "draft -> sent".into();
        full.terminal_state = "FAILED_PERMANENT".into();
        full.known_code = true;
        full.operation_inferred = true;
        full.warnings = vec!["w".repeat(130), String::new(), "x".into()];
        full.reason = "r".repeat(127);
        full.rule = "q".repeat(128);
        full.verdict = 127;
        full.scope = 128;
        full.retry = Some(pb::RetryContract {
            retryable: true,
            safe: true,
            after_ms: u64::MAX,
            max_after_ms: 1,
            strategy: -5,
            attempt: 7,
            max_attempts: 9,
            deadline: Some(prost_types::Timestamp { seconds: -1, nanos: -1 }),
            idempotency_key: Some(String::new()),
            side_effect_state: 3,
            reconciliation_action: Some("a".repeat(300)),
        });
        full.hold = Some(pb::Hold::default());
        full.budget = Some(pb::RetryBudget::default());
        decisions.push(full);
        decisions.push(pb::Decision::default());
        let error = tonic_types::Status {
            code: 3,
            message: "failures[7].code: is 200 bytes".into(),
            details: vec![prost_types::Any {
                type_url: "t".into(),
                value: vec![1, 2, 3],
            }],
        };
        let mut shapes: Vec<pb::BatchResult> = decisions
            .into_iter()
            .map(|d| pb::BatchResult {
                index: 0,
                outcome: Some(pb::batch_result::Outcome::Decision(Box::new(d))),
            })
            .collect();
        shapes.push(pb::BatchResult {
            index: 0,
            outcome: Some(pb::batch_result::Outcome::Error(error)),
        });
        shapes.push(pb::BatchResult {
            index: 0,
            outcome: Some(pb::batch_result::Outcome::Error(tonic_types::Status::default())),
        });
        shapes.push(pb::BatchResult::default());
        shapes
    }

    proptest! {
        /// The batch encoder writes exactly prost's bytes, for any mix of
        /// results, indexes and summaries.
        #[test]
        fn batch_answers_encode_as_prost_does(
            picks in proptest::collection::vec((0usize..64, any::<u32>()), 0..40),
            summary in proptest::option::of((any::<u32>(), any::<u32>())),
        ) {
            let shapes = shapes();
            let resp = pb::ClassifyBatchResponse {
                results: picks
                    .iter()
                    .map(|(shape, index)| pb::BatchResult {
                        index: if shape % 2 == 0 { *index } else { index % 200 },
                        ..shapes[shape % shapes.len()].clone()
                    })
                    .collect(),
                summary: summary.map(|(a, e)| pb::BatchSummary {
                    retry_with_limit: a,
                    errors: e,
                    ..Default::default()
                }),
            };
            let mut ours = Vec::new();
            encode_batch_response(&resp, &mut ours);
            prop_assert_eq!(&ours, &resp.encode_to_vec());
            let mut pooled = Vec::new();
            encode_and_recycle(resp.clone(), &mut pooled);
            prop_assert_eq!(pooled, resp.encode_to_vec());
        }
    }
}
