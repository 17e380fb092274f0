//! The domain words of a retry decision: what failed (a [`Failure`]) and what
//! retryd answers (a [`Decision`] carrying an ASC [`RetryContract`]).
//!
//! Every type borrows its strings from the request or the catalog, so a
//! decision is made without a heap allocation.

use serde::Serialize;

use super::time::UnixMillis;

/// Whether the failed operation only read data or changed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Operation {
    /// The caller did not say; retryd infers it from the method's meaning.
    #[default]
    Unspecified,
    /// Does not change data: a retry cannot create a duplicate.
    Read,
    /// Creates, changes, deletes or sends something.
    Write,
}

crate::words!(Operation { Unspecified => "unspecified", Read => "read", Write => "write" });

/// What the caller learned by reading the state back after a failed write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ReadBack {
    /// No read-back was done.
    #[default]
    NotDone,
    /// The write's effect was found by its business key.
    EffectPresent,
    /// The write's effect was verifiably absent.
    EffectAbsent,
    /// The read-back could not tell.
    Inconclusive,
}

crate::words!(ReadBack {
    NotDone => "not_done",
    EffectPresent => "effect_present",
    EffectAbsent => "effect_absent",
    Inconclusive => "inconclusive",
});

/// The answer: may the caller retry, and on what terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Wait for the stated condition, then retry within the attempt limit.
    RetryWithLimit,
    /// Read the state back first; retry only if the effect is proven absent.
    StateVerificationRequired,
    /// Fix the cause (the named transition) before any new attempt.
    FixBeforeRetry,
    /// Do not retry automatically; hand the case over.
    DoNotRetry,
    /// A read-back found the effect: treat the write as successful.
    AlreadyApplied,
}

impl Verdict {
    /// Every verdict, in the order of the proto enum and of declaration.
    pub const ALL: [Verdict; 5] = [
        Verdict::RetryWithLimit,
        Verdict::StateVerificationRequired,
        Verdict::FixBeforeRetry,
        Verdict::DoNotRetry,
        Verdict::AlreadyApplied,
    ];

    /// Position in [`Verdict::ALL`] (and in per-verdict arrays).
    pub fn index(self) -> usize {
        self as usize
    }

    /// A verdict a catalog rule may name (`already_applied` only comes from a read-back).
    pub fn from_catalog_word(word: &str) -> Option<Verdict> {
        Verdict::ALL
            .into_iter()
            .find(|v| *v != Verdict::AlreadyApplied && v.as_str() == word)
    }
}

crate::words!(Verdict {
    RetryWithLimit => "retry_with_limit",
    StateVerificationRequired => "state_verification_required",
    FixBeforeRetry => "fix_before_retry",
    DoNotRetry => "do_not_retry",
    AlreadyApplied => "already_applied",
});

/// Did the target call reach the dependency (the matrix's second column)?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetReached {
    /// Stopped before it was sent.
    No,
    /// It reached the dependency.
    Yes,
    /// The code alone cannot tell.
    Unknown,
}

crate::words!(TargetReached { No => "no", Yes => "yes", Unknown => "unknown" });

/// Current knowledge of externally visible effects (ASC 0.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SideEffectState {
    /// No side effect occurred.
    None,
    /// A side effect may have occurred.
    Possible,
    /// The side effect occurred.
    Confirmed,
    /// Whether it occurred cannot be established.
    Unknown,
}

crate::words!(SideEffectState {
    None => "none",
    Possible => "possible",
    Confirmed => "confirmed",
    Unknown => "unknown",
});

/// How the delay in the contract was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// No automatic retry, so no delay.
    None,
    /// Bounded exponential backoff with jitter.
    ExponentialBackoff,
    /// The dependency's Retry-After (or pushback) decides.
    RetryAfter,
    /// A fixed schedule of waits, one per retry.
    Schedule,
    /// A fleet hold on the failure's scope ends later than any other delay.
    Hold,
    /// The fleet retry budget of the failure's scope is spent: the retry
    /// waits until its window has room again.
    Budget,
}

crate::words!(Strategy {
    None => "none",
    ExponentialBackoff => "exponential_backoff",
    RetryAfter => "retry_after",
    Schedule => "schedule",
    Hold => "hold",
    Budget => "budget",
});

/// Whether a stop applies to this request or to every call of the tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scope {
    /// Only this request.
    #[default]
    Request,
    /// Stop calling this tenant until the quota resets.
    Tenant,
}

crate::words!(Scope { Request => "request", Tenant => "tenant" });

/// A final state the caller should record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TerminalState {
    /// The schedule is exhausted; the record waits for a person.
    FailedPermanent,
}

// The seeds' own spelling, written to records and the wire as is.
crate::words!(TerminalState { FailedPermanent => "FAILED_PERMANENT" });

/// The language of `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Locale {
    /// English (the default).
    #[default]
    En,
    /// Russian.
    Ru,
}

crate::words!(Locale { En => "en", Ru => "ru" });

impl Locale {
    /// Every supported locale, in index order.
    pub const ALL: [Locale; 2] = [Locale::En, Locale::Ru];

    /// Reads a locale tag: empty is English, `ru-RU` is Russian; anything
    /// else is `None`.
    pub fn parse(tag: &str) -> Option<Locale> {
        let primary = tag.split(['-', '_']).next().unwrap_or(tag);
        if tag.is_empty() || primary.eq_ignore_ascii_case("en") {
            Some(Locale::En)
        } else if primary.eq_ignore_ascii_case("ru") {
            Some(Locale::Ru)
        } else {
            None
        }
    }

