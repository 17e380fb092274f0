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
}

impl Warning {
    /// Every warning, in bit order.
    pub const ALL: [Warning; 12] = [
        Warning::RetryAfterUnparseable,
        Warning::LocaleUnsupported,
        Warning::ReadBackIgnoredForRead,
        Warning::MaxAttemptsCapped,
        Warning::IdempotencyKeyNotEnforced,
        Warning::UpstreamLessSafeIgnored,
        Warning::AttemptZeroReadAsOne,
        Warning::DelayCapped,
        Warning::HoldNeedsDependency,
        Warning::HoldNeedsTenant,
        Warning::HoldRateLimited,
        Warning::TimestampOutOfRange,
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
        }
    }
}

/// A set of [`Warning`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Warnings(u16);

impl Warnings {
    /// Adds one.
    pub fn add(&mut self, w: Warning) {
        self.0 |= w as u16;
    }

    /// Whether `w` is in the set.
    pub fn contains(self, w: Warning) -> bool {
        self.0 & (w as u16) != 0
    }

    /// No warnings.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The warnings in bit order.
    pub fn iter(self) -> impl Iterator<Item = Warning> {
        Warning::ALL.into_iter().filter(move |w| self.contains(*w))
    }
}

impl Serialize for Warnings {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter().map(Warning::message))
    }
}
