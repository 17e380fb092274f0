//! How the shadow policy, a replay, a policy test and a diff compare two
//! decisions: through one owned summary, [`Outcome`] — the fields a caller
//! acts on (verdict, safe, delays, side effect, holds, budgets) — so they
//! all agree on what "the decision changed" means. It is also the
//! `decision` of a decision-log line.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::core::{Decision, SideEffectState, Strategy, UnixMillis, Verdict};

/// An enum the decision log names by its word, whose proto name is the
/// word in capitals behind a prefix (`VERDICT_RETRY_WITH_LIMIT`).
pub trait ProtoNamed: Copy + 'static {
    /// The proto enum's value prefix.
    const PREFIX: &'static str;
    /// The value a core word names.
    fn from_word(word: &str) -> Option<Self>;
    /// Its core word.
    fn word(self) -> &'static str;
}

macro_rules! proto_named {
    ($ty:ident, $prefix:literal) => {
        impl ProtoNamed for $ty {
            const PREFIX: &'static str = $prefix;
            fn from_word(word: &str) -> Option<Self> {
                $ty::from_word(word)
            }
            fn word(self) -> &'static str {
                self.as_str()
            }
        }
    };
}
proto_named!(Verdict, "VERDICT_");
proto_named!(Strategy, "STRATEGY_");
proto_named!(SideEffectState, "SIDE_EFFECT_STATE_");

/// Reads a logged word written either as the core's word or as the proto
/// name (a log written by a tool that printed the gRPC JSON form), so
/// `retryd replay` compares like with like. A word neither knows is kept
/// as written: the replay then reports it as a change rather than failing.
fn either_spelling<'de, T: ProtoNamed, D: serde::Deserializer<'de>>(d: D) -> Result<Cow<'static, str>, D::Error> {
    let given = String::deserialize(d)?;
    let word = given
        .strip_prefix(T::PREFIX)
        .map_or_else(|| given.clone(), str::to_ascii_lowercase);
    Ok(T::from_word(&word).map_or(Cow::Owned(given), |v| Cow::Borrowed(v.word())))
}

/// The fields of a decision a caller acts on, owned, comparable and
/// serializable (the `decision` of a decision-log line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// `retry_with_limit`, `state_verification_required`, ….
    #[serde(deserialize_with = "either_spelling::<Verdict, _>")]
    pub verdict: Cow<'static, str>,
    /// ASC `safe`.
    pub safe: bool,
    /// ASC `retryable`.
    pub retryable: bool,
    /// ASC `after_ms`.
    pub after_ms: u64,
    /// Top of the jitter window.
    pub max_after_ms: u64,
    /// How the delay was computed.
    #[serde(deserialize_with = "either_spelling::<Strategy, _>")]
    pub strategy: Cow<'static, str>,
    /// The attempt budget.
    pub max_attempts: u32,
    /// `none`, `possible`, `confirmed`, `unknown`.
    #[serde(deserialize_with = "either_spelling::<SideEffectState, _>")]
    pub side_effect_state: Cow<'static, str>,
    /// Machine-readable action, if any.
    pub reconciliation_action: Option<String>,
    /// The transition needed before a retry, if any.
    pub required_transition: Option<String>,
    /// e.g. `FAILED_PERMANENT`.
    pub terminal_state: Option<String>,
    /// The hold this decision asks to place, as `kind/scope`, if any.
    pub hold: Option<String>,
    /// The end of that hold, in Unix milliseconds.
    pub hold_until_ms: Option<i64>,
    /// The rule that decided (context, not compared).
    pub rule: String,
}

/// The compared fields, in report order (also the bounded values of the
/// `field` label of `retryd_shadow_disagreements_total`).
pub const FIELDS: [&str; 13] = [
    "verdict",
    "safe",
    "retryable",
    "after_ms",
    "max_after_ms",
    "strategy",
    "max_attempts",
    "side_effect_state",
    "reconciliation_action",
    "required_transition",
    "terminal_state",
    "hold",
    "hold_until",
];

/// One field that differs between two outcomes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldChange {
    /// One of [`FIELDS`].
    pub field: String,
    /// Under the old (live, logged) policy.
    pub old: String,
    /// Under the new (shadow, candidate) policy.
    pub new: String,
}

impl Outcome {
    /// The summary of `d`.
    pub fn of(d: &Decision<'_>) -> Outcome {
        Outcome {
            verdict: Cow::Borrowed(d.verdict.as_str()),
            safe: d.retry.safe,
            retryable: d.retry.retryable,
            after_ms: d.retry.after_ms,
            max_after_ms: d.retry.max_after_ms,
            strategy: Cow::Borrowed(d.retry.strategy.as_str()),
            max_attempts: d.retry.max_attempts,
            side_effect_state: Cow::Borrowed(d.retry.side_effect_state.as_str()),
            reconciliation_action: d.retry.reconciliation_action.map(str::to_owned),
            required_transition: d.required_transition.map(str::to_owned),
            terminal_state: d.terminal_state.map(|t| t.as_str().to_owned()),
            hold: d.hold_plan.map(|p| format!("{}/{}", p.kind.as_str(), p.scope.as_str())),
            hold_until_ms: d.hold_plan.map(|p| p.until.0),
            rule: d.rule.to_owned(),
        }
    }

