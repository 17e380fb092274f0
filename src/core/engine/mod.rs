//! The decision: from a [`Failure`] and the [`Policy`] in force to a
//! [`Decision`]. Pure and allocation-free on every successful path.
//!
//! The order is the seeds' order of reasoning:
//! 1. the catalog's rule for the code and the operation (the matrix);
//! 2. the dependency's own advice, which can only make the answer safer;
//! 3. for writes, what the caller knows: a read-back, or an enforced idempotency key;
//! 4. when to retry: Retry-After, the schedule or backoff;
//! 5. the budgets: attempt limit and deadline.

use super::catalog::{Catalog, CodeEntry, DelayKind, Rule};
use super::hold::HoldPlan;
use super::messages::{Outcome, action};
use super::model::{
    Decision, Failure, Locale, Operation, ReadBack, RetryContract, SideEffectState, Strategy, TerminalState, Verdict,
};
use super::policy::Policy;
use super::retry_after::parse_retry_after;
use super::time::UnixMillis;
use super::warnings::{Warning, Warnings};

/// Why no decision could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// The failure names a catalog that is not loaded.
    #[error("unknown catalog {requested:?}; catalogs: {available}")]
    UnknownCatalog {
        /// The name asked for.
        requested: String,
        /// The catalogs there are, comma-separated.
        available: String,
    },
}

/// Decides what the caller may do about `failure`, as of `now`, with no
/// fleet hold in force.
pub fn decide<'a>(policy: &'a Policy, failure: &Failure<'a>, now: UnixMillis) -> Result<Decision<'a>, DecideError> {
    decide_held(policy, failure, now, None)
}

/// Decides as [`decide`] does, with a fleet hold in force on the failure's
/// scope until `hold_until` (for an open circuit: its next probe slot): a
/// retry then waits at least until then (`strategy` says `hold`), and the
/// attempt and deadline limits judge that wait like any other.
pub fn decide_held<'a>(
    policy: &'a Policy,
    failure: &Failure<'a>,
    now: UnixMillis,
    hold_until: Option<UnixMillis>,
) -> Result<Decision<'a>, DecideError> {
    decide_floored(
        policy,
        failure,
        now,
        hold_until.map(|until| Floor {
            until,
            strategy: Strategy::Hold,
        }),
    )
}

/// The earliest time a retry may go ahead, set by the fleet (a hold, or a
/// spent retry budget), and the strategy that names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Floor {
    /// Not before.
    pub until: UnixMillis,
    /// Why: [`Strategy::Hold`] or [`Strategy::Budget`].
    pub strategy: Strategy,
}

