use proptest::prelude::*;

use std::collections::HashMap;

use super::*;
use crate::core::budget::{BUCKETS, Window};
use crate::fleet::store::{FlushReply, ScopeFlush};

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

fn hash(t: &str) -> String {
    format!("h:{}", t.len())
}

fn scope(dep: &str) -> ScopeOf<'_> {
    ScopeOf {
        catalog: "vibecode",
        dependency: dep,
        tenant: "acme",
    }
}

/// Stands in for the shared store inside a test: the same sums Redis keeps.
#[derive(Default)]
struct Sums(HashMap<String, Window>);

impl Sums {
    fn flush(&mut self, b: &Budgets, now: UnixMillis) {
        let taken = b.take_flush(now);
        self.answer(b, taken, now);
    }

    /// The flush of the leases asked for (the flush task woken).
    fn flush_leases(&mut self, b: &Budgets, now: UnixMillis) {
        let taken = b.take_lease_flush(now);
        self.answer(b, taken, now);
    }

    fn answer(&mut self, b: &Budgets, (keys, batch): (Vec<String>, Vec<ScopeFlush>), now: UnixMillis) {
        let mut granted = Vec::new();
        let totals = batch
            .iter()
            .map(|s: &ScopeFlush| {
                let (g, t) = self.apply(s);
                granted.push(g);
                t
            })
            .collect();
        let replicas = 3;
        b.apply_flush(
            &keys,
            Some(FlushReply {
                replicas,
                totals,
                granted,
            }),
            now,
        );
    }

    /// What Redis does with one scope's flush, the lease script included.
    fn apply(&mut self, s: &ScopeFlush) -> (u64, Vec<(i64, Counts)>) {
        let w = self.0.entry(s.tag.clone()).or_default();
        for (bucket, c) in &s.deltas {
            w.add(*bucket, *c);
        }
        let mut grant = 0;
        if let Some(l) = &s.lease {
            let back = w.get(l.give_back_bucket);
            let back = Counts {
                retries: back.retries.saturating_sub(l.give_back),
                ..back
            };
            if w.get(l.give_back_bucket) != Counts::default() {
                w.set(l.give_back_bucket, back);
            }
            let total = w.total(s.bucket);
            let base = l.allowance.unwrap_or(total.requests);
            let allowed = base * u64::from(l.retry_percent) / 100 + l.floor;
            grant = l.want.min(allowed.saturating_sub(total.retries));
            w.add(
                s.bucket,
                Counts {
                    requests: 0,
                    retries: grant,
                },
            );
        }
        let first = s.bucket - (BUCKETS as i64 - 1);
        (grant, (first..=s.bucket).map(|b| (b, w.get(b))).collect())
    }
}

#[test]
fn one_replica_counts_deposits_and_withdrawals() {
    let b = Budgets::new(10, false, 100);
    let rules = [finagle()];
    assert!(
        b.judge(&rules, scope("p"), T0, None, &hash).is_empty(),
        "no request recorded: not budgeted"
    );
    b.deposit(&rules, scope("p"), 1_000, T0, &hash);
    for _ in 0..300 {
        b.withdraw(&rules, scope("p"), T0, &hash);
    }
    let j = &b.judge(&rules, scope("p"), T0, None, &hash)[0];
    assert_eq!(
        (j.standing.requests, j.standing.retries, j.standing.allowed),
        (1_000, 300, 300)
    );
    assert!(j.standing.exhausted);
    assert_eq!(j.shown, "d:vibecode:p");
    // Another dependency is its own scope; no dependency is no scope.
    assert!(b.judge(&rules, scope("q"), T0, None, &hash).is_empty());
    assert!(b.judge(&rules, scope(""), T0, None, &hash).is_empty());
    // After the window the scope keeps its budget, the reserve alone (it saw
    // traffic); a failure judged keeps it so, and ten windows after it was
    // last active it is forgotten.
    let j = &b.judge(&rules, scope("p"), T0.plus_ms(11_000), None, &hash)[0];
    assert_eq!(
        (j.standing.requests, j.standing.retries, j.standing.allowed),
        (0, 0, 100)
    );
    assert!(!b.judge(&rules, scope("p"), T0.plus_ms(109_000), None, &hash).is_empty());
    assert!(b.judge(&rules, scope("p"), T0.plus_ms(220_000), None, &hash).is_empty());
}

