//! Fleet retry budgets on the gRPC path: a Classify's retry judged against
//! the budgets of its scopes (deferred when spent, then counted as a
//! withdrawal), first attempts deposited by Admit and ReportOutcomes, and
//! the ListBudgets RPC.

use tonic::Status;

use super::convert::timestamp_from_millis;
use super::pb;
use crate::core::budget::BudgetRule;
use crate::core::warnings::BudgetNote;
use crate::core::{DecideError, Decision, Failure, Floor, Policy, Strategy, UnixMillis, Verdict, decide_floored};
use crate::fleet::Fleet;
use crate::fleet::budget::{BUDGET_EXHAUSTED_TOTAL, Judged, ScopeOf};

/// Default and largest ListBudgets answer.
const LIMIT_DEFAULT: usize = 20;
const LIMIT_MAX: usize = 1_000;

fn rules<'p>(policy: &'p Policy, catalog: &str) -> &'p [BudgetRule] {
    policy.catalog(catalog).map_or(&[], |c| &c.budgets)
}

/// Judges the retry `d` (already decided with the hold floor `hold_floor`,
/// if any) against the budgets of its scopes. Only a `retry_with_limit`
/// answer is judged: a verification, a stop or an applied effect is no
/// retry, so a budget never changes it (nor makes an unsafe retry look
/// safe). A spent budget defers the retry through the engine, like a hold:
/// the verdict stays, `after_ms` reaches the time the window has room (past
/// the deadline: `do_not_retry` by the deadline rule). A retry still
/// answered `retry_with_limit` is then counted as a withdrawal.
pub fn apply<'a>(
    policy: &'a Policy,
    fleet: &Fleet,
    f: &Failure<'a>,
    d: Decision<'a>,
    hold_floor: Option<UnixMillis>,
    now: UnixMillis,
) -> Result<Decision<'a>, DecideError> {
    let rules = rules(policy, d.catalog);
    if rules.is_empty() || d.verdict != Verdict::RetryWithLimit || f.dependency.is_empty() {
        return Ok(d);
    }
    let scope = ScopeOf {
        catalog: d.catalog,
        dependency: f.dependency,
        tenant: f.tenant,
    };
    let judged = fleet.budget_judge(rules, scope, now);
    let first = judged.first();
    let mut d = d;
    if let Some(j) = first.filter(|j| j.standing.exhausted) {
        let room = j.standing.room_at;
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
        d = decide_floored(policy, f, now, Some(floor))?;
        for w in warnings.iter() {
            d.warnings.add(w);
        }
        d.warnings.add_budget_exhausted(BudgetNote {
            retries: j.standing.retries,
            requests: j.standing.requests,
            rule: j.rule,
        });
        metrics::counter!(BUDGET_EXHAUSTED_TOTAL, "catalog" => d.catalog.to_owned()).increment(1);
    }
    let retried = d.verdict == Verdict::RetryWithLimit;
    if retried {
        fleet.budget_withdraw(rules, scope, now);
    }
    d.budget = first.map(|j| crate::core::budget::BudgetView {
        scope_key: j.shown.clone(),
        requests: j.standing.requests,
        retries: j.standing.retries.saturating_add(u64::from(retried)),
        allowed: j.standing.allowed,
        window_start: j.standing.window_start,
    });
    Ok(d)
}

/// A decision's budget for the wire.
pub fn view_to_proto(v: &crate::core::budget::BudgetView) -> pb::RetryBudget {
    pb::RetryBudget {
        scope_key: v.scope_key.clone(),
        requests: v.requests,
        retries: v.retries,
        allowed: v.allowed,
        window_start: Some(timestamp_from_millis(v.window_start)),
    }
}

/// Where `j` stands, with `extra` retries counted since it was judged.
pub fn to_proto(j: &Judged, extra: u64) -> pb::RetryBudget {
    pb::RetryBudget {
        scope_key: j.shown.clone(),
        requests: j.standing.requests,
        retries: j.standing.retries.saturating_add(extra),
        allowed: j.standing.allowed,
        window_start: Some(timestamp_from_millis(j.standing.window_start)),
    }
}

/// Records `n` first attempts of a call (Admit with attempt ≤ 1, or a
/// ReportOutcomes count) on the budgets of its catalog.
pub fn deposit(policy: &Policy, fleet: &Fleet, catalog: &str, dependency: &str, tenant: &str, n: u64, now: UnixMillis) {
    let rules = rules(policy, catalog);
    if n == 0 || rules.is_empty() {
        return;
    }
    let scope = ScopeOf {
        catalog,
        dependency,
        tenant,
    };
    fleet.budget_deposit(rules, scope, n, now);
}

/// The body of ListBudgets.
pub fn list_budgets(fleet: &Fleet, req: &pb::ListBudgetsRequest) -> Result<pb::ListBudgetsResponse, Status> {
    super::holds::check_len("catalog", &req.catalog, crate::core::limits::MAX_CATALOG)?;
    super::holds::check_len("dependency", &req.dependency, crate::core::limits::MAX_DEPENDENCY)?;
    if req.limit < 0 {
        return Err(super::holds::invalid("limit", "must not be negative"));
    }
    let limit = match req.limit {
        0 => LIMIT_DEFAULT,
        n => usize::try_from(n).unwrap_or(LIMIT_MAX).min(LIMIT_MAX),
    };
    let now = UnixMillis::now();
    let budgets = fleet
        .budgets()
        .list(&req.catalog, &req.dependency, limit, now)
        .into_iter()
        .map(|(catalog, j)| pb::BudgetStanding {
            catalog: catalog.to_string(),
            scope: j.rule.scope.as_str().to_owned(),
            rule: j.rule.describe(),
            budget: Some(to_proto(&j, 0)),
        })
        .collect();
    Ok(pb::ListBudgetsResponse { budgets })
}
