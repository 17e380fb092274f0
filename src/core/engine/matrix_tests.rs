//! Every code × operation of every embedded catalog against the seeds'
//! matrices, written out by hand from the documents (not derived from the
//! TOML), plus the contract invariants over the same grid.

use super::*;
use crate::core::model::TargetReached::{self, No, Unknown as Unk, Yes};
use crate::core::model::Verdict::{
    DoNotRetry as Dnr, FixBeforeRetry as Fix, RetryWithLimit as Retry, StateVerificationRequired as Verify,
};
use crate::core::model::{Failure, Operation, SideEffectState as S};

pub(super) const NOW: UnixMillis = UnixMillis(1_786_190_400_000); // 2026-08-08T12:00:00Z

/// The embedded policy, compiled once for all tests.
pub(super) fn policy() -> &'static Policy {
    static POLICY: std::sync::OnceLock<Policy> = std::sync::OnceLock::new();
    POLICY.get_or_init(|| Policy::embedded().expect("embedded catalogs compile"))
}

type Row = (&'static str, TargetReached, Verdict, Verdict, S);

/// The Vibecode matrix: (code, reached, read, write verdict per the seed's classifier, write side effect).
const VIBECODE: &[Row] = &[
    ("QUEUE_OVERFLOW", No, Retry, Retry, S::None),
    ("QUEUE_TIMEOUT", No, Retry, Retry, S::None),
    ("RATE_LIMITED", Unk, Retry, Retry, S::None),
    ("OPERATION_TIME_LIMIT", Unk, Retry, Verify, S::Unknown),
    ("TIMEOUT_QUARANTINE", No, Retry, Retry, S::None),
    ("BITRIX_TIMEOUT", Yes, Retry, Verify, S::Possible),
    ("BITRIX_ERROR", Yes, Fix, Fix, S::Possible),
    ("BITRIX_UNAVAILABLE", Unk, Retry, Verify, S::Unknown),
    ("POOL_EXHAUSTED", Unk, Retry, Verify, S::Unknown),
    ("DB_TRANSIENT", Unk, Retry, Verify, S::Unknown),
    ("SERVICE_UNAVAILABLE", Unk, Retry, Verify, S::Unknown),
    ("TOKEN_REFRESH_FAILED", No, Fix, Fix, S::None),
    ("ERROR_LOOP_DETECTED", No, Fix, Fix, S::None),
    ("BH_APP_STARTING", Unk, Retry, Verify, S::Unknown),
    ("BH_APP_TIMEOUT", Unk, Retry, Verify, S::Unknown),
    ("LARGE_BODY_BACKEND_BUSY", No, Retry, Retry, S::None),
    ("NOT_A_VIBECODE_CODE", Unk, Retry, Verify, S::Unknown),
    ("", Unk, Retry, Verify, S::Unknown),
];

/// ASC 0.1: RESULT_STATE_UNKNOWN is never retried before reconciliation.
const ASC: &[Row] = &[
    ("RESULT_STATE_UNKNOWN", Unk, Verify, Verify, S::Unknown),
    ("ASC-6005", Unk, Verify, Verify, S::Unknown),
    ("TIMEOUT", Unk, Retry, Verify, S::Unknown),
    ("ASC-5004", Unk, Retry, Verify, S::Unknown),
    ("FAILED_PRECONDITION", Yes, Fix, Fix, S::None),
    ("HUMAN_APPROVAL_REQUIRED", Yes, Fix, Fix, S::None),
    ("AUTHENTICATION_REQUIRED", Yes, Fix, Fix, S::None),
    // Not retried merely because it is in the 5xxx class.
    ("ASC-5999", Unk, Retry, Verify, S::Unknown),
    ("", Unk, Retry, Verify, S::Unknown),
];

/// FrontSpin: three classes retry on the schedule for reads and writes alike.
const FRONTSPIN: &[Row] = &[
    ("RATE_LIMITED", Yes, Retry, Retry, S::None),
    ("FRONTSPIN_SERVER_ERROR", Yes, Retry, Retry, S::Possible),
    ("TIMEOUT", Unk, Retry, Retry, S::Possible),
    ("BAD_REQUEST", Yes, Fix, Fix, S::None),
    ("AUTHENTICATION_FAILED", Yes, Fix, Fix, S::None),
    ("FORBIDDEN", Yes, Fix, Fix, S::None),
    ("NOT_FOUND", Yes, Dnr, Dnr, S::None),
    ("NOT_SENT", No, Fix, Fix, S::None),
    ("SOMETHING_ELSE", Unk, Retry, Verify, S::Unknown),
];

/// gRPC status codes (AIP-194, code.proto) with unknown writes verified.
const GRPC: &[Row] = &[
    ("OK", Yes, Dnr, Dnr, S::None),
    ("CANCELLED", Unk, Dnr, Dnr, S::Unknown),
    ("UNKNOWN", Unk, Retry, Verify, S::Unknown),
    ("INVALID_ARGUMENT", Yes, Fix, Fix, S::None),
    ("DEADLINE_EXCEEDED", Unk, Retry, Verify, S::Unknown),
    ("NOT_FOUND", Yes, Fix, Fix, S::None),
    ("ALREADY_EXISTS", Yes, Fix, Fix, S::None),
    ("PERMISSION_DENIED", Yes, Fix, Fix, S::None),
    ("RESOURCE_EXHAUSTED", Yes, Retry, Retry, S::None),
    ("FAILED_PRECONDITION", Yes, Fix, Fix, S::None),
    ("ABORTED", Yes, Retry, Retry, S::None),
    ("OUT_OF_RANGE", Yes, Fix, Fix, S::None),
    ("UNIMPLEMENTED", Yes, Fix, Fix, S::None),
    ("INTERNAL", Unk, Retry, Verify, S::Unknown),
    ("UNAVAILABLE", Unk, Retry, Verify, S::Unknown),
    ("14", Unk, Retry, Verify, S::Unknown),
    ("4", Unk, Retry, Verify, S::Unknown),
    ("DATA_LOSS", Yes, Dnr, Dnr, S::Unknown),
    ("UNAUTHENTICATED", Yes, Fix, Fix, S::None),
    ("17", Unk, Retry, Verify, S::Unknown),
];

/// HTTP status codes after RFC 9110 (first attempt, no Retry-After).
const HTTP: &[Row] = &[
    ("408", No, Retry, Retry, S::None),
    ("425", No, Retry, Retry, S::None),
    ("429", No, Retry, Retry, S::None),
    ("500", Unk, Retry, Verify, S::Unknown),
    ("502", Unk, Retry, Verify, S::Unknown),
    ("503", Unk, Retry, Verify, S::Unknown),
    ("504", Unk, Retry, Verify, S::Unknown),
    ("409", Yes, Fix, Fix, S::None),
    ("400", Yes, Fix, Fix, S::None),
    ("401", Yes, Fix, Fix, S::None),
    ("403", Yes, Fix, Fix, S::None),
    ("404", Yes, Fix, Fix, S::None),
    ("405", Yes, Fix, Fix, S::None),
    ("406", Yes, Fix, Fix, S::None),
    ("410", Yes, Fix, Fix, S::None),
    ("411", Yes, Fix, Fix, S::None),
    ("412", Yes, Fix, Fix, S::None),
    ("413", Yes, Fix, Fix, S::None),
    ("414", Yes, Fix, Fix, S::None),
    ("415", Yes, Fix, Fix, S::None),
    ("416", Yes, Fix, Fix, S::None),
    ("417", Yes, Fix, Fix, S::None),
    ("421", No, Fix, Fix, S::None),
    ("422", Yes, Fix, Fix, S::None),
    ("426", Yes, Fix, Fix, S::None),
    ("428", Yes, Fix, Fix, S::None),
    ("431", Yes, Fix, Fix, S::None),
    ("451", Yes, Fix, Fix, S::None),
    ("501", Yes, Fix, Fix, S::None),
    ("599", Unk, Retry, Verify, S::Unknown),
];

fn check_catalog(catalog: &str, rows: &[Row]) {
    let p = policy();
    for &(code, reached, read, write, write_side) in rows {
        for (op, verdict, side) in [(Operation::Read, read, S::None), (Operation::Write, write, write_side)] {
            let f = Failure {
                catalog,
                code,
                operation: op,
                ..Failure::default()
            };
            let d = decide(p, &f, NOW).unwrap();
            let at = format!("{catalog}/{code}/{op:?}");
            assert_eq!(d.verdict, verdict, "{at}: verdict");
            assert_eq!(d.target_reached, reached, "{at}: target_reached");
            assert_eq!(d.retry.side_effect_state, side, "{at}: side_effect_state");
            assert_eq!(d.operation, op, "{at}");
            assert!(!d.operation_inferred, "{at}");
            assert_eq!(d.catalog, catalog, "{at}");
            assert!(d.rule.starts_with(&format!("{catalog}/")), "{at}: rule {}", d.rule);
            assert!(!d.reason.is_empty(), "{at}: reason");
            assert_contract_consistent(&d, &at);
        }
    }
}

/// Rule 3 of the engine issue, for one decision.
pub(super) fn assert_contract_consistent(d: &Decision<'_>, at: &str) {
    let r = &d.retry;
    match d.verdict {
        Verdict::RetryWithLimit => {
            assert!(
                r.retryable && r.safe,
                "{at}: retry_with_limit must be retryable and safe"
            );
            assert!(r.after_ms <= r.max_after_ms, "{at}: jitter window");
            assert_ne!(r.strategy, Strategy::None, "{at}: a retry has a strategy");
        }
        Verdict::StateVerificationRequired => {
            assert!(!r.safe, "{at}: verification means unsafe to replay");
            assert_eq!(r.reconciliation_action, Some("read_back_by_business_key"), "{at}");
        }
        Verdict::FixBeforeRetry => {
            assert!(!r.retryable, "{at}: not retryable until the transition");
            assert!(d.required_transition.is_some(), "{at}: names the transition");
        }
        Verdict::AlreadyApplied => {
            assert!(!r.retryable, "{at}");
            assert_eq!(r.side_effect_state, S::Confirmed, "{at}");
        }
        Verdict::DoNotRetry => assert!(!r.retryable, "{at}"),
    }
    if !r.retryable {
        assert_eq!(
            (r.after_ms, r.max_after_ms, r.strategy),
            (0, 0, Strategy::None),
            "{at}: no wait without retry"
        );
    }
    assert!(r.attempt >= 1 && r.max_attempts >= 1, "{at}");
}

#[test]
fn vibecode_matrix() {
    check_catalog("vibecode", VIBECODE);
}

#[test]
fn asc_matrix() {
    check_catalog("asc", ASC);
}

#[test]
fn frontspin_matrix() {
    check_catalog("frontspin", FRONTSPIN);
}

#[test]
fn grpc_matrix() {
    check_catalog("grpc", GRPC);
}

#[test]
fn http_matrix() {
    check_catalog("http", HTTP);
}

#[test]
fn every_catalog_code_is_in_the_tables() {
    let p = policy();
    for (name, rows) in [
        ("vibecode", VIBECODE),
        ("asc", ASC),
        ("frontspin", FRONTSPIN),
        ("grpc", GRPC),
        ("http", HTTP),
    ] {
        let catalog = p.catalog(name).unwrap();
        for entry in catalog.codes() {
            assert!(
                rows.iter().any(|r| r.0 == &*entry.code),
                "{name}/{} has no expected row",
                entry.code
            );
        }
    }
    assert_eq!(
        p.catalog("vibecode").unwrap().codes().len(),
        16,
        "the seed lists 16 codes"
    );
    assert_eq!(p.catalog("grpc").unwrap().codes().len(), 17, "code.proto has 17 codes");
}

#[test]
fn rule_ids_are_stable_and_name_code_and_operation() {
    let p = policy();
    let cases = [
        ("BITRIX_TIMEOUT", Operation::Write, "vibecode/BITRIX_TIMEOUT/write"),
        ("BITRIX_TIMEOUT", Operation::Read, "vibecode/BITRIX_TIMEOUT/read"),
        ("WHATEVER", Operation::Write, "vibecode/unknown/write"),
        ("", Operation::Read, "vibecode/no_envelope/read"),
    ];
    for (code, operation, rule) in cases {
        let d = decide(
            p,
            &Failure {
                code,
                operation,
                ..Failure::default()
            },
            NOW,
        )
        .unwrap();
        assert_eq!(d.rule, rule);
    }
}

#[test]
fn unknown_and_empty_codes_have_their_own_reasons() {
    let p = policy();
    let unknown = decide(
        p,
        &Failure {
            code: "X",
            operation: Operation::Write,
            ..Failure::default()
        },
        NOW,
    )
    .unwrap();
    let empty = decide(
        p,
        &Failure {
            code: "",
            operation: Operation::Write,
            ..Failure::default()
        },
        NOW,
    )
    .unwrap();
    assert!(!unknown.known_code && !empty.known_code);
    assert_eq!(unknown.code, "X");
    assert_ne!(unknown.reason, empty.reason);
    assert!(empty.reason.contains("envelope"), "{}", empty.reason);
}

#[test]
fn verdict_index_follows_verdict_all() {
    for (i, v) in Verdict::ALL.into_iter().enumerate() {
        assert_eq!(v.index(), i, "{v:?}");
    }
}
