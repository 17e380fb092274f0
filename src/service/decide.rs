//! What a retry is under holds and budgets: the one decision path.
//!
//! A decision is made in this order, here and nowhere else:
//!
//! 1. the core decides the failure alone ([`crate::core::decide`]);
//! 2. a probe token sent with the failure reports that probe failed;
//! 3. the hold the decision asks for is placed;
//! 4. the hold in force on the failure's scope (the one ending last, the
//!    decision's own included) floors a retry's wait;
//! 5. the scope's retry budget judges what is still a retry: a spent budget
//!    defers it, paced at the budget's rate (a deferral withdraws nothing:
//!    the retry is judged again when it returns), and an approved retry is
//!    withdrawn from the budget.
//!
//! What the decision meets in steps 2–5 is a [`Standing`]: the live fleet
//! memory ([`Live`], which places and withdraws), no fleet memory at all
//! ([`Alone`]), or a standing given as data ([`Given`], which places
//! nothing and withdraws nothing). The live server, the shadow policy,
//! `retryd replay`, policy tests and diffs all call [`decide`] below, so the
//! decision they report is the live one by construction.

use std::sync::Arc;

use crate::core::budget::BudgetRule;
use crate::core::hold::{self, Hold, HoldPlan};
use crate::core::{DecideError, Decision, Failure, Policy, UnixMillis, Warning};
use crate::fleet::budget::{Judged, ScopeOf};
use crate::fleet::{Fleet, PlaceOutcome, ScopeHolds};

pub use super::budget_step::{Budgeting, budget_rules};
use super::caller::Caller;

/// What the door noticed about the input that the core cannot see.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InputNotes {
    /// A timestamp was outside what the wire format can carry and was
    /// clamped on the way in (warned as `timestamp_out_of_range`).
    pub timestamp_out_of_range: bool,
}

/// A decision with the fleet standing it met.
#[derive(Debug)]
pub struct Decided<'a> {
    /// The decision as answered.
    pub decision: Decision<'a>,
    /// The hold in force on the failure's scope after the decision placed
    /// its own (what floored a retry), if any: the fleet memory's own,
    /// shared, not copied.
    pub hold: Option<Arc<Hold>>,
    /// The budget the retry was judged against, as it stood before this
    /// decision's withdrawal, if the scope is budgeted.
    pub budget: Option<Judged>,
}

/// The fleet state a decision meets (steps 2–5 of the module docs).
pub trait Standing: Budgeting {
    /// Whether there is any fleet state at all; without it the core's
    /// decision is the answer.
    fn remembers(&self) -> bool {
        true
    }
    /// A probe the caller reports as failed with this failure.
    fn probe_failed(&mut self, token: &str, now: UnixMillis);
    /// Places the decision's hold; `false` when the caller is over its
    /// placement rate and nothing was placed.
    fn place(&mut self, plan: &HoldPlan<'_>, now: UnixMillis) -> bool;
    /// The hold in force on the failure's scopes that ends last.
    fn in_force(&mut self, catalog: &str, failure: &Failure<'_>, now: UnixMillis) -> Option<Arc<Hold>>;
}

/// The live fleet memory: places holds and withdraws retries.
#[derive(Debug)]
pub struct Live<'f> {
    /// The replica's fleet memory.
    pub fleet: &'f Fleet,
    /// Who places any hold.
    pub caller: Caller<'f>,
    /// The holds met per scope within this call (a batch's items share
    /// it); `None`, every item asks the mirror.
    pub seen: Option<&'f mut ScopeHolds>,
}

impl<'f> Live<'f> {
    /// The live fleet memory for `caller`, one decision at a time.
    pub fn new(fleet: &'f Fleet, caller: Caller<'f>) -> Self {
        Live {
            fleet,
            caller,
            seen: None,
        }
    }
}

impl Standing for Live<'_> {
    fn probe_failed(&mut self, token: &str, now: UnixMillis) {
        // Spends the token; the decision itself re-places a stop, and a
        // circuit stays open until its next slot.
        self.fleet.probe_failed(token, now);
    }

