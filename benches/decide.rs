//! One decision in the core: the cost retryd adds per failed call, before
//! any network or encoding. Run: `cargo bench --bench decide`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use retryd::core::{Failure, Operation, Policy, UnixMillis, decide};

fn one_decision(c: &mut Criterion) {
    let policy = Policy::embedded().expect("embedded policy");
    let now = UnixMillis(1_786_190_400_000);
    let write_timeout = Failure {
        catalog: "vibecode",
        code: "BITRIX_TIMEOUT",
        operation: Operation::Write,
        method: "crm.deal.add",
        attempt: 2,
        request_id: "req-1",
        ..Failure::default()
    };
    c.bench_function("decide/vibecode_write_timeout", |b| {
        b.iter(|| decide(black_box(&policy), black_box(&write_timeout), now).map(|d| d.verdict))
    });
    let inferred_retry_after = Failure {
        code: "QUEUE_OVERFLOW",
        method: "crm.deal.list",
        retry_after: "Sat, 08 Aug 2026 12:00:30 GMT",
        ..Failure::default()
    };
    c.bench_function("decide/inferred_read_http_date", |b| {
        b.iter(|| decide(black_box(&policy), black_box(&inferred_retry_after), now).map(|d| d.verdict))
    });
}

criterion_group!(benches, one_decision);
criterion_main!(benches);