    /// The value of `field` (one of [`FIELDS`]) as text; `-` for none.
    pub fn field(&self, field: &str) -> String {
        let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".to_owned());
        match field {
            "verdict" => self.verdict.to_string(),
            "safe" => self.safe.to_string(),
            "retryable" => self.retryable.to_string(),
            "after_ms" => self.after_ms.to_string(),
            "max_after_ms" => self.max_after_ms.to_string(),
            "strategy" => self.strategy.to_string(),
            "max_attempts" => self.max_attempts.to_string(),
            "side_effect_state" => self.side_effect_state.to_string(),
            "reconciliation_action" => opt(&self.reconciliation_action),
            "required_transition" => opt(&self.required_transition),
            "terminal_state" => opt(&self.terminal_state),
            "hold" => opt(&self.hold),
            "hold_until" => self
                .hold_until_ms
                .map_or_else(|| "-".to_owned(), |ms| UnixMillis(ms).to_rfc3339()),
            _ => String::new(),
        }
    }

    /// Every field that differs from `old` to `self`, in [`FIELDS`] order.
    pub fn changes_from(&self, old: &Outcome) -> Vec<FieldChange> {
        // The common case, no text built: everything but the rule id is equal.
        if self.same_as(old) {
            return Vec::new();
        }
        FIELDS
            .iter()
            .filter_map(|f| {
                let (a, b) = (old.field(f), self.field(f));
                (a != b).then(|| FieldChange {
                    field: (*f).to_owned(),
                    old: a,
                    new: b,
                })
            })
            .collect()
    }

    /// Every compared field is equal (the rule id is not compared).
    pub fn same_as(&self, other: &Outcome) -> bool {
        self.verdict == other.verdict
            && self.safe == other.safe
            && self.retryable == other.retryable
            && self.after_ms == other.after_ms
            && self.max_after_ms == other.max_after_ms
            && self.strategy == other.strategy
            && self.max_attempts == other.max_attempts
            && self.side_effect_state == other.side_effect_state
            && self.reconciliation_action == other.reconciliation_action
            && self.required_transition == other.required_transition
            && self.terminal_state == other.terminal_state
            && self.hold == other.hold
            && self.hold_until_ms == other.hold_until_ms
    }

    /// Whether going from `old` to `self` makes a write less safe, and why:
    /// a more permissive verdict (`state_verification_required` →
    /// `retry_with_limit`, a stop → a retry), `safe` false → true, a
    /// reconciliation action dropped, or a side effect thought less likely.
    pub fn less_safe_than(&self, old: &Outcome) -> Option<String> {
        let rank = |v: &str| match v {
            "retry_with_limit" => 3,
            "state_verification_required" => 2,
            "already_applied" => 1,
            _ => 0,
        };
        let mut why = Vec::new();
        if rank(&self.verdict) > rank(&old.verdict) {
            why.push(format!("verdict {} → {}", old.verdict, self.verdict));
        }
        if self.safe && !old.safe {
            why.push("safe false → true".to_owned());
        }
        if self.retryable && !old.retryable && rank(&self.verdict) <= rank(&old.verdict) {
            why.push("retryable false → true".to_owned());
        }
        if old.reconciliation_action.is_some() && self.reconciliation_action.is_none() {
            why.push(format!(
                "reconciliation_action {} dropped",
                old.reconciliation_action.as_deref().unwrap_or_default()
            ));
        }
        let risk = |s: &str| match s {
            "none" => 0,
            "possible" => 1,
            _ => 2,
        };
        if risk(&self.side_effect_state) < risk(&old.side_effect_state) {
            why.push(format!(
                "side_effect_state {} → {}",
                old.side_effect_state, self.side_effect_state
            ));
        }
        (!why.is_empty()).then(|| why.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_outcome_reads_in_either_spelling() {
        let line = |verdict: &str, strategy: &str, side: &str| {
            serde_json::json!({
                "verdict": verdict, "safe": true, "retryable": true, "after_ms": 1, "max_after_ms": 2,
                "strategy": strategy, "max_attempts": 3, "side_effect_state": side,
                "reconciliation_action": null, "required_transition": null, "terminal_state": null,
                "hold": null, "hold_until_ms": null, "rule": "r"
            })
        };
        let words: Outcome = serde_json::from_value(line("retry_with_limit", "exponential_backoff", "none")).unwrap();
        let proto: Outcome = serde_json::from_value(line(
            "VERDICT_RETRY_WITH_LIMIT",
            "STRATEGY_EXPONENTIAL_BACKOFF",
            "SIDE_EFFECT_STATE_NONE",
        ))
        .unwrap();
        assert_eq!(words, proto);
        assert!(proto.changes_from(&words).is_empty());
        let odd: Outcome = serde_json::from_value(line("maybe", "exponential_backoff", "none")).unwrap();
        assert_eq!(odd.verdict, "maybe");
        assert_eq!(odd.changes_from(&words).len(), 1);
    }
}