    fn place(&mut self, plan: &HoldPlan<'_>, now: UnixMillis) -> bool {
        self.fleet.place(plan, &self.caller.name(), now) != PlaceOutcome::RateLimited
    }

    fn in_force(&mut self, catalog: &str, f: &Failure<'_>, now: UnixMillis) -> Option<Arc<Hold>> {
        match self.seen.as_deref_mut() {
            Some(seen) => seen.in_force(self.fleet, [catalog, f.dependency, f.tenant, f.method], now),
            None => self.fleet.in_force(catalog, f.dependency, f.tenant, f.method, now),
        }
    }
}

impl Budgeting for Live<'_> {
    fn budget(&mut self, rules: &[BudgetRule], scope: ScopeOf<'_>, now: UnixMillis) -> Option<Judged> {
        let caller = self.caller;
        let name = move || caller.name().into_owned();
        self.fleet.budget_judge(rules, scope, now, &name).into_iter().next()
    }

    fn withdraw(&mut self, rules: &[BudgetRule], scope: ScopeOf<'_>, now: UnixMillis) {
        self.fleet.budget_withdraw(rules, scope, now);
    }

    fn defer(&mut self, rule: &BudgetRule, scope: ScopeOf<'_>, now: UnixMillis) {
        self.fleet.budgets().defer(rule, scope, now);
    }
}

/// No fleet memory (a server started without it, the CLI): nothing is held
/// and nothing is budgeted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Alone;

impl Standing for Alone {
    fn remembers(&self) -> bool {
        false
    }
    fn probe_failed(&mut self, _: &str, _: UnixMillis) {}
    fn place(&mut self, _: &HoldPlan<'_>, _: UnixMillis) -> bool {
        true
    }
    fn in_force(&mut self, _: &str, _: &Failure<'_>, _: UnixMillis) -> Option<Arc<Hold>> {
        None
    }
}

impl Budgeting for Alone {
    fn budget(&mut self, _: &[BudgetRule], _: ScopeOf<'_>, _: UnixMillis) -> Option<Judged> {
        None
    }
    fn withdraw(&mut self, _: &[BudgetRule], _: ScopeOf<'_>, _: UnixMillis) {}
    fn defer(&mut self, _: &BudgetRule, _: ScopeOf<'_>, _: UnixMillis) {}
}

/// A standing given as data, read-only: the holds in force on the scope and
/// the budget as it stood. Nothing is stored and nothing is withdrawn. What
/// a policy test, a diff, the shadow policy and a replay decide with.
#[derive(Debug, Clone, Default)]
pub struct Given<'h> {
    /// Holds in force on the failure's scope.
    pub holds: &'h [Hold],
    /// The budget as it stood when the live decision was made.
    pub budget: Option<&'h Judged>,
    /// Whether the decision's own hold joins `holds` (it has not been
    /// placed yet), or `holds` already is what the live decision met after
    /// placing its own (a logged decision).
    pub place_own: bool,
    placed: Option<Hold>,
}

impl<'h> Given<'h> {
    /// `holds` in force before the decision, which adds its own hold to
    /// them, and the budget standing `budget` (policy tests, diffs).
    pub fn new(holds: &'h [Hold], budget: Option<&'h Judged>) -> Self {
        Given {
            holds,
            budget,
            place_own: true,
            placed: None,
        }
    }

    /// What a logged (or live) decision met: `hold`, the hold in force
    /// after the live decision placed its own (so a hold the live replica
    /// did not place, e.g. over a caller's placement rate, is not made up
    /// here), or none, when the decision's own hold is all there is; and
    /// the budget as it stood.
    pub fn as_logged(hold: Option<&'h Hold>, budget: Option<&'h Judged>) -> Self {
        Given {
            holds: hold.map_or(&[], std::slice::from_ref),
            budget,
            place_own: hold.is_none(),
            placed: None,
        }
    }
}

impl Standing for Given<'_> {
    fn probe_failed(&mut self, _: &str, _: UnixMillis) {}

    fn place(&mut self, plan: &HoldPlan<'_>, now: UnixMillis) -> bool {
        if self.place_own {
            self.placed = Some(plan.to_hold(String::new(), now));
        }
        true
    }

