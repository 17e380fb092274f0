//! The hand-written parts of the gRPC wire, kept where they pay for
//! themselves on the hot path (see `bench/RESULTS.md` and
//! `docs/performance.md`): a ClassifyBatch codec that decodes into and
//! encodes from pooled storage ([`codec`], [`pool`]) and pooled Classify
//! requests and answers ([`unary_pool`]). They follow prost's encoding
//! byte for byte (proptests check it), so this folder is the one place that
//! depends on prost's version.

pub mod codec;
pub mod pool;
pub mod unary_pool;
