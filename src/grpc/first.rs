//! The routes answered as bytes, served ahead of the generated server.
//!
//! A generated method can only answer its response message, which tonic then
//! encodes with prost; Classify and ClassifyBatch write their answers as
//! bytes straight from the core's decisions ([`super::wire::answer`]), so
//! [`BytesFirst`] serves those two paths itself, with a codec whose answers
//! are bytes ([`BytesCodec`]), and hands every other path to the generated
//! server. The generated methods stay, for a server built without this
//! layer and for the library: they decode the same bytes into the message.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::codegen::{Body, BoxFuture, StdError};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

use super::pb;
use super::service::RetryDecisionApi;
use super::wire::batch_codec::{BatchCodec, BytesCodec, ClassifyCodec, EncodedBatch, EncodedClassify};

/// The path of ClassifyBatch, which [`BytesFirst`] serves.
pub const CLASSIFY_BATCH_PATH: &str = "/retryd.v1.RetryDecisionService/ClassifyBatch";

/// The path of Classify, which [`BytesFirst`] serves.
pub const CLASSIFY_PATH: &str = "/retryd.v1.RetryDecisionService/Classify";

/// The generated server `S`, with Classify and ClassifyBatch served ahead of
/// it by [`RetryDecisionApi::classify_call`] and
/// [`RetryDecisionApi::classify_batch_call`]: the same request decoding and
/// size limit, answers that are bytes.
#[derive(Debug, Clone)]
pub struct BytesFirst<S> {
    inner: S,
    api: Arc<RetryDecisionApi>,
    max_decoding_message_size: usize,
}

impl<S> BytesFirst<S> {
    /// `inner` with `api` answering Classify and ClassifyBatch; requests
    /// over `max_decoding_message_size` bytes are refused as the generated
    /// server refuses them.
    pub fn new(inner: S, api: Arc<RetryDecisionApi>, max_decoding_message_size: usize) -> Self {
        BytesFirst {
            inner,
            api,
            max_decoding_message_size,
        }
    }
}

impl<S: NamedService> NamedService for BytesFirst<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> tower::Service<http::Request<B>> for BytesFirst<S>
where
    S: tower::Service<
            http::Request<B>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
            Future = BoxFuture<http::Response<tonic::body::Body>, Infallible>,
        >,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let limit = self.max_decoding_message_size;
        match req.uri().path() {
            CLASSIFY_PATH => unary(
                ClassifyCodec::default(),
                ClassifyMethod(Arc::clone(&self.api)),
                limit,
                req,
            ),
            CLASSIFY_BATCH_PATH => unary(
                BatchCodec::default(),
                ClassifyBatchMethod(Arc::clone(&self.api)),
                limit,
                req,
            ),
            _ => self.inner.call(req),
        }
    }
}

/// Serves `req` as the unary method `method` with `codec`, as the generated
/// server does (the decoding limit applied, no compression).
fn unary<T, U, M, B>(
    codec: BytesCodec<T, U>,
    method: M,
    limit: usize,
    req: http::Request<B>,
) -> BoxFuture<http::Response<tonic::body::Body>, Infallible>
where
    BytesCodec<T, U>: tonic::codec::Codec<Encode = T, Decode = U> + Send + 'static,
    T: Send + 'static,
    U: Send + 'static,
    M: UnaryService<U, Response = T> + Send + 'static,
    M::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    Box::pin(async move {
        let mut grpc = Grpc::new(codec).apply_max_message_size_config(Some(limit), None);
        Ok(grpc.unary(method, req).await)
    })
}

/// Classify as tonic's unary service.
struct ClassifyMethod(Arc<RetryDecisionApi>);

impl UnaryService<pb::ClassifyRequest> for ClassifyMethod {
    type Response = EncodedClassify;
    type Future = BoxFuture<Response<EncodedClassify>, Status>;

    fn call(&mut self, request: Request<pb::ClassifyRequest>) -> Self::Future {
        let api = Arc::clone(&self.0);
        Box::pin(async move { api.classify_call(request).await })
    }
}

/// ClassifyBatch as tonic's unary service.
struct ClassifyBatchMethod(Arc<RetryDecisionApi>);

impl UnaryService<pb::ClassifyBatchRequest> for ClassifyBatchMethod {
    type Response = EncodedBatch;
    type Future = BoxFuture<Response<EncodedBatch>, Status>;

    fn call(&mut self, request: Request<pb::ClassifyBatchRequest>) -> Self::Future {
        let api = Arc::clone(&self.0);
        Box::pin(async move { api.classify_batch_call(request).await })
    }
}
