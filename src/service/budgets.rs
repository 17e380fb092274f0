//! Fleet retry budgets outside a decision: first attempts deposited (Admit,
//! ReportOutcomes) and the budgets listed. How a retry is judged against
//! them is step 5 of [`super::decide`].

use super::Service;
use super::caller::Caller;
use super::decide::budget_rules;
use super::error::{Error, check_len};
use crate::core::{Policy, UnixMillis, limits};
use crate::fleet::Fleet;
use crate::fleet::budget::{Judged, ScopeOf};

/// Default and largest ListBudgets answer.
const LIMIT_DEFAULT: usize = 20;
const LIMIT_MAX: usize = 1_000;

/// One budgeted scope as ListBudgets shows it.
#[derive(Debug, Clone)]
pub struct BudgetStanding {
    /// The catalog of the scope.
    pub catalog: String,
    /// Where it stands (tenant hashed in `shown`).
    pub judged: Judged,
}

/// Records `n` first attempts of a call (Admit with attempt ≤ 1) on the
/// budgets of its catalog; `caller`, when the door names one, is held to its
/// new-scope rate (`--budget-scopes-per-sec-per-caller`).
#[allow(clippy::too_many_arguments)]
pub fn deposit(
    policy: &Policy,
    fleet: &Fleet,
    catalog: &str,
    dependency: &str,
    tenant: &str,
    n: u64,
    caller: Option<Caller<'_>>,
    now: UnixMillis,
) {
    let rules = budget_rules(policy, catalog);
    if n == 0 || rules.is_empty() {
        return;
    }
    let scope = ScopeOf {
        catalog,
        dependency,
        tenant,
    };
    match caller {
        Some(caller) => fleet.budget_deposit_from(rules, scope, n, &|| caller.name().into_owned(), now),
        None => fleet.budget_deposit(rules, scope, n, now),
    }
}

impl Service {
    /// ListBudgets: the budgeted scopes matching `catalog` and `dependency`
    /// (empty matches all), at most `limit` (0: the default of 20; at most 1 000).
    pub fn list_budgets(&self, catalog: &str, dependency: &str, limit: i32) -> Result<Vec<BudgetStanding>, Error> {
        let fleet = self.fleet()?;
        check_len("catalog", catalog, limits::MAX_CATALOG)?;
        check_len("dependency", dependency, limits::MAX_DEPENDENCY)?;
        if limit < 0 {
            return Err(Error::invalid("limit", "must not be negative"));
        }
        let limit = match limit {
            0 => LIMIT_DEFAULT,
            n => usize::try_from(n).unwrap_or(LIMIT_MAX).min(LIMIT_MAX),
        };
        Ok(fleet
            .budgets()
            .list(catalog, dependency, limit, UnixMillis::now())
            .into_iter()
            .map(|(catalog, judged)| BudgetStanding {
                catalog: catalog.to_string(),
                judged,
            })
            .collect())
    }
}
