use super::*;
use crate::core::model::{Failure, Operation, Strategy, Verdict};
use crate::core::warnings::Warning;
use crate::core::{Policy, decide, decide_held};

/// 2026-11-30T15:00:00Z
const NOW: UnixMillis = UnixMillis(1_796_050_800_000);

fn policy() -> Policy {
    Policy::embedded().expect("embedded policy")
}

fn hold(kind: HoldKind, since: i64, until: i64, probe_every_ms: u64) -> Hold {
    Hold {
        id: format!("{kind:?}-{until}"),
        key: HoldKey {
            scope: HoldScope::Dependency,
            catalog: "vibecode".into(),
            dependency: "portal-1".into(),
            subject: String::new(),
        },
        kind,
        since: UnixMillis(since),
        until: UnixMillis(until),
        probe_every_ms,
        probe_window_ms: 0,
        rank: Default::default(),
        code: "X".into(),
        rule: "r".into(),
        reason: "why".into(),
    }
}

#[test]
fn frontspin_rate_limited_stops_the_tenant_until_the_next_midnight() {
    let p = policy();
    let f = Failure {
        catalog: "frontspin",
        code: "RATE_LIMITED",
        operation: Operation::Write,
        attempt: 1,
        tenant: "acme",
        dependency: "frontspin-eu",
        ..Failure::default()
    };
    let plan = decide(&p, &f, NOW).unwrap().hold_plan.expect("a quota stop");
    assert_eq!((plan.scope, plan.kind), (HoldScope::Tenant, HoldKind::QuotaStop));
    assert_eq!(
        (plan.catalog, plan.dependency, plan.subject),
        ("frontspin", "frontspin-eu", "acme")
    );
    assert_eq!(plan.until, UnixMillis::parse_rfc3339("2026-12-01T00:00:00Z").unwrap());
    assert_eq!(plan.rule, "frontspin/RATE_LIMITED/write");

    // The dependency's own reset time wins over the catalog's rule.
    let reset = UnixMillis::parse_rfc3339("2026-11-30T18:30:00Z").unwrap();
    let own = Failure {
        quota_resets_at: Some(reset),
        ..f
    };
    assert_eq!(decide(&p, &own, NOW).unwrap().hold_plan.unwrap().until, reset);

    // A reset in the past is no reset: the catalog's rule applies.
    let stale = Failure {
        quota_resets_at: Some(UnixMillis(NOW.0 - 1)),
        ..f
    };
    assert_eq!(decide(&p, &stale, NOW).unwrap().hold_plan.unwrap().until, plan.until);

    // No tenant: no hold, and a warning says why.
    let anonymous = Failure { tenant: "", ..f };
    let d = decide(&p, &anonymous, NOW).unwrap();
    assert!(d.hold_plan.is_none());
    assert!(d.warnings.contains(Warning::HoldNeedsTenant));
}

#[test]
fn one_generic_failure_without_a_dependency_holds_nobody() {
    let p = policy();
    for (catalog, code) in [
        ("vibecode", "TIMEOUT_QUARANTINE"),
        ("vibecode", "QUEUE_OVERFLOW"),
        ("http", "429"),
        ("grpc", "UNAVAILABLE"),
    ] {
        let f = Failure {
            catalog,
            code,
            operation: Operation::Read,
            attempt: 1,
            retry_after: "30",
            ..Failure::default()
        };
        let d = decide(&p, &f, NOW).unwrap();
        assert!(d.hold_plan.is_none(), "{catalog}/{code}");
        assert!(d.warnings.contains(Warning::HoldNeedsDependency), "{catalog}/{code}");
    }
}