/// Decides as [`decide`] does, with a retry waiting at least until
/// `floor.until` (`strategy` says why when the floor decides the wait); the
/// attempt and deadline limits judge that wait like any other, so a floor
/// past the deadline turns the retry into `do_not_retry`. A floor never
/// turns a verdict into a retry: it only delays one.
pub fn decide_floored<'a>(
    policy: &'a Policy,
    failure: &Failure<'a>,
    now: UnixMillis,
    floor: Option<Floor>,
) -> Result<Decision<'a>, DecideError> {
    let catalog = resolve_catalog(policy, failure.catalog)?;
    let mut warnings = Warnings::default();

    let (operation, operation_inferred) = match failure.operation {
        Operation::Unspecified => (catalog.infer_operation(failure.method), true),
        explicit => (explicit, false),
    };
    let (entry, known_code) = match failure.code {
        "" => (catalog.no_envelope(), false),
        code => match catalog.lookup(code) {
            Some(entry) => (entry, true),
            None => {
                if let Some(spelling) = catalog.lookup_ignore_case(code) {
                    warnings.add_code_case_mismatch(spelling);
                } else if let Some(spelling) = catalog.guess(code) {
                    warnings.add_unknown_code_guess(spelling);
                }
                (catalog.unknown(), false)
            }
        },
    };
    let attempt = if failure.attempt == 0 {
        warnings.add(Warning::AttemptZeroReadAsOne);
        1
    } else {
        failure.attempt
    };
    let cap = entry.max_delay_ms;
    let retry_after = retry_after_ms(failure, now, &mut warnings);
    // The dependency's own advice past the cap (a Retry-After, gRPC pushback
    // or RetryInfo) is not cut to it: nobody waits 25 h inside a retry loop,
    // and a hostile or broken 2^64 must not pause a dependency fleet-wide.
    let beyond_cap =
        retry_after.is_some_and(|ra| ra > cap) || failure.upstream.as_ref().is_some_and(|up| up.after_ms > cap);
    let retry_after = retry_after.map(|ra| ra.min(cap));
    let rule = entry.rule(operation, attempt, retry_after.is_some());
    let hold_plan = rule.hold.as_ref().filter(|_| !beyond_cap).and_then(|h| {
        let plan = holds::plan(h, catalog, entry, rule, failure, retry_after, now, &mut warnings);
        plan.map(|p| HoldPlan {
            code: if known_code { &entry.code } else { failure.code },
            ..p
        })
    });

    let locale = match Locale::parse(failure.locale) {
        Some(l) if catalog.locales.contains(&l) => l,
        _ => {
            warnings.add(Warning::LocaleUnsupported);
            Locale::En
        }
    };
    let mut d = Draft::from_rule(rule, locale);
    let upstream = failure.upstream.as_ref();
    if let Some(up) = upstream {
        d.apply_upstream(up, &mut warnings);
    }
    let key = match (failure.idempotency_key, failure.idempotency_key_enforced) {
        ("", _) => None,
        (k, true) => Some(k),
        (_, false) => {
            warnings.add(Warning::IdempotencyKeyNotEnforced);
            None
        }
    };
    if operation == Operation::Write {
        d.apply_write_knowledge(failure, rule, key.is_some());
    } else if failure.read_back != ReadBack::NotDone {
        warnings.add(Warning::ReadBackIgnoredForRead);
    }

    let mut max_attempts = catalog.max_attempts;
    if failure.max_attempts != 0 {
        if failure.max_attempts > catalog.max_attempts {
            warnings.add(Warning::MaxAttemptsCapped);
        }
        max_attempts = max_attempts.min(failure.max_attempts);
    }
    let mut deadline = failure.deadline;
    if let Some(up) = upstream {
        if up.max_attempts != 0 {
            max_attempts = max_attempts.min(up.max_attempts);
        }
        deadline = match (deadline, up.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    if beyond_cap && d.retrying() {
        // A write of unknown outcome still reconciles before any re-drive.
        let action = (d.verdict == Verdict::StateVerificationRequired).then_some(action::READ_BACK);
        d.stop(Outcome::AdviceBeyondCap, action);
    }

    let (mut after_ms, mut max_after_ms, mut strategy) = (0, 0, Strategy::None);
    if d.retrying() {
        (after_ms, max_after_ms, strategy) = delay(catalog, entry, attempt, retry_after);
        if let Some(up) = upstream.filter(|up| up.after_ms > after_ms) {
            after_ms = capped(up.after_ms, cap, &mut warnings);
            max_after_ms = max_after_ms.max(after_ms);
        }
        if let Some((wait, why)) = floor
            .map(|f| (now.ms_until(f.until), f.strategy))
            .filter(|(w, _)| *w > after_ms)
        {
            // The fleet's hold or budget ends later than any other delay:
            // wait for it, keeping the jitter window's width above it.
            let width = max_after_ms.saturating_sub(after_ms);
            after_ms = capped(wait, cap, &mut warnings);
            max_after_ms = after_ms.saturating_add(width);
            strategy = why;
        }
        // One cap for every delay; nothing above 2^63-1 reaches the wire.
        after_ms = capped(after_ms, cap, &mut warnings);
        max_after_ms = max_after_ms.clamp(after_ms, cap.max(after_ms)).min(i64::MAX as u64);
        if attempt >= max_attempts {
            let outcome = match catalog.exhausted_terminal_state {
                Some(state) => {
                    d.terminal_state = Some(state);
                    Outcome::ScheduleExhausted
                }
                None => Outcome::AttemptsExhausted,
            };
            d.stop(outcome, Some(action::ESCALATE));
        } else if deadline.is_some_and(|dl| now.plus_ms(after_ms) > dl) {
            let reconcile = matches!(d.side_effect, SideEffectState::Possible | SideEffectState::Unknown)
                && operation == Operation::Write;
            d.stop(Outcome::DeadlineWouldPass, reconcile.then_some(action::READ_BACK));
        }
        if !d.retrying() {
            (after_ms, max_after_ms, strategy) = (0, 0, Strategy::None);
        }
    }

    // A retry that survived the steps above is safe by construction (the
    // dependency's "unsafe" already turned it into a verification, which only
    // a read-back or an enforced key can lift); a stop is safe to replay later
    // only if nothing happened and the dependency agrees.
    let safe = match d.verdict {
        Verdict::RetryWithLimit => true,
        Verdict::StateVerificationRequired | Verdict::AlreadyApplied => false,
        Verdict::FixBeforeRetry | Verdict::DoNotRetry => {
            d.side_effect == SideEffectState::None && upstream.is_none_or(|up| up.safe)
        }
    };

    Ok(Decision {
        verdict: d.verdict,
        retry: RetryContract {
            retryable: d.retrying(),
            safe,
            after_ms,
            max_after_ms,
            strategy,
            attempt,
            max_attempts,
            deadline,
            idempotency_key: key,
            side_effect_state: d.side_effect,
            reconciliation_action: d.action,
        },
        target_reached: entry.target_reached,
        catalog: &catalog.name,
        code: if known_code { &entry.code } else { failure.code },
        known_code,
        operation,
        operation_inferred,
        reason: d.reason,
        rule: &rule.id,
        policy_version: policy.version(),
        required_transition: d.transition,
        scope: rule.scope,
        request_id: failure.request_id,
        terminal_state: d.terminal_state,
        warnings,
        hold_plan,
        budget: None,
    })
}

fn resolve_catalog<'a>(policy: &'a Policy, name: &str) -> Result<&'a Catalog, DecideError> {
    if name.is_empty() {
        return Ok(policy.default_catalog());
    }
    policy.catalog(name).ok_or_else(|| DecideError::UnknownCatalog {
        requested: name.to_owned(),
        available: policy.catalog_names(),
    })
}

