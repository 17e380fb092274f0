//! One 1 000-item ClassifyBatch without the network: decode the request,
//! decide every item and write the answer's bytes
//! (`RetryDecisionApi::classify_batch_bytes`, the synchronous body of the
//! RPC), hand them over as the route does (as they are, the buffer given
//! back once dropped). Reported per batch and per item
//! (criterion's throughput is items). Run: `cargo bench --bench batch`.
//!
//! The items are the load generator's mix (`src/bin/retryd-load/workload.rs`).

use std::hint::black_box;
use std::sync::Arc;

use arc_swap::ArcSwap;
use criterion::{Criterion, Throughput, criterion_group};
use prost::Message as _;
use retryd::core::{Policy, UnixMillis};
use retryd::grpc::wire::codec::Pooled as _;
use retryd::grpc::wire::pool;
use retryd::grpc::{RetryDecisionApi, pb};
use retryd::service::{Caller, ServiceConfig};

#[allow(dead_code)]
#[path = "../../src/bin/retryd-load/workload.rs"]
mod workload;

const ITEMS: u32 = 1_000;

fn batch(c: &mut Criterion) {
    let policy = Policy::embedded().expect("embedded policy");
    let api = RetryDecisionApi::new(Arc::new(ArcSwap::from_pointee(policy)), ServiceConfig::default());
    let now = UnixMillis(1_786_190_400_000);
    let mut rng = workload::Rng::new(0x5EED);
    let wire = workload::batch_request(&mut rng, ITEMS, 0).encode_to_vec();

    // The response must be real decisions, not errors, or the bench measures the wrong path.
    let check = api
        .classify_batch_at(
            &pb::ClassifyBatchRequest::decode(wire.as_slice()).expect("decodes"),
            now,
        )
        .expect("batch decided");
    let summary = check.summary.expect("summary");
    assert_eq!(check.results.len(), ITEMS as usize);
    assert!(summary.errors < ITEMS / 10, "too many item errors: {summary:?}");
    eprintln!(
        "batch of {ITEMS}: request {} bytes, response {} bytes, {} item errors",
        wire.len(),
        check.encoded_len(),
        summary.errors
    );

    let mut group = c.benchmark_group("classify_batch");
    group.throughput(Throughput::Elements(u64::from(ITEMS)));
    let local = || Caller::Named("local");
    // What the server does with a call: the request read in place from
    // its bytes (the items' storage pooled), the handler writes the
    // answer's bytes into a pooled buffer, and the route sends the bytes as
    // they are; the buffer goes back once they are sent (here: dropped).
    group.bench_function("decode_decide_encode/1000", |b| {
        b.iter(|| {
            let resp = api
                .classify_batch_bytes(black_box(wire.as_slice()), now, local(), None)
                .expect("decided");
            let frame = resp.into_frame();
            black_box(frame.len())
        })
    });
    // The same with the request decoded into pooled `pb::Failure`s (the
    // route before the in-place reader, and still its way for a request
    // with an upstream contract).
    group.bench_function("decode_pooled_decide_encode/1000", |b| {
        b.iter(|| {
            let req = pb::ClassifyBatchRequest::decode_pooled(black_box(wire.as_slice())).expect("decodes");
            let resp = api.classify_batch_encoded(&req, now, local(), None).expect("decided");
            pool::recycle_request(req);
            let frame = resp.into_frame();
            black_box(frame.len())
        })
    });
    // The same without the pools (nothing is given back, so they stay empty):
    // every request string and every answer buffer allocated and freed.
    group.bench_function("decode_decide_encode_unpooled/1000", |b| {
        let mut out = Vec::with_capacity(check.encoded_len() * 2);
        b.iter(|| {
            let req = pb::ClassifyBatchRequest::decode(black_box(wire.as_slice())).expect("decodes");
            let resp = api.classify_batch_encoded(&req, now, local(), None).expect("decided");
            out.clear();
            out.extend_from_slice(resp.bytes());
            black_box(out.len())
        })
    });
    // Deciding and writing the answer's bytes, the buffer given back as the
    // codec gives it back once sent: what the server's handler costs per item.
    group.bench_function("decide_pooled/1000", |b| {
        let req = pb::ClassifyBatchRequest::decode(wire.as_slice()).expect("decodes");
        b.iter(|| {
            let resp = api
                .classify_batch_encoded(black_box(&req), now, local(), None)
                .expect("decided");
            let n = resp.bytes().len();
            resp.recycle();
            black_box(n)
        })
    });
    // The same, the buffer never given back (allocated and freed each time).
    group.bench_function("decide_only/1000", |b| {
        let req = pb::ClassifyBatchRequest::decode(wire.as_slice()).expect("decodes");
        b.iter(|| {
            black_box(
                api.classify_batch_encoded(black_box(&req), now, local(), None)
                    .expect("decided")
                    .bytes()
                    .len(),
            )
        })
    });
    // The floor no decision service can go under with these messages: prost
    // decoding the same request and encoding the same answer (built once,
    // before the timing), nothing decided. The batch targets are judged
    // against this machine's speed through it: decode_decide_encode divided
    // by this is the same on a fast host and a slow one.
    group.bench_function("prost_decode_encode_floor/1000", |b| {
        let mut out = Vec::with_capacity(check.encoded_len() * 2);
        b.iter(|| {
            let req = pb::ClassifyBatchRequest::decode(black_box(wire.as_slice())).expect("decodes");
            out.clear();
            black_box(&check).encode(&mut out).expect("room");
            black_box((req.failures.len(), out.len()))
        })
    });
    group.finish();
}

criterion_group!(benches, batch);
