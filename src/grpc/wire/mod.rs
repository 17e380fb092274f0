//! The hand-written parts of the gRPC wire, kept where they pay for
//! themselves on the hot path (see `bench/RESULTS.md` and
//! `docs/performance.md`): ClassifyBatch requests read in place
//! ([`view`]), or, when they hold what only prost reads, decoded into
//! pooled storage ([`codec`], [`pool`]), ClassifyBatch answers written as
//! bytes straight from the core's decisions ([`answer`], [`encoded`]),
//! pooled Classify requests and answers ([`unary_pool`]), and the gRPC
//! header names every call reads or writes, made once ([`headers`]). They follow
//! prost's encoding byte for byte (proptests check it), so this folder is
//! the one place that depends on prost's version.

pub mod answer;
pub mod codec;
pub mod encoded;
pub mod headers;
pub mod pool;
pub mod unary_pool;
pub mod view;

/// What one pool keeps now.
#[derive(Debug, Default, Clone, Copy)]
pub struct Kept {
    /// Values kept for reuse.
    pub values: usize,
    /// Bytes they hold, their own size and their heap storage (strings,
    /// buffers) together.
    pub bytes: usize,
}

/// Every pool of this folder and what it keeps now, for the
/// `retryd_pooled_*` gauges. Each pool is bounded by its own constants;
/// this shows the bound holding.
pub fn pooled() -> Vec<(&'static str, Kept)> {
    let mut all = pool::kept().to_vec();
    all.extend(unary_pool::kept());
    all.push(view::kept());
    all
}
