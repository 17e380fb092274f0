//! The decision log's line format (one JSON object per decision) and its
//! conversion from and to the core's [`Failure`].
//!
//! Every line carries `v`, the format version; `retryd replay` refuses a
//! version it does not know ([`SUPPORTED_VERSIONS`]). Enum values are the
//! core's words (`crate::core::words`). Tenants,
//! idempotency keys and request ids are replaced by a keyed hash
//! (SipHash-2-4, [`Hasher`]) unless the log is written raw; the hash is
//! stable for one key, so a replay still sees which failures share a tenant.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::outcome::Outcome;
use crate::core::budget::{BudgetRule, BudgetScope, Standing};
use crate::core::hold::Hold;
use crate::core::{Failure, Operation, ReadBack, RetryContract, SideEffectState, Strategy, UnixMillis};
use crate::fleet::budget::Judged;

/// The format version written in every line's `v`.
pub const FORMAT_VERSION: u32 = 1;
/// The versions `retryd replay` reads.
pub const SUPPORTED_VERSIONS: &[u32] = &[1];

/// One decision-log line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogRecord {
    /// Format version ([`FORMAT_VERSION`]).
    pub v: u32,
    /// When the decision was made, RFC 3339.
    pub ts: String,
    /// The same instant in Unix milliseconds (what replay decides at).
    pub ts_ms: i64,
    /// The policy that decided.
    pub policy_version: String,
    /// Whether tenants, keys and request ids are hashed.
    pub hashed: bool,
    /// The failure as received.
    pub failure: LoggedFailure,
    /// The decision.
    pub decision: Outcome,
    /// The fleet hold in force on the failure's scope when it was decided
    /// (tenant subjects hashed like the failure's tenant).
    pub hold: Option<Hold>,
    /// The retry budget the decision was judged against, as it stood before
    /// the decision (absent in lines written before budgets were logged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<LoggedBudget>,
}

/// A budget standing as logged: the rule and where its scope stood.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedBudget {
    /// `dependency` or `tenant`.
    pub scope: BudgetScope,
    /// The rule's window.
    pub window_ms: u64,
    /// The rule's share of first attempts.
    pub retry_percent: u32,
    /// The rule's reserve.
    pub min_retries_per_sec: u32,
    /// The rule's fixed allowance of first attempts, if any.
    pub rule_requests: Option<u64>,
    /// The scope key (tenant hashed).
    pub scope_key: String,
    /// First attempts in the window.
    pub requests: u64,
    /// Retries in the window, before this decision.
    pub retries: u64,
    /// Retries allowed in the window.
    pub allowed: u64,
    /// When the window starts, Unix ms.
    pub window_start_ms: i64,
    /// Spent: a retry had to wait until `room_at_ms`.
    pub exhausted: bool,
    /// When the window has room again, Unix ms.
    pub room_at_ms: i64,
    /// Deferrals this replica had given in the window (paces a deferral).
    #[serde(default)]
    pub deferred: u64,
    /// Replicas judging the scope (paces a deferral; 0 in older logs: 1).
    #[serde(default)]
    pub replicas: u64,
}

impl LoggedBudget {
    /// The standing `j`, as logged.
    pub fn of(j: &Judged) -> Self {
        LoggedBudget {
            scope: j.rule.scope,
            window_ms: j.rule.window_ms,
            retry_percent: j.rule.retry_percent,
            min_retries_per_sec: j.rule.min_retries_per_sec,
            rule_requests: j.rule.requests,
            scope_key: j.shown.clone(),
            requests: j.standing.requests,
            retries: j.standing.retries,
            allowed: j.standing.allowed,
            window_start_ms: j.standing.window_start.0,
            exhausted: j.standing.exhausted,
            room_at_ms: j.standing.room_at.0,
            deferred: j.standing.deferred,
            replicas: j.replicas,
        }
    }

    /// The standing to decide again with.
    pub fn judged(&self) -> Judged {
        Judged {
            rule: BudgetRule {
                scope: self.scope,
                window_ms: self.window_ms,
                retry_percent: self.retry_percent,
                min_retries_per_sec: self.min_retries_per_sec,
                requests: self.rule_requests,
            },
            shown: self.scope_key.clone(),
            standing: Standing {
                requests: self.requests,
                retries: self.retries,
                allowed: self.allowed,
                window_start: UnixMillis(self.window_start_ms),
                exhausted: self.exhausted,
                room_at: UnixMillis(self.room_at_ms),
                deferred: self.deferred,
            },
            replicas: self.replicas.max(1),
        }
    }
}