#[test]
fn quarantine_pause_and_circuit_come_from_the_catalog() {
    let p = policy();
    let base = Failure {
        catalog: "vibecode",
        operation: Operation::Read,
        attempt: 1,
        dependency: "portal-1",
        method: "crm.deal.list",
        ..Failure::default()
    };
    let plan = |code: &'static str, retry_after: &'static str| {
        let f = Failure {
            code,
            retry_after,
            ..base
        };
        decide(&p, &f, NOW).unwrap().hold_plan
    };
    let q = plan("TIMEOUT_QUARANTINE", "30").expect("quarantine");
    assert_eq!(
        (q.scope, q.kind, q.until),
        (HoldScope::Dependency, HoldKind::Quarantine, NOW.plus_ms(30_000))
    );
    // Without a Retry-After its length is unknown: no hold.
    assert!(plan("TIMEOUT_QUARANTINE", "").is_none());
    let m = plan("OPERATION_TIME_LIMIT", "12").expect("method pause");
    assert_eq!(
        (m.scope, m.kind, m.subject),
        (HoldScope::Method, HoldKind::Pause, "crm.deal.list")
    );
    let c = plan("ERROR_LOOP_DETECTED", "").expect("circuit");
    assert_eq!(
        (c.scope, c.kind, c.probe_every_ms),
        (HoldScope::Dependency, HoldKind::CircuitOpen, 30_000)
    );
    assert_eq!(
        c.until,
        NOW.plus_ms(25 * 3_600_000),
        "an open circuit lasts until the cap"
    );
    // Codes that place nothing.
    assert!(plan("BITRIX_TIMEOUT", "5").is_none());
}

#[test]
fn a_retry_after_past_the_cap_is_not_retried_and_holds_nobody() {
    let p = policy();
    let cap = 25 * 3_600_000;
    let at_cap = Failure {
        catalog: "vibecode",
        code: "TIMEOUT_QUARANTINE",
        operation: Operation::Read,
        attempt: 1,
        dependency: "portal-1",
        retry_after: "90000",
        ..Failure::default()
    };
    // At the cap exactly: waited for, and the fleet held as long.
    let d = decide(&p, &at_cap, NOW).unwrap();
    assert_eq!((d.verdict, d.retry.after_ms), (Verdict::RetryWithLimit, cap));
    assert_eq!(d.hold_plan.unwrap().until, NOW.plus_ms(cap));
    // Past it (a second more, a clamped 2^64): do not retry, no hold, the
    // reason says why.
    let past = [
        Failure {
            retry_after: "90001",
            ..at_cap
        },
        Failure {
            retry_after: "",
            retry_after_ms: Some(u64::MAX),
            ..at_cap
        },
    ];
    for f in past {
        let d = decide(&p, &f, NOW).unwrap();
        assert_eq!(d.verdict, Verdict::DoNotRetry, "{f:?}");
        assert!(!d.retry.retryable);
        assert_eq!((d.retry.after_ms, d.retry.max_after_ms), (0, 0));
        assert!(d.hold_plan.is_none(), "no fleet hold from advice past the cap");
        assert!(d.reason.contains("max_delay_ms"), "{}", d.reason);
    }
    // A write of unknown outcome still reads back before any re-drive.
    let write = Failure {
        code: "BITRIX_TIMEOUT",
        operation: Operation::Write,
        retry_after: "99999999",
        ..at_cap
    };
    let d = decide(&p, &write, NOW).unwrap();
    assert_eq!(d.verdict, Verdict::DoNotRetry);
    assert_eq!(d.retry.reconciliation_action, Some("read_back_by_business_key"));
}

#[test]
fn a_hold_in_force_is_a_floor_for_the_callers_wait() {
    let p = policy();
    let f = Failure {
        catalog: "vibecode",
        code: "QUEUE_OVERFLOW",
        operation: Operation::Read,
        attempt: 1,
        ..Failure::default()
    };
    let free = decide(&p, &f, NOW).unwrap();
    let held = decide_held(&p, &f, NOW, Some(NOW.plus_ms(120_000))).unwrap();
    assert_eq!(held.verdict, Verdict::RetryWithLimit);
    assert_eq!(held.retry.after_ms, 120_000);
    assert_eq!(held.retry.strategy, Strategy::Hold);
    assert_eq!(
        held.retry.max_after_ms - held.retry.after_ms,
        free.retry.max_after_ms - free.retry.after_ms,
        "the jitter window keeps its width above the hold"
    );
    // A hold that ends sooner than the caller's own delay changes nothing.
    let short = decide_held(&p, &f, NOW, Some(NOW.plus_ms(1))).unwrap();
    assert_eq!(short.retry, free.retry);
    // A hold past the deadline: the deadline rule stops the retry as always.
    let bounded = Failure {
        deadline: Some(NOW.plus_ms(60_000)),
        ..f
    };
    let stopped = decide_held(&p, &bounded, NOW, Some(NOW.plus_ms(120_000))).unwrap();
    assert_eq!(stopped.verdict, Verdict::DoNotRetry);
}

