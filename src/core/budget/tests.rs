use super::*;
use crate::core::model::{Failure, Operation, ReadBack, Strategy, Verdict};
use crate::core::{Floor, Policy, decide, decide_floored};

fn finagle() -> BudgetRule {
    BudgetRule {
        scope: BudgetScope::Dependency,
        window_ms: 10_000,
        retry_percent: 20,
        min_retries_per_sec: 10,
        requests: None,
    }
}

const T0: UnixMillis = UnixMillis(1_786_190_700_000);

fn window_with(rule: &BudgetRule, at: UnixMillis, c: Counts) -> Window {
    let mut w = Window::default();
    w.add(rule.bucket_of(at), c);
    w
}

#[test]
fn buckets_are_aligned_to_absolute_time_and_the_window_slides_by_one() {
    let r = finagle();
    assert_eq!(r.bucket_ms(), 1_000);
    assert_eq!(r.bucket_of(UnixMillis(12_345)), 12);
    assert_eq!(r.window_start(UnixMillis(12_345)), UnixMillis(3_000));
    let mut w = Window::default();
    w.add(
        12,
        Counts {
            requests: 5,
            retries: 1,
        },
    );
    w.add(
        12,
        Counts {
            requests: 1,
            retries: 0,
        },
    );
    w.add(
        21,
        Counts {
            requests: 2,
            retries: 2,
        },
    );
    assert_eq!(
        w.total(21),
        Counts {
            requests: 8,
            retries: 3
        }
    );
    // Bucket 12 leaves the window when bucket 22 begins.
    assert_eq!(
        w.total(22),
        Counts {
            requests: 2,
            retries: 2
        }
    );
    // A slot is reused by a later bucket; a late count for an aged-out bucket is dropped.
    w.add(
        22,
        Counts {
            requests: 7,
            retries: 0,
        },
    );
    w.add(
        12,
        Counts {
            requests: 100,
            retries: 100,
        },
    );
    assert_eq!(w.get(12), Counts::default());
    assert_eq!(
        w.total(22),
        Counts {
            requests: 9,
            retries: 2
        }
    );
}

#[test]
fn the_floor_is_finagles_reserve() {
    let r = finagle();
    assert_eq!(r.floor(), 100);
    assert_eq!(r.allowed(0), 100);
    assert_eq!(r.allowed(1_000), 300);
    assert_eq!(r.describe(), "20 % + 10/s over 10 s");
    // A quiet scope: 3 requests still allow the reserve.
    let w = window_with(
        &r,
        T0,
        Counts {
            requests: 3,
            retries: 99,
        },
    );
    let s = judge(&r, &w.buckets(r.bucket_of(T0)), T0, false).unwrap();
    assert!(!s.exhausted && s.allowed == 100 && s.room_at == T0, "{s:?}");
}

#[test]
fn a_scope_with_no_recorded_request_is_not_budgeted() {
    let r = finagle();
    let w = window_with(
        &r,
        T0,
        Counts {
            requests: 0,
            retries: 10_000,
        },
    );
    assert_eq!(judge(&r, &w.buckets(r.bucket_of(T0)), T0, false), None);
}

/// The escape (issue 23): 1 s window, no reserve, 10 %. 100 first attempts,
/// 100 failures: 10 approved, 90 deferred (withdrawing nothing). When they
/// return the window holds no first attempt, but the scope was seen: it
/// gets the reserve alone (none), not "not budgeted".
#[test]
fn a_scope_that_saw_traffic_stays_budgeted_when_its_window_empties() {
    let r = BudgetRule {
        window_ms: 1_000,
        retry_percent: 10,
        min_retries_per_sec: 0,
        ..finagle()
    };
    let b = r.bucket_of(T0);
    let mut w = window_with(
        &r,
        T0,
        Counts {
            requests: 100,
            retries: 0,
        },
    );
    let mut approved = 0;
    for _ in 0..100 {
        let s = judge(&r, &w.buckets(b), T0, true).unwrap();
        if !s.exhausted {
            approved += 1;
            w.add(
                b,
                Counts {
                    requests: 0,
                    retries: 1,
                },
            );
        }
    }
    assert_eq!(approved, 10);
    // The window empties of both first attempts and retries; the 90 come back.
    let later = T0.plus_ms(1_500);
    let lb = r.bucket_of(later);
    for _ in 0..90 {
        let s = judge(&r, &w.buckets(lb), later, true).expect("still budgeted");
        if !s.exhausted {
            approved += 1;
            w.add(
                lb,
                Counts {
                    requests: 0,
                    retries: 1,
                },
            );
        }
    }
    assert!(approved <= 11, "{approved} approved in all");
    // The reserve alone when it has one: a quiet, seen scope gets 10/s.
    let quiet = finagle();
    let s = judge(&quiet, &Window::default().buckets(quiet.bucket_of(T0)), T0, true).unwrap();
    assert_eq!((s.requests, s.allowed, s.exhausted), (0, 100, false));
}