/// A failure, owned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoggedFailure {
    /// Catalog name (empty: the default).
    pub catalog: String,
    /// The code (empty: no envelope).
    pub code: String,
    /// `read`, `write` or empty (inferred from the method).
    pub operation: Cow<'static, str>,
    /// The dependency's method.
    pub method: String,
    /// The attempt that failed.
    pub attempt: u32,
    /// The caller's attempt limit (0: the catalog's).
    pub max_attempts: u32,
    /// The raw Retry-After.
    pub retry_after: String,
    /// A parsed delay.
    pub retry_after_ms: Option<u64>,
    /// The caller's deadline, Unix ms.
    pub deadline_ms: Option<i64>,
    /// The idempotency key (hashed unless raw).
    pub idempotency_key: String,
    /// The dependency enforces the key.
    pub idempotency_key_enforced: bool,
    /// `not_done`, `effect_present`, `effect_absent`, `inconclusive`.
    pub read_back: Cow<'static, str>,
    /// The caller cannot verify the effect.
    pub cannot_verify_effect: bool,
    /// X-Request-Id (hashed unless raw).
    pub request_id: String,
    /// The tenant (hashed unless raw).
    pub tenant: String,
    /// Locale of the reason.
    pub locale: String,
    /// The dependency instance.
    pub dependency: String,
    /// The dependency's own reset time, Unix ms.
    pub quota_resets_at_ms: Option<i64>,
    /// The dependency's own retry advice.
    pub upstream: Option<LoggedContract>,
}

/// An upstream ASC contract, owned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoggedContract {
    /// `retryable`.
    pub retryable: bool,
    /// `safe`.
    pub safe: bool,
    /// `after_ms`.
    pub after_ms: u64,
    /// `max_after_ms`.
    pub max_after_ms: u64,
    /// `strategy`.
    pub strategy: String,
    /// `attempt`.
    pub attempt: u32,
    /// `max_attempts`.
    pub max_attempts: u32,
    /// `deadline`, Unix ms.
    pub deadline_ms: Option<i64>,
    /// `idempotency_key` (hashed unless raw).
    pub idempotency_key: Option<String>,
    /// `side_effect_state`.
    pub side_effect_state: String,
    /// `reconciliation_action`.
    pub reconciliation_action: Option<String>,
}

/// The keyed hash that stands in for tenants, idempotency keys and request
/// ids: SipHash-2-4 (the `siphasher` crate), a keyed PRF made for short
/// inputs — a few dozen nanoseconds per value, where HMAC-SHA256 measured
/// about a microsecond, on a path that runs for every logged decision. Its
/// 128-bit key is the first half of SHA-256 of the key file. Written as `h:`
/// and 16 hex digits. Without a key, values are written raw.
#[derive(Clone)]
pub struct Hasher {
    key: Option<(u64, u64)>,
}

impl std::fmt::Debug for Hasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hasher").field("keyed", &self.key.is_some()).finish()
    }
}

impl Hasher {
    /// Hashes with a key derived from `key`.
    pub fn keyed(key: &[u8]) -> Hasher {
        use sha2::Digest as _;
        let d = Sha256::digest(key);
        let half = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&d[r]);
            u64::from_le_bytes(b)
        };
        Hasher {
            key: Some((half(0..8), half(8..16))),
        }
    }

    /// Writes values as they are (`--decision-log-raw`).
    pub fn raw() -> Hasher {
        Hasher { key: None }
    }

    /// Whether values are hashed.
    pub fn is_keyed(&self) -> bool {
        self.key.is_some()
    }

    /// `value` hashed (empty stays empty), or as is when raw.
    pub fn hash(&self, value: &str) -> String {
        use std::hash::Hasher as _;
        let Some((k0, k1)) = self.key else {
            return value.to_owned();
        };
        if value.is_empty() {
            return String::new();
        }
        let mut h = siphasher::sip::SipHasher24::new_with_keys(k0, k1);
        h.write(value.as_bytes());
        let n = h.finish();
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(18);
        out.push_str("h:");
        for i in (0..16).rev() {
            out.push(char::from(HEX[((n >> (i * 4)) & 0xf) as usize]));
        }
        out
    }
}

