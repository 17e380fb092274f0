//! `GET /v1/catalogs`: the ListCatalogs answer in JSON (the proto's field
//! names, enum values as the lowercase words decisions use).

use serde_json::{Value, json};

use crate::grpc::json::{hold_kind_word, scope_word};
use crate::grpc::pb;

/// The JSON form of a ListCatalogs answer.
pub fn list_json(r: &pb::ListCatalogsResponse) -> Value {
    json!({
        "catalogs": r.catalogs.iter().map(catalog).collect::<Vec<_>>(),
        "policy_version": r.policy_version,
        "default_catalog": r.default_catalog,
    })
}

fn catalog(c: &pb::Catalog) -> Value {
    json!({
        "name": c.name,
        "description": c.description,
        "max_attempts": c.max_attempts,
        "backoff": c.backoff.as_ref().map(|b| json!({
            "base_ms": b.base_ms, "multiplier": b.multiplier, "cap_ms": b.cap_ms,
        })),
        "schedule_ms": c.schedule_ms,
        "codes": c.codes.iter().map(code).collect::<Vec<_>>(),
        "unknown": c.unknown.as_ref().map(code),
        "no_envelope": c.no_envelope.as_ref().map(code),
        "locales": c.locales,
        "exhausted_terminal_state": c.exhausted_terminal_state,
        "read_words": c.read_words,
        "write_words": c.write_words,
        "max_delay_ms": c.max_delay_ms,
        "quota_reset": c.quota_reset,
    })
}

fn code(c: &pb::CatalogCode) -> Value {
    json!({
        "code": c.code,
        "aliases": c.aliases,
        "target_reached": target_reached_word(c.target_reached),
        "read_verdict": verdict_word(c.read_verdict),
        "write_verdict": verdict_word(c.write_verdict),
        "delay": c.delay,
        "condition": c.condition,
        "retried_write_verdict": c.retried_write_verdict.map(verdict_word),
        "write_with_retry_after_verdict": c.write_with_retry_after_verdict.map(verdict_word),
        "read": c.read.as_ref().map(rule),
        "write": c.write.as_ref().map(rule),
        "retried_write": c.retried_write.as_ref().map(rule),
        "write_with_retry_after": c.write_with_retry_after.as_ref().map(rule),
        "max_delay_ms": c.max_delay_ms,
    })
}

fn rule(r: &pb::CatalogRule) -> Value {
    json!({
        "rule": r.rule,
        "verdict": verdict_word(r.verdict),
        "side_effect_state": side_effect_word(r.side_effect_state),
        "required_transition": r.required_transition,
        "reconciliation_action": r.reconciliation_action,
        "scope": scope_word(r.scope),
        "reconcile_before_retry": r.reconcile_before_retry,
        "reason": r.reason,
        "hold_kind": (r.hold_kind != 0).then(|| hold_kind_word(r.hold_kind)),
        "hold_scope": (r.hold_scope != 0).then(|| scope_word(r.hold_scope)),
        "hold_ms": r.hold_ms,
        "probe_every_ms": r.probe_every_ms,
    })
}

/// The lowercase word of a proto `Verdict` (as in decisions).
pub fn verdict_word(n: i32) -> &'static str {
    match pb::Verdict::try_from(n) {
        Ok(pb::Verdict::RetryWithLimit) => "retry_with_limit",
        Ok(pb::Verdict::StateVerificationRequired) => "state_verification_required",
        Ok(pb::Verdict::FixBeforeRetry) => "fix_before_retry",
        Ok(pb::Verdict::DoNotRetry) => "do_not_retry",
        Ok(pb::Verdict::AlreadyApplied) => "already_applied",
        Ok(pb::Verdict::Unspecified) | Err(_) => "unspecified",
    }
}

/// The lowercase word of a proto `TargetReached`.
pub fn target_reached_word(n: i32) -> &'static str {
    match pb::TargetReached::try_from(n) {
        Ok(pb::TargetReached::No) => "no",
        Ok(pb::TargetReached::Yes) => "yes",
        Ok(pb::TargetReached::Unknown) => "unknown",
        Ok(pb::TargetReached::Unspecified) | Err(_) => "unspecified",
    }
}

/// The lowercase word of a proto `SideEffectState`.
pub fn side_effect_word(n: i32) -> &'static str {
    match pb::SideEffectState::try_from(n) {
        Ok(pb::SideEffectState::None) => "none",
        Ok(pb::SideEffectState::Possible) => "possible",
        Ok(pb::SideEffectState::Confirmed) => "confirmed",
        Ok(pb::SideEffectState::Unknown) => "unknown",
        Ok(pb::SideEffectState::Unspecified) | Err(_) => "unspecified",
    }
}