#[test]
fn tenant_scopes_are_shown_hashed_and_bounded_by_the_cap() {
    let b = Budgets::new(16, false, 100);
    let rule = BudgetRule {
        scope: BudgetScope::Tenant,
        ..finagle()
    };
    for i in 0..100 {
        let t = format!("tenant-{i}");
        b.deposit(
            &[rule],
            ScopeOf {
                catalog: "c",
                dependency: "d",
                tenant: &t,
            },
            1,
            T0,
            &hash,
        );
    }
    assert!(b.lock().map.len() <= 16);
    assert!(b.evicted() >= 84);
    let listed = b.list("", "", 100, T0);
    assert!(
        listed.iter().all(|(_, j)| j.shown.starts_with("t:c:d:h:")),
        "{listed:?}"
    );
}

#[test]
fn shared_counts_add_the_fleet_totals_and_fall_back_to_scaled_local_counts() {
    let (a, b) = (Budgets::new(10, true, 100), Budgets::new(10, true, 100));
    let rules = [finagle()];
    let mut redis = Sums::default();
    a.deposit(&rules, scope("p"), 600, T0, &hash);
    b.deposit(&rules, scope("p"), 400, T0, &hash);
    redis.flush(&a, T0);
    redis.flush(&b, T0);
    redis.flush(&a, T0);
    let j = &a.judge(&rules, scope("p"), T0, None, &hash)[0];
    assert_eq!(j.standing.requests, 1_000, "fleet totals");
    assert_eq!(j.replicas, 3, "deferrals paced over the replicas the heartbeats count");
    a.withdraw(&rules, scope("p"), T0, &hash);
    assert_eq!(
        a.judge(&rules, scope("p"), T0, None, &hash)[0].standing.retries,
        1,
        "plus unflushed counts"
    );
    // The store stops answering: after a while, own counts × the replicas last seen (3).
    let later = T0.plus_ms(2_000);
    a.apply_flush(&a.take_flush(later).0, None, later);
    assert!(a.in_fallback(later));
    let j = &a.judge(&rules, scope("p"), later, None, &hash)[0];
    assert_eq!((j.standing.requests, j.standing.retries), (1_800, 3));
    // Counts made meanwhile are sent when it answers again.
    redis.flush(&a, later);
    assert!(!a.in_fallback(later));
    assert_eq!(a.judge(&rules, scope("p"), later, None, &hash)[0].standing.retries, 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any interleaving of first attempts and failures on N replicas, with
    /// every replica flushing once per round (in any order): the approved
    /// retries exceed the budget by at most the retries the fleet counts in
    /// two rounds (one round of the others' counts this replica has not read
    /// yet, one it read before they were flushed).
    #[test]
    fn approved_retries_overshoot_by_at_most_two_flush_periods(
        n in 2usize..5,
        rounds in proptest::collection::vec(
            (proptest::collection::vec((0usize..5, 0u8..4), 0..120), any::<u64>()),
            1..12,
        ),
    ) {
        let rule = BudgetRule { min_retries_per_sec: 1, ..finagle() };
        let rules = [rule];
        let replicas: Vec<Budgets> = (0..n).map(|_| Budgets::new(100, true, 100)).collect();
        let mut redis = Sums::default();
        let (mut requests, mut approved, mut max_round) = (0u64, 0u64, 0u64);
        for (ops, order) in &rounds {
            let mut failures = 0;
            for (r, kind) in ops {
                let replica = &replicas[r % n];
                if *kind == 0 {
                    replica.deposit(&rules, scope("p"), 5, T0, &hash);
                    requests += 5;
                } else {
                    failures += 1;
                    let spent = replica.judge(&rules, scope("p"), T0, None, &hash).first().is_some_and(|j| j.standing.exhausted);
                    if !spent {
                        approved += 1;
                    }
                    replica.withdraw(&rules, scope("p"), T0, &hash);
                }
            }
            max_round = max_round.max(failures);
            let start = (*order as usize) % n;
            for i in 0..n {
                redis.flush(&replicas[(start + i) % n], T0);
            }
        }
        let allowed = rule.allowed(requests);
        prop_assert!(approved <= allowed + 2 * max_round, "approved {approved}, allowed {allowed}, round {max_round}");
    }
}

/// Replicas that flush every `per_flush` retries each, answering lease asks
/// at once (the flush task woken): the approved retries of 1 000 first
/// attempts and 600 retries, and the retries the store counted.
fn leased_run(n: usize, per_flush: usize) -> (u64, u64) {
    let rules = [finagle()];
    let replicas: Vec<Budgets> = (0..n).map(|_| Budgets::new(100, true, 100)).collect();
    let mut redis = Sums::default();
    for (i, r) in replicas.iter().enumerate() {
        r.deposit(
            &rules,
            scope("p"),
            1_000 / n as u64 + u64::from(i < 1_000 % n),
            T0,
            &hash,
        );
        redis.flush(r, T0);
    }
    for r in &replicas {
        redis.flush(r, T0);
    }
    let mut approved = 0;
    for i in 0..600 {
        let r = &replicas[i % n];
        let j = &r.judge(&rules, scope("p"), T0, None, &hash)[0];
        if !j.standing.exhausted {
            approved += 1;
            r.withdraw(&rules, scope("p"), T0, &hash);
        }
        redis.flush_leases(r, T0);
        if (i / n) % per_flush == per_flush - 1 {
            redis.flush(r, T0);
        }
    }
    for r in &replicas {
        redis.flush(r, T0);
    }
    let counted = redis
        .0
        .values()
        .next()
        .map_or(0, |w| w.total(finagle().bucket_of(T0)).retries);
    (approved, counted)
}

#[test]
fn near_exhaustion_replicas_approve_from_leases_only() {
    for (n, per_flush) in [(2, 1), (2, 10), (2, 50), (3, 20), (4, 30)] {
        let (approved, counted) = leased_run(n, per_flush);
        println!("{n} replicas, a flush every {per_flush} retries each: {approved} approved, {counted} counted");
        assert!(
            (294..=306).contains(&approved),
            "{n} replicas, a flush every {per_flush}: approved {approved} of 300"
        );
        // The store counts every approval once: the view path's and the
        // leases' (the unused ones handed back by the last flush).
        assert_eq!(counted, approved, "{n} replicas, a flush every {per_flush}");
    }
}

#[test]
fn an_empty_lease_defers_and_the_fallback_takes_no_lease() {
    let rules = [finagle()];
    let b = Budgets::new(10, true, 100);
    let mut redis = Sums::default();
    b.deposit(&rules, scope("p"), 100, T0, &hash);
    redis.flush(&b, T0);
    // 20 % × 100 + 100 = 120 allowed; the store already counts 119.
    redis.0.values_mut().for_each(|w| {
        w.add(
            finagle().bucket_of(T0),
            Counts {
                requests: 0,
                retries: 119,
            },
        )
    });
    redis.flush(&b, T0);
    let j = &b.judge(&rules, scope("p"), T0, None, &hash)[0];
    assert!(j.standing.exhausted, "1 left, no lease yet: deferred");
    let (keys, batch) = b.take_lease_flush(T0);
    assert_eq!(batch.len(), 1, "the flush task is asked for a lease");
    assert_eq!(batch[0].lease.map(|l| l.want), Some(1));
    // No answer (Redis hung past the lease timeout): nothing granted.
    b.apply_flush(&keys, None, T0);
    assert!(b.judge(&rules, scope("p"), T0, None, &hash)[0].standing.exhausted);
    redis.flush_leases(&b, T0);
    let j = &b.judge(&rules, scope("p"), T0, None, &hash)[0];
    assert!(!j.standing.exhausted, "the lease granted the last one");
    b.withdraw(&rules, scope("p"), T0, &hash);
    redis.flush_leases(&b, T0);
    assert!(b.judge(&rules, scope("p"), T0, None, &hash)[0].standing.exhausted);
    // The store silent for long: own counts × 3 (1 retry, 100 first
    // attempts → 300, allowing 160): approved again, without any lease.
    let later = T0.plus_ms(2_000);
    b.apply_flush(&b.take_flush(later).0, None, later);
    let j = &b.judge(&rules, scope("p"), later, None, &hash)[0];
    assert!(!j.standing.exhausted && j.standing.requests == 300, "{j:?}");
    assert!(b.take_lease_flush(later).1.is_empty());
}
