//! Invariants of the engine issue's rules 3–6 over arbitrary failures.

use proptest::option;
use proptest::prelude::{
    Just, ProptestConfig, Strategy as Gen, any, prop, prop_assert, prop_assert_eq, prop_oneof, proptest,
};

use super::matrix_tests::{NOW, assert_contract_consistent, policy};
use super::*;
use crate::core::model::{Failure, Operation};
use crate::core::warnings::Warning;

/// The seed's consumer algorithm (ASC 0.1 `should_retry`), verbatim in Rust.
fn should_retry(code: &str, d: &Decision<'_>, operation_is_idempotent: bool) -> bool {
    let attempts_remaining = d.retry.attempt < d.retry.max_attempts;
    if !attempts_remaining {
        return false;
    }
    if code == "RESULT_STATE_UNKNOWN" {
        return false;
    }
    d.retry.retryable && d.retry.safe && (operation_is_idempotent || d.retry.idempotency_key.is_some())
}

#[derive(Debug, Clone)]
struct Input {
    catalog: &'static str,
    code: String,
    operation: Operation,
    method: &'static str,
    attempt: u32,
    max_attempts: u32,
    retry_after: String,
    retry_after_ms: Option<u64>,
    deadline_offset: Option<i64>,
    key: &'static str,
    enforced: bool,
    read_back: ReadBack,
    cannot_verify: bool,
    upstream: Option<(bool, bool, u64, u32, SideEffectState)>,
}

fn codes() -> Vec<String> {
    let p = policy();
    let mut all: Vec<String> = p
        .catalogs()
        .iter()
        .flat_map(|c| c.codes().iter().map(|e| e.code.to_string()))
        .collect();
    all.extend([
        "ASC-6005".into(),
        "ASC-5004".into(),
        "14".into(),
        String::new(),
        "NOPE".into(),
    ]);
    all
}

fn input() -> impl Gen<Value = Input> {
    let side = prop_oneof![
        Just(SideEffectState::None),
        Just(SideEffectState::Possible),
        Just(SideEffectState::Unknown),
        Just(SideEffectState::Confirmed)
    ];
    let head = (
        prop::sample::select(vec!["", "vibecode", "asc", "frontspin", "grpc", "http"]),
        prop::sample::select(codes()),
        prop_oneof![
            Just(Operation::Unspecified),
            Just(Operation::Read),
            Just(Operation::Write)
        ],
        prop::sample::select(vec!["", "crm.deal.add", "crm.deal.get", "x.list", "a.b.weird"]),
        prop_oneof![0u32..8, Just(u32::MAX)],
        prop_oneof![0u32..8, Just(u32::MAX)],
        prop_oneof![
            Just(String::new()),
            (0u64..100_000).prop_map(|s| s.to_string()),
            "[ -~]{0,12}"
        ],
    );
    let tail = (
        option::of(0u64..10_000_000),
        option::of(-100_000i64..100_000_000),
        prop::sample::select(vec!["", "key-1"]),
        any::<bool>(),
        prop_oneof![
            Just(ReadBack::NotDone),
            Just(ReadBack::EffectPresent),
            Just(ReadBack::EffectAbsent),
            Just(ReadBack::Inconclusive)
        ],
        any::<bool>(),
        option::of((any::<bool>(), any::<bool>(), 0u64..200_000, 0u32..6, side)),
    );
    (head, tail).prop_map(
        |((catalog, code, operation, method, attempt, max_attempts, retry_after), t)| Input {
            catalog,
            code,
            operation,
            method,
            attempt,
            max_attempts,
            retry_after,
            retry_after_ms: t.0,
            deadline_offset: t.1,
            key: t.2,
            enforced: t.3,
            read_back: t.4,
            cannot_verify: t.5,
            upstream: t.6,
        },
    )
}

