//! The engine's rules beyond the matrix: delays, limits, deadlines,
//! idempotency keys, read-back, inference, upstream advice, schedules.

use super::matrix_tests::{NOW, assert_contract_consistent, policy};
use super::*;
use crate::core::model::{Failure, Operation, Scope};

fn write(code: &'static str) -> Failure<'static> {
    Failure {
        code,
        operation: Operation::Write,
        ..Failure::default()
    }
}

fn read(code: &'static str) -> Failure<'static> {
    Failure {
        code,
        operation: Operation::Read,
        ..Failure::default()
    }
}

fn run<'a>(p: &'a Policy, f: Failure<'a>) -> Decision<'a> {
    let d = decide(p, &f, NOW).unwrap();
    assert_contract_consistent(&d, &format!("{}/{}", f.catalog, f.code));
    d
}

#[test]
fn retry_after_seconds_is_a_floor_with_jitter_above_it() {
    let p = policy();
    let d = run(
        p,
        Failure {
            retry_after: "30",
            ..write("QUEUE_OVERFLOW")
        },
    );
    assert_eq!(d.retry.strategy, Strategy::RetryAfter);
    assert_eq!(d.retry.after_ms, 30_000);
    assert!(d.retry.max_after_ms > d.retry.after_ms);
}

#[test]
fn strict_codes_never_wait_less_than_retry_after() {
    let p = policy();
    for code in ["TIMEOUT_QUARANTINE", "OPERATION_TIME_LIMIT"] {
        for ra in ["0", "1", "7", "3600"] {
            let d = run(
                p,
                Failure {
                    retry_after: ra,
                    ..read(code)
                },
            );
            let ra_ms = ra.parse::<u64>().unwrap() * 1000;
            assert!(d.retry.after_ms >= ra_ms, "{code} {ra}");
        }
    }
}

#[test]
fn retry_after_as_http_date_is_measured_against_now() {
    let p = policy();
    let d = run(
        p,
        Failure {
            retry_after: "Sat, 08 Aug 2026 12:02:00 GMT",
            ..read("QUEUE_TIMEOUT")
        },
    );
    assert_eq!(d.retry.after_ms, 120_000);
}

#[test]
fn pre_parsed_and_raw_retry_after_take_the_larger() {
    let p = policy();
    let d = run(
        p,
        Failure {
            retry_after: "5",
            retry_after_ms: Some(9_000),
            ..read("RATE_LIMITED")
        },
    );
    assert_eq!(d.retry.after_ms, 9_000);
}

#[test]
fn unparseable_retry_after_is_ignored_with_a_warning() {
    let p = policy();
    let d = run(
        p,
        Failure {
            retry_after: "tomorrow",
            ..read("QUEUE_OVERFLOW")
        },
    );
    assert!(d.warnings.contains(Warning::RetryAfterUnparseable));
    assert_eq!(d.retry.strategy, Strategy::ExponentialBackoff);
    assert_eq!((d.retry.after_ms, d.retry.max_after_ms), (500, 1000));
}

#[test]
fn backoff_grows_with_the_attempt_and_is_capped() {
    let p = policy();
    let at = |attempt| {
        run(
            p,
            Failure {
                attempt,
                max_attempts: 100,
                ..read("BITRIX_UNAVAILABLE")
            },
        )
        .retry
    };
    assert_eq!((at(1).after_ms, at(1).max_after_ms), (500, 1000));
    assert_eq!((at(3).after_ms, at(3).max_after_ms), (2000, 4000));
    // the caller's 100 is capped by the catalog's 5
    assert_eq!(at(3).max_attempts, 5);
}

#[test]
fn bh_app_timeout_write_is_not_made_safe_by_waiting() {
    let p = policy();
    let d = run(
        p,
        Failure {
            retry_after: "600",
            ..write("BH_APP_TIMEOUT")
        },
    );
    assert_eq!(d.verdict, Verdict::StateVerificationRequired);
    assert!(!d.retry.safe);
}

#[test]
fn effective_max_attempts_is_the_smaller_and_the_limit_escalates() {
    let p = policy();
    let d = run(
        p,
        Failure {
            max_attempts: 3,
            attempt: 2,
            ..read("QUEUE_OVERFLOW")
        },
    );
    assert_eq!((d.verdict, d.retry.max_attempts), (Verdict::RetryWithLimit, 3));
    let d = run(
        p,
        Failure {
            max_attempts: 3,
            attempt: 3,
            request_id: "req-1",
            ..read("QUEUE_OVERFLOW")
        },
    );
    assert_eq!(d.verdict, Verdict::DoNotRetry);
    assert_eq!(d.retry.reconciliation_action, Some("escalate_with_request_id"));
    assert!(d.reason.contains("X-Request-Id"), "{}", d.reason);
    assert_eq!(d.request_id, "req-1");
    let d = run(
        p,
        Failure {
            max_attempts: 9,
            ..read("QUEUE_OVERFLOW")
        },
    );
    assert!(d.warnings.contains(Warning::MaxAttemptsCapped));
    assert_eq!(d.retry.max_attempts, 5);
}

#[test]
fn attempt_zero_means_one() {
    let p = policy();
    let d = run(
        p,
        Failure {
            attempt: 0,
            ..read("QUEUE_OVERFLOW")
        },
    );
    assert_eq!(d.retry.attempt, 1);
    assert!(d.warnings.contains(Warning::AttemptZeroReadAsOne));
}

#[test]
fn a_deadline_the_delay_would_overrun_stops_retries() {
    let p = policy();
    let soon = Some(NOW.plus_ms(10_000));
    let d = run(
        p,
        Failure {
            retry_after: "30",
            deadline: soon,
            ..read("QUEUE_OVERFLOW")
        },
    );
    assert_eq!(d.verdict, Verdict::DoNotRetry);
    assert_eq!(d.retry.deadline, soon);
    let d = run(
        p,
        Failure {
            retry_after: "5",
            deadline: soon,
            ..read("QUEUE_OVERFLOW")
        },
    );
    assert_eq!(d.verdict, Verdict::RetryWithLimit);
    let past = Some(UnixMillis(NOW.0 - 1));
    let d = run(
        p,
        Failure {
            deadline: past,
            ..read("QUEUE_OVERFLOW")
        },
    );
    assert_eq!(d.verdict, Verdict::DoNotRetry);
    // an unknown write stopped by its deadline still needs reconciling
    let d = run(
        p,
        Failure {
            deadline: past,
            ..write("BITRIX_TIMEOUT")
        },
    );
    assert_eq!(d.retry.reconciliation_action, Some("read_back_by_business_key"));
}

#[test]
fn enforced_idempotency_key_makes_verification_a_safe_resend() {
    let p = policy();
    let f = Failure {
        idempotency_key: "deal-42",
        idempotency_key_enforced: true,
        ..write("BITRIX_TIMEOUT")
    };
    let d = run(p, f);
    assert_eq!(d.verdict, Verdict::RetryWithLimit);
    assert_eq!(d.retry.idempotency_key, Some("deal-42"));
    assert_eq!(d.retry.reconciliation_action, Some("resend_with_same_idempotency_key"));
    // a key the dependency does not enforce changes nothing and is not echoed
    let d = run(
        p,
        Failure {
            idempotency_key: "deal-42",
            ..write("BITRIX_TIMEOUT")
        },
    );
    assert_eq!(d.verdict, Verdict::StateVerificationRequired);
    assert_eq!(d.retry.idempotency_key, None);
    assert!(d.warnings.contains(Warning::IdempotencyKeyNotEnforced));
}

#[test]
fn request_id_is_never_an_idempotency_key() {
    let p = policy();
    let d = run(
        p,
        Failure {
            request_id: "req-9",
            ..write("BITRIX_TIMEOUT")
        },
    );
    assert_eq!(d.verdict, Verdict::StateVerificationRequired);
    assert_eq!(d.retry.idempotency_key, None);
}

#[test]
fn read_back_settles_a_write() {
    let p = policy();
    let d = run(
        p,
        Failure {
            read_back: ReadBack::EffectPresent,
            ..write("BITRIX_TIMEOUT")
        },
    );
    assert_eq!(d.verdict, Verdict::AlreadyApplied);
    let d = run(
        p,
        Failure {
            read_back: ReadBack::EffectAbsent,
            ..write("BITRIX_TIMEOUT")
        },
    );
    assert_eq!(
        (d.verdict, d.retry.side_effect_state),
        (Verdict::RetryWithLimit, SideEffectState::None)
    );
    let d = run(
        p,
        Failure {
            read_back: ReadBack::Inconclusive,
            ..write("BITRIX_TIMEOUT")
        },
    );
    assert_eq!(d.verdict, Verdict::DoNotRetry);
    assert_eq!(d.retry.reconciliation_action, Some("manual_review"));
    let d = run(
        p,
        Failure {
            cannot_verify_effect: true,
            ..write("DB_TRANSIENT")
        },
    );
    assert_eq!(d.verdict, Verdict::DoNotRetry);
    assert_eq!(d.retry.reconciliation_action, Some("manual_review"));
    // absent does not lift a fix-first verdict: the cause is still there
    let d = run(
        p,
        Failure {
            read_back: ReadBack::EffectAbsent,
            ..write("TOKEN_REFRESH_FAILED")
        },
    );
    assert_eq!(d.verdict, Verdict::FixBeforeRetry);
    let d = run(
        p,
        Failure {
            read_back: ReadBack::EffectPresent,
            ..read("BITRIX_TIMEOUT")
        },
    );
    assert_eq!(d.verdict, Verdict::RetryWithLimit);
    assert!(d.warnings.contains(Warning::ReadBackIgnoredForRead));
}

#[test]
fn operation_is_inferred_from_the_method_meaning() {
    let p = policy();
    let cases = [
        ("crm.deal.add", Operation::Write),
        ("crm.deal.update", Operation::Write),
        ("im.message.send", Operation::Write),
        ("crm.deal.get", Operation::Read),
        ("crm.deal.list", Operation::Read),
        ("crm.address.weird", Operation::Write),
        ("", Operation::Write),
        // The last segment after any of `.`, `/`, `:`; non-ASCII before it.
        ("orders:list", Operation::Read),
        ("/orders/get", Operation::Read),
        ("crm.get.", Operation::Write),
        ("сделка.get", Operation::Read),
        ("get", Operation::Read),
        ("crm.get:сделка", Operation::Write),
    ];
    for (method, op) in cases {
        let d = run(
            p,
            Failure {
                code: "BITRIX_TIMEOUT",
                method,
                ..Failure::default()
            },
        );
        assert_eq!((d.operation, d.operation_inferred), (op, true), "{method}");
    }
    // an explicit operation wins over the method
    let d = run(
        p,
        Failure {
            method: "crm.deal.add",
            ..read("BITRIX_TIMEOUT")
        },
    );
    assert_eq!((d.operation, d.operation_inferred), (Operation::Read, false));
}

#[test]
fn result_state_unknown_is_not_resent_on_a_key_alone() {
    let p = policy();
    let f = Failure {
        catalog: "asc",
        idempotency_key: "k",
        idempotency_key_enforced: true,
        ..write("ASC-6005")
    };
    let d = run(p, f);
    assert_eq!(d.code, "RESULT_STATE_UNKNOWN");
    assert_eq!(d.verdict, Verdict::StateVerificationRequired);
    let d = run(
        p,
        Failure {
            read_back: ReadBack::EffectAbsent,
            ..f
        },
    );
    assert_eq!(d.verdict, Verdict::RetryWithLimit);
}

#[test]
fn asc_preconditions_name_their_transition() {
    let p = policy();
    for (code, t) in [
        ("FAILED_PRECONDITION", "precondition_satisfied"),
        ("HUMAN_APPROVAL_REQUIRED", "human_approval_granted"),
        ("AUTHENTICATION_REQUIRED", "authentication_completed"),
    ] {
        let d = run(
            p,
            Failure {
                catalog: "asc",
                ..write(code)
            },
        );
        assert_eq!((d.verdict, d.required_transition), (Verdict::FixBeforeRetry, Some(t)));
    }
}

fn upstream(retryable: bool, safe: bool) -> RetryContract<'static> {
    RetryContract {
        retryable,
        safe,
        after_ms: 0,
        max_after_ms: 0,
        strategy: Strategy::None,
        attempt: 1,
        max_attempts: 0,
        deadline: None,
        idempotency_key: None,
        side_effect_state: SideEffectState::None,
        reconciliation_action: None,
    }
}

#[test]
fn upstream_advice_only_makes_a_decision_safer() {
    let p = policy();
    let f = Failure {
        catalog: "asc",
        ..read("TIMEOUT")
    };
    let d = run(
        p,
        Failure {
            upstream: Some(upstream(true, false)),
            ..f
        },
    );
    assert_eq!(d.verdict, Verdict::StateVerificationRequired);
    let d = run(
        p,
        Failure {
            upstream: Some(upstream(false, true)),
            ..f
        },
    );
    assert_eq!(d.verdict, Verdict::DoNotRetry);
    let up = RetryContract {
        after_ms: 45_000,
        max_attempts: 2,
        deadline: Some(NOW.plus_ms(60_000)),
        ..upstream(true, true)
    };
    let d = run(
        p,
        Failure {
            upstream: Some(up),
            ..f
        },
    );
    assert_eq!(d.verdict, Verdict::RetryWithLimit);
    assert!(d.retry.after_ms >= 45_000);
    assert_eq!(d.retry.max_attempts, 2);
    assert_eq!(d.retry.deadline, up.deadline);
    // an upstream that says "safe" does not make a write with unknown outcome safe
    let d = run(
        p,
        Failure {
            upstream: Some(upstream(true, true)),
            ..Failure {
                catalog: "asc",
                ..write("TIMEOUT")
            }
        },
    );
    assert_eq!(d.verdict, Verdict::StateVerificationRequired);
    assert!(d.warnings.contains(Warning::UpstreamLessSafeIgnored));
}

#[test]
fn frontspin_schedule_then_failed_permanent() {
    let p = policy();
    let expect = [900_000, 3_600_000, 14_400_000, 86_400_000];
    for (i, wait) in expect.into_iter().enumerate() {
        let attempt = i as u32 + 1;
        for code in ["RATE_LIMITED", "FRONTSPIN_SERVER_ERROR", "TIMEOUT"] {
            for f in [read(code), write(code)] {
                let d = run(
                    p,
                    Failure {
                        catalog: "frontspin",
                        attempt,
                        ..f
                    },
                );
                assert_eq!(d.verdict, Verdict::RetryWithLimit, "{code} attempt {attempt}");
                assert_eq!(
                    (d.retry.strategy, d.retry.after_ms),
                    (Strategy::Schedule, wait),
                    "{code}"
                );
            }
        }
    }
    let d = run(
        p,
        Failure {
            catalog: "frontspin",
            attempt: 5,
            ..write("TIMEOUT")
        },
    );
    assert_eq!(d.verdict, Verdict::DoNotRetry);
    assert_eq!(d.terminal_state, Some(TerminalState::FailedPermanent));
}

#[test]
fn frontspin_rate_limit_stops_the_tenant() {
    let p = policy();
    let d = run(
        p,
        Failure {
            catalog: "frontspin",
            tenant: "t1",
            ..write("RATE_LIMITED")
        },
    );
    assert_eq!(d.scope, Scope::Tenant);
    assert_eq!(d.retry.reconciliation_action, Some("redrive_pending_after_quota_reset"));
    let d = run(
        p,
        Failure {
            catalog: "frontspin",
            ..write("TIMEOUT")
        },
    );
    assert_eq!(
        (d.scope, d.retry.side_effect_state, d.retry.safe),
        (Scope::Request, SideEffectState::Possible, true)
    );
    let d = run(
        p,
        Failure {
            catalog: "frontspin",
            ..write("NOT_FOUND")
        },
    );
    assert_eq!(d.retry.reconciliation_action, Some("clear_stored_id_or_investigate"));
}

#[test]
fn unknown_catalog_lists_the_catalogs() {
    let p = policy();
    let err = decide(
        p,
        &Failure {
            catalog: "nope",
            ..read("X")
        },
        NOW,
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("\"nope\"") && msg.contains("vibecode, asc, frontspin"),
        "{msg}"
    );
}

#[test]
fn locale_selects_the_reason_language() {
    let p = policy();
    let en = run(p, read("BITRIX_TIMEOUT"));
    let ru = run(
        p,
        Failure {
            locale: "ru-RU",
            ..read("BITRIX_TIMEOUT")
        },
    );
    assert_ne!(en.reason, ru.reason);
    assert!(ru.reason.contains("Битрикс24"), "{}", ru.reason);
    let xx = run(
        p,
        Failure {
            locale: "xx",
            ..read("BITRIX_TIMEOUT")
        },
    );
    assert_eq!(xx.reason, en.reason);
    assert!(xx.warnings.contains(Warning::LocaleUnsupported));
}

#[test]
fn codes_are_case_sensitive() {
    let p = policy();
    let d = run(p, write("bitrix_timeout"));
    assert!(!d.known_code);
    assert_eq!(d.rule, "vibecode/unknown/write");
}

#[test]
fn policy_version_is_a_content_hash() {
    let a = policy();
    let b = policy();
    assert_eq!(a.version(), b.version());
    assert!(a.version().starts_with("sha256:"));
    let mut sources: Vec<(&str, String)> = crate::core::policy::EMBEDDED
        .iter()
        .map(|(f, t)| (*f, t.to_string()))
        .collect();
    sources[0].1 = sources[0].1.replace("max_attempts = 5", "max_attempts = 6");
    let changed = Policy::from_sources(sources.iter().map(|(f, t)| (*f, t.as_str())), "vibecode").unwrap();
    assert_ne!(changed.version(), a.version());
    let d = run(&changed, read("QUEUE_OVERFLOW"));
    assert_eq!(d.policy_version, changed.version());
}

#[test]
fn a_code_in_another_case_is_unknown_with_a_warning_naming_the_catalog_code() {
    let p = policy();
    let d = run(p, write("bitrix_timeout"));
    assert!(!d.known_code, "codes stay case-sensitive");
    assert_eq!(d.rule, "vibecode/unknown/write");
    assert!(d.warnings.contains(Warning::CodeCaseMismatch));
    let texts: Vec<String> = d.warnings.texts().map(|t| t.to_string()).collect();
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("code_case_mismatch: did you mean BITRIX_TIMEOUT?")),
        "{texts:?}"
    );
    // an alias is named as spelled in the catalog
    let d = run(
        p,
        Failure {
            catalog: "asc",
            ..write("asc-6005")
        },
    );
    assert_eq!(d.warnings.case_match(), Some("ASC-6005"));
    // an exact code, or one that matches nothing, has no such warning
    assert!(
        !run(p, write("BITRIX_TIMEOUT"))
            .warnings
            .contains(Warning::CodeCaseMismatch)
    );
    assert!(
        !run(p, write("NO_SUCH_CODE"))
            .warnings
            .contains(Warning::CodeCaseMismatch)
    );
}
