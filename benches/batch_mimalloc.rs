//! `benches/batch.rs` with mimalloc as the global allocator: compare the
//! per-item times to see what the allocator buys.
//! Run: `cargo bench --bench batch --bench batch_mimalloc`.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/batch.rs"]
mod batch;

criterion::criterion_main!(batch::benches);
