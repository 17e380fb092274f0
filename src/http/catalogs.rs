//! `GET /v1/catalogs`: the ListCatalogs answer in JSON (the proto's field
//! names, enum values as the core's words, as decisions use them), written
//! from the service's [`CatalogList`].

use serde_json::{Value, json};

use crate::core::Locale;
use crate::core::catalog::{Catalog, CodeEntry, Rule};
use crate::core::hold::HoldKind;
use crate::service::catalogs::CatalogList;

/// The JSON form of a ListCatalogs answer.
pub fn list_json(list: &CatalogList) -> Value {
    let policy = &list.policy;
    json!({
        "catalogs": policy.catalogs().iter().map(|c| catalog(c, list.locale_of(c))).collect::<Vec<_>>(),
        "policy_version": policy.version(),
        "default_catalog": policy.default_catalog().name,
    })
}

fn catalog(c: &Catalog, locale: Locale) -> Value {
    json!({
        "name": c.name,
        "description": c.description,
        "max_attempts": c.max_attempts,
        "backoff": {
            "base_ms": c.backoff.base_ms, "multiplier": c.backoff.multiplier, "cap_ms": c.backoff.cap_ms,
        },
        "schedule_ms": c.schedule_ms,
        "codes": c.codes().iter().map(|e| {
            let mut v = code(e, locale);
            v["origin"] = json!(c.origin_of(&e.code).map_or("", |o| o.as_str()));
            v
        }).collect::<Vec<_>>(),
        "extends": c.extends().unwrap_or_default(),
        "unknown": code(c.unknown(), locale),
        "no_envelope": code(c.no_envelope(), locale),
        "locales": c.locales.iter().map(|l| l.as_str()).collect::<Vec<_>>(),
        "exhausted_terminal_state": c.exhausted_terminal_state.map_or("", |t| t.as_str()),
        "read_words": c.read_words(),
        "write_words": c.write_words(),
        "max_delay_ms": c.max_delay_ms,
        "quota_reset": c.quota.as_ref().map(|q| q.describe()).unwrap_or_default(),
        "budgets": c.budgets.iter().map(|b| json!({
            "scope": b.scope,
            "window_ms": b.window_ms,
            "retry_percent": b.retry_percent,
            "min_retries_per_sec": b.min_retries_per_sec,
            "requests": b.requests,
        })).collect::<Vec<_>>(),
    })
}

fn code(e: &CodeEntry, locale: Locale) -> Value {
    json!({
        "code": e.code,
        "aliases": e.aliases,
        "target_reached": e.target_reached,
        "read_verdict": e.read.verdict,
        "write_verdict": e.write.verdict,
        "delay": e.delay.as_str(),
        "condition": e.condition.get(locale),
        "retried_write_verdict": e.retried_write.as_ref().map(|r| r.verdict),
        "write_with_retry_after_verdict": e.write_with_retry_after.as_ref().map(|r| r.verdict),
        "read": rule(&e.read, locale),
        "write": rule(&e.write, locale),
        "retried_write": e.retried_write.as_ref().map(|r| rule(r, locale)),
        "write_with_retry_after": e.write_with_retry_after.as_ref().map(|r| rule(r, locale)),
        "max_delay_ms": e.max_delay_ms,
        "origin": "",
    })
}

fn rule(r: &Rule, locale: Locale) -> Value {
    json!({
        "rule": r.id,
        "verdict": r.verdict,
        "side_effect_state": r.side_effect,
        "required_transition": r.required_transition.as_deref().unwrap_or_default(),
        "reconciliation_action": r.reconciliation_action.as_deref().unwrap_or_default(),
        "scope": r.scope,
        "reconcile_before_retry": r.reconcile_before_retry,
        "reason": r.reason.get(locale),
        "hold_kind": r.hold.map(|h| h.kind),
        "hold_scope": r.hold.map(|h| h.scope),
        "hold_ms": r.hold.and_then(|h| h.hold_ms).unwrap_or_default(),
        "probe_every_ms": r.hold.filter(|h| h.kind == HoldKind::CircuitOpen).map_or(0, |h| h.probe_every_ms),
    })
}
