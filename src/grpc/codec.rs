//! The protobuf codec of retryd's services: prost, as in tonic-prost's codec,
//! except that
//! - a request that does not decode is the caller's error (INVALID_ARGUMENT
//!   with a BadRequest naming the request), not INTERNAL as tonic-prost
//!   answers: bad bytes are input like any other; INTERNAL is kept for our own
//!   faults;
//! - ClassifyBatch requests are decoded into, and its responses given back
//!   to, the pools of [`super::pool`], Classify's those of
//!   [`super::unary_pool`] ([`Pooled`]).

use bytes::{Buf, BufMut};
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
        // Room for the whole message at once: tonic's buffer starts at 8 KiB,
        // and regrowing it under a 300 KB batch answer as prost writes copied
        // the answer several times over (callgrind: realloc 8% of a batch).
        if !T::SMALL {
            buf.reserve(item.encoded_len());
        }
        encode_and_recycle(item, buf);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// Encodes `item` into `buf` (which must grow as it is written, as tonic's
/// `EncodeBuf` does), then recycles it.
///
/// `encode_raw` rather than `encode`: `encode` computes the whole message's
/// length again only to check that the buffer has room, one more pass over
/// every nested message, which the encoder has already made to reserve that
/// room. `encode_raw` is a `#[doc(hidden)]` method of `prost::Message`;
/// prost is pinned to 0.14 in Cargo.toml.
pub fn encode_and_recycle<T: Pooled>(item: T, buf: &mut impl BufMut) {
    item.encode_raw(buf);
    item.recycle();
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
