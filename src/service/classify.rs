//! Classify and ClassifyBatch: a failure (or a batch of them) checked,
//! decided through [`super::decide`], counted and shown to the decision
//! hook. Every call loads the policy once, so it is decided wholly by one
//! policy even if the policy is swapped meanwhile.

use std::borrow::Borrow;
use std::sync::{Arc, OnceLock, Weak};

use tracing::field::Empty;

use super::decide::{self, Alone, Decided, InputNotes, Live};
use super::error::{Violation, check_locale};
use super::{Caller, Service};
use crate::core::hold::Hold;
use crate::core::limits::{self, FieldViolation};
use crate::core::{DecideError, Decision, Failure, Policy, UnixMillis, Verdict};
use crate::fleet::ScopeHolds;

/// Counter of decisions, labelled `catalog` (a loaded catalog's name) and
/// `verdict` (the fixed set of [`Verdict::as_str`]).
pub const DECISIONS_TOTAL: &str = "retryd_decisions_total";
/// Counter of failures whose code their catalog does not know (not counting
/// failures without a code), labelled `catalog` (a loaded catalog's name): a
/// typo in a caller's mapping, or a dependency's new code, shows here.
pub const UNKNOWN_CODES_TOTAL: &str = "retryd_unknown_codes_total";
/// Histogram of ClassifyBatch sizes (items per call).
pub const BATCH_ITEMS: &str = "retryd_batch_items";

/// Batches larger than this are decided on the blocking pool so they do not
/// hold up an async worker.
pub const BLOCKING_BATCH: usize = 256;

/// Default of `--max-batch`: the most items whose worst-case answer (each
/// result at most `doors::ITEM_ANSWER_BYTES`, in any embedded locale) fits
/// the 4 MiB every gRPC client accepts by default; tests/grpc_answer_size.rs
/// checks it against every embedded code.
pub const DEFAULT_MAX_BATCH: usize = 1_600;

/// Decisions per verdict and item errors of one batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchSummary {
    /// Decisions per verdict, in [`Verdict::ALL`] order.
    pub verdicts: [u32; Verdict::ALL.len()],
    /// Items refused with a field error.
    pub errors: u32,
}

impl BatchSummary {
    /// Decisions with verdict `v`.
    pub fn count(&self, v: Verdict) -> u32 {
        self.verdicts[v.index()]
    }
}

/// One item of a batch as the door hands it in: the failure and what the
/// door noticed about it.
pub type BatchItem<'a> = (Failure<'a>, InputNotes);

