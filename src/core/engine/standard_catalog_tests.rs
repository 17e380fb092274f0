//! The `grpc` and `http` catalogs' conditional rules: retried writes,
//! Retry-After, pushback, and operation inference without HTTP verbs.

use super::matrix_tests::{NOW, assert_contract_consistent, policy};
use super::*;
use crate::core::model::{Failure, Operation};

fn run(f: Failure<'_>) -> Decision<'_> {
    let d = decide(policy(), &f, NOW).unwrap();
    assert_contract_consistent(&d, &format!("{}/{}", f.catalog, f.code));
    d
}

fn grpc(code: &'static str, operation: Operation) -> Failure<'static> {
    Failure {
        catalog: "grpc",
        code,
        operation,
        ..Failure::default()
    }
}

fn http(code: &'static str, operation: Operation) -> Failure<'static> {
    Failure {
        catalog: "http",
        code,
        operation,
        ..Failure::default()
    }
}

#[test]
fn grpc_codes_resolve_by_name_or_number() {
    let d = run(grpc("14", Operation::Read));
    assert_eq!(
        (d.code, d.known_code, d.rule),
        ("UNAVAILABLE", true, "grpc/UNAVAILABLE/read")
    );
}

#[test]
fn grpc_already_exists_on_a_retried_create_asks_to_verify() {
    let first = run(grpc("ALREADY_EXISTS", Operation::Write));
    assert_eq!(first.verdict, Verdict::FixBeforeRetry);
    let retried = run(Failure {
        attempt: 2,
        ..grpc("ALREADY_EXISTS", Operation::Write)
    });
    assert_eq!(retried.verdict, Verdict::StateVerificationRequired);
    assert_eq!(retried.rule, "grpc/ALREADY_EXISTS/retried_write");
    assert_eq!(retried.retry.side_effect_state, SideEffectState::Possible);
    let read = run(Failure {
        attempt: 2,
        ..grpc("ALREADY_EXISTS", Operation::Read)
    });
    assert_eq!(read.verdict, Verdict::FixBeforeRetry);
}

#[test]
fn grpc_resource_exhausted_honours_pushback() {
    let d = run(Failure {
        retry_after_ms: Some(2_500),
        ..grpc("RESOURCE_EXHAUSTED", Operation::Write)
    });
    assert_eq!(
        (d.verdict, d.retry.strategy, d.retry.after_ms),
        (Verdict::RetryWithLimit, Strategy::RetryAfter, 2_500)
    );
}

#[test]
fn grpc_aborted_restarts_the_read_modify_write() {
    let d = run(grpc("ABORTED", Operation::Write));
    assert_eq!(d.retry.reconciliation_action, Some("restart_read_modify_write"));
}

#[test]
fn grpc_unavailable_and_deadline_retry_reads_and_verify_writes() {
    for code in ["UNAVAILABLE", "DEADLINE_EXCEEDED"] {
        assert_eq!(run(grpc(code, Operation::Read)).verdict, Verdict::RetryWithLimit);
        assert_eq!(
            run(grpc(code, Operation::Write)).verdict,
            Verdict::StateVerificationRequired
        );
    }
}

#[test]
fn grpc_method_names_infer_the_operation() {
    let d = run(Failure {
        method: "/shop.v1.Orders/GetOrder",
        ..grpc("UNAVAILABLE", Operation::Unspecified)
    });
    assert_eq!(d.operation, Operation::Read);
    let d = run(Failure {
        method: "/shop.v1.Orders/CreateOrder",
        ..grpc("UNAVAILABLE", Operation::Unspecified)
    });
    assert_eq!(d.operation, Operation::Write);
}

#[test]
fn http_503_with_retry_after_retries_a_write() {
    let without = run(http("503", Operation::Write));
    assert_eq!(without.verdict, Verdict::StateVerificationRequired);
    let with = run(Failure {
        retry_after: "120",
        ..http("503", Operation::Write)
    });
    assert_eq!((with.verdict, with.retry.after_ms), (Verdict::RetryWithLimit, 120_000));
    assert_eq!(with.rule, "http/503/write_with_retry_after");
    let date = run(Failure {
        retry_after: "Sat, 08 Aug 2026 12:00:30 GMT",
        ..http("503", Operation::Write)
    });
    assert_eq!((date.verdict, date.retry.after_ms), (Verdict::RetryWithLimit, 30_000));
}

#[test]
fn http_429_honours_retry_after() {
    let d = run(Failure {
        retry_after: "7",
        ..http("429", Operation::Write)
    });
    assert_eq!(
        (d.verdict, d.retry.strategy, d.retry.after_ms),
        (Verdict::RetryWithLimit, Strategy::RetryAfter, 7_000)
    );
}

#[test]
fn http_409_on_a_retried_write_asks_to_verify() {
    assert_eq!(run(http("409", Operation::Write)).verdict, Verdict::FixBeforeRetry);
    let d = run(Failure {
        attempt: 2,
        ..http("409", Operation::Write)
    });
    assert_eq!(d.verdict, Verdict::StateVerificationRequired);
    // and with a Retry-After too: the retried write's rule wins
    let d = run(Failure {
        attempt: 2,
        retry_after: "5",
        ..http("409", Operation::Write)
    });
    assert_eq!(d.verdict, Verdict::StateVerificationRequired);
}

#[test]
fn http_never_infers_from_the_verb() {
    for verb in ["GET", "get", "POST", "HEAD"] {
        let d = run(Failure {
            method: verb,
            ..http("500", Operation::Unspecified)
        });
        assert_eq!(d.operation, Operation::Write, "{verb}");
    }
    let d = run(Failure {
        method: "orders.list",
        ..http("500", Operation::Unspecified)
    });
    assert_eq!(d.operation, Operation::Read);
}
