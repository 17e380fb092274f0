//! Input that retryd ignored or adjusted, reported with the decision. A
//! bit set, so a decision carries its warnings without allocating.

use serde::{Serialize, Serializer};

/// One thing the caller should know was ignored or adjusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Warning {
    /// `retry_after` was neither delta-seconds nor an HTTP-date.
    RetryAfterUnparseable = 1 << 0,
    /// `locale` is not supported; English was used.
    LocaleUnsupported = 1 << 1,
    /// `read_back` was given for a read and has no bearing on it.
    ReadBackIgnoredForRead = 1 << 2,
    /// The caller's `max_attempts` exceeded the catalog's; the catalog's was used.
    MaxAttemptsCapped = 1 << 3,
    /// `idempotency_key` was given but the dependency does not enforce it.
    IdempotencyKeyNotEnforced = 1 << 4,
    /// The upstream contract asked for something less safe; retryd kept the safer answer.
    UpstreamLessSafeIgnored = 1 << 5,
    /// `attempt` was 0 and was read as 1.
    AttemptZeroReadAsOne = 1 << 6,
    /// The code is unknown, but matches a catalog code in another case
    /// (codes are case-sensitive; the unknown-code rule decided).
    CodeCaseMismatch = 1 << 7,
    /// A delay or hold was longer than the catalog's `max_delay_ms` and was cut to it.
    DelayCapped = 1 << 8,
    /// The rule places a dependency or method hold but the failure names no `dependency`.
    HoldNeedsDependency = 1 << 9,
    /// The rule places a tenant hold but the failure names no `tenant`.
    HoldNeedsTenant = 1 << 10,
    /// This caller placed more holds than its rate allows; this one was not placed.
    HoldRateLimited = 1 << 11,
    /// A timestamp was outside the range the wire can carry and was clamped.
    TimestampOutOfRange = 1 << 12,
    /// The fleet retry budget of the failure's scope is spent: the retry is deferred.
    BudgetExhausted = 1 << 13,
    /// The code is unknown, but within two edits of a catalog code (a typo,
    /// most likely; the unknown-code rule decided).
    UnknownCode = 1 << 14,
}

impl Warning {
    /// Every warning, in bit order.
    pub const ALL: [Warning; 15] = [
        Warning::RetryAfterUnparseable,
        Warning::LocaleUnsupported,
        Warning::ReadBackIgnoredForRead,
        Warning::MaxAttemptsCapped,
        Warning::IdempotencyKeyNotEnforced,
        Warning::UpstreamLessSafeIgnored,
        Warning::AttemptZeroReadAsOne,
        Warning::CodeCaseMismatch,
        Warning::DelayCapped,
        Warning::HoldNeedsDependency,
        Warning::HoldNeedsTenant,
        Warning::HoldRateLimited,
        Warning::TimestampOutOfRange,
        Warning::BudgetExhausted,
        Warning::UnknownCode,
    ];

    /// A stable, English message with a machine-readable prefix.
    pub fn message(self) -> &'static str {
        match self {
            Warning::RetryAfterUnparseable => {
                "retry_after_unparseable: Retry-After is neither delta-seconds nor an HTTP-date; it was ignored"
            }
            Warning::LocaleUnsupported => "locale_unsupported: the locale is not supported; English was used",
            Warning::ReadBackIgnoredForRead => "read_back_ignored: read_back only applies to writes",
            Warning::MaxAttemptsCapped => {
                "max_attempts_capped: the caller's max_attempts exceeds the catalog's; the catalog's limit applies"
            }
            Warning::IdempotencyKeyNotEnforced => {
                "idempotency_key_not_enforced: the dependency does not deduplicate by this key, so it does not make a retry safe"
            }
            Warning::UpstreamLessSafeIgnored => {
                "upstream_less_safe_ignored: the dependency's retry advice was less conservative than the catalog; the safer answer was kept"
            }
            Warning::AttemptZeroReadAsOne => "attempt_zero: attempt 0 was read as the first attempt",
            Warning::CodeCaseMismatch => {
                "code_case_mismatch: the code matches a catalog code only in another case; codes are case-sensitive, so the unknown-code rule decided"
            }
            Warning::DelayCapped => {
                "delay_capped: the delay was longer than the catalog's max_delay_ms and was cut to it (the fleet's hold too)"
            }
            Warning::HoldNeedsDependency => {
                "hold_needs_dependency: this failure places a dependency-wide hold, but the failure names no dependency; no hold was placed"
            }
            Warning::HoldNeedsTenant => {
                "hold_needs_tenant: this failure places a tenant hold, but the failure names no tenant; no hold was placed"
            }
            Warning::HoldRateLimited => {
                "hold_rate_limited: this caller placed more holds than its rate allows; no hold was placed"
            }
            Warning::TimestampOutOfRange => {
                "timestamp_out_of_range: a timestamp was outside the range the wire can carry and was clamped"
            }
            Warning::BudgetExhausted => {
                "budget_exhausted: the fleet retry budget of this scope is spent; the retry is deferred until its window has room"
            }
            Warning::UnknownCode => {
                "unknown_code: the code is not in the catalog but close to one of its codes, so the unknown-code rule decided"
            }
        }
    }
}

