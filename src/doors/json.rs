//! The one JSON form of a decision: what `retryd classify --format json`
//! prints and what the HTTP door answers under `"decision"`, built by the
//! same code so a decision reads the same wherever it is read.
//!
//! It is the core [`Decision`]'s own serde form (snake_case names, the
//! core's words, `null` where the seed has null) followed by `hold`, the
//! fleet hold in force on the failure's scope after this decision, and
//! `budget`, the retry budget of the scope as this decision left it — each
//! `null` from the CLI, which has no fleet memory, and from a server when
//! no hold covers the call or no budget counts its scope.

use serde::Serialize;

use crate::core::budget::BudgetView;
use crate::core::hold::{Hold, HoldKind, HoldScope};
use crate::core::{Decision, UnixMillis};
use crate::service::holds::Shown;

/// A decision, the hold in force and the budget, serialized as one object.
#[derive(Debug, Serialize)]
pub struct DecisionJson<'d, 'a> {
    /// Every field of the decision, in declaration order.
    #[serde(flatten)]
    pub decision: &'d Decision<'a>,
    /// The hold in force on this failure's scope, or `null`.
    pub hold: Option<HoldJson<'d>>,
    /// The retry budget of this failure's scope, or `null`.
    pub budget: Option<BudgetJson<'d>>,
}

impl<'d, 'a> DecisionJson<'d, 'a> {
    /// `decision` with `hold` in force, its tenant shown in clear (the
    /// caller named it).
    pub fn new(decision: &'d Decision<'a>, hold: Option<&'d Hold>) -> Self {
        DecisionJson {
            decision,
            hold: hold.map(|h| HoldJson::new(h, h.key.tenant())),
            budget: decision.budget.as_ref().map(BudgetJson::from),
        }
    }
}

/// A fleet hold in JSON: snake_case, the catalogs' words for `scope` and
/// `kind`, RFC 3339 times.
#[derive(Debug, Clone, Serialize)]
pub struct HoldJson<'h> {
    /// Opaque id (what `DELETE /v1/holds/{id}` takes).
    pub id: &'h str,
    /// Catalog of the held scope.
    pub catalog: &'h str,
    /// Dependency instance held.
    pub dependency: &'h str,
    /// Tenant held (tenant scope), in clear or hashed as the caller may see it.
    pub tenant: &'h str,
    /// Method held (method scope).
    pub method: &'h str,
    /// `tenant`, `dependency` or `method`.
    pub scope: HoldScope,
    /// `pause`, `quota_stop`, `quarantine` or `circuit_open`.
    pub kind: HoldKind,
    /// When it was placed.
    pub since: UnixMillis,
    /// When it ends (in the probe phase: the end of the probe window).
    pub until: UnixMillis,
    /// In its probe phase: one call may go; the hold lifts on its success.
    pub probing: bool,
    /// When the next probe may go (an open circuit's next slot, or the
    /// probe phase's start); `null` for a hold that admits no probe.
    pub next_probe_at: Option<UnixMillis>,
    /// The code that placed it.
    pub code: &'h str,
    /// The catalog rule that placed it.
    pub rule: &'h str,
    /// Why, in English.
    pub reason: &'h str,
}

impl<'h> HoldJson<'h> {
    /// `h` with its tenant shown as `tenant`, as it stands now.
    pub fn new(h: &'h Hold, tenant: &'h str) -> Self {
        let now = UnixMillis::now();
        HoldJson {
            id: &h.id,
            catalog: &h.key.catalog,
            dependency: &h.key.dependency,
            tenant,
            method: h.key.method(),
            scope: h.key.scope,
            kind: h.kind,
            since: h.since,
            until: h.shown_until(now),
            probing: h.probing(now),
            next_probe_at: h.next_probe_at(now),
            code: &h.code,
            rule: &h.rule,
            reason: &h.reason,
        }
    }
}

impl<'h> From<&'h Shown> for HoldJson<'h> {
    fn from(s: &'h Shown) -> Self {
        HoldJson::new(&s.hold, &s.tenant)
    }
}

/// A scope's retry budget as a decision reports it.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetJson<'b> {
    /// `d:<catalog>:<dependency>` or `t:<catalog>:<dependency>:h:<hex>` (tenant hashed).
    pub scope_key: &'b str,
    /// First attempts in the window.
    pub requests: u64,
    /// Approved retries in the window, this decision's included if approved.
    pub retries: u64,
    /// Retries the budget allows in the window.
    pub allowed: u64,
    /// When the window starts.
    pub window_start: UnixMillis,
    /// Deferrals given in the window (this replica's), this decision's included.
    pub deferred: u64,
    /// When the next retry would be approved at the current rates.
    pub next_room_at: UnixMillis,
}

impl<'b> From<&'b crate::fleet::budget::Judged> for BudgetJson<'b> {
    fn from(j: &'b crate::fleet::budget::Judged) -> Self {
        BudgetJson {
            scope_key: &j.shown,
            requests: j.standing.requests,
            retries: j.standing.retries,
            allowed: j.standing.allowed,
            window_start: j.standing.window_start,
            deferred: j.standing.deferred,
            next_room_at: j.standing.room_at,
        }
    }
}

impl<'b> From<&'b BudgetView> for BudgetJson<'b> {
    fn from(v: &'b BudgetView) -> Self {
        BudgetJson {
            scope_key: &v.scope_key,
            requests: v.requests,
            retries: v.retries,
            allowed: v.allowed,
            window_start: v.window_start,
            deferred: v.deferred,
            next_room_at: v.next_room_at,
        }
    }
}
