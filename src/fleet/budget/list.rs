//! What the table shows: the busiest scopes (ListBudgets) and the
//! utilization gauges.

use std::collections::HashMap;

use super::{BUDGET_UTILIZATION, Budgets, Judged, ScopeOf, stand};
use crate::core::budget::{BudgetRule, BudgetScope, Standing};
use crate::core::time::UnixMillis;

impl Budgets {
    /// The busiest scopes matching the filters (empty matches all), most used first.
    pub fn list(&self, catalog: &str, dependency: &str, limit: usize, now: UnixMillis) -> Vec<(Box<str>, Judged)> {
        let fallback = self.in_fallback(now);
        let k = self.replicas();
        let t = self.lock();
        let mut out: Vec<(Box<str>, Judged)> = t
            .map
            .values()
            .filter(|e| {
                (catalog.is_empty() || *e.catalog == *catalog)
                    && (dependency.is_empty() || *e.dependency == *dependency)
            })
            .filter_map(|e| {
                let standing = stand(e, now, self.shared, fallback, k)?;
                Some((
                    e.catalog.clone(),
                    Judged {
                        rule: e.rule,
                        shown: e.shown.clone(),
                        standing,
                        replicas: if self.shared { k } else { 1 },
                    },
                ))
            })
            .collect();
        out.sort_by(|a, b| {
            utilization(&b.1.standing)
                .partial_cmp(&utilization(&a.1.standing))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        out.truncate(limit);
        out
    }

    /// Where a call's budgeted scopes stand, the most constraining first,
    /// read-only (explain): as [`Self::judge`] sees them, but a scope the
    /// table lacks is not added and nothing is marked seen.
    pub fn peek(&self, rules: &[BudgetRule], scope: ScopeOf<'_>, now: UnixMillis) -> Vec<Judged> {
        if rules.is_empty() || scope.dependency.is_empty() {
            return Vec::new();
        }
        let fallback = self.in_fallback(now);
        let k = self.replicas();
        let t = self.lock();
        let mut out: Vec<Judged> = rules
            .iter()
            .filter_map(|rule| {
                let e = t.map.get(&scope.key(rule)?)?;
                let mut standing = stand(e, now, self.shared, fallback, k)?;
                if self.shared && !fallback {
                    // Near exhaustion, as the lease would gate it (nothing asked).
                    let room = standing.allowed.saturating_sub(standing.retries);
                    super::lease::gated(&mut standing, e.lease.would_gate(room, k), now, self.flush_ms);
                }
                Some(Judged {
                    rule: *rule,
                    shown: e.shown.clone(),
                    standing,
                    replicas: if self.shared { k } else { 1 },
                })
            })
            .collect();
        most_constraining_first(&mut out);
        out
    }

    /// Sets [`BUDGET_UTILIZATION`] per catalog and scope kind from the busiest scope.
    /// Reads the table in place: nothing is copied or sorted per scope
    /// (listing every scope for this cost a few thousand instructions per
    /// Admit under load, and held the table's lock meanwhile).
    pub fn update_gauges(&self, now: UnixMillis) {
        let fallback = self.in_fallback(now);
        let k = self.replicas();
        let busiest: Vec<((Box<str>, BudgetScope), f64)> = {
            let t = self.lock();
            let mut busiest: HashMap<(&str, BudgetScope), f64> = HashMap::new();
            for e in t.map.values() {
                let Some(standing) = stand(e, now, self.shared, fallback, k) else {
                    continue;
                };
                let slot = busiest.entry((&*e.catalog, e.rule.scope)).or_insert(0.0);
                *slot = slot.max(utilization(&standing));
            }
            busiest
                .into_iter()
                .map(|((c, scope), u)| ((c.into(), scope), u))
                .collect()
        };
        for ((catalog, scope), u) in busiest {
            metrics::gauge!(BUDGET_UTILIZATION, "catalog" => catalog.to_string(), "scope" => scope.as_str()).set(u);
        }
    }
}

/// Sorts judged scopes as a decision meets them: a spent one before one
/// with room, the latest room first, then the most used.
pub(super) fn most_constraining_first(judged: &mut [Judged]) {
    judged.sort_by(|a, b| {
        (b.standing.exhausted, b.standing.room_at, utilization(&b.standing))
            .partial_cmp(&(a.standing.exhausted, a.standing.room_at, utilization(&a.standing)))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
}

/// Retries / allowed (0 when nothing is allowed and nothing spent).
pub fn utilization(s: &Standing) -> f64 {
    if s.allowed == 0 {
        return if s.retries == 0 { 0.0 } else { f64::INFINITY };
    }
    s.retries as f64 / s.allowed as f64
}