impl Service {
    /// Decides one failure of `caller` as of `now` and hands the decision,
    /// with the fleet hold in force on its scope, to `answer`. `failure` is
    /// `None` when the request carried none; `locale` is the request's.
    /// Violations name the field as `failure.<field>`.
    pub fn classify<'a, R>(
        &self,
        locale: &str,
        failure: Option<BatchItem<'a>>,
        now: UnixMillis,
        caller: Caller<'_>,
        answer: impl FnOnce(&Decision<'_>, Option<&Hold>) -> R,
    ) -> Result<R, Violation> {
        // One span per call at debug level: under the default `info` filter it
        // is disabled, and a disabled span costs a cached callsite check
        // instead of a registry slot and three field records per call.
        let span = tracing::debug_span!("Classify", catalog = Empty, code = Empty, verdict = Empty);
        let _entered = span.enter();
        let policy = self.policy.load();
        let decided = |decided: Result<&Decided<'_>, Violation>| match decided {
            Ok(d) => {
                let (hold, d) = (d.hold.as_deref(), &d.decision);
                if !span.is_disabled() {
                    span.record("catalog", d.catalog);
                    span.record("code", d.code);
                    span.record("verdict", d.verdict.as_str());
                }
                self.with_counters(&policy, |c| {
                    c.increment(d.catalog, d.verdict, 1);
                    if unknown_code(d) {
                        c.increment_unknown(d.catalog, 1);
                    }
                });
                tracing::debug!("decided");
                Ok(answer(d, hold))
            }
            Err(v) => {
                tracing::debug!(field = %v.field, "invalid argument");
                Err(v)
            }
        };
        let failure =
            check_locale(locale).and_then(|()| failure.ok_or_else(|| Violation::new("failure", "is required")));
        match failure {
            Ok((f, notes)) => self.decide_one(
                &policy,
                &f,
                notes,
                now,
                caller,
                None,
                |field| format!("failure.{field}"),
                decided,
            ),
            Err(v) => decided(Err(v)),
        }
    }

    /// The whole-call limits of a batch: its size and its locale.
    pub fn check_batch(&self, items: usize, locale: &str) -> Result<(), Violation> {
        if items > self.config.max_batch {
            return Err(Violation::new(
                "failures",
                format!("{items} items; the limit is {} (--max-batch)", self.config.max_batch),
            ));
        }
        check_locale(locale)
    }

    /// Decides the `n` failures of a batch of `caller` as of `now`, in
    /// order (`failure(i)` gives item `i`, or a reference to it: an item is
    /// large, and a move is a copy), handing each item's decision
    /// (with the hold in force) or its field error to `item`, and returns
    /// the summary. A whole-call error (too many items, a bad locale) comes
    /// back before any item.
    pub fn classify_batch<'a, I: Borrow<BatchItem<'a>>>(
        &self,
        locale: &str,
        n: usize,
        failure: impl Fn(usize) -> I,
        now: UnixMillis,
        caller: Caller<'_>,
        mut item: impl FnMut(usize, Result<(&Decision<'_>, Option<&Hold>), &Violation>),
    ) -> Result<BatchSummary, Violation> {
        let span = tracing::info_span!("ClassifyBatch", items = n, errors = Empty);
        let _entered = span.enter();
        metrics::histogram!(BATCH_ITEMS).record(n as f64);
        if let Err(v) = self.check_batch(n, locale) {
            tracing::debug!(field = %v.field, "invalid argument");
            return Err(v);
        }
        let policy = self.policy.load();
        let mut summary = BatchSummary::default();
        let mut tally = Tally::default();
        // `now` is one instant for the whole batch: the holds met per scope
        // are asked of the mirror once while they do not change.
        let mut seen = ScopeHolds::default();
        for i in 0..n {
            let given = failure(i);
            let (f, notes) = given.borrow();
            // Handed over by reference: a decision is large, and a move is a copy.
            let name = |field: &str| format!("failures[{i}].{field}");
            self.decide_one(
                &policy,
                f,
                *notes,
                now,
                caller,
                Some(&mut seen),
                name,
                |decided| match decided {
                    Ok(d) => {
                        let verdict = d.decision.verdict;
                        summary.verdicts[verdict.index()] += 1;
                        tally.add(&policy, d.decision.catalog, verdict, unknown_code(&d.decision));
                        item(i, Ok((&d.decision, d.hold.as_deref())));
                    }
                    Err(v) => {
                        summary.errors += 1;
                        item(i, Err(&v));
                    }
                },
            );
        }
        self.with_counters(&policy, |c| tally.emit(c));
        span.record("errors", summary.errors);
        tracing::debug!(
            retry_with_limit = summary.count(Verdict::RetryWithLimit),
            state_verification_required = summary.count(Verdict::StateVerificationRequired),
            fix_before_retry = summary.count(Verdict::FixBeforeRetry),
            do_not_retry = summary.count(Verdict::DoNotRetry),
            already_applied = summary.count(Verdict::AlreadyApplied),
            "decided batch"
        );
        Ok(summary)
    }

    /// Checks and decides one failure live and hands the decision (or the
    /// field error) to `answer`, the decision by reference: it is large, and
    /// each move out of a call is a copy (`perf`: about 4 % of a batch).
    /// `name` turns a field of the failure into its name in the request;
    /// `seen`, a batch's holds met per scope. The decision hook sees it.
    #[allow(clippy::too_many_arguments)]
    fn decide_one<'a, R>(
        &self,
        policy: &'a Policy,
        f: &Failure<'a>,
        notes: InputNotes,
        now: UnixMillis,
        caller: Caller<'_>,
        seen: Option<&mut ScopeHolds>,
        name: impl Fn(&str) -> String,
        answer: impl FnOnce(Result<&Decided<'a>, Violation>) -> R,
    ) -> R {
        if let Err(v) = check_failure(f, &name) {
            return answer(Err(v));
        }
        let decided = match self.fleet.as_deref() {
            Some(fleet) => decide::decide(policy, f, notes, now, &mut Live { fleet, caller, seen }),
            None => decide::decide(policy, f, notes, now, &mut Alone),
        };
        match &decided {
            Ok(d) => {
                if let Some(observer) = &self.observer {
                    observer.observe(f, d, now);
                }
                answer(Ok(d))
            }
            Err(e) => answer(Err(decide_violation(e, &name))),
        }
    }

    /// The `retryd_decisions_total` handles of `policy`'s catalogs, rebuilt
    /// (once, by whichever call sees it first) after a policy swap.
    fn with_counters(&self, policy: &Arc<Policy>, f: impl FnOnce(&DecisionCounters)) {
        let current = self.counters.load();
        if current.is_for(policy) {
            return f(&current);
        }
        drop(current);
        let fresh = Arc::new(DecisionCounters::for_policy(policy));
        f(&fresh);
        self.counters.store(fresh);
    }
}

/// The field limits of a failure, violations named by `name` (Classify,
/// a batch item and explain name them alike).
pub(super) fn check_failure(f: &Failure<'_>, name: &impl Fn(&str) -> String) -> Result<(), Violation> {
    limits::check(f).map_err(|FieldViolation { field, description }| Violation::new(name(field), description))
}

/// The field a decision's error is about, named by `name`.
pub(super) fn decide_violation(e: &DecideError, name: &impl Fn(&str) -> String) -> Violation {
    match e {
        DecideError::UnknownCatalog { .. } => Violation::new(name("catalog"), e.to_string()),
    }
}

/// Whether `d` decided a code its catalog does not know (a failure without
/// a code is not one: it is a network error, with its own rule).
fn unknown_code(d: &Decision<'_>) -> bool {
    !d.known_code && !d.code.is_empty()
}

/// Decisions per catalog and verdict (and unknown codes per catalog) within
/// one batch, so the counters are touched once per (catalog, verdict) rather
/// than once per item. Catalog names are the policy's, so the tally borrows
/// nothing of the request.
#[derive(Default)]
struct Tally<'p> {
    per_catalog: Vec<(&'p str, [u64; Verdict::ALL.len()], u64)>,
}

impl<'p> Tally<'p> {
    fn add(&mut self, policy: &'p Policy, catalog: &str, verdict: Verdict, unknown: bool) {
        let slot = verdict.index();
        // The decision names the catalog by the policy's own string: the
        // address settles it without comparing the bytes.
        let same = |c: &&str| std::ptr::eq(c.as_ptr(), catalog.as_ptr()) && c.len() == catalog.len() || *c == catalog;
        match self.per_catalog.iter_mut().find(|(c, _, _)| same(c)) {
            Some((_, counts, unknowns)) => {
                counts[slot] += 1;
                *unknowns += u64::from(unknown);
            }
            None => {
                let Some(c) = policy.catalog(catalog) else { return };
                let mut counts = [0; Verdict::ALL.len()];
                counts[slot] = 1;
                self.per_catalog.push((&c.name, counts, u64::from(unknown)));
            }
        }
    }

    fn emit(&self, counters: &DecisionCounters) {
        for (catalog, counts, unknowns) in &self.per_catalog {
            for (verdict, n) in Verdict::ALL.iter().zip(counts).filter(|(_, n)| **n > 0) {
                counters.increment(catalog, *verdict, *n);
            }
            if *unknowns > 0 {
                counters.increment_unknown(catalog, *unknowns);
            }
        }
    }
}

/// The `retryd_decisions_total` counter handles of one policy: one slot per
/// (loaded catalog, verdict), registered on first use (so the exposition
/// shows only series that were counted) and then reused, so a decision
/// costs no registry lookup and no label allocation. Label values stay
/// bounded: only the names of the policy's catalogs.
#[derive(Default)]
pub(super) struct DecisionCounters {
    /// The policy these are for (a `Weak` keeps its address from being reused).
    policy: Weak<Policy>,
    catalogs: Vec<CatalogCounters>,
}

/// One catalog's counters: its name, one per verdict, and its unknown codes.
type CatalogCounters = (
    Box<str>,
    [OnceLock<metrics::Counter>; Verdict::ALL.len()],
    OnceLock<metrics::Counter>,
);

impl std::fmt::Debug for DecisionCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionCounters")
            .field("catalogs", &self.catalogs.iter().map(|(c, _, _)| c).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl DecisionCounters {
    fn for_policy(policy: &Arc<Policy>) -> Self {
        DecisionCounters {
            policy: Arc::downgrade(policy),
            catalogs: policy
                .catalogs()
                .iter()
                .map(|c| (Box::from(&*c.name), Default::default(), OnceLock::new()))
                .collect(),
        }
    }

    fn is_for(&self, policy: &Arc<Policy>) -> bool {
        std::ptr::eq(self.policy.as_ptr(), Arc::as_ptr(policy))
    }

    fn increment(&self, catalog: &str, verdict: Verdict, n: u64) {
        let v = verdict.index();
        // A handful of catalogs: a scan beats hashing the name.
        match self.catalogs.iter().find(|(c, _, _)| **c == *catalog) {
            Some((name, slots, _)) => slots[v]
                .get_or_init(
                    || metrics::counter!(DECISIONS_TOTAL, "catalog" => name.to_string(), "verdict" => verdict.as_str()),
                )
                .increment(n),
            // Not reached: a decision names a catalog of the policy that made it.
            None => metrics::counter!(DECISIONS_TOTAL, "catalog" => catalog.to_owned(), "verdict" => verdict.as_str())
                .increment(n),
        }
    }

    fn increment_unknown(&self, catalog: &str, n: u64) {
        match self.catalogs.iter().find(|(c, _, _)| **c == *catalog) {
            Some((name, _, slot)) => slot
                .get_or_init(|| metrics::counter!(UNKNOWN_CODES_TOTAL, "catalog" => name.to_string()))
                .increment(n),
            // Not reached: a decision names a catalog of the policy that made it.
            None => metrics::counter!(UNKNOWN_CODES_TOTAL, "catalog" => catalog.to_owned()).increment(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use arc_swap::ArcSwap;

    use super::*;
    use crate::core::Operation;
    use crate::service::ServiceConfig;

    fn service(max_batch: usize) -> Service {
        let policy = Policy::embedded().expect("embedded policy");
        Service::new(
            Arc::new(ArcSwap::from_pointee(policy)),
            ServiceConfig {
                max_batch,
                ..Default::default()
            },
        )
    }

    const NOW: UnixMillis = UnixMillis(1_786_190_700_000);

    fn failure<'a>(catalog: &'a str, code: &'a str, op: Operation) -> BatchItem<'a> {
        (
            Failure {
                catalog,
                code,
                operation: op,
                attempt: 1,
                ..Failure::default()
            },
            InputNotes::default(),
        )
    }

    #[test]
    fn decision_counters_follow_the_policy() {
        let s = service(10);
        let first = s.policy.load_full();
        s.with_counters(&first, |c| assert!(c.is_for(&first)));
        assert!(s.counters.load().is_for(&first));
        assert_eq!(s.counters.load().catalogs.len(), first.catalogs().len());
        s.policy.store(Arc::new(Policy::embedded().expect("embedded policy")));
        let second = s.policy.load_full();
        s.with_counters(&second, |c| assert!(c.is_for(&second)));
        assert!(!s.counters.load().is_for(&first));
    }

    #[test]
    fn classify_requires_failure() {
        let err = service(10)
            .classify("", None, NOW, Caller::Named("t"), |_, _| ())
            .unwrap_err();
        assert_eq!(err.field, "failure");
    }

    #[test]
    fn oversize_field_is_named_with_its_prefix() {
        let key = "k".repeat(limits::MAX_IDEMPOTENCY_KEY + 1);
        let (mut f, notes) = failure("", "X", Operation::Write);
        f.idempotency_key = &key;
        let err = service(10)
            .classify("", Some((f, notes)), NOW, Caller::Named("t"), |_, _| ())
            .unwrap_err();
        assert_eq!(err.field, "failure.idempotency_key");
    }

    #[test]
    fn batch_errors_stay_per_item_and_are_counted() {
        let items = [
            failure("vibecode", "BITRIX_TIMEOUT", Operation::Write),
            failure("nope", "X", Operation::Read),
            failure("vibecode", "BITRIX_TIMEOUT", Operation::Read),
        ];
        let mut seen = Vec::new();
        let summary = service(10)
            .classify_batch(
                "en",
                items.len(),
                |i| items[i],
                NOW,
                Caller::Named("t"),
                |i, r| {
                    seen.push((i, r.map(|(d, _)| d.verdict).map_err(|v| v.clone())));
                },
            )
            .expect("batch answered");
        assert_eq!(seen.len(), 3);
        let Err(v) = &seen[1].1 else {
            panic!("item 1 should be an error: {:?}", seen[1]);
        };
        assert_eq!(v.field, "failures[1].catalog");
        assert!(v.description.contains("vibecode"), "{v:?}");
        assert_eq!(summary.errors, 1);
        assert_eq!(summary.verdicts.iter().sum::<u32>(), 2);
    }

    #[test]
    fn over_max_batch_fails_the_call() {
        let items = [failure("", "", Operation::Read); 3];
        let err = service(2)
            .classify_batch("", 3, |i| items[i], NOW, Caller::Named("t"), |_, _| ())
            .unwrap_err();
        assert_eq!(err.message(), "failures: 3 items; the limit is 2 (--max-batch)");
    }

    #[test]
    fn a_call_is_decided_by_one_policy_snapshot() {
        let s = service(10);
        let (version, catalog) = s
            .classify(
                "",
                Some(failure("", "BITRIX_TIMEOUT", Operation::Write)),
                NOW,
                Caller::Named("t"),
                |d, _| (d.policy_version.to_owned(), d.catalog.to_owned()),
            )
            .expect("decided");
        assert_eq!(catalog, "vibecode");
        assert_eq!(version, s.policy.load().version());
    }
}
