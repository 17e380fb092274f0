//! Issue 23's scenarios through the one decision path (one replica, real
//! fleet memory, time passed in): a scope that saw traffic stays budgeted,
//! deferrals are paced instead of bunched, interleaved traffic gets its
//! share, and deferred answers withdraw nothing.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::caller::Caller;
use super::decide::{InputNotes, Live, decide};
use crate::core::{Failure, Operation, Policy, UnixMillis, Verdict, Warning};
use crate::fleet::budget::ScopeOf;
use crate::fleet::{Fleet, FleetConfig};

const T0: UnixMillis = UnixMillis(1_786_190_700_000);

/// A catalog whose one code retries, with the budget `budget` (TOML).
fn policy(budget: &str) -> Policy {
    let text = format!(
        r#"
name = "t"
description = "A test budget"
max_attempts = 1000
[backoff]
base_ms = 100
multiplier = 2.0
cap_ms = 1000
[operations]
read = ["get"]
write = ["add"]
[[codes]]
code = "SLOW"
target_reached = "no"
condition.en = "Slow."
read = {{ verdict = "retry_with_limit" }}
write = {{ verdict = "retry_with_limit" }}
[unknown]
target_reached = "unknown"
condition.en = "Unknown."
read = {{ verdict = "retry_with_limit" }}
write = {{ verdict = "state_verification_required" }}
[no_envelope]
target_reached = "unknown"
condition.en = "No envelope."
read = {{ verdict = "retry_with_limit" }}
write = {{ verdict = "state_verification_required" }}
[[budgets]]
scope = "dependency"
{budget}
"#
    );
    Policy::from_sources([("t.toml", text.as_str())], "t").expect("test catalog")
}

fn failure() -> Failure<'static> {
    Failure {
        catalog: "t",
        code: "SLOW",
        operation: Operation::Read,
        attempt: 2,
        dependency: "dep",
        ..Failure::default()
    }
}

struct Run {
    policy: Policy,
    fleet: std::sync::Arc<Fleet>,
}

impl Run {
    fn new(budget: &str) -> Self {
        Run {
            policy: policy(budget),
            fleet: Fleet::in_memory(FleetConfig::default()),
        }
    }

    fn first_attempts(&self, n: u64, now: UnixMillis) {
        super::budgets::deposit(&self.policy, &self.fleet, "t", "dep", "", n, None, now);
    }

    /// One failure judged at `now`: `None` when approved, else when it is told to return.
    fn retry(&self, now: UnixMillis) -> Option<UnixMillis> {
        let mut live = Live::new(&self.fleet, Caller::Named("test"));
        let d = decide(&self.policy, &failure(), InputNotes::default(), now, &mut live).expect("decided");
        assert_eq!(
            d.decision.verdict,
            Verdict::RetryWithLimit,
            "a budget defers, never refuses"
        );
        let deferred = d.decision.warnings.iter().any(|w| w == Warning::BudgetExhausted);
        deferred.then(|| now.plus_ms(d.decision.retry.after_ms))
    }

    fn listed(&self, now: UnixMillis) -> crate::core::budget::Standing {
        self.fleet.budgets().list("t", "dep", 1, now)[0].1.standing
    }

    /// Judges every deferred retry again when it returns, until `until`;
    /// returns how many of them were approved.
    fn returns(&self, deferred: Vec<UnixMillis>, until: UnixMillis) -> u64 {
        let mut queue: BinaryHeap<Reverse<i64>> = deferred.into_iter().map(|t| Reverse(t.0)).collect();
        let mut approved = 0;
        while let Some(Reverse(at)) = queue.pop() {
            if at > until.0 {
                break;
            }
            match self.retry(UnixMillis(at)) {
                None => approved += 1,
                Some(back) => queue.push(Reverse(back.0)),
            }
        }
        approved
    }
}

