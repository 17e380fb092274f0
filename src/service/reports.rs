//! ReportOutcomes as the doors call it: the report validated and its probe
//! reported by [`Service::report_outcomes`], its first attempts deposited
//! here — summed per scope and limited per caller, so that no report can
//! switch a budget off (`docs/retry-budgets.md`, "Counting").

use std::collections::HashMap;

use super::Service;
use super::caller::Caller;
use super::decide::budget_rules;
use super::error::{Error, ErrorKind};
use super::holds::{MAX_COUNT_PER_REPORT, OUTCOME_REQUESTS_TOTAL, OutcomeCount, Shown};
use crate::core::{Policy, UnixMillis};
use crate::fleet::Fleet;
use crate::fleet::budget::ScopeOf;

/// Deposits one report's first attempts from `caller`: the counts of each
/// scope (catalog, dependency, tenant) summed with saturation, then limited
/// as one per caller per budget scope (`--max-reported-requests-per-sec`,
/// far under the per-entry cap [`MAX_COUNT_PER_REPORT`]); all that is not
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

impl Service {
    /// ReportOutcomes from `caller`: the report is validated and its probe
    /// reported by [`Service::report_outcomes`] (given the counts without
    /// their first attempts), and its first attempts are deposited by
    /// [`deposit_report`] — summed per scope and limited per caller — once
    /// the report is valid (as before, even when its probe token is unknown).
    pub fn report_outcomes_from(
        &self,
        caller: Caller<'_>,
        counts: &[OutcomeCount<'_>],
        probe_token: &str,
        probe_succeeded: bool,
    ) -> Result<Option<Shown>, Error> {
        let bare: Vec<OutcomeCount<'_>> = counts.iter().map(|c| OutcomeCount { requests: 0, ..*c }).collect();
        let answer = self.report_outcomes(&bare, probe_token, probe_succeeded);
        if answer.as_ref().is_ok() || answer.as_ref().is_err_and(|e| e.kind == ErrorKind::NotFound) {
            let requests = counts
                .iter()
                .fold(0u64, |a, c| a.saturating_add(c.requests.min(MAX_COUNT_PER_REPORT)));
            metrics::counter!(OUTCOME_REQUESTS_TOTAL).increment(requests);
            let fleet = self.fleet()?;
            deposit_report(&self.policy(), fleet, &caller.name(), counts, UnixMillis::now());
        }
        answer
    }
}