/// The decision as it is refined step by step.
struct Draft<'a> {
    verdict: Verdict,
    side_effect: SideEffectState,
    reason: &'a str,
    action: Option<&'a str>,
    transition: Option<&'a str>,
    terminal_state: Option<TerminalState>,
    locale: Locale,
}

impl<'a> Draft<'a> {
    fn from_rule(rule: &'a Rule, locale: Locale) -> Self {
        let action = match rule.verdict {
            Verdict::StateVerificationRequired => Some(action::READ_BACK),
            _ => rule.reconciliation_action.as_deref(),
        };
        Draft {
            verdict: rule.verdict,
            side_effect: rule.side_effect,
            reason: rule.reason.get(locale),
            action,
            transition: rule.required_transition.as_deref(),
            terminal_state: None,
            locale,
        }
    }

    fn retrying(&self) -> bool {
        matches!(
            self.verdict,
            Verdict::RetryWithLimit | Verdict::StateVerificationRequired
        )
    }

    fn set(&mut self, verdict: Verdict, outcome: Outcome, action: Option<&'a str>) {
        self.verdict = verdict;
        self.reason = outcome.reason(self.locale);
        self.action = action;
    }

    fn stop(&mut self, outcome: Outcome, action: Option<&'a str>) {
        self.set(Verdict::DoNotRetry, outcome, action);
    }

    /// The dependency's advice can only make the answer more careful.
    fn apply_upstream(&mut self, up: &RetryContract<'a>, warnings: &mut Warnings<'a>) {
        if up.side_effect_state > self.side_effect && up.side_effect_state != SideEffectState::Confirmed {
            self.side_effect = up.side_effect_state;
        }
        if !up.retryable && self.retrying() {
            self.set(
                Verdict::DoNotRetry,
                Outcome::UpstreamNotRetryable,
                up.reconciliation_action.or(Some(action::MANUAL_REVIEW)),
            );
        } else if !up.safe && self.verdict == Verdict::RetryWithLimit {
            self.set(
                Verdict::StateVerificationRequired,
                Outcome::UpstreamUnsafe,
                Some(action::READ_BACK),
            );
            if self.side_effect == SideEffectState::None {
                self.side_effect = SideEffectState::Unknown;
            }
        } else if (up.retryable && !self.retrying()) || (up.safe && self.verdict == Verdict::StateVerificationRequired)
        {
            warnings.add(Warning::UpstreamLessSafeIgnored);
        }
    }

