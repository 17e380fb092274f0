//! The TOML shape of a catalog file, exactly as written under `policies/`.
//! Unknown keys are refused; meaning is checked by [`super::compile_catalog`].

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::core::model::{Scope, SideEffectState, TargetReached};

/// A localized text: `{ en = "...", ru = "..." }`.
pub type TextSource = BTreeMap<String, String>;

/// One catalog file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogSource {
    /// The name callers put in `Failure.catalog`.
    pub name: String,
    /// One line for people.
    pub description: String,
    /// Locales every text must have; `en` is always required.
    #[serde(default = "default_locales")]
    pub locales: Vec<String>,
    /// Attempts allowed in all, the first included.
    pub max_attempts: u32,
    /// Backoff used when no Retry-After or schedule applies.
    pub backoff: BackoffSource,
    /// Waits for `delay = "schedule"`, one per retry, in milliseconds.
    #[serde(default)]
    pub schedule_ms: Vec<u64>,
    /// State to record when retries run out (e.g. `FAILED_PERMANENT`).
    #[serde(default)]
    pub exhausted_terminal_state: Option<String>,
    /// How to tell reads from writes by the method's meaning.
    pub operations: OperationsSource,
    /// The known codes.
    #[serde(default)]
    pub codes: Vec<CodeSource>,
    /// Rule for a code the catalog does not know.
    pub unknown: CodeSource,
    /// Rule for a failure with no platform envelope (empty code).
    pub no_envelope: CodeSource,
    /// The cap on every delay and every hold, in milliseconds (default 25 h).
    #[serde(default)]
    pub max_delay_ms: Option<u64>,
    /// When an exhausted allowance resets (for `quota_stop` holds).
    #[serde(default)]
    pub quota: Option<super::holds::QuotaSource>,
}

fn default_locales() -> Vec<String> {
    vec!["en".to_owned()]
}

/// Bounded exponential backoff: `min(cap, base · multiplier^(attempt−1))`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackoffSource {
    /// Delay after the first attempt, in milliseconds.
    pub base_ms: u64,
    /// Growth per attempt (> 1).
    pub multiplier: f64,
    /// Largest delay, in milliseconds.
    pub cap_ms: u64,
}

/// Method-name words that mark a read or a write (last path segment).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationsSource {
    /// Words that mean a read, e.g. `get`, `list`.
    #[serde(default)]
    pub read: Vec<String>,
    /// Words that mean a write, e.g. `add`, `update`.
    #[serde(default)]
    pub write: Vec<String>,
}

/// One code (or the `unknown` / `no_envelope` fallback).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeSource {
    /// The code, case-sensitive; absent for fallbacks.
    #[serde(default)]
    pub code: Option<String>,
    /// Other spellings of the same code (e.g. `ASC-6005`).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Did the target call reach the dependency?
    pub target_reached: TargetReached,
    /// How the wait is computed: `backoff`, `retry_after`, `strict_retry_after`, `schedule`.
    #[serde(default = "default_delay")]
    pub delay: String,
    /// The matrix's condition and explanation; the default reason.
    pub condition: TextSource,
    /// The rule for reads.
    pub read: RuleSource,
    /// The rule for writes.
    pub write: RuleSource,
    /// The rule for a write on a retried attempt (attempt > 1), e.g. a
    /// conflict that the earlier attempt probably caused.
    #[serde(default)]
    pub retried_write: Option<RuleSource>,
    /// The rule for a write when the dependency sent a Retry-After (e.g. an
    /// HTTP 503 that defers processing).
    #[serde(default)]
    pub write_with_retry_after: Option<RuleSource>,
    /// This code's own cap on delays and holds (default: the catalog's).
    #[serde(default)]
    pub max_delay_ms: Option<u64>,
}

fn default_delay() -> String {
    "backoff".to_owned()
}

/// What to answer for one code and one operation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSource {
    /// `retry_with_limit`, `state_verification_required`, `fix_before_retry` or `do_not_retry`.
    pub verdict: String,
    /// Knowledge of effects; defaults from `target_reached` (no → none, yes → possible, unknown → unknown) and `none` for reads.
    #[serde(default)]
    pub side_effect: Option<SideEffectState>,
    /// The state change needed first, e.g. `authorization_restored`.
    #[serde(default)]
    pub required_transition: Option<String>,
    /// Machine-readable action, e.g. `clear_stored_id_or_investigate`.
    #[serde(default)]
    pub reconciliation_action: Option<String>,
    /// Overrides the code's condition as the reason.
    #[serde(default)]
    pub reason: Option<TextSource>,
    /// `request`, or `tenant` for a tenant-wide stop.
    #[serde(default)]
    pub scope: Scope,
    /// An idempotency key does not replace reconciliation (ASC RESULT_STATE_UNKNOWN).
    #[serde(default)]
    pub reconcile_before_retry: bool,
    /// The write rule is deliberately less conservative than the read rule.
    #[serde(default)]
    pub acknowledge_less_conservative: bool,
    /// A fleet hold this failure places.
    #[serde(default)]
    pub hold: Option<super::holds::HoldSource>,
}