fn failure(i: &Input) -> Failure<'_> {
    Failure {
        catalog: i.catalog,
        code: &i.code,
        operation: i.operation,
        method: i.method,
        attempt: i.attempt,
        max_attempts: i.max_attempts,
        retry_after: &i.retry_after,
        retry_after_ms: i.retry_after_ms,
        deadline: i.deadline_offset.map(|o| UnixMillis(NOW.0 + o)),
        idempotency_key: i.key,
        idempotency_key_enforced: i.enforced,
        read_back: i.read_back,
        cannot_verify_effect: i.cannot_verify,
        request_id: "req",
        tenant: "",
        upstream: i.upstream.map(
            |(retryable, safe, after_ms, max_attempts, side_effect_state)| RetryContract {
                retryable,
                safe,
                after_ms,
                max_after_ms: after_ms,
                strategy: Strategy::RetryAfter,
                attempt: 1,
                max_attempts,
                deadline: None,
                idempotency_key: None,
                side_effect_state,
                reconciliation_action: None,
            },
        ),
        locale: "en",
        dependency: "",
        quota_resets_at: None,
        probe_token: "",
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// Rule 3: consistent contracts, and should_retry never retries a write
    /// whose outcome is unknown unless the dependency deduplicates by key.
    #[test]
    fn contracts_are_consistent_and_unknown_writes_are_never_blindly_retried(i in input()) {
        let p = policy();
        let f = failure(&i);
        let d = decide(p, &f, NOW).unwrap();
        assert_contract_consistent(&d, &format!("{i:?}"));
        if d.operation == Operation::Write
            && matches!(d.retry.side_effect_state, SideEffectState::Unknown | SideEffectState::Possible)
            && should_retry(d.code, &d, false)
        {
            prop_assert!(i.enforced && !i.key.is_empty(), "blind retry of an unknown write: {i:?} → {d:?}");
            prop_assert_eq!(d.retry.idempotency_key, Some(i.key));
        }
        if d.verdict == Verdict::RetryWithLimit && d.operation == Operation::Write {
            // a write is only retried when nothing happened, the catalog says a replay
            // cannot duplicate, a key deduplicates, or a read-back proved the effect absent
            let has_retry_after = crate::core::retry_after::parse_retry_after(&i.retry_after, NOW).is_some()
                || i.retry_after_ms.is_some();
            let rule = p
                .catalog(d.catalog)
                .unwrap()
                .lookup(d.code)
                .map(|e| e.rule(Operation::Write, d.retry.attempt, has_retry_after).verdict);
            prop_assert!(
                rule == Some(Verdict::RetryWithLimit)
                    || (i.enforced && !i.key.is_empty())
                    || i.read_back == ReadBack::EffectAbsent,
                "{i:?} → {d:?}"
            );
        }
    }

    /// Rule 4: where a Retry-After was given, a retry never comes sooner.
    #[test]
    fn retry_after_is_a_floor(i in input()) {
        let p = policy();
        let f = failure(&i);
        let d = decide(p, &f, NOW).unwrap();
        if d.retry.retryable {
            let ra = crate::core::retry_after::parse_retry_after(&i.retry_after, NOW);
            // A floor up to the catalog's one cap, which a longer delay
            // meets with a warning: the caller is never told more than it.
            let cap = p.catalog(d.catalog).unwrap().max_delay_ms;
            if let Some(ra) = ra.into_iter().chain(i.retry_after_ms).max() {
                prop_assert!(d.retry.after_ms >= ra.min(cap), "{i:?} → {d:?}");
                prop_assert!(ra <= cap || d.warnings.contains(Warning::DelayCapped), "{i:?} → {d:?}");
            }
            if let Some((_, _, up_after, _, _)) = i.upstream {
                prop_assert!(d.retry.after_ms >= up_after.min(cap));
            }
        }
    }

    /// Every delay is within the catalog's cap, and nothing above 2^63-1 reaches the wire.
    #[test]
    fn every_delay_is_capped(i in input()) {
        let p = policy();
        let f = failure(&i);
        let d = decide(p, &f, NOW).unwrap();
        let cap = p.catalog(d.catalog).unwrap().max_delay_ms;
        prop_assert!(d.retry.after_ms <= cap && d.retry.max_after_ms <= cap, "{i:?} → {d:?}");
        prop_assert!(d.retry.max_after_ms >= d.retry.after_ms);
        prop_assert!(i64::try_from(d.retry.max_after_ms).is_ok());
    }

    /// Rule 5: limits and deadlines bound every retry.
    #[test]
    fn limits_and_deadlines_bound_retries(i in input()) {
        let p = policy();
        let f = failure(&i);
        let d = decide(p, &f, NOW).unwrap();
        let catalog = p.catalog(d.catalog).unwrap();
        prop_assert!(d.retry.max_attempts <= catalog.max_attempts);
        if i.max_attempts != 0 {
            prop_assert!(d.retry.max_attempts <= i.max_attempts);
        }
        if d.retry.retryable {
            prop_assert!(d.retry.attempt < d.retry.max_attempts);
            if let Some(dl) = d.retry.deadline {
                prop_assert!(NOW.plus_ms(d.retry.after_ms) <= dl);
            }
        }
    }

    /// Rule 6: what the caller knows about a write decides it.
    #[test]
    fn write_knowledge_decides(i in input()) {
        let p = policy();
        let f = failure(&i);
        let d = decide(p, &f, NOW).unwrap();
        if d.operation == Operation::Write && i.read_back == ReadBack::EffectPresent {
            prop_assert_eq!(d.verdict, Verdict::AlreadyApplied);
        }
        if d.operation == Operation::Write && i.enforced && !i.key.is_empty() {
            prop_assert!(d.verdict != Verdict::StateVerificationRequired || d.code == "RESULT_STATE_UNKNOWN", "{d:?}");
        }
        if d.operation == Operation::Write
            && d.verdict == Verdict::DoNotRetry
            && d.retry.reconciliation_action == Some("manual_review")
        {
            // the engine sends a write to manual review only when it cannot be verified,
            // unless the catalog's own rule already says so (e.g. grpc DATA_LOSS)
            let catalog_says = p
                .catalog(d.catalog)
                .unwrap()
                .lookup(d.code)
                .is_some_and(|e| e.rule(Operation::Write, d.retry.attempt, true).reconciliation_action.as_deref() == Some("manual_review")
                    || e.rule(Operation::Write, d.retry.attempt, false).reconciliation_action.as_deref() == Some("manual_review"));
            prop_assert!(
                i.read_back == ReadBack::Inconclusive || i.cannot_verify || i.upstream.is_some() || catalog_says,
                "{i:?} -> {d:?}"
            );
        }
    }
}
