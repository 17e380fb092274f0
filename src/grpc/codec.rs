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
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len, message, uint32};
use prost::{DecodeError, Message};
use tonic::Status;
use tonic::codec::{BufferSettings, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic_types::{ErrorDetails, StatusExt as _};

use super::{pb, pool, unary_pool};

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
impl Pooled for pb::AdmitRequest {}
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
/// Here every decision is measured once, the lengths kept for the writing
/// pass; each decision's fields are still prost's own `encode_raw`.
pub fn encode_batch_response(resp: &pb::ClassifyBatchResponse, buf: &mut impl Reserve) {
    let pb::ClassifyBatchResponse { results, summary } = resp;
    let mut lens = Vec::with_capacity(results.len());
    let mut total = summary.as_ref().map_or(0, |s| message::encoded_len(SUMMARY_TAG, s));
    for result in results {
        let outcome = outcome_len(result);
        let len = result_len(result, outcome);
        total += key_len(RESULTS_TAG) + encoded_len_varint(len as u64) + len;
        lens.push(outcome);
    }
    buf.reserve_bytes(total);
    for (result, &outcome) in results.iter().zip(&lens) {
        let pb::BatchResult { index, outcome: value } = result;
        encode_key(RESULTS_TAG, WireType::LengthDelimited, buf);
        encode_varint(result_len(result, outcome) as u64, buf);
        if *index != 0 {
            uint32::encode(INDEX_TAG, index, buf);
        }
        match value {
            Some(pb::batch_result::Outcome::Decision(d)) => {
                encode_key(DECISION_TAG, WireType::LengthDelimited, buf);
                encode_varint(outcome as u64, buf);
                d.encode_raw(buf);
            }
            Some(pb::batch_result::Outcome::Error(e)) => {
                encode_key(ERROR_TAG, WireType::LengthDelimited, buf);
                encode_varint(outcome as u64, buf);
                e.encode_raw(buf);
            }
            None => {}
        }
    }
    if let Some(s) = summary {
        message::encode(SUMMARY_TAG, s, buf);
    }
}

/// The length of a result's decision or error message (0 for none).
fn outcome_len(result: &pb::BatchResult) -> usize {
    match &result.outcome {
        Some(pb::batch_result::Outcome::Decision(d)) => d.encoded_len(),
        Some(pb::batch_result::Outcome::Error(e)) => e.encoded_len(),
        None => 0,
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
            .map(|f| decision_to_proto(&crate::core::decide(&policy, &failure_from_proto(f, "ru"), now).expect("decides")))
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
                outcome: Some(pb::batch_result::Outcome::Decision(d)),
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
