//! Step 5 of the one decision path ([`super::decide`]): the retry judged
//! against its scope's budgets. Only an approved retry withdraws; a spent
//! budget defers the retry, paced at the budget's rate, and the deferral
//! withdraws nothing (the one model of `docs/retry-budgets.md`).

use crate::core::budget::{BudgetRule, BudgetView, pace_ms, unit_of};
use crate::core::warnings::BudgetNote;
use crate::core::{DecideError, Decision, Failure, Floor, Policy, Strategy, UnixMillis, Verdict};
use crate::fleet::budget::{BUDGET_EXHAUSTED_TOTAL, Judged, ScopeOf};

/// The budget rules of `catalog` (none for an unknown one).
pub fn budget_rules<'p>(policy: &'p Policy, catalog: &str) -> &'p [BudgetRule] {
    policy.catalog(catalog).map_or(&[], |c| &c.budgets)
}

/// What step 5 meets: a scope's budgets, live (withdrawing and recording
/// deferrals) or given as data (read-only).
pub trait Budgeting {
    /// The most constraining budget of the scope (`None`: not budgeted).
    fn budget(&mut self, rules: &[BudgetRule], scope: ScopeOf<'_>, now: UnixMillis) -> Option<Judged>;
    /// An approved retry's withdrawal.
    fn withdraw(&mut self, rules: &[BudgetRule], scope: ScopeOf<'_>, now: UnixMillis);
    /// A deferral given on `rule`'s scope (withdraws nothing; paces the next).
    fn defer(&mut self, rule: &BudgetRule, scope: ScopeOf<'_>, now: UnixMillis);
}

/// Step 5: judges the retry `d` (already decided with the hold floor
/// `hold_floor`, if any) against the budgets of its scopes. Only a
/// `retry_with_limit` answer is judged: a verification, a stop or an
/// applied effect is no retry, so a budget never changes it (nor makes an
/// unsafe retry look safe). A spent budget defers the retry through the
/// engine, like a hold: the verdict stays, `after_ms` reaches the paced
/// return (past the deadline: `do_not_retry` by the deadline rule). Only
/// an approved retry is withdrawn; a deferral withdraws nothing (the one
/// model of `docs/retry-budgets.md`).
pub(super) fn judge_budget<'a>(
    policy: &'a Policy,
    standing: &mut impl Budgeting,
    f: &Failure<'a>,
    d: &mut Decision<'a>,
    hold_floor: Option<UnixMillis>,
    now: UnixMillis,
) -> Result<Option<Judged>, DecideError> {
    let rules = budget_rules(policy, d.catalog);
    if rules.is_empty() || d.verdict != Verdict::RetryWithLimit || f.dependency.is_empty() {
        return Ok(None);
    }
    let scope = ScopeOf {
        catalog: d.catalog,
        dependency: f.dependency,
        tenant: f.tenant,
    };
    let judged = standing.budget(rules, scope, now);
    let mut deferred = false;
    if let Some(j) = judged.as_ref().filter(|j| j.standing.exhausted) {
        let room = now.plus_ms(paced_wait_ms(policy, d, j));
        let floor = match hold_floor {
            Some(h) if h >= room => Floor {
                until: h,
                strategy: Strategy::Hold,
            },
            _ => Floor {
                until: room,
                strategy: Strategy::Budget,
            },
        };
        let warnings = d.warnings;
        *d = crate::core::decide_floored(policy, f, now, Some(floor))?;
        for w in warnings.iter() {
            d.warnings.add(w);
        }
        d.warnings.add_budget_exhausted(BudgetNote {
            retries: j.standing.retries,
            requests: j.standing.requests,
            rule: j.rule,
        });
        metrics::counter!(BUDGET_EXHAUSTED_TOTAL, "catalog" => d.catalog.to_owned()).increment(1);
        deferred = d.verdict == Verdict::RetryWithLimit;
        if deferred {
            standing.defer(&j.rule, scope, now);
        }
    }
    let approved = d.verdict == Verdict::RetryWithLimit && !deferred;
    if approved {
        standing.withdraw(rules, scope, now);
    }
    d.budget = judged.as_ref().map(|j| BudgetView {
        scope_key: j.shown.clone(),
        requests: j.standing.requests,
        retries: j.standing.retries.saturating_add(u64::from(approved)),
        allowed: j.standing.allowed,
        window_start: j.standing.window_start,
        deferred: j.standing.deferred.saturating_add(u64::from(deferred)),
        next_room_at: j.standing.room_at,
    });
    Ok(judged)
}

/// How long the deferral of `d` by the spent budget `j` waits: the
/// `deferred + 1`-th of the window, paced at the budget's rate over its
/// replicas, capped by the code's `max_delay_ms` (beyond it: spread over the
/// cap's last half). The jitter is drawn from the scope, window and `k`, so
/// the read-only path given the same standing decides the same wait.
fn paced_wait_ms(policy: &Policy, d: &Decision<'_>, j: &Judged) -> u64 {
    let cap = policy.catalog(d.catalog).map_or(0, |c| {
        let entry = match d.code {
            "" => c.no_envelope(),
            code if d.known_code => c.lookup(code).unwrap_or_else(|| c.unknown()),
            _ => c.unknown(),
        };
        entry.max_delay_ms
    });
    let k = j.standing.deferred.saturating_add(1);
    let seed = j.shown.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }) ^ (j.standing.window_start.0 as u64).rotate_left(17)
        ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    pace_ms(&j.rule, &j.standing, k, j.replicas, cap, unit_of(seed), unit_of(!seed))
}
