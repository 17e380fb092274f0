//! The TOML shape of a catalog file, exactly as written under `policies/`.
//!
//! Every key is a [`Field`]: a value of the wrong type is kept as an error
//! instead of failing the whole file, and keys the format does not know are
//! collected in `unknown_keys`, so [`super::compile_catalog`] can report every
//! problem of a file at once, each with its key path and line.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use crate::core::model::{Scope, SideEffectState, TargetReached};

/// A localized text: `{ en = "...", ru = "..." }`.
pub type TextSource = BTreeMap<String, String>;

/// Keys a table does not declare, by name (reported as errors).
pub type UnknownKeys = BTreeMap<String, toml::Value>;

/// One key of a catalog table: absent, present but not of its type, or read.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Field<T> {
    /// The key is not in the table.
    #[default]
    Missing,
    /// The key is there, with a value that is not a `T` (serde's message).
    Invalid(String),
    /// The key's value.
    Value(T),
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Any TOML value is a `toml::Value`; whether it is a `T` is checked
        // second, so a wrong type is an error of this key, not of the file.
        let value = toml::Value::deserialize(d)?;
        Ok(match T::deserialize(value) {
            Ok(v) => Field::Value(v),
            Err(e) => Field::Invalid(e.message().trim().to_owned()),
        })
    }
}

/// One catalog file.
#[derive(Debug, Deserialize)]
pub struct CatalogSource {
    /// The name callers put in `Failure.catalog`.
    #[serde(default)]
    pub name: Field<String>,
    /// One line for people.
    #[serde(default)]
    pub description: Field<String>,
    /// Locales every text must have; `en` is always required (default `["en"]`).
    #[serde(default)]
    pub locales: Field<Vec<String>>,
    /// Attempts allowed in all, the first included.
    #[serde(default)]
    pub max_attempts: Field<u32>,
    /// Backoff used when no Retry-After or schedule applies.
    #[serde(default)]
    pub backoff: Field<BackoffSource>,
    /// Waits for `delay = "schedule"`, one per retry, in milliseconds.
    #[serde(default)]
    pub schedule_ms: Field<Vec<u64>>,
    /// State to record when retries run out (e.g. `FAILED_PERMANENT`).
    #[serde(default)]
    pub exhausted_terminal_state: Field<String>,
    /// How to tell reads from writes by the method's meaning.
    #[serde(default)]
    pub operations: Field<OperationsSource>,
    /// The known codes.
    #[serde(default)]
    pub codes: Field<Vec<CodeSource>>,
    /// Rule for a code the catalog does not know.
    #[serde(default)]
    pub unknown: Field<CodeSource>,
    /// Rule for a failure with no platform envelope (empty code).
    #[serde(default)]
    pub no_envelope: Field<CodeSource>,
    /// The cap on every delay and every hold, in milliseconds (default 25 h).
    #[serde(default)]
    pub max_delay_ms: Field<u64>,
    /// When an exhausted allowance resets (for `quota_stop` holds).
    #[serde(default)]
    pub quota: Field<super::holds::QuotaSource>,
    /// Fleet retry budgets (`[[budgets]]`).
    #[serde(default)]
    pub budgets: Field<Vec<super::budgets::BudgetSource>>,
    /// Policy test cases kept in the catalog file (`[[tests]]`), read by
    /// `retryd policy test`, not by the catalog compiler.
    #[serde(default)]
    pub tests: Field<toml::Value>,
    /// The catalog this file amends (merged before compiling, see `amend`).
    #[serde(default)]
    pub extends: Field<toml::Value>,
    /// Codes of the base catalog an amending file drops.
    #[serde(default)]
    pub remove: Field<toml::Value>,
    /// This file replaces the embedded catalog of its name, on purpose.
    #[serde(default)]
    pub replaces: Field<toml::Value>,
    /// Keys the format does not have.
    #[serde(flatten)]
    pub unknown_keys: UnknownKeys,
}

impl CatalogSource {
    /// The keys of this table.
    pub const KEYS: &'static [&'static str] = &[
        "name",
        "description",
        "locales",
        "max_attempts",
        "backoff",
        "schedule_ms",
        "exhausted_terminal_state",
        "operations",
        "codes",
        "unknown",
        "no_envelope",
        "max_delay_ms",
        "quota",
        "budgets",
        "tests",
        "extends",
        "remove",
        "replaces",
    ];
}

/// Bounded exponential backoff with equal jitter: after attempt n the wait
/// is drawn from `[m/2, m]`, `m = min(cap_ms, base_ms · multiplier^(n−1))`.
#[derive(Debug, Deserialize)]
pub struct BackoffSource {
    /// `m` after the first attempt, in milliseconds: the first wait is
    /// between `base_ms/2` and `base_ms`.
    #[serde(default)]
    pub base_ms: Field<u64>,
    /// Growth per attempt (≥ 1).
    #[serde(default)]
    pub multiplier: Field<f64>,
    /// Largest `m`, in milliseconds.
    #[serde(default)]
    pub cap_ms: Field<u64>,
    /// Keys the format does not have.
    #[serde(flatten)]
    pub unknown_keys: UnknownKeys,
}

