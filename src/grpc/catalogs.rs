//! ListCatalogs: the policy in force as data (what `retryd policy matrix`
//! prints, with every rule's details).

use super::convert::{
    hold_kind_to_proto, hold_scope_to_proto, scope_to_proto, side_effect_to_proto, target_reached_to_proto,
    verdict_to_proto,
};
use super::pb;
use crate::core::Locale;
use crate::core::catalog::{Catalog, CodeEntry, Rule};
use crate::core::hold::HoldKind;
use crate::service::catalogs::CatalogList;

/// ListCatalogs' answer: every catalog of the listed policy, each in the
/// locale it has of the one asked for.
pub fn list_catalogs(list: &CatalogList) -> pb::ListCatalogsResponse {
    let policy = &list.policy;
    pb::ListCatalogsResponse {
        catalogs: policy
            .catalogs()
            .iter()
            .map(|c| catalog_to_proto(c, list.locale_of(c)))
            .collect(),
        policy_version: policy.version().to_owned(),
        default_catalog: policy.default_catalog().name.to_string(),
    }
}

fn catalog_to_proto(c: &Catalog, locale: Locale) -> pb::Catalog {
    pb::Catalog {
        name: c.name.to_string(),
        description: c.description.to_string(),
        max_attempts: c.max_attempts,
        backoff: Some(pb::Backoff {
            base_ms: c.backoff.base_ms,
            multiplier: c.backoff.multiplier,
            cap_ms: c.backoff.cap_ms,
        }),
        schedule_ms: c.schedule_ms.to_vec(),
        codes: c
            .codes()
            .iter()
            .map(|e| pb::CatalogCode {
                origin: c.origin_of(&e.code).map_or("", |o| o.as_str()).to_owned(),
                ..code_to_proto(e, locale)
            })
            .collect(),
        unknown: Some(code_to_proto(c.unknown(), locale)),
        no_envelope: Some(code_to_proto(c.no_envelope(), locale)),
        extends: c.extends().unwrap_or_default().to_owned(),
        locales: c.locales.iter().map(|l| l.as_str().to_owned()).collect(),
        exhausted_terminal_state: c
            .exhausted_terminal_state
            .map(|t| t.as_str())
            .unwrap_or_default()
            .to_owned(),
        read_words: c.read_words().iter().map(ToString::to_string).collect(),
        write_words: c.write_words().iter().map(ToString::to_string).collect(),
        max_delay_ms: c.max_delay_ms,
        quota_reset: c.quota.as_ref().map(|q| q.describe()).unwrap_or_default(),
        budgets: c
            .budgets
            .iter()
            .map(|b| pb::CatalogBudget {
                scope: b.scope.as_str().to_owned(),
                window_ms: b.window_ms,
                retry_percent: b.retry_percent,
                min_retries_per_sec: b.min_retries_per_sec,
                requests: b.requests,
            })
            .collect(),
    }
}

fn code_to_proto(e: &CodeEntry, locale: Locale) -> pb::CatalogCode {
    let verdict = |r: &Rule| verdict_to_proto(r.verdict) as i32;
    pb::CatalogCode {
        code: e.code.to_string(),
        aliases: e.aliases.iter().map(ToString::to_string).collect(),
        target_reached: target_reached_to_proto(e.target_reached) as i32,
        read_verdict: verdict(&e.read),
        write_verdict: verdict(&e.write),
        delay: e.delay.as_str().to_owned(),
        condition: e.condition.get(locale).to_owned(),
        retried_write_verdict: e.retried_write.as_ref().map(verdict),
        write_with_retry_after_verdict: e.write_with_retry_after.as_ref().map(verdict),
        read: Some(rule_to_proto(&e.read, locale)),
        write: Some(rule_to_proto(&e.write, locale)),
        retried_write: e.retried_write.as_ref().map(|r| rule_to_proto(r, locale)),
        write_with_retry_after: e.write_with_retry_after.as_ref().map(|r| rule_to_proto(r, locale)),
        max_delay_ms: e.max_delay_ms,
        origin: String::new(),
    }
}