/// Escape: 1 s window, no reserve, 10 %. 100 first attempts, 100 failures
/// → 10 approved; the 90 deferred come back to a window with no first
/// attempt, and are not approved just because of that (≤ 11 in all).
#[test]
fn a_batch_that_only_retries_does_not_escape_its_budget() {
    let run = Run::new("window = \"1s\"\nretry_percent = 10\nmin_retries_per_sec = 0");
    run.first_attempts(100, T0);
    let deferred: Vec<UnixMillis> = (0..100).filter_map(|_| run.retry(T0)).collect();
    assert_eq!(deferred.len(), 90);
    let s = run.listed(T0);
    assert_eq!(
        (s.requests, s.retries, s.deferred),
        (100, 10, 90),
        "deferrals withdraw nothing"
    );
    let later = run.returns(deferred, T0.plus_ms(30_000));
    println!("escape: 10 approved at once, {later} more when the 90 returned (30 s)");
    assert!(10 + later <= 11, "{} approved in all", 10 + later);
}

/// Bunching: 1 000 first attempts then 1 000 retries (20 % + 10/s over
/// 10 s): 300 approved, and the 700 deferred return spread at the budget's
/// rate r = 30/s: no sliding second holds more than 2r = 60 of them.
#[test]
fn deferrals_are_paced_at_the_budgets_rate() {
    let run = Run::new("window = \"10s\"\nretry_percent = 20\nmin_retries_per_sec = 10");
    run.first_attempts(1_000, T0);
    let mut back: Vec<i64> = (0..1_000).filter_map(|_| run.retry(T0)).map(|t| t.0).collect();
    assert_eq!(back.len(), 700);
    back.sort_unstable();
    let busiest = (0..back.len())
        .map(|i| back[i..].iter().take_while(|t| **t < back[i] + 1_000).count())
        .max()
        .unwrap_or(0);
    println!("busiest second of the deferred returns: {busiest} (r = 30/s)");
    assert!(busiest <= 60, "{busiest} returns in one second");
    assert!(
        back[0] > T0.0 && back[699] - back[0] > 15_000,
        "spread over ≈ 700 / 30 s"
    );
}

/// Finagle's `testBudget` pattern: 10 %, one first attempt then one retry,
/// 1 000 times: 100 ± 5 approved at once; then, judging every deferred retry
/// again when it returns, still at most 105 approved in all.
#[test]
fn interleaved_traffic_gets_its_share_and_no_more() {
    let run = Run::new("window = \"60s\"\nretry_percent = 10\nmin_retries_per_sec = 0");
    let mut deferred = Vec::new();
    for i in 0..1_000 {
        let now = T0.plus_ms(i);
        run.first_attempts(1, now);
        if let Some(back) = run.retry(now) {
            deferred.push(back);
        }
    }
    let immediate = 1_000 - deferred.len() as u64;
    assert!((95..=105).contains(&immediate), "{immediate} approved at once");
    let later = run.returns(deferred, T0.plus_ms(200_000));
    println!("interleaved: {immediate} approved at once, {later} more as deferred retries returned (200 s)");
    assert!(immediate + later <= 105, "{immediate} + {later} approved over the run");
}

/// A spent scope's deferral counts in `deferred`, never in `retries`, and
/// the read-only path given the live standing paces the same wait.
#[test]
fn a_deferral_is_advice_not_a_withdrawal() {
    let run = Run::new("window = \"10s\"\nretry_percent = 20\nmin_retries_per_sec = 0");
    run.first_attempts(10, T0);
    assert_eq!(run.retry(T0), None);
    assert_eq!(run.retry(T0), None);
    let scope = ScopeOf {
        catalog: "t",
        dependency: "dep",
        tenant: "",
    };
    let rules = super::decide::budget_rules(&run.policy, "t");
    let before = run
        .fleet
        .budget_judge(rules, scope, T0, &|| "test".to_owned())
        .remove(0);
    assert!(before.standing.exhausted);
    let live = run.retry(T0).expect("deferred");
    let again = super::decide::read_only(
        &run.policy,
        &failure(),
        T0,
        super::decide::Given::as_logged(None, Some(&before)),
    )
    .expect("decided");
    assert_eq!(T0.plus_ms(again.decision.retry.after_ms), live);
    let s = run.listed(T0);
    assert_eq!((s.retries, s.deferred), (2, 1));
    // 2 allowed over 10 s: r = 0.2/s, the first deferral ≈ 5 s on.
    assert!((4_000..=6_000).contains(&T0.ms_until(live)), "{}", T0.ms_until(live));
}