/// A set of [`Warning`]s, with the catalog code a [`Warning::CodeCaseMismatch`]
/// or [`Warning::UnknownCode`] points to (borrowed from the catalog: no
/// allocation; at most one of the two is ever set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Warnings<'a> {
    bits: u16,
    case_match: Option<&'a str>,
    budget: Option<BudgetNote>,
}

/// The numbers a [`Warning::BudgetExhausted`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetNote {
    /// Retries in the window.
    pub retries: u64,
    /// First attempts in the window.
    pub requests: u64,
    /// The budget.
    pub rule: crate::core::budget::BudgetRule,
}

impl<'a> Warnings<'a> {
    /// Adds one.
    pub fn add(&mut self, w: Warning) {
        self.bits |= w as u16;
    }

    /// Adds [`Warning::CodeCaseMismatch`] for the catalog code `code`.
    pub fn add_code_case_mismatch(&mut self, code: &'a str) {
        self.add(Warning::CodeCaseMismatch);
        self.case_match = Some(code);
    }

    /// Adds [`Warning::UnknownCode`], naming the catalog code `code` the
    /// unknown one is taken for.
    pub fn add_unknown_code_guess(&mut self, code: &'a str) {
        self.add(Warning::UnknownCode);
        self.case_match = Some(code);
    }

    /// Adds [`Warning::BudgetExhausted`] with the numbers it names.
    pub fn add_budget_exhausted(&mut self, note: BudgetNote) {
        self.add(Warning::BudgetExhausted);
        self.budget = Some(note);
    }

    /// The numbers of a [`Warning::BudgetExhausted`].
    pub fn budget(self) -> Option<BudgetNote> {
        self.budget
    }

    /// The catalog code a [`Warning::CodeCaseMismatch`] or
    /// [`Warning::UnknownCode`] points to.
    pub fn case_match(self) -> Option<&'a str> {
        self.case_match
    }

    /// Whether `w` is in the set.
    pub fn contains(self, w: Warning) -> bool {
        self.bits & (w as u16) != 0
    }

    /// No warnings.
    pub fn is_empty(self) -> bool {
        self.bits == 0
    }

    /// The warnings in bit order.
    pub fn iter(self) -> impl Iterator<Item = Warning> + use<'a> {
        let bits = self.bits;
        Warning::ALL.into_iter().filter(move |w| bits & (*w as u16) != 0)
    }

    /// The warnings' texts, in bit order.
    pub fn texts(self) -> impl Iterator<Item = WarningText<'a>> {
        self.iter().map(move |warning| WarningText {
            warning,
            case_match: self.case_match,
            budget: self.budget,
        })
    }
}

/// The text of one warning: [`Warning::message`], except that
/// `code_case_mismatch` and `unknown_code` name the catalog code
/// (`unknown_code: did you mean BITRIX_TIMEOUT? …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarningText<'a> {
    warning: Warning,
    case_match: Option<&'a str>,
    budget: Option<BudgetNote>,
}

impl std::fmt::Display for WarningText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.warning, self.case_match) {
            (Warning::CodeCaseMismatch, Some(code)) => write!(
                f,
                "code_case_mismatch: did you mean {code}? codes are case-sensitive, so the unknown-code rule decided"
            ),
            (Warning::UnknownCode, Some(code)) => write!(
                f,
                "unknown_code: did you mean {code}? the code is not in the catalog, so the unknown-code rule decided"
            ),
            (Warning::BudgetExhausted, _) if self.budget.is_some() => {
                let Some(n) = self.budget else { return Ok(()) };
                write!(
                    f,
                    "budget_exhausted: retries {} of {} requests in the last {}, budget {}",
                    grouped(n.retries),
                    grouped(n.requests),
                    crate::core::budget::describe_window(n.rule.window_ms),
                    n.rule.short()
                )
            }
            (w, _) => f.write_str(w.message()),
        }
    }
}

/// `1 000`, `212`, `1 000 000`: digits grouped by three with spaces.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

impl Serialize for Warnings<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.texts().map(|t| t.to_string()))
    }
}
