//! The gRPC adapter: generated `retryd.v1` types, the proto ⇄ domain
//! conversions and the [`RetryDecisionService`](pb::retry_decision_service_server::RetryDecisionService)
//! implementation. Thin by design: every decision is the core's.

pub mod budgets;
pub mod catalogs;
pub mod codec;
pub mod convert;
pub mod holds;
pub mod json;
pub mod pool;
pub mod service;
pub mod unary_pool;

pub use holds::Operators;
pub use service::{PolicyHandle, RetryDecisionApi, ServiceConfig};

/// Code generated from `proto/retryd/v1/retryd.proto` (messages, client, server).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/retryd.v1.rs"));
}

/// The encoded `FileDescriptorSet` of `retryd.proto` and its imports, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/retryd_descriptor.bin"));

/// The fully qualified name of the service, as health checks and reflection know it.
pub const SERVICE_NAME: &str = "retryd.v1.RetryDecisionService";
