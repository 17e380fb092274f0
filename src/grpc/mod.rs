//! The gRPC door: generated `retryd.v1` types, the proto ⇄ domain
//! mappings and the [`RetryDecisionService`](pb::retry_decision_service_server::RetryDecisionService)
//! implementation. Thin by design: every operation is the service's
//! ([`crate::service`]); this folder maps wire to domain and back.
//!
//! - [`service`]: the RPC methods; [`convert`]: proto ⇄ domain;
//!   [`catalogs`]: ListCatalogs' messages; [`trace`]: span attributes;
//! - [`wire`]: the hand-written codec and pools of the hot path (the one
//!   place that depends on prost's encoding).

pub mod catalogs;
pub mod convert;
pub mod service;
pub mod trace;
pub mod watch;
pub mod wire;

pub use service::RetryDecisionApi;

/// Code generated from `proto/retryd/v1/retryd.proto` (messages, client, server).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/retryd.v1.rs"));
}

/// The encoded `FileDescriptorSet` of `retryd.proto` and its imports, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/retryd_descriptor.bin"));

/// The fully qualified name of the service, as health checks and reflection know it.
pub const SERVICE_NAME: &str = "retryd.v1.RetryDecisionService";
