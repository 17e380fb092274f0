//! Explain: the decision retryd would give a failure now, read-only. The
//! failure meets the holds in force and the budget standing as they are,
//! through the one decision path, and nothing is changed: no hold placed
//! or extended, no probe token spent, no budget withdrawn or deferral
//! counted, no decision counted, observed or logged.

use std::sync::Arc;

use super::Service;
use super::classify::{BatchItem, check_failure, decide_violation};
use super::decide::{self, Alone, Budgeting, Decided, Standing};
use super::error::{Violation, check_locale};
use crate::core::budget::BudgetRule;
use crate::core::hold::{self, Hold, HoldPlan};
use crate::core::{Failure, UnixMillis};
use crate::fleet::Fleet;
use crate::fleet::budget::{Judged, ScopeOf};

/// What a failure would meet and be answered now.
#[derive(Debug)]
pub struct Explained<'a> {
    /// The decision, the hold in force that floors it and the budget it is
    /// judged against, as a live call would get them.
    pub decided: Decided<'a>,
    /// The hold the decision asks for, as it would be placed (or extend the
    /// one in force); not placed.
    pub would_place: Option<Hold>,
}

/// The live fleet memory, only read.
struct Peek<'f> {
    fleet: &'f Fleet,
    planned: Option<Hold>,
}

impl Standing for Peek<'_> {
    fn probe_failed(&mut self, _: &str, _: UnixMillis) {}

    fn place(&mut self, plan: &HoldPlan<'_>, now: UnixMillis) -> bool {
        self.planned = Some(plan.to_hold(String::new(), now));
        true
    }

    fn in_force(&mut self, catalog: &str, f: &Failure<'_>, now: UnixMillis) -> Option<Arc<Hold>> {
        let live = self.fleet.in_force(catalog, f.dependency, f.tenant, f.method, now);
        match &self.planned {
            // The decision's own hold ends last only if placing it would extend.
            Some(planned)
                if hold::ending_last([live.as_deref(), Some(planned)].into_iter().flatten(), now)
                    .is_some_and(|h| std::ptr::eq(h, planned)) =>
            {
                Some(Arc::new(planned.clone()))
            }
            _ => live,
        }
    }
}

