//! The protobuf codec of retryd's services: prost, as in tonic-prost's codec,
//! except that
//! - a request that does not decode is the caller's error (INVALID_ARGUMENT
//!   with a BadRequest naming the request), not INTERNAL as tonic-prost
//!   answers: bad bytes are input like any other; INTERNAL is kept for our own
//!   faults;
//! - ClassifyBatch requests are decoded into the pool of [`super::pool`],
//!   Classify's requests and answers those of [`super::unary_pool`]
//!   ([`Pooled`]). ClassifyBatch answers are bytes already
//!   ([`super::encoded`]).

use bytes::{Buf, BufMut};
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

/// Only a client's, or the generated server's route that
/// [`crate::grpc::first`] serves ahead of it.
impl Pooled for pb::ClassifyResponse {
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
impl Pooled for pb::AdmitResponse {
    // At most one hold: under 1 KiB.
    const SMALL: bool = true;
}
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

/// Only a client's, or the generated server's route that
/// [`crate::grpc::batch`] serves ahead of it: prost's decode and encode.
impl Pooled for pb::ClassifyBatchResponse {}

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

/// The length in the 5-byte prefix of a gRPC message (compressed flag,
/// length big-endian) at the start of `framed`, if the prefix is whole.
pub fn message_len(framed: &[u8]) -> Option<usize> {
    let prefix = framed.get(1..5)?;
    let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    usize::try_from(len).ok()
}

/// A unary call whose request carries a second message: UNIMPLEMENTED, as
/// the gRPC status-code table says for a cardinality violation.
pub fn second_message() -> Status {
    Status::unimplemented("a unary call carries more than one request message (cardinality violation)")
}

/// A request that is not a valid protobuf message: INVALID_ARGUMENT, with
/// a BadRequest naming the request.
pub fn invalid_message(e: prost::DecodeError) -> Status {
    let description = format!("the request is not a valid protobuf message: {e}");
    Status::with_error_details(
        tonic::Code::InvalidArgument,
        description.clone(),
        ErrorDetails::with_bad_request_violation("request", description),
    )
}

/// Decodes with prost (or the pool); errors are INVALID_ARGUMENT.
#[derive(Debug)]
pub struct InvalidArgumentDecoder<U>(std::marker::PhantomData<U>);

impl<U> Default for InvalidArgumentDecoder<U> {
    fn default() -> Self {
        InvalidArgumentDecoder(std::marker::PhantomData)
    }
}

impl<U: Pooled> Decoder for InvalidArgumentDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode_pooled(buf).map(Some).map_err(invalid_message)
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}