impl BackoffSource {
    /// The keys of this table.
    pub const KEYS: &'static [&'static str] = &["base_ms", "multiplier", "cap_ms"];
}

/// Method-name words that mark a read or a write (last path segment).
#[derive(Debug, Deserialize)]
pub struct OperationsSource {
    /// Words that mean a read, e.g. `get`, `list`.
    #[serde(default)]
    pub read: Field<Vec<String>>,
    /// Words that mean a write, e.g. `add`, `update`.
    #[serde(default)]
    pub write: Field<Vec<String>>,
    /// Keys the format does not have.
    #[serde(flatten)]
    pub unknown_keys: UnknownKeys,
}

impl OperationsSource {
    /// The keys of this table.
    pub const KEYS: &'static [&'static str] = &["read", "write"];
}

/// One code (or the `unknown` / `no_envelope` fallback).
#[derive(Debug, Deserialize)]
pub struct CodeSource {
    /// The code, case-sensitive; absent for fallbacks.
    #[serde(default)]
    pub code: Field<String>,
    /// Other spellings of the same code (e.g. `ASC-6005`).
    #[serde(default)]
    pub aliases: Field<Vec<String>>,
    /// Did the target call reach the dependency?
    #[serde(default)]
    pub target_reached: Field<TargetReached>,
    /// How the wait is computed: `backoff` (default), `retry_after`,
    /// `strict_retry_after`, `schedule`.
    #[serde(default)]
    pub delay: Field<String>,
    /// The matrix's condition and explanation; the default reason.
    #[serde(default)]
    pub condition: Field<TextSource>,
    /// The rule for reads.
    #[serde(default)]
    pub read: Field<RuleSource>,
    /// The rule for writes.
    #[serde(default)]
    pub write: Field<RuleSource>,
    /// The rule for a write on a retried attempt (attempt > 1), e.g. a
    /// conflict that the earlier attempt probably caused.
    #[serde(default)]
    pub retried_write: Field<RuleSource>,
    /// The rule for a write when the dependency sent a Retry-After (e.g. an
    /// HTTP 503 that defers processing).
    #[serde(default)]
    pub write_with_retry_after: Field<RuleSource>,
    /// This code's own cap on delays and holds (default: the catalog's).
    #[serde(default)]
    pub max_delay_ms: Field<u64>,
    /// Keys the format does not have.
    #[serde(flatten)]
    pub unknown_keys: UnknownKeys,
}

impl CodeSource {
    /// The keys of this table.
    pub const KEYS: &'static [&'static str] = &[
        "code",
        "aliases",
        "target_reached",
        "delay",
        "condition",
        "read",
        "write",
        "retried_write",
        "write_with_retry_after",
        "max_delay_ms",
    ];
}

/// What to answer for one code and one operation.
#[derive(Debug, Deserialize)]
pub struct RuleSource {
    /// `retry_with_limit`, `state_verification_required`, `fix_before_retry` or `do_not_retry`.
    #[serde(default)]
    pub verdict: Field<String>,
    /// Knowledge of effects; defaults from `target_reached` (no → none, yes → possible, unknown → unknown) and `none` for reads.
    #[serde(default)]
    pub side_effect: Field<SideEffectState>,
    /// The state change needed first, e.g. `authorization_restored`.
    #[serde(default)]
    pub required_transition: Field<String>,
    /// Machine-readable action, e.g. `clear_stored_id_or_investigate`.
    #[serde(default)]
    pub reconciliation_action: Field<String>,
    /// Overrides the code's condition as the reason.
    #[serde(default)]
    pub reason: Field<TextSource>,
    /// `request` (default), or `tenant` for a tenant-wide stop.
    #[serde(default)]
    pub scope: Field<Scope>,
    /// An idempotency key does not replace reconciliation (ASC RESULT_STATE_UNKNOWN).
    #[serde(default)]
    pub reconcile_before_retry: Field<bool>,
    /// The write rule is deliberately less conservative than the read rule.
    #[serde(default)]
    pub acknowledge_less_conservative: Field<bool>,
    /// A fleet hold this failure places.
    #[serde(default)]
    pub hold: Field<super::holds::HoldSource>,
    /// Keys the format does not have.
    #[serde(flatten)]
    pub unknown_keys: UnknownKeys,
}

impl RuleSource {
    /// The keys of this table.
    pub const KEYS: &'static [&'static str] = &[
        "verdict",
        "side_effect",
        "required_transition",
        "reconciliation_action",
        "reason",
        "scope",
        "reconcile_before_retry",
        "acknowledge_less_conservative",
        "hold",
    ];
}