    /// A read-back or an enforced idempotency key settles a write's unknown outcome.
    fn apply_write_knowledge(&mut self, failure: &Failure<'a>, rule: &Rule, key_enforced: bool) {
        let verifying = self.verdict == Verdict::StateVerificationRequired;
        match failure.read_back {
            ReadBack::EffectPresent => {
                self.set(Verdict::AlreadyApplied, Outcome::EffectPresent, None);
                self.side_effect = SideEffectState::Confirmed;
                self.transition = None;
            }
            ReadBack::EffectAbsent if verifying => {
                self.set(Verdict::RetryWithLimit, Outcome::EffectAbsent, None);
                self.side_effect = SideEffectState::None;
            }
            _ if verifying && key_enforced && !rule.reconcile_before_retry => {
                self.set(
                    Verdict::RetryWithLimit,
                    Outcome::ResendWithKey,
                    Some(action::RESEND_WITH_KEY),
                );
            }
            ReadBack::Inconclusive if verifying => {
                self.set(Verdict::DoNotRetry, Outcome::CannotVerify, Some(action::MANUAL_REVIEW));
            }
            ReadBack::NotDone if verifying && failure.cannot_verify_effect => {
                self.set(Verdict::DoNotRetry, Outcome::CannotVerify, Some(action::MANUAL_REVIEW));
            }
            _ => {}
        }
    }
}

/// `ms` cut to the catalog's cap, with a warning when it was over.
fn capped(ms: u64, cap: u64, warnings: &mut Warnings) -> u64 {
    if ms > cap {
        warnings.add(Warning::DelayCapped);
        cap
    } else {
        ms
    }
}

/// The larger of the raw and the pre-parsed Retry-After, if any.
fn retry_after_ms(failure: &Failure<'_>, now: UnixMillis, warnings: &mut Warnings<'_>) -> Option<u64> {
    let raw = if failure.retry_after.trim().is_empty() {
        None
    } else {
        let parsed = parse_retry_after(failure.retry_after, now);
        if parsed.is_none() {
            warnings.add(Warning::RetryAfterUnparseable);
        }
        parsed
    };
    match (raw, failure.retry_after_ms) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// `(after_ms, max_after_ms, strategy)` for a retry after `attempt`.
///
/// The catalog's schedule or backoff gives a window; a Retry-After is always
/// a floor (the dependency said "not before"), and when it decides the wait
/// the window's width is kept above it as jitter so that callers told the
/// same Retry-After do not return in one burst. `strict_retry_after` codes
/// get no jitter below the Retry-After either way; the distinction is kept
/// in the catalog for the reason text and for introspection.
fn delay(catalog: &Catalog, entry: &CodeEntry, attempt: u32, retry_after: Option<u64>) -> (u64, u64, Strategy) {
    let (lo, hi, strategy) = match entry.delay {
        DelayKind::Schedule => {
            let i = (attempt as usize)
                .saturating_sub(1)
                .min(catalog.schedule_ms.len().saturating_sub(1));
            let wait = catalog.schedule_ms.get(i).copied().unwrap_or(catalog.backoff.cap_ms);
            (wait, wait, Strategy::Schedule)
        }
        DelayKind::Backoff | DelayKind::RetryAfter | DelayKind::StrictRetryAfter => {
            let (lo, hi) = catalog.backoff.window(attempt);
            (lo, hi, Strategy::ExponentialBackoff)
        }
    };
    match retry_after {
        Some(ra) if ra >= lo => (ra, ra.saturating_add(hi - lo), Strategy::RetryAfter),
        _ => (lo, hi, strategy),
    }
}

mod holds;

#[cfg(test)]
mod alloc_tests;
#[cfg(test)]
mod matrix_tests;
#[cfg(test)]
mod oracle_tests;
#[cfg(test)]
mod property_tests;
#[cfg(test)]
mod rule_tests;
#[cfg(test)]
mod standard_catalog_tests;
