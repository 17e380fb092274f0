//! The answers of the routes answered as bytes ([`crate::grpc::first`]):
//! ClassifyBatch, Classify and Admit. Requests are decoded into the pools as by
//! [`super::codec`]; answers are bytes already ([`super::answer`]), sent as
//! they are (no copy into an encoder's buffer), and the buffer they were
//! written in goes back to its pool once sent.

use bytes::Bytes;
use tonic::Status;

use super::super::pb;
use super::answer::FRAME_HEADER;
use super::{pool, unary_pool};

/// The bytes of an answer to send: given back to their pool when the last
/// reference to them (the transport's) is dropped.
#[derive(Debug)]
struct Recycled {
    bytes: Vec<u8>,
    recycle: fn(Vec<u8>),
}

impl AsRef<[u8]> for Recycled {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Recycled {
    fn drop(&mut self) {
        (self.recycle)(std::mem::take(&mut self.bytes));
    }
}

fn recycled(bytes: Vec<u8>, recycle: fn(Vec<u8>)) -> Bytes {
    Bytes::from_owner(Recycled { bytes, recycle })
}

/// `framed` (room for the header, then the message) as one gRPC message:
/// not compressed (0), then the message's length, big-endian.
fn framed(mut framed: Vec<u8>, recycle: fn(Vec<u8>)) -> Bytes {
    if framed.len() < FRAME_HEADER {
        framed.resize(FRAME_HEADER, 0);
    }
    // An answer is bounded far below 4 GiB (`--max-batch` items);
    // saturating keeps a bug from wrapping: the client would then fail
    // to read the message rather than read a wrong one.
    let len = u32::try_from(framed.len() - FRAME_HEADER).unwrap_or(u32::MAX);
    framed[0] = 0;
    framed[1..FRAME_HEADER].copy_from_slice(&len.to_be_bytes());
    recycled(framed, recycle)
}

/// The message after the room for its header.
fn message(framed: &[u8]) -> &[u8] {
    framed.get(FRAME_HEADER..).unwrap_or_default()
}

/// The bytes of a `ClassifyBatchResponse`, as prost would encode it, after
/// room for the gRPC message header.
#[derive(Debug, Default)]
pub struct EncodedBatch(Vec<u8>);

impl EncodedBatch {
    /// `framed`: [`FRAME_HEADER`] bytes of room, then a whole encoded
    /// `ClassifyBatchResponse` (as [`super::answer::AnswerWriter`] writes).
    pub fn from_framed(framed: Vec<u8>) -> Self {
        EncodedBatch(framed)
    }

    /// The encoded answer.
    pub fn bytes(&self) -> &[u8] {
        message(&self.0)
    }

    /// The answer as one gRPC message (header and bytes), to send; the
    /// buffer goes back to the pool once sent.
    pub fn into_frame(self) -> Bytes {
        framed(self.0, pool::recycle_answer)
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

/// The bytes of a `ClassifyResponse`, after room for the gRPC message
/// header, in a buffer of [`unary_pool`].
#[derive(Debug, Default)]
pub struct EncodedClassify(Vec<u8>);

impl EncodedClassify {
    /// `framed`: [`FRAME_HEADER`] bytes of room, then a whole encoded
    /// `ClassifyResponse` (as [`super::answer::classify_answer`] writes).
    pub fn from_framed(framed: Vec<u8>) -> Self {
        EncodedClassify(framed)
    }

    /// The encoded answer.
    pub fn bytes(&self) -> &[u8] {
        message(&self.0)
    }

    /// The answer as the message, the buffer given back to the pool.
    pub fn into_message(self) -> Result<pb::ClassifyResponse, Status> {
        use prost::Message as _;
        let decoded = pb::ClassifyResponse::decode(self.bytes());
        unary_pool::recycle_answer(self.0);
        decoded.map_err(|e| Status::internal(format!("a Classify answer did not decode: {e}")))
    }
}

/// An `AdmitResponse` encoded by prost after room for the gRPC message
/// header, in a buffer of [`unary_pool`].
#[derive(Debug, Default)]
pub struct EncodedAdmit(Vec<u8>);

impl EncodedAdmit {
    /// `answer`'s bytes.
    pub fn encode(answer: &pb::AdmitResponse) -> Self {
        use prost::Message as _;
        let mut out = unary_pool::take_answer();
        out.clear();
        out.resize(FRAME_HEADER, 0);
        // `encode_raw`: `encode` would size the message again only to check
        // room in a buffer that grows (see `codec::Pooled::encode_pooled`).
        answer.encode_raw(&mut out);
        EncodedAdmit(out)
    }

    /// The encoded answer.
    pub fn bytes(&self) -> &[u8] {
        message(&self.0)
    }
}

impl Encoded for EncodedAdmit {
    fn into_frame(self) -> Bytes {
        framed(self.0, unary_pool::recycle_answer)
    }
}

/// An answer already written as bytes, sent as it is.
pub trait Encoded: Send + 'static {
    /// The answer as one gRPC message (header and bytes), to send; its
    /// buffer goes back to its pool once sent.
    fn into_frame(self) -> Bytes;
}

impl Encoded for EncodedBatch {
    fn into_frame(self) -> Bytes {
        EncodedBatch::into_frame(self)
    }
}

impl Encoded for EncodedClassify {
    fn into_frame(self) -> Bytes {
        framed(self.0, unary_pool::recycle_answer)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    static GIVEN_BACK: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

    fn keep(bytes: Vec<u8>) {
        GIVEN_BACK.lock().unwrap().push(bytes);
    }

    /// The bytes sent are the buffer itself, and the buffer goes back
    /// (capacity and all) when the last reference to them is dropped, not
    /// before.
    #[test]
    fn a_frame_gives_its_buffer_back_when_the_last_reference_goes() {
        let mut buffer = Vec::with_capacity(4096);
        buffer.extend_from_slice(b"answer");
        let at = buffer.as_ptr();
        let frame = recycled(buffer, keep);
        assert_eq!((frame.as_ref(), frame.as_ptr()), (&b"answer"[..], at), "not copied");
        let sent = frame.slice(1..);
        drop(frame);
        assert!(GIVEN_BACK.lock().unwrap().is_empty(), "a slice still refers to it");
        drop(sent);
        let back = GIVEN_BACK.lock().unwrap().pop().expect("given back");
        assert_eq!((back.as_ptr(), back.capacity()), (at, 4096));
    }

    /// The room before the message becomes its header; the message stays
    /// where it was written.
    #[test]
    fn the_header_is_written_in_the_room_left_for_it() {
        let mut written = vec![0; FRAME_HEADER];
        written.extend_from_slice(&[7; 300]);
        let answer = EncodedBatch::from_framed(written);
        assert_eq!(answer.bytes(), &[7; 300][..]);
        let frame = answer.into_frame();
        assert_eq!(frame[..FRAME_HEADER], [0, 0, 0, 1, 44]);
        assert_eq!(frame[FRAME_HEADER..], [7; 300]);
        let admit = pb::AdmitResponse {
            admitted: true,
            probe_token: "t".repeat(200),
            ..Default::default()
        };
        let encoded = EncodedAdmit::encode(&admit);
        assert_eq!(encoded.bytes(), prost::Message::encode_to_vec(&admit));
        let frame = encoded.into_frame();
        assert_eq!(frame[..FRAME_HEADER], [0, 0, 0, 0, 205]);
        let empty = EncodedClassify::default();
        assert!(empty.bytes().is_empty());
        assert_eq!(empty.into_frame()[..], [0; FRAME_HEADER], "an empty message");
    }
}
