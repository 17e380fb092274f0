//! The core decides without touching the heap: a counting allocator (the
//! `allocation-counter` dev-dependency, per thread) sees zero allocations
//! across a spread of decisions, including warnings, upstream advice,
//! Retry-After dates, read-backs and limits.

use super::matrix_tests::{NOW, policy};
use super::*;
use crate::core::model::{Failure, Operation};

#[test]
fn deciding_allocates_nothing() {
    let p = policy();
    let up = RetryContract {
        retryable: true,
        safe: false,
        after_ms: 10,
        max_after_ms: 10,
        strategy: Strategy::RetryAfter,
        attempt: 1,
        max_attempts: 3,
        deadline: Some(NOW.plus_ms(1_000_000)),
        idempotency_key: None,
        side_effect_state: SideEffectState::Possible,
        reconciliation_action: None,
    };
    let failures = [
        Failure {
            code: "BITRIX_TIMEOUT",
            operation: Operation::Write,
            ..Failure::default()
        },
        Failure {
            code: "QUEUE_OVERFLOW",
            method: "crm.deal.add",
            retry_after: "12",
            ..Failure::default()
        },
        Failure {
            code: "RATE_LIMITED",
            retry_after: "Sat, 08 Aug 2026 12:02:00 GMT",
            locale: "ru",
            ..Failure::default()
        },
        Failure {
            code: "NOPE",
            retry_after: "garbage",
            attempt: 9,
            max_attempts: 3,
            ..Failure::default()
        },
        Failure {
            code: "",
            idempotency_key: "k",
            idempotency_key_enforced: true,
            ..Failure::default()
        },
        Failure {
            catalog: "asc",
            code: "ASC-6005",
            upstream: Some(up),
            ..Failure::default()
        },
        Failure {
            catalog: "frontspin",
            code: "TIMEOUT",
            attempt: 5,
            tenant: "t",
            ..Failure::default()
        },
        Failure {
            code: "DB_TRANSIENT",
            read_back: ReadBack::Inconclusive,
            deadline: Some(NOW),
            ..Failure::default()
        },
    ];
    let mut verdicts = 0usize;
    let info = allocation_counter::measure(|| {
        for f in &failures {
            let d = decide(p, f, NOW).unwrap();
            verdicts += d.verdict as usize + d.retry.after_ms as usize % 7;
            let _ = crate::core::limits::check(f);
        }
    });
    assert!(verdicts > 0);
    assert_eq!(info.count_total, 0, "the core allocated {} times", info.count_total);
}