#[test]
fn holds_only_extend_and_small_extensions_are_not_worth_announcing() {
    let h = hold(HoldKind::Pause, 0, 100_000, 0);
    let now = UnixMillis(50_000);
    assert_eq!(merge(None, UnixMillis(10), now), Merge::Place);
    assert_eq!(
        merge(Some(&h), UnixMillis(90_000), now),
        Merge::Keep,
        "shorter never shortens"
    );
    // 10 % of a 100 s hold is 10 s: 5 s more is kept, 11 s more extends.
    assert_eq!(merge(Some(&h), UnixMillis(105_000), now), Merge::Keep);
    assert_eq!(merge(Some(&h), UnixMillis(111_000), now), Merge::Extend);
    // A short hold extends by at least a second.
    let short = hold(HoldKind::Pause, 0, 2_000, 0);
    assert_eq!(merge(Some(&short), UnixMillis(2_900), UnixMillis(1)), Merge::Keep);
    assert_eq!(merge(Some(&short), UnixMillis(3_100), UnixMillis(1)), Merge::Extend);
    // An expired hold is replaced by a new one.
    assert_eq!(merge(Some(&h), UnixMillis(300_000), UnixMillis(200_000)), Merge::Place);
}

#[test]
fn the_hold_that_ends_last_is_reported() {
    let a = hold(HoldKind::Pause, 0, 10_000, 0);
    let b = hold(HoldKind::QuotaStop, 0, 50_000, 0);
    let expired = hold(HoldKind::Quarantine, 0, 900, 0);
    assert_eq!(ending_last([&a, &b, &expired], UnixMillis(1_000)), Some(&b));
    assert_eq!(ending_last([&expired], UnixMillis(1_000)), None);
}

#[test]
fn admit_refuses_under_a_hold_and_spaces_probes() {
    let pause = hold(HoldKind::Pause, 0, 10_000, 0);
    let circuit = hold(HoldKind::CircuitOpen, 0, 1_000_000, 30_000);
    let never = |_: usize, _: u64| false;
    assert_eq!(admit(&[], UnixMillis(5), 1_000, never), Admission::Admitted);
    assert_eq!(
        admit(&[&pause], UnixMillis(5), 1_000, never),
        Admission::Refused {
            retry_at: UnixMillis(10_000)
        }
    );
    assert_eq!(
        admit(&[&pause], UnixMillis(10_000), 1_000, never),
        Admission::Admitted,
        "ended"
    );
    // Before the first slot: refused until it opens.
    assert_eq!(
        admit(&[&circuit], UnixMillis(29_999), 1_000, never),
        Admission::Refused {
            retry_at: UnixMillis(30_000)
        }
    );
    // Slot 1 at 30 s, slot 2 at 60 s.
    assert_eq!(
        admit(&[&circuit], UnixMillis(30_000), 1_000, never),
        Admission::ProbeDue { hold: 0, slot: 1 }
    );
    assert_eq!(
        admit(&[&circuit], UnixMillis(59_999), 1_000, |_, n| n == 1),
        Admission::Refused {
            retry_at: UnixMillis(60_000)
        }
    );
    assert_eq!(
        admit(&[&circuit], UnixMillis(61_000), 1_000, |_, n| n == 1),
        Admission::ProbeDue { hold: 0, slot: 2 }
    );
    // No probe gets through a pause on the same call; slot 1 is still
    // untaken when the pause ends, so that is when to ask again.
    let long_pause = hold(HoldKind::Pause, 0, 45_000, 0);
    assert_eq!(
        admit(&[&circuit, &long_pause], UnixMillis(30_000), 1_000, never),
        Admission::Refused {
            retry_at: UnixMillis(45_000)
        }
    );
}

#[test]
fn probe_tokens_carry_their_hold_slot_and_a_128_bit_nonce() {
    let t = probe_token("abc.def", 7, 0xfeed);
    let parsed = parse_probe_token(&t).expect("well formed");
    assert_eq!((parsed.hold, parsed.slot), ("abc.def", 7));
    assert_eq!(parsed.nonce, format!("{:032x}", 0xfeed));
    for bad in [
        "",
        "x",
        "id.1",
        "id.x.0000000000000000000000000000000a",
        ".1.0000000000000000000000000000000a",
        "id.1.zz",
        // The 64-bit nonces of earlier versions are no longer tokens.
        "id.1.0000000000000001",
        "id.1.0000000000000000000000000000000A",
        "id.18446744073709551616.0000000000000000000000000000000a",
    ] {
        assert_eq!(parse_probe_token(bad), None, "{bad:?}");
    }
    let max = probe_token("h", u64::MAX, u128::MAX);
    assert_eq!(parse_probe_token(&max).map(|p| p.slot), Some(u64::MAX));
}