    fn in_force(&mut self, _: &str, _: &Failure<'_>, now: UnixMillis) -> Option<Arc<Hold>> {
        hold::ending_last(self.holds.iter().chain(self.placed.as_ref()), now)
            .cloned()
            .map(Arc::new)
    }
}

impl Budgeting for Given<'_> {
    fn budget(&mut self, _: &[BudgetRule], _: ScopeOf<'_>, _: UnixMillis) -> Option<Judged> {
        self.budget.cloned()
    }

    fn withdraw(&mut self, _: &[BudgetRule], _: ScopeOf<'_>, _: UnixMillis) {}
    fn defer(&mut self, _: &BudgetRule, _: ScopeOf<'_>, _: UnixMillis) {}
}

/// Decides `f` at `now` against `standing`: the one decision path (see the
/// module docs for its order).
pub fn decide<'a>(
    policy: &'a Policy,
    f: &Failure<'a>,
    notes: InputNotes,
    now: UnixMillis,
    standing: &mut impl Standing,
) -> Result<Decided<'a>, DecideError> {
    let mut d = crate::core::decide(policy, f, now)?;
    if notes.timestamp_out_of_range {
        d.warnings.add(Warning::TimestampOutOfRange);
    }
    if !standing.remembers() {
        return Ok(Decided {
            decision: d,
            hold: None,
            budget: None,
        });
    }
    if !f.probe_token.is_empty() {
        standing.probe_failed(f.probe_token, now);
    }
    let rate_limited = d.hold_plan.is_some_and(|plan| !standing.place(&plan, now));
    let hold = standing.in_force(d.catalog, f, now);
    let hold_floor = hold.as_ref().filter(|_| d.retry.retryable).map(|h| h.retry_floor(now));
    if let Some(floor) = hold_floor {
        d = crate::core::decide_held(policy, f, now, Some(floor))?;
    }
    // The decision is amended in place: it is large, and each move is a copy.
    let budget = super::budget_step::judge_budget(policy, standing, f, &mut d, hold_floor, now)?;
    if rate_limited {
        d.warnings.add(Warning::HoldRateLimited);
    }
    if notes.timestamp_out_of_range {
        d.warnings.add(Warning::TimestampOutOfRange);
    }
    Ok(Decided {
        decision: d,
        hold,
        budget,
    })
}

