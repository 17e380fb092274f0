//! Step 4b of a decision: the fleet hold the failure's rule asks for, with
//! its key and its end. Whether it is new, an extension or already covered
//! is the fleet layer's question (`core::hold::merge`).

use crate::core::catalog::{Catalog, CodeEntry, HoldRule, Rule};
use crate::core::hold::{HoldKind, HoldPlan, HoldScope};
use crate::core::model::{Failure, Locale};
use crate::core::time::UnixMillis;
use crate::core::warnings::{Warning, Warnings};

/// The hold `h` asks for, or `None` (with a warning when the failure lacks
/// the key, since one generic failure must never hold every caller).
/// `retry_after` is already capped.
#[allow(clippy::too_many_arguments)]
pub(super) fn plan<'a>(
    h: &HoldRule,
    catalog: &'a Catalog,
    entry: &'a CodeEntry,
    rule: &'a Rule,
    failure: &Failure<'a>,
    retry_after: Option<u64>,
    now: UnixMillis,
    warnings: &mut Warnings,
) -> Option<HoldPlan<'a>> {
    let cap = entry.max_delay_ms;
    let end = match h.kind {
        HoldKind::Pause | HoldKind::Quarantine => retry_after.or(h.hold_ms).map(|ms| now.plus_ms(ms)),
        HoldKind::QuotaStop => failure
            .quota_resets_at
            .filter(|at| *at > now)
            .or_else(|| catalog.quota.as_ref().map(|q| q.next_after(now)))
            .or_else(|| retry_after.or(h.hold_ms).map(|ms| now.plus_ms(ms))),
        HoldKind::CircuitOpen => Some(now.plus_ms(cap)),
    }
    // A zero wait (a Retry-After in the past) holds nobody.
    .filter(|end| *end > now)?;
    // Only a hold that would be placed needs its key: warn then, not for
    // every failure of a code that places holds.
    let subject = match h.scope {
        HoldScope::Tenant if failure.tenant.is_empty() => {
            warnings.add(Warning::HoldNeedsTenant);
            return None;
        }
        HoldScope::Tenant => failure.tenant,
        HoldScope::Dependency | HoldScope::Method if failure.dependency.is_empty() => {
            warnings.add(Warning::HoldNeedsDependency);
            return None;
        }
        HoldScope::Dependency => "",
        HoldScope::Method if failure.method.is_empty() => return None,
        HoldScope::Method => failure.method,
    };
    let until = if now.ms_until(end) > cap {
        warnings.add(Warning::DelayCapped);
        now.plus_ms(cap)
    } else {
        end
    };
    Some(HoldPlan {
        scope: h.scope,
        kind: h.kind,
        catalog: &catalog.name,
        dependency: failure.dependency,
        subject,
        until,
        probe_every_ms: if h.kind == HoldKind::CircuitOpen {
            h.probe_every_ms
        } else {
            0
        },
        probe_window_ms: h.probe_window_ms,
        code: failure.code,
        rule: &rule.id,
        reason: rule.reason.get(Locale::En),
    })
}