impl Budgeting for Peek<'_> {
    fn budget(&mut self, rules: &[BudgetRule], scope: ScopeOf<'_>, now: UnixMillis) -> Option<Judged> {
        self.fleet.budget_peek(rules, scope, now).into_iter().next()
    }

    fn withdraw(&mut self, _: &[BudgetRule], _: ScopeOf<'_>, _: UnixMillis) {}
    fn defer(&mut self, _: &BudgetRule, _: ScopeOf<'_>, _: UnixMillis) {}
}

impl Service {
    /// What `failure` would be answered at `now`, read-only (see the module
    /// docs), handed to `answer`. Violations name the field as
    /// `failure.<field>`, as Classify's do.
    pub fn explain<R>(
        &self,
        locale: &str,
        failure: Option<BatchItem<'_>>,
        now: UnixMillis,
        answer: impl FnOnce(&Explained<'_>) -> R,
    ) -> Result<R, Violation> {
        check_locale(locale)?;
        let (f, notes) = failure.ok_or_else(|| Violation::new("failure", "is required"))?;
        let name = |field: &str| format!("failure.{field}");
        check_failure(&f, &name)?;
        let policy = self.policy();
        let (decided, would_place) = match self.fleet.as_deref() {
            Some(fleet) => {
                let mut peek = Peek { fleet, planned: None };
                let decided = decide::decide(&policy, &f, notes, now, &mut peek);
                (decided, peek.planned)
            }
            None => (decide::decide(&policy, &f, notes, now, &mut Alone), None),
        };
        let decided = decided.map_err(|e| decide_violation(&e, &name))?;
        Ok(answer(&Explained { decided, would_place }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use arc_swap::ArcSwap;

    use super::*;
    use crate::core::{Operation, Policy, Verdict};
    use crate::fleet::FleetConfig;
    use crate::service::holds::AdmitAsk;
    use crate::service::observe::DecisionObserver;
    use crate::service::{Caller, InputNotes, ServiceConfig};

    #[derive(Debug, Default)]
    struct Seen(AtomicUsize);

    impl DecisionObserver for Seen {
        fn observe(&self, _: &Failure<'_>, _: &Decided<'_>, _: UnixMillis) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn failure<'a>(code: &'a str, op: Operation, attempt: u32) -> Failure<'a> {
        Failure {
            catalog: "frontspin",
            code,
            operation: op,
            attempt,
            dependency: "fs-eu",
            tenant: "acme",
            ..Failure::default()
        }
    }

    /// Explain reads the holds and the budget in force and changes neither:
    /// no hold placed, no retry withdrawn, nothing seen by the decision hook
    /// (the decision log); a live Classify of the same failure does all three.
    #[tokio::test]
    async fn explain_answers_as_classify_would_and_changes_nothing() {
        let policy = Arc::new(ArcSwap::from_pointee(Policy::embedded().expect("policy")));
        let fleet = Fleet::in_memory(FleetConfig::default());
        let seen = Arc::new(Seen::default());
        let (_drain, draining) = tokio::sync::watch::channel(false);
        let s = Service::new(policy, ServiceConfig::default())
            .with_fleet(Arc::clone(&fleet), draining)
            .with_observer(Arc::clone(&seen) as Arc<dyn DecisionObserver>);
        for _ in 0..50 {
            let ask = AdmitAsk {
                catalog: "frontspin",
                dependency: "fs-eu",
                tenant: "acme",
                method: "",
                attempt: 1,
                caller: None,
            };
            s.admit(ask).await.expect("admit");
        }
        let now = UnixMillis::now();
        let requests = |fleet: &Fleet| -> Vec<(u64, u64)> {
            fleet
                .budgets()
                .list("frontspin", "fs-eu", 10, now)
                .into_iter()
                .map(|(_, j)| (j.standing.requests, j.standing.retries))
                .collect()
        };
        let before = requests(&fleet);
        assert!(!before.is_empty(), "the scope is budgeted");

        // A retryable read under a budget: explained with its standing.
        let read = failure("FRONTSPIN_SERVER_ERROR", Operation::Read, 2);
        let (verdict, budgeted) = s
            .explain("en", Some((read, InputNotes::default())), now, |e| {
                (e.decided.decision.verdict, e.decided.budget.is_some())
            })
            .expect("explained");
        assert_eq!((verdict, budgeted), (Verdict::RetryWithLimit, true));
        // A quota stop: what it would place, placed nowhere.
        let stop = failure("RATE_LIMITED", Operation::Write, 1);
        let would = s
            .explain("en", Some((stop, InputNotes::default())), now, |e| {
                e.would_place.as_ref().map(|h| (h.kind, h.key.tenant().to_owned()))
            })
            .expect("explained");
        assert_eq!(would, Some((crate::core::hold::HoldKind::QuotaStop, "acme".to_owned())));
        assert_eq!(fleet.mirror().len(), 0, "explain placed no hold");
        assert_eq!(requests(&fleet), before, "explain withdrew nothing");
        assert_eq!(
            seen.0.load(Ordering::Relaxed),
            0,
            "explain is not a decision: not logged"
        );
        // A bad field is named as Classify names it.
        let mut bad = failure("RATE_LIMITED", Operation::Write, 1);
        bad.catalog = "nope";
        let err = s
            .explain("en", Some((bad, InputNotes::default())), now, |_| ())
            .expect_err("unknown catalog");
        assert_eq!(err.field, "failure.catalog");

        // The same failures classified live: the hold is placed, the retry
        // withdrawn, both seen by the hook — so the test above could fail.
        s.classify(
            "en",
            Some((read, InputNotes::default())),
            now,
            Caller::Named("c"),
            |_, _| (),
        )
        .expect("classified");
        s.classify(
            "en",
            Some((stop, InputNotes::default())),
            now,
            Caller::Named("c"),
            |_, _| (),
        )
        .expect("classified");
        assert_eq!(fleet.mirror().len(), 1);
        assert_ne!(requests(&fleet), before);
        assert_eq!(seen.0.load(Ordering::Relaxed), 2);
    }
}
