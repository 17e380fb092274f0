//! ReportOutcomes' deposits (called by `Service::report_outcomes` once the
//! report is valid): its first attempts summed per scope and limited per
//! caller, so that no report can switch a budget off
//! (`docs/retry-budgets.md`, "Counting").

use std::collections::HashMap;

use super::decide::budget_rules;
use crate::core::{Policy, UnixMillis};
use crate::fleet::Fleet;
use crate::fleet::budget::ScopeOf;

/// One entry of a ReportOutcomes.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutcomeCount<'a> {
    /// Catalog (empty: the default).
    pub catalog: &'a str,
    /// Dependency instance.
    pub dependency: &'a str,
    /// Tenant.
    pub tenant: &'a str,
    /// Method.
    pub method: &'a str,
    /// First attempts made (the budgets' deposits).
    pub requests: u64,
}

/// Deposits one report's first attempts from `caller`: the counts of each
/// scope (catalog, dependency, tenant) summed with saturation, then limited
/// as one per caller per budget scope (`--max-reported-requests-per-sec`,
/// far under the per-entry cap `MAX_COUNT_PER_REPORT`); all that is not
/// deposited is counted as cut. `counts` were validated.
pub fn deposit_report(policy: &Policy, fleet: &Fleet, caller: &str, counts: &[OutcomeCount<'_>], now: UnixMillis) {
    let mut summed: HashMap<(&str, &str, &str), u64> = HashMap::new();
    for c in counts {
        let catalog = match c.catalog {
            "" => policy.default_catalog().name.as_ref(),
            name => match policy.catalog(name) {
                Some(cat) => cat.name.as_ref(),
                None => continue,
            },
        };
        let n = summed.entry((catalog, c.dependency, c.tenant)).or_insert(0);
        *n = n.saturating_add(c.requests);
    }
    for ((catalog, dependency, tenant), n) in summed {
        let rules = budget_rules(policy, catalog);
        if n == 0 || rules.is_empty() {
            continue;
        }
        let scope = ScopeOf {
            catalog,
            dependency,
            tenant,
        };
        fleet.budget_deposit_reported(rules, scope, n, caller, now);
    }
}