/// Decides `f` at `now` read-only against `given` (see [`Given`]).
pub fn read_only<'a>(
    policy: &'a Policy,
    f: &Failure<'a>,
    now: UnixMillis,
    mut given: Given<'_>,
) -> Result<Decided<'a>, DecideError> {
    decide(policy, f, InputNotes::default(), now, &mut given)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::budget::Standing as BudgetStanding;
    use crate::core::hold::{HoldKey, HoldKind, HoldScope};
    use crate::core::{Operation, Policy, Strategy, Verdict};
    use crate::fleet::FleetConfig;

    const NOW: UnixMillis = UnixMillis(1_786_190_700_000);

    fn failure<'a>(catalog: &'a str, code: &'a str, op: Operation) -> Failure<'a> {
        Failure {
            catalog,
            code,
            operation: op,
            attempt: 1,
            dependency: "portal-1",
            ..Failure::default()
        }
    }

    /// The live path and the read-only path given what the live one met
    /// agree on every field of the decision, for holds and budgets alike.
    #[test]
    fn read_only_given_the_live_standing_decides_as_live() {
        let policy = Policy::embedded().expect("embedded policy");
        let fleet = Fleet::in_memory(FleetConfig::default());
        let mut paused = failure("vibecode", "QUEUE_OVERFLOW", Operation::Write);
        paused.retry_after = "5";
        let read = failure("vibecode", "BITRIX_TIMEOUT", Operation::Read);
        for (i, f) in [paused, read, paused, read].iter().enumerate() {
            let now = NOW.plus_ms(i as u64 * 10);
            let mut live = Live::new(&fleet, Caller::Named("test"));
            let a = decide(&policy, f, InputNotes::default(), now, &mut live).expect("decided");
            let b =
                read_only(&policy, f, now, Given::as_logged(a.hold.as_deref(), a.budget.as_ref())).expect("decided");
            assert_eq!(format!("{:?}", a.decision), format!("{:?}", b.decision), "item {i}");
            assert_eq!(a.hold, b.hold);
        }
        assert!(!fleet.mirror().is_empty(), "the live path placed a hold");
    }

    /// A spent budget defers a retry in the read-only path exactly as live.
    #[test]
    fn a_given_spent_budget_defers_the_retry() {
        let policy = Policy::embedded().expect("embedded policy");
        let catalog = policy
            .catalogs()
            .iter()
            .find(|c| !c.budgets.is_empty())
            .expect("an embedded catalog with a budget");
        let rule = catalog.budgets[0];
        let code = catalog
            .codes()
            .iter()
            .find(|e| e.read.verdict == Verdict::RetryWithLimit)
            .expect("a code whose read retries");
        let mut f = failure(&catalog.name, &code.code, Operation::Read);
        f.tenant = "acme";
        let spent = Judged {
            rule,
            shown: "d:scope".to_owned(),
            standing: BudgetStanding {
                requests: 10,
                retries: 10,
                allowed: 2,
                window_start: NOW,
                exhausted: true,
                room_at: NOW.plus_ms(7_000),
                deferred: 0,
            },
            replicas: 1,
        };
        let mut given = Given::new(&[], Some(&spent));
        let d = decide(&policy, &f, InputNotes::default(), NOW, &mut given).expect("decided");
        assert_eq!(d.decision.verdict, Verdict::RetryWithLimit);
        assert_eq!(d.decision.retry.strategy, Strategy::Budget);
        // Paced: the first deferral of a window allowing 2 waits window / 2
        // ±20 %, or, past the code's cap, somewhere in the cap's last half.
        let (pace, cap) = (rule.window_ms / 2, code.max_delay_ms);
        let after = d.decision.retry.after_ms;
        let expected = if pace * 12 / 10 <= cap {
            pace * 8 / 10..=pace * 12 / 10
        } else {
            cap / 2..=cap
        };
        assert!(expected.contains(&after), "{after} not in {expected:?}");
        assert!(d.decision.warnings.iter().any(|w| w == Warning::BudgetExhausted));
        assert_eq!(d.budget.as_ref().map(|j| j.standing.retries), Some(10));
    }

    /// Without fleet memory the core's decision is the answer: no hold, no budget.
    #[test]
    fn alone_is_the_core_decision() {
        let policy = Policy::embedded().expect("embedded policy");
        let mut f = failure("vibecode", "QUEUE_OVERFLOW", Operation::Write);
        f.retry_after = "5";
        let d = decide(&policy, &f, InputNotes::default(), NOW, &mut Alone).expect("decided");
        let core = crate::core::decide(&policy, &f, NOW).expect("decided");
        assert_eq!(format!("{:?}", d.decision), format!("{core:?}"));
        assert!(d.hold.is_none() && d.budget.is_none());
    }

    #[test]
    fn a_given_hold_floors_a_retry() {
        let policy = Policy::embedded().expect("embedded policy");
        let f = failure("vibecode", "BITRIX_TIMEOUT", Operation::Read);
        let pause = Hold {
            id: "h1".into(),
            key: HoldKey {
                scope: HoldScope::Dependency,
                catalog: "vibecode".into(),
                dependency: "portal-1".into(),
                subject: String::new(),
            },
            kind: HoldKind::Pause,
            since: NOW,
            until: NOW.plus_ms(60_000),
            probe_every_ms: 0,
            probe_window_ms: 0,
            rank: Default::default(),
            code: "QUEUE_OVERFLOW".into(),
            rule: "r".into(),
            reason: "paused".into(),
        };
        let holds = [pause];
        let d = decide(&policy, &f, InputNotes::default(), NOW, &mut Given::new(&holds, None)).expect("decided");
        assert_eq!(d.decision.retry.strategy, Strategy::Hold);
        assert!(d.decision.retry.after_ms >= 60_000);
        assert_eq!(d.hold.map(|h| h.id.clone()), Some("h1".to_owned()));
    }
}
