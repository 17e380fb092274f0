//! The gRPC door: generated `retryd.v1` types, the proto ⇄ domain
//! mappings and the [`RetryDecisionService`](pb::retry_decision_service_server::RetryDecisionService)
//! implementation. Thin by design: every operation is the service's
//! ([`crate::service`]); this folder maps wire to domain and back.
//!
//! - [`service`]: the RPC methods; [`classify`] and [`batch`]: Classify and
//!   ClassifyBatch, answered as bytes by routes served ahead of the
//!   generated server ([`first`], [`server`]);
//!   [`convert`]: proto ⇄ domain;
//!   [`catalogs`]: ListCatalogs' messages; [`trace`]: span attributes;
//! - [`wire`]: the hand-written codec and pools of the hot path (the one
//!   place that depends on prost's encoding).

pub mod batch;
pub mod catalogs;
pub mod classify;
pub mod convert;
pub mod first;
pub mod service;
pub mod trace;
pub mod watch;
pub mod wire;

pub use service::RetryDecisionApi;

/// The gRPC service of `api` as the server mounts it: the generated server
/// with Classify and ClassifyBatch served ahead of it ([`first::BytesFirst`]); requests
/// over `max_decoding_message_size` bytes are refused.
pub fn server(
    api: RetryDecisionApi,
    max_decoding_message_size: usize,
) -> first::BytesFirst<pb::retry_decision_service_server::RetryDecisionServiceServer<RetryDecisionApi>> {
    let api = std::sync::Arc::new(api);
    let generated =
        pb::retry_decision_service_server::RetryDecisionServiceServer::from_arc(std::sync::Arc::clone(&api))
            .max_decoding_message_size(max_decoding_message_size);
    first::BytesFirst::new(generated, api, max_decoding_message_size)
}

/// Code generated from `proto/retryd/v1/retryd.proto` (messages, client, server).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/retryd.v1.rs"));
}

/// The encoded `FileDescriptorSet` of `retryd.proto` and its imports, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/retryd_descriptor.bin"));

/// The fully qualified name of the service, as health checks and reflection know it.
pub const SERVICE_NAME: &str = "retryd.v1.RetryDecisionService";
