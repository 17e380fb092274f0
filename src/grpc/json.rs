//! The one JSON form of a decision: what `retryd classify --format json`
//! prints and what the HTTP door answers under `"decision"`, built by the
//! same code so a decision reads the same wherever it is read.
//!
//! It is the core [`Decision`]'s own serde form (snake_case names, the
//! seeds' lowercase words, `null` where the seed has null) followed by
//! `hold`: the fleet hold in force on the failure's scope after this
//! decision, or `null` — always `null` from the CLI, which has no fleet
//! memory, and from a server when no hold covers the call. A hold has one
//! JSON form too, [`HoldJson`], made from the proto `Hold` every door
//! already builds.

use serde::Serialize;

use super::convert::millis_from_timestamp;
use super::pb;
use crate::core::{Decision, UnixMillis};

/// A decision and the hold in force, serialized as one object.
#[derive(Debug, Serialize)]
pub struct DecisionJson<'d, 'a> {
    /// Every field of the decision, in declaration order.
    #[serde(flatten)]
    pub decision: &'d Decision<'a>,
    /// The hold in force on this failure's scope, or `null`.
    pub hold: Option<HoldJson<'d>>,
}

impl<'d, 'a> DecisionJson<'d, 'a> {
    /// `decision` with `hold`.
    pub fn new(decision: &'d Decision<'a>, hold: Option<&'d pb::Hold>) -> Self {
        DecisionJson {
            decision,
            hold: hold.map(HoldJson::from),
        }
    }
}

/// A fleet hold in JSON: the proto `Hold`'s fields, snake_case, with the
/// catalogs' words for `scope` and `kind` and RFC 3339 times.
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
    pub scope: &'static str,
    /// `pause`, `quota_stop`, `quarantine` or `circuit_open`.
    pub kind: &'static str,
    /// When it was placed.
    pub since: Option<UnixMillis>,
    /// When it ends.
    pub until: Option<UnixMillis>,
    /// The code that placed it.
    pub code: &'h str,
    /// The catalog rule that placed it.
    pub rule: &'h str,
    /// Why, in English.
    pub reason: &'h str,
}

impl<'h> From<&'h pb::Hold> for HoldJson<'h> {
    fn from(h: &'h pb::Hold) -> Self {
        HoldJson {
            id: &h.id,
            catalog: &h.catalog,
            dependency: &h.dependency,
            tenant: &h.tenant,
            method: &h.method,
            scope: scope_word(h.scope),
            kind: hold_kind_word(h.kind),
            since: h.since.as_ref().map(millis_from_timestamp),
            until: h.until.as_ref().map(millis_from_timestamp),
            code: &h.code,
            rule: &h.rule,
            reason: &h.reason,
        }
    }
}

/// The lowercase word of a proto `Scope`.
pub fn scope_word(n: i32) -> &'static str {
    match pb::Scope::try_from(n) {
        Ok(pb::Scope::Request) => "request",
        Ok(pb::Scope::Tenant) => "tenant",
        Ok(pb::Scope::Dependency) => "dependency",
        Ok(pb::Scope::Method) => "method",
        Ok(pb::Scope::Unspecified) | Err(_) => "unspecified",
    }
}

/// The lowercase word of a proto `HoldKind` (the catalogs' word).
pub fn hold_kind_word(n: i32) -> &'static str {
    match pb::HoldKind::try_from(n) {
        Ok(pb::HoldKind::Pause) => "pause",
        Ok(pb::HoldKind::QuotaStop) => "quota_stop",
        Ok(pb::HoldKind::Quarantine) => "quarantine",
        Ok(pb::HoldKind::CircuitOpen) => "circuit_open",
        Ok(pb::HoldKind::Unspecified) | Err(_) => "unspecified",
    }
}