fn rule_to_proto(r: &Rule, locale: Locale) -> pb::CatalogRule {
    pb::CatalogRule {
        rule: r.id.to_string(),
        verdict: verdict_to_proto(r.verdict) as i32,
        side_effect_state: side_effect_to_proto(r.side_effect) as i32,
        required_transition: r.required_transition.as_deref().unwrap_or_default().to_owned(),
        reconciliation_action: r.reconciliation_action.as_deref().unwrap_or_default().to_owned(),
        scope: scope_to_proto(r.scope) as i32,
        reconcile_before_retry: r.reconcile_before_retry,
        reason: r.reason.get(locale).to_owned(),
        hold_kind: r.hold.map_or(pb::HoldKind::Unspecified, |h| hold_kind_to_proto(h.kind)) as i32,
        hold_scope: r.hold.map_or(pb::Scope::Unspecified, |h| hold_scope_to_proto(h.scope)) as i32,
        hold_ms: r.hold.and_then(|h| h.hold_ms).unwrap_or_default(),
        probe_every_ms: r
            .hold
            .filter(|h| h.kind == HoldKind::CircuitOpen)
            .map_or(0, |h| h.probe_every_ms),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::core::Policy;

    #[test]
    fn lists_every_embedded_catalog_with_its_rules() {
        let policy = Arc::new(Policy::embedded().expect("embedded policy"));
        let resp = list_catalogs(&CatalogList {
            policy: Arc::clone(&policy),
            wanted: Locale::Ru,
        });
        assert_eq!(resp.policy_version, policy.version());
        assert_eq!(resp.default_catalog, "vibecode");
        let names: Vec<&str> = resp.catalogs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["vibecode", "asc", "frontspin", "grpc", "http"]);
        let frontspin = &resp.catalogs[2];
        assert_eq!(frontspin.quota_reset, "daily at 00:00 UTC");
        assert_eq!(frontspin.max_delay_ms, 25 * 3_600_000);
        let rate = frontspin
            .codes
            .iter()
            .find(|c| c.code == "RATE_LIMITED")
            .expect("RATE_LIMITED");
        let write = rate.write.as_ref().expect("write");
        assert_eq!(
            (write.hold_kind(), write.hold_scope()),
            (pb::HoldKind::QuotaStop, pb::Scope::Tenant)
        );
        let vibecode = &resp.catalogs[0];
        let lp = vibecode
            .codes
            .iter()
            .find(|c| c.code == "ERROR_LOOP_DETECTED")
            .expect("loop");
        let read = lp.read.as_ref().expect("read");
        assert_eq!(
            (read.hold_kind(), read.probe_every_ms),
            (pb::HoldKind::CircuitOpen, 30_000)
        );
        let asc = &resp.catalogs[1];
        let unknown_state = asc
            .codes
            .iter()
            .find(|c| c.code == "RESULT_STATE_UNKNOWN")
            .expect("RESULT_STATE_UNKNOWN");
        assert_eq!(unknown_state.aliases, ["ASC-6005"]);
        assert_eq!(unknown_state.write_verdict(), pb::Verdict::StateVerificationRequired);
        let write = unknown_state.write.as_ref().expect("write rule");
        assert!(write.reconcile_before_retry);
        assert_eq!(write.rule, "asc/RESULT_STATE_UNKNOWN/write");
        assert!(
            unknown_state.condition.starts_with("Операция"),
            "{}",
            unknown_state.condition
        );
        assert_eq!(asc.unknown.as_ref().expect("unknown").code, "unknown");
        assert_eq!(asc.no_envelope.as_ref().expect("no_envelope").code, "no_envelope");
        let frontspin = &resp.catalogs[2];
        assert_eq!(frontspin.schedule_ms, [900_000, 3_600_000, 14_400_000, 86_400_000]);
        assert_eq!(frontspin.exhausted_terminal_state, "FAILED_PERMANENT");
        let rate = frontspin.codes.iter().find(|c| c.code == "RATE_LIMITED").expect("code");
        assert_eq!(rate.delay, "schedule");
        assert_eq!(rate.read.as_ref().expect("read").scope(), pb::Scope::Tenant);
        // Variants are listed only where a catalog has them.
        let http = &resp.catalogs[4];
        assert!(http.codes.iter().any(|c| c.retried_write_verdict.is_some()));
        assert!(http.codes.iter().any(|c| c.write_with_retry_after.is_some()));
        assert!(http.codes.iter().any(|c| c.retried_write.is_none()));
    }
}