    /// An exact catalog tag: `en` or `ru`.
    pub fn from_tag(tag: &str) -> Option<Locale> {
        Locale::from_word(tag)
    }

    /// Position in per-locale arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The ASC 0.1 retry contract, as sent by a dependency (`upstream`) or
/// answered by retryd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RetryContract<'a> {
    /// Another attempt may succeed once the stated conditions are met.
    pub retryable: bool,
    /// A replay will not create unacceptable duplicate effects.
    pub safe: bool,
    /// Minimum delay before another attempt.
    pub after_ms: u64,
    /// Top of the jitter window: wait a uniform time in `[after_ms, max_after_ms]`.
    pub max_after_ms: u64,
    /// How the delay was computed.
    pub strategy: Strategy,
    /// Number of the attempt that produced this failure (1-based).
    pub attempt: u32,
    /// Maximum attempts permitted by the current policy.
    pub max_attempts: u32,
    /// Time after which no further attempt is permitted.
    pub deadline: Option<UnixMillis>,
    /// The key the dependency deduplicates by; `None` unless it enforces one.
    pub idempotency_key: Option<&'a str>,
    /// What is known of the failed call's external effects.
    pub side_effect_state: SideEffectState,
    /// Machine-readable action for resolving uncertain state.
    pub reconciliation_action: Option<&'a str>,
}

/// A failed call, as the caller describes it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Failure<'a> {
    /// Catalog name; empty means the default catalog.
    pub catalog: &'a str,
    /// Error code from the response; empty means no platform envelope (a network error).
    pub code: &'a str,
    /// Read or write; unspecified is inferred from `method`.
    pub operation: Operation,
    /// The dependency's method, e.g. `crm.deal.add`.
    pub method: &'a str,
    /// 1-based number of the attempt that failed; 0 means 1.
    pub attempt: u32,
    /// The caller's attempt limit; 0 means the catalog's.
    pub max_attempts: u32,
    /// The raw `Retry-After` header: delta-seconds or an HTTP-date.
    pub retry_after: &'a str,
    /// An already parsed delay (e.g. `grpc-retry-pushback-ms`, RetryInfo).
    pub retry_after_ms: Option<u64>,
    /// No attempt is allowed after this time.
    pub deadline: Option<UnixMillis>,
    /// The caller's idempotency key.
    pub idempotency_key: &'a str,
    /// The dependency deduplicates by `idempotency_key`.
    pub idempotency_key_enforced: bool,
    /// What a read-back of the state found.
    pub read_back: ReadBack,
    /// The caller has no reliable way to verify the write's effect.
    pub cannot_verify_effect: bool,
    /// `X-Request-Id`: echoed for diagnostics, never an idempotency key.
    pub request_id: &'a str,
    /// The caller's tenant (used for tenant-wide stops).
    pub tenant: &'a str,
    /// Retry advice the failed dependency itself returned.
    pub upstream: Option<RetryContract<'a>>,
    /// Language of the reason: `en` (default, also when empty) or `ru`;
    /// region subtags such as `ru-RU` are accepted.
    pub locale: &'a str,
    /// Which instance of the dependency (a portal, a host, an account): the
    /// key of dependency and method holds.
    pub dependency: &'a str,
    /// The dependency's own word on when its allowance resets (wins over the catalog's rule).
    pub quota_resets_at: Option<UnixMillis>,
    /// The token of an open circuit's probe, when this failure is the probe's outcome.
    pub probe_token: &'a str,
}

/// retryd's answer for one failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision<'a> {
    /// What the caller may do.
    pub verdict: Verdict,
    /// The full ASC retry contract.
    pub retry: RetryContract<'a>,
    /// Whether the target call reached the dependency, from the matrix.
    pub target_reached: TargetReached,
    /// The catalog that decided.
    pub catalog: &'a str,
    /// The canonical code (an alias resolves to its code), or the input code if unknown.
    pub code: &'a str,
    /// The code is in the catalog.
    pub known_code: bool,
    /// The effective operation.
    pub operation: Operation,
    /// The operation was inferred from the method (or defaulted to write).
    pub operation_inferred: bool,
    /// Why, in the requested locale.
    pub reason: &'a str,
    /// Stable id of the rule that decided, e.g. `vibecode/BITRIX_TIMEOUT/write`.
    pub rule: &'a str,
    /// Content hash of the policy that decided.
    pub policy_version: &'a str,
    /// The state change needed before a retry is valid, e.g. `authorization_restored`.
    pub required_transition: Option<&'a str>,
    /// Whether the stop applies to the request or the whole tenant.
    pub scope: Scope,
    /// `X-Request-Id` echoed.
    pub request_id: &'a str,
    /// A final state to record, e.g. `FAILED_PERMANENT`.
    pub terminal_state: Option<TerminalState>,
    /// Input that was ignored or adjusted.
    pub warnings: super::warnings::Warnings<'a>,
    /// The fleet hold this failure asks to place, if its rule places one
    /// (the fleet layer decides whether it is new, an extension or kept).
    /// Not part of the JSON form: the wire reports the hold in force instead.
    #[serde(skip)]
    pub hold_plan: Option<super::hold::HoldPlan<'a>>,
    /// Where the fleet retry budget of the failure's scope stands, set by
    /// the fleet layer when the scope is budgeted (the engine leaves it unset).
    #[serde(skip)]
    pub budget: Option<super::budget::BudgetView>,
}
