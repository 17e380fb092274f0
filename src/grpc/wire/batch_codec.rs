//! The codec of the routes answered as bytes ([`crate::grpc::first`]):
//! ClassifyBatch and Classify. Requests are decoded into the pools as by
//! [`super::codec`]; answers are bytes already ([`super::answer`]), copied
//! into tonic's buffer, and the buffer they were written in goes back to its
//! pool.

use std::marker::PhantomData;

use tonic::Status;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};

use super::super::pb;
use super::codec::{InvalidArgumentDecoder, Pooled, Reserve};
use super::{pool, unary_pool};

/// The bytes of a `ClassifyBatchResponse`, as prost would encode it.
#[derive(Debug, Default)]
pub struct EncodedBatch(Vec<u8>);

impl EncodedBatch {
    /// Bytes that are a whole encoded `ClassifyBatchResponse`.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        EncodedBatch(bytes)
    }

    /// The encoded answer.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// Writes the answer into `buf` (room reserved first), then gives its
    /// buffer back to the pool.
    pub fn encode_into(self, buf: &mut impl Reserve) {
        buf.reserve_bytes(self.0.len());
        buf.put_slice(&self.0);
        pool::recycle_answer(self.0);
    }

    /// Gives the buffer back to the pool unsent.
    pub fn recycle(self) {
        pool::recycle_answer(self.0);
    }

    /// The answer as the message (the library API and the generated trait's
    /// method), the buffer given back to the pool.
    pub fn into_message(self) -> Result<pb::ClassifyBatchResponse, Status> {
        use prost::Message as _;
        let decoded = pb::ClassifyBatchResponse::decode(self.bytes());
        self.recycle();
        decoded.map_err(|e| Status::internal(format!("a batch answer did not decode: {e}")))
    }
}

/// The bytes of a `ClassifyResponse`, in a buffer of [`unary_pool`].
#[derive(Debug, Default)]
pub struct EncodedClassify(Vec<u8>);

impl EncodedClassify {
    /// Bytes that are a whole encoded `ClassifyResponse`.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        EncodedClassify(bytes)
    }

    /// The encoded answer.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The answer as the message, the buffer given back to the pool.
    pub fn into_message(self) -> Result<pb::ClassifyResponse, Status> {
        use prost::Message as _;
        let decoded = pb::ClassifyResponse::decode(self.bytes());
        unary_pool::recycle_answer(self.0);
        decoded.map_err(|e| Status::internal(format!("a Classify answer did not decode: {e}")))
    }
}

/// An answer already written as bytes: copied into tonic's buffer, its own
/// buffer given back to its pool.
pub trait Encoded: Send + 'static {
    /// Writes the answer into `buf` (room reserved first), then recycles it.
    fn encode_into(self, buf: &mut impl Reserve);
}

impl Encoded for EncodedBatch {
    fn encode_into(self, buf: &mut impl Reserve) {
        EncodedBatch::encode_into(self, buf);
    }
}

impl Encoded for EncodedClassify {
    fn encode_into(self, buf: &mut impl Reserve) {
        buf.reserve_bytes(self.0.len());
        buf.put_slice(&self.0);
        unary_pool::recycle_answer(self.0);
    }
}

/// The codec of a route answered as bytes ([`crate::grpc::first`]):
/// requests `U` decoded as by [`super::codec`] (into a pool where the type
/// has one), answers `T` already bytes.
#[derive(Debug)]
pub struct BytesCodec<T, U>(PhantomData<fn() -> (T, U)>);

impl<T, U> Default for BytesCodec<T, U> {
    fn default() -> Self {
        BytesCodec(PhantomData)
    }
}

/// ClassifyBatch's codec: pooled request decoding, encoded answers.
pub type BatchCodec = BytesCodec<EncodedBatch, pb::ClassifyBatchRequest>;

/// Classify's codec: the request's failure decoded into the unary pool,
/// encoded answers.
pub type ClassifyCodec = BytesCodec<EncodedClassify, pb::ClassifyRequest>;

impl<T: Encoded, U: Pooled + Send + 'static> Codec for BytesCodec<T, U> {
    type Encode = T;
    type Decode = U;
    type Encoder = BytesEncoder<T>;
    type Decoder = InvalidArgumentDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        BytesEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        InvalidArgumentDecoder::default()
    }
}

/// Copies an encoded answer into tonic's buffer.
#[derive(Debug)]
pub struct BytesEncoder<T>(PhantomData<fn() -> T>);

impl<T: Encoded> Encoder for BytesEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode_into(buf);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}