#[test]
fn a_stop_with_a_probe_phase_admits_one_probe_then_polls() {
    let mut stop = hold(HoldKind::QuotaStop, 0, 10_000, 0);
    stop.probe_window_ms = 30_000;
    let never = |_: usize, _: u64| false;
    // Before the end: refused until the end (the phase's start).
    assert_eq!(
        admit(&[&stop], UnixMillis(5_000), 1_000, never),
        Admission::Refused {
            retry_at: UnixMillis(10_000)
        }
    );
    assert_eq!(stop.next_probe_at(UnixMillis(5_000)), Some(UnixMillis(10_000)));
    assert!(!stop.probing(UnixMillis(9_999)) && stop.probing(UnixMillis(10_000)));
    // At the end: the phase's one probe is due ...
    assert_eq!(
        admit(&[&stop], UnixMillis(10_000), 1_000, never),
        Admission::ProbeDue { hold: 0, slot: 10_000 }
    );
    // ... and once taken, everyone else polls, never past the window's end.
    assert_eq!(
        admit(&[&stop], UnixMillis(10_000), 1_200, |_, n| n == 10_000),
        Admission::Refused {
            retry_at: UnixMillis(11_200)
        }
    );
    assert_eq!(
        admit(&[&stop], UnixMillis(39_500), 1_000, |_, n| n == 10_000),
        Admission::Refused {
            retry_at: UnixMillis(40_000)
        }
    );
    assert_eq!(stop.shown_until(UnixMillis(10_000)), UnixMillis(40_000));
    assert_eq!(stop.shown_until(UnixMillis(9_000)), UnixMillis(10_000));
    // No failure by the window's end: it ends for everyone.
    assert_eq!(admit(&[&stop], UnixMillis(40_000), 1_000, never), Admission::Admitted);
    // A failure in the phase re-places it, however close the new end.
    assert_eq!(
        merge(Some(&stop), UnixMillis(10_500), UnixMillis(10_100)),
        Merge::Extend
    );
    // A pause without a phase ends for everyone.
    let pause = hold(HoldKind::Pause, 0, 10_000, 0);
    assert_eq!(admit(&[&pause], UnixMillis(10_000), 1_000, never), Admission::Admitted);
    assert_eq!(pause.next_probe_at(UnixMillis(0)), None);
}

#[test]
fn storage_keys_are_unambiguous() {
    let a = storage_key(HoldScope::Tenant, "c", "d:1", "t");
    let b = storage_key(HoldScope::Tenant, "c", "d", "1:t");
    assert_ne!(a, b);
    assert_ne!(
        storage_key(HoldScope::Dependency, "c", "d", ""),
        storage_key(HoldScope::Method, "c", "d", "")
    );
}

#[test]
fn storage_keys_keep_their_stored_form() {
    // Keys live in Redis across versions: the form is pinned, digits and all.
    let long = "x".repeat(1234);
    assert_eq!(
        storage_key(HoldScope::Tenant, "vibecode", "b24", "tenant-1234567890"),
        "t:8:vibecode:3:b24:17:tenant-1234567890"
    );
    assert_eq!(storage_key(HoldScope::Dependency, "", "d", ""), "d:0::1:d:0:");
    assert_eq!(
        storage_key(HoldScope::Method, "c", "d", &long),
        format!("m:1:c:1:d:1234:{long}")
    );
    // Every length writes its decimal form, across the widths the writer treats apart.
    for n in [0, 9, 10, 99, 100, 999, 1000, 65_535] {
        let part = "y".repeat(n);
        assert_eq!(
            storage_key(HoldScope::Dependency, &part, "d", ""),
            format!("d:{n}:{part}:1:d:0:"),
            "length {n}"
        );
    }
    // Written over a used buffer, the key is the same (nothing of the last one stays).
    let mut buf = "garbage that is longer than the key".to_owned();
    super::storage_key_into(&mut buf, HoldScope::Method, "c", "d", "m");
    assert_eq!(buf, storage_key(HoldScope::Method, "c", "d", "m"));
    assert_eq!(buf, "m:1:c:1:d:1:m");
}
