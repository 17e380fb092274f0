//! A raw-bytes gRPC client for bad-input tests: the request is sent as the
//! given bytes (no prost encoding, so it may be anything) and the response
//! comes back as bytes.
#![allow(dead_code)]

use std::time::Duration;

use bytes::{Buf as _, BufMut as _, Bytes};
use http::uri::PathAndQuery;
use tonic::client::Grpc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Request, Status};

/// `Bytes` in, `Bytes` out.
#[derive(Debug, Default, Clone, Copy)]
pub struct BytesCodec;

/// Writes the bytes as they are.
#[derive(Debug, Default)]
pub struct BytesEncoder;

/// Reads the whole message as bytes.
#[derive(Debug, Default)]
pub struct BytesDecoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Codec for BytesCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = BytesEncoder;
    type Decoder = BytesDecoder;

    fn encoder(&mut self) -> BytesEncoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> BytesDecoder {
        BytesDecoder
    }
}

/// `/retryd.v1.RetryDecisionService/Classify`.
pub const CLASSIFY: &str = "/retryd.v1.RetryDecisionService/Classify";
/// `/retryd.v1.RetryDecisionService/ClassifyBatch`.
pub const CLASSIFY_BATCH: &str = "/retryd.v1.RetryDecisionService/ClassifyBatch";

/// Sends `body` as the request message of the unary method `path`, with a
/// client-side deadline of `timeout`; a timeout is a test failure, not a
/// status.
pub async fn unary(channel: Channel, path: &'static str, body: Bytes, timeout: Duration) -> Result<Bytes, Status> {
    let mut grpc = Grpc::new(channel);
    let call = async {
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(format!("not ready: {e}")))?;
        grpc.unary(Request::new(body), PathAndQuery::from_static(path), BytesCodec)
            .await
            .map(tonic::Response::into_inner)
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result,
        Err(_) => panic!("{path}: no answer within {timeout:?} (the server hangs)"),
    }
}
