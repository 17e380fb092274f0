//! The codec of the ClassifyBatch route ([`crate::grpc::batch`]): requests
//! decoded into the pool as by [`super::codec`], answers already bytes
//! ([`super::answer`]) copied into tonic's buffer and the buffer they were
//! written in given back to the pool.

use tonic::Status;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};

use super::super::pb;
use super::codec::{InvalidArgumentDecoder, Reserve};
use super::pool;

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

/// ClassifyBatch's codec: pooled request decoding, encoded answers.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchCodec;

impl Codec for BatchCodec {
    type Encode = EncodedBatch;
    type Decode = pb::ClassifyBatchRequest;
    type Encoder = BatchEncoder;
    type Decoder = InvalidArgumentDecoder<pb::ClassifyBatchRequest>;

    fn encoder(&mut self) -> Self::Encoder {
        BatchEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        InvalidArgumentDecoder::default()
    }
}

/// Copies an encoded answer into tonic's buffer.
#[derive(Debug)]
pub struct BatchEncoder;

impl Encoder for BatchEncoder {
    type Item = EncodedBatch;
    type Error = Status;

    fn encode(&mut self, item: EncodedBatch, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode_into(buf);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}
