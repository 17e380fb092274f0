//! One 1 000-item ClassifyBatch without the network: decode, decide every
//! item, encode (the body is in `support/batch.rs`, shared with
//! `batch_mimalloc`). Run: `cargo bench --bench batch`.

#[path = "support/batch.rs"]
mod batch;

criterion::criterion_main!(batch::benches);