/// One report switches no budget off: 100 Admits, then one report of
/// 1 000 entries × (2⁶⁴−1) for the same scope: `requests` rises by at most
/// 50 000 (one second of `--max-reported-requests-per-sec`), and of 15 000
/// immediate retries at most 20 % × 50 100 + 100, + 5 % (10 626) are approved.
#[test]
fn one_report_cannot_switch_a_budget_off() {
    let run = Run::new("window = \"10s\"\nretry_percent = 20\nmin_retries_per_sec = 10");
    for _ in 0..100 {
        run.first_attempts(1, T0);
    }
    let entry = super::holds::OutcomeCount {
        catalog: "t",
        dependency: "dep",
        requests: u64::MAX,
        ..Default::default()
    };
    let report = vec![entry; 1_000];
    super::reports::deposit_report(&run.policy, &run.fleet, "10.0.0.9", &report, T0);
    let requests = run.listed(T0).requests;
    assert!(requests - 100 <= 50_000, "requests rose by {}", requests - 100);
    assert_eq!(
        run.fleet.budgets().reported().clamped(),
        u64::MAX - 50_000,
        "the cut is counted"
    );
    let approved = (0..15_000).filter(|_| run.retry(T0).is_none()).count();
    println!("requests {requests}, approved {approved} of 15 000");
    assert!(approved <= 10_626, "{approved} approved");
    // Another caller has its own bucket; the same caller a second later gets
    // one second's worth more, no more.
    super::reports::deposit_report(&run.policy, &run.fleet, "10.0.0.8", &report[..1], T0);
    super::reports::deposit_report(&run.policy, &run.fleet, "10.0.0.9", &report[..3], T0.plus_ms(1_000));
    assert_eq!(run.listed(T0.plus_ms(1_000)).requests, requests + 100_000);
}

/// A scope flood cannot reset real scopes: a real scope with 1 000 first
/// attempts keeps them through 120 reports × 1 000 unique dependency names
/// from 50 addresses (over 0.4 s), at a table of 2 000 scopes: the flood's
/// scopes are limited per caller, and at the cap those with the fewest
/// first attempts go.
#[test]
fn a_scope_flood_cannot_reset_a_real_scope() {
    let policy = policy("window = \"10s\"\nretry_percent = 20\nmin_retries_per_sec = 10");
    let fleet = Fleet::in_memory(FleetConfig {
        max_budget_scopes: 2_000,
        ..FleetConfig::default()
    });
    super::budgets::deposit(&policy, &fleet, "t", "dep", "", 1_000, None, T0);
    let names: Vec<String> = (0..120_000).map(|i| format!("flood-{i}.example")).collect();
    for r in 0..120 {
        let now = T0.plus_ms(r * 400 / 120);
        let report: Vec<super::holds::OutcomeCount<'_>> = names[r as usize * 1_000..][..1_000]
            .iter()
            .map(|n| super::holds::OutcomeCount {
                catalog: "t",
                dependency: n,
                requests: 5,
                ..Default::default()
            })
            .collect();
        super::reports::deposit_report(&policy, &fleet, &format!("10.0.0.{}", r % 50), &report, now);
    }
    let b = fleet.budgets();
    let real = b.list("t", "dep", 1, T0.plus_ms(400));
    assert!(real[0].1.standing.requests >= 1_000, "{:?}", real[0].1.standing);
    println!("scopes {}, evicted {}, refused {}", b.len(), b.evicted(), b.refused());
    assert!(b.len() <= 2_000);
    assert!(b.evicted() > 0 && b.refused() > 0);
}