#[test]
fn spent_budget_has_room_when_the_buckets_holding_the_retries_age_out() {
    let r = finagle();
    let b = r.bucket_of(T0);
    let mut w = Window::default();
    w.add(
        b - 5,
        Counts {
            requests: 1_000,
            retries: 250,
        },
    );
    w.add(
        b,
        Counts {
            requests: 0,
            retries: 60,
        },
    );
    let s = judge(&r, &w.buckets(b), T0, false).unwrap();
    assert_eq!((s.requests, s.retries, s.allowed, s.exhausted), (1_000, 310, 300, true));
    // Bucket b-5 leaves at the start of bucket b+5: then no request is left, and 60 retries are under the reserve (100).
    assert_eq!(s.room_at, UnixMillis((b + 5) * 1_000));
    // Everything in the current bucket: room when it ages out, a whole window on.
    let w = window_with(
        &r,
        T0,
        Counts {
            requests: 10,
            retries: 102,
        },
    );
    let s = judge(&r, &w.buckets(b), T0, false).unwrap();
    assert!(s.exhausted);
    assert_eq!(s.room_at, UnixMillis((b + 10) * 1_000));
    assert!(T0.ms_until(s.room_at) <= 10_000);
}

#[test]
fn an_allowance_budget_caps_retries_at_a_share_of_the_allowance() {
    let r = BudgetRule {
        scope: BudgetScope::Tenant,
        window_ms: 86_400_000,
        retry_percent: 20,
        min_retries_per_sec: 0,
        requests: Some(500),
    };
    assert_eq!((r.allowed(1), r.allowed(10_000)), (100, 100));
    assert_eq!(r.describe(), "20 % of 500 requests per 1 d");
    let b = r.bucket_of(T0);
    let w = window_with(
        &r,
        T0,
        Counts {
            requests: 300,
            retries: 99,
        },
    );
    assert!(!judge(&r, &w.buckets(b), T0, false).unwrap().exhausted);
    let w = window_with(
        &r,
        T0,
        Counts {
            requests: 300,
            retries: 100,
        },
    );
    assert!(judge(&r, &w.buckets(b), T0, false).unwrap().exhausted);
}

fn failure<'a>(code: &'a str, op: Operation) -> Failure<'a> {
    Failure {
        catalog: "vibecode",
        code,
        operation: op,
        attempt: 2,
        ..Failure::default()
    }
}

#[test]
fn a_budget_floor_defers_a_retry_and_never_makes_an_unsafe_one_look_safe() {
    let policy = Policy::embedded().unwrap();
    let floor = Some(Floor {
        until: T0.plus_ms(7_000),
        strategy: Strategy::Budget,
    });
    // A read that retries: deferred, still retry_with_limit, no terminal state.
    let read = failure("BITRIX_TIMEOUT", Operation::Read);
    let d = decide_floored(&policy, &read, T0, floor).unwrap();
    assert_eq!(d.verdict, Verdict::RetryWithLimit);
    assert!(d.retry.retryable);
    assert_eq!((d.retry.after_ms, d.retry.strategy), (7_000, Strategy::Budget));
    assert!(d.retry.max_after_ms >= d.retry.after_ms);
    assert_eq!(d.terminal_state, None);
    // A write of unknown outcome stays a verification: the floor does not turn it into a retry.
    let write = failure("BITRIX_TIMEOUT", Operation::Write);
    let plain = decide(&policy, &write, T0).unwrap();
    assert_eq!(plain.verdict, Verdict::StateVerificationRequired);
    let floored = decide_floored(&policy, &write, T0, floor).unwrap();
    assert_eq!(floored.verdict, Verdict::StateVerificationRequired);
    assert!(!floored.retry.safe);
    // A deferral past the deadline becomes do_not_retry by the deadline rule.
    let late = Failure {
        deadline: Some(T0.plus_ms(1_000)),
        ..read
    };
    let d = decide_floored(&policy, &late, T0, floor).unwrap();
    assert_eq!(d.verdict, Verdict::DoNotRetry);
    assert_eq!(d.terminal_state, None);
    // A read-back that found the effect absent is a resend: a retry the budget may defer.
    let absent = Failure {
        read_back: ReadBack::EffectAbsent,
        ..write
    };
    let d = decide_floored(&policy, &absent, T0, floor).unwrap();
    assert_eq!(
        (d.verdict, d.retry.strategy),
        (Verdict::RetryWithLimit, Strategy::Budget)
    );
}

#[test]
fn the_warning_names_the_numbers() {
    let mut w = crate::core::Warnings::default();
    w.add_budget_exhausted(crate::core::warnings::BudgetNote {
        retries: 212,
        requests: 1_000,
        rule: finagle(),
    });
    let texts: Vec<String> = w.texts().map(|t| t.to_string()).collect();
    assert_eq!(
        texts,
        ["budget_exhausted: retries 212 of 1 000 requests in the last 10 s, budget 20 % + 10/s"]
    );
}