impl LoggedFailure {
    /// An owned copy of `f`, personal values passed through `hasher`.
    pub fn from_failure(f: &Failure<'_>, hasher: &Hasher) -> LoggedFailure {
        LoggedFailure {
            catalog: f.catalog.to_owned(),
            code: f.code.to_owned(),
            // Not given is written as nothing, as in format version 1.
            operation: Cow::Borrowed(match f.operation {
                Operation::Unspecified => "",
                op => op.as_str(),
            }),
            method: f.method.to_owned(),
            attempt: f.attempt,
            max_attempts: f.max_attempts,
            retry_after: f.retry_after.to_owned(),
            retry_after_ms: f.retry_after_ms,
            deadline_ms: f.deadline.map(|d| d.0),
            idempotency_key: hasher.hash(f.idempotency_key),
            idempotency_key_enforced: f.idempotency_key_enforced,
            read_back: Cow::Borrowed(f.read_back.as_str()),
            cannot_verify_effect: f.cannot_verify_effect,
            request_id: hasher.hash(f.request_id),
            tenant: hasher.hash(f.tenant),
            locale: f.locale.to_owned(),
            dependency: f.dependency.to_owned(),
            quota_resets_at_ms: f.quota_resets_at.map(|d| d.0),
            upstream: f.upstream.map(|u| LoggedContract {
                retryable: u.retryable,
                safe: u.safe,
                after_ms: u.after_ms,
                max_after_ms: u.max_after_ms,
                strategy: u.strategy.as_str().to_owned(),
                attempt: u.attempt,
                max_attempts: u.max_attempts,
                deadline_ms: u.deadline.map(|d| d.0),
                idempotency_key: u.idempotency_key.map(|k| hasher.hash(k)),
                side_effect_state: u.side_effect_state.as_str().to_owned(),
                reconciliation_action: u.reconciliation_action.map(str::to_owned),
            }),
        }
    }

    /// The failure to decide again (borrowing from `self`).
    pub fn as_failure(&self) -> Failure<'_> {
        Failure {
            catalog: &self.catalog,
            code: &self.code,
            operation: operation_from_str(&self.operation).unwrap_or_default(),
            method: &self.method,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            retry_after: &self.retry_after,
            retry_after_ms: self.retry_after_ms,
            deadline: self.deadline_ms.map(UnixMillis),
            idempotency_key: &self.idempotency_key,
            idempotency_key_enforced: self.idempotency_key_enforced,
            read_back: read_back_from_str(&self.read_back).unwrap_or_default(),
            cannot_verify_effect: self.cannot_verify_effect,
            request_id: &self.request_id,
            tenant: &self.tenant,
            upstream: self.upstream.as_ref().map(|u| RetryContract {
                retryable: u.retryable,
                safe: u.safe,
                after_ms: u.after_ms,
                max_after_ms: u.max_after_ms,
                strategy: Strategy::from_word(&u.strategy).unwrap_or(Strategy::None),
                attempt: u.attempt,
                max_attempts: u.max_attempts,
                deadline: u.deadline_ms.map(UnixMillis),
                idempotency_key: u.idempotency_key.as_deref(),
                side_effect_state: SideEffectState::from_word(&u.side_effect_state).unwrap_or(SideEffectState::Unknown),
                reconciliation_action: u.reconciliation_action.as_deref(),
            }),
            locale: &self.locale,
            dependency: &self.dependency,
            quota_resets_at: self.quota_resets_at_ms.map(UnixMillis),
            probe_token: "",
        }
    }
}

/// An operation from its word (empty: not given).
pub fn operation_from_str(s: &str) -> Option<Operation> {
    match s {
        "" => Some(Operation::Unspecified),
        word => Operation::from_word(word),
    }
}

/// A read-back from its word (empty: not done; the seeds' `present`,
/// `absent` and `none` accepted too).
pub fn read_back_from_str(s: &str) -> Option<ReadBack> {
    match s {
        "" | "none" => Some(ReadBack::NotDone),
        "present" => Some(ReadBack::EffectPresent),
        "absent" => Some(ReadBack::EffectAbsent),
        word => ReadBack::from_word(word),
    }
}

/// A hold as logged: a tenant subject passed through `hasher`.
pub fn logged_hold(h: &Hold, hasher: &Hasher) -> Hold {
    let mut h = h.clone();
    if h.key.scope == crate::core::hold::HoldScope::Tenant {
        h.key.subject = hasher.hash(&h.key.subject);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashing_is_keyed_stable_and_keeps_empty() {
        let a = Hasher::keyed(b"key-a");
        let b = Hasher::keyed(b"key-b");
        assert_eq!(a.hash("acme"), a.hash("acme"));
        assert_ne!(a.hash("acme"), b.hash("acme"));
        assert!(a.hash("acme").starts_with("h:") && a.hash("acme").len() == 18);
        assert_eq!(a.hash(""), "");
        assert_eq!(Hasher::raw().hash("acme"), "acme");
    }

    #[test]
    fn a_failure_survives_the_log() {
        let f = Failure {
            catalog: "vibecode",
            code: "BITRIX_TIMEOUT",
            operation: Operation::Write,
            attempt: 2,
            retry_after: "5",
            read_back: ReadBack::Inconclusive,
            dependency: "portal-1",
            ..Default::default()
        };
        let logged = LoggedFailure::from_failure(&f, &Hasher::raw());
        let json = serde_json::to_string(&logged).expect("json");
        let back: LoggedFailure = serde_json::from_str(&json).expect("parse");
        let g = back.as_failure();
        assert_eq!(
            (g.code, g.operation, g.attempt, g.read_back),
            ("BITRIX_TIMEOUT", Operation::Write, 2, ReadBack::Inconclusive)
        );
    }
}
