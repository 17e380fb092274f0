//! Proto ⇄ domain conversions.
//!
//! Requests are mapped by borrowing: a core [`Failure`] points into the
//! decoded prost message, so nothing is copied on the way in. Strings are
//! only copied when the response message is built, into the strings of an
//! earlier response where there is one (`decision_into_proto`); a
//! ClassifyBatch answer is written as bytes instead (`wire::answer`).
//!
//! Enum numbers are open on the wire (proto3): a number this build does not
//! know maps to the "not given" value rather than failing the call.

use prost_types::Timestamp;
use std::fmt::Write as _;

use prost::Message as _;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt as _};

use super::pb;
use crate::core::budget::BudgetView;
use crate::core::hold::{Hold, HoldKind, HoldScope};
use crate::core::{
    Decision, Failure, Operation, ReadBack, RetryContract, Scope, SideEffectState, Strategy, TargetReached, UnixMillis,
    Verdict,
};
use crate::doors::code_of;
use crate::fleet::HoldEventKind;
use crate::fleet::budget::Judged;
use crate::service::holds::Shown;
use crate::service::{Error, InputNotes, Violation};

/// Borrows a core [`Failure`] from a decoded proto failure; `locale` is the
/// request's raw locale tag (the core parses it).
pub fn failure_from_proto<'a>(f: &'a pb::Failure, locale: &'a str) -> Failure<'a> {
    Failure {
        catalog: &f.catalog,
        code: &f.code,
        operation: operation_from_proto(f.operation),
        method: &f.method,
        attempt: f.attempt,
        max_attempts: f.max_attempts,
        retry_after: &f.retry_after,
        retry_after_ms: f.retry_after_ms,
        deadline: f.deadline.as_ref().map(millis_from_timestamp),
        idempotency_key: &f.idempotency_key,
        idempotency_key_enforced: f.idempotency_key_enforced,
        read_back: read_back_from_proto(f.read_back),
        cannot_verify_effect: f.cannot_verify_effect,
        request_id: &f.request_id,
        tenant: &f.tenant,
        upstream: f.upstream.as_ref().map(contract_from_proto),
        locale,
        dependency: &f.dependency,
        quota_resets_at: f.quota_resets_at.as_ref().map(millis_from_timestamp),
        probe_token: &f.probe_token,
    }
}

/// What the core cannot see of a proto failure: a `Timestamp` outside
/// 0001-01-01..9999-12-31 (or with bad nanos) is clamped on the way in and
/// out, and the decision says so (`timestamp_out_of_range`) rather than
/// clamp silently.
pub fn failure_notes(f: &pb::Failure) -> InputNotes {
    let stamps = [f.deadline.as_ref(), f.quota_resets_at.as_ref()];
    let upstream = f.upstream.as_ref().and_then(|u| u.deadline.as_ref());
    InputNotes {
        timestamp_out_of_range: stamps
            .into_iter()
            .chain([upstream])
            .flatten()
            .any(|t| !timestamp_in_range(t)),
    }
}

/// Borrows a core [`RetryContract`] from an upstream proto contract.
/// `SIDE_EFFECT_STATE_UNSPECIFIED` is read as "none" and
/// `STRATEGY_UNSPECIFIED` as "no strategy", as the proto documents.
pub fn contract_from_proto(c: &pb::RetryContract) -> RetryContract<'_> {
    RetryContract {
        retryable: c.retryable,
        safe: c.safe,
        after_ms: c.after_ms,
        max_after_ms: c.max_after_ms,
        strategy: strategy_from_proto(c.strategy),
        attempt: c.attempt,
        max_attempts: c.max_attempts,
        deadline: c.deadline.as_ref().map(millis_from_timestamp),
        idempotency_key: c.idempotency_key.as_deref(),
        side_effect_state: side_effect_from_proto(c.side_effect_state),
        reconciliation_action: c.reconciliation_action.as_deref(),
    }
}

/// Builds the proto decision (the only place strings are copied).
pub fn decision_to_proto(d: &Decision<'_>) -> pb::Decision {
    let mut out = pb::Decision::default();
    decision_into_proto(d, &mut out);
    out
}

/// Writes `d` over `out`, reusing the capacity of its strings (a batch
/// response is built in slots of an earlier one). Every field is written:
/// the destructuring names them all, so a field added to the proto does not
/// compile until it is written here, and nothing of an earlier decision can
/// be left behind.
pub fn decision_into_proto(d: &Decision<'_>, out: &mut pb::Decision) {
    let pb::Decision {
        verdict,
        retry,
        target_reached,
        catalog,
        code,
        known_code,
        operation,
        operation_inferred,
        reason,
        rule,
        policy_version,
        required_transition,
        scope,
        request_id,
        terminal_state,
        warnings,
        hold,
        budget,
    } = out;
    // The fleet layer sets them after the decision, when a hold is in force
    // or a budget counts the scope.
    *hold = None;
    *budget = d.budget.as_ref().map(budget_view_to_proto);
    *verdict = verdict_to_proto(d.verdict) as i32;
    contract_into_proto(&d.retry, retry.get_or_insert_with(Default::default));
    *target_reached = target_reached_to_proto(d.target_reached) as i32;
    overwrite(catalog, d.catalog);
    overwrite(code, d.code);
    *known_code = d.known_code;
    *operation = operation_to_proto(d.operation) as i32;
    *operation_inferred = d.operation_inferred;
    overwrite(reason, d.reason);
    overwrite(rule, d.rule);
    overwrite(policy_version, d.policy_version);
    overwrite(required_transition, d.required_transition.unwrap_or_default());
    *scope = scope_to_proto(d.scope) as i32;
    overwrite(request_id, d.request_id);
    overwrite(terminal_state, d.terminal_state.map(|t| t.as_str()).unwrap_or_default());
    let mut n = 0;
    for w in d.warnings.texts() {
        match warnings.get_mut(n) {
            Some(slot) => {
                slot.clear();
                let _ = write!(slot, "{w}");
            }
            None => warnings.push(w.to_string()),
        }
        n += 1;
    }
    warnings.truncate(n);
}

/// Builds a proto retry contract.
pub fn contract_to_proto(c: &RetryContract<'_>) -> pb::RetryContract {
    let mut out = pb::RetryContract::default();
    contract_into_proto(c, &mut out);
    out
}

/// Writes `c` over `out`, every field, reusing string capacity.
pub fn contract_into_proto(c: &RetryContract<'_>, out: &mut pb::RetryContract) {
    let pb::RetryContract {
        retryable,
        safe,
        after_ms,
        max_after_ms,
        strategy,
        attempt,
        max_attempts,
        deadline,
        idempotency_key,
        side_effect_state,
        reconciliation_action,
    } = out;
    *retryable = c.retryable;
    *safe = c.safe;
    *after_ms = c.after_ms;
    *max_after_ms = c.max_after_ms;
    *strategy = strategy_to_proto(c.strategy) as i32;
    *attempt = c.attempt;
    *max_attempts = c.max_attempts;
    *deadline = c.deadline.map(timestamp_from_millis);
    overwrite_optional(idempotency_key, c.idempotency_key);
    *side_effect_state = side_effect_to_proto(c.side_effect_state) as i32;
    overwrite_optional(reconciliation_action, c.reconciliation_action);
}

/// `*slot = value.to_owned()`, without a new allocation when `slot` can hold it.
fn overwrite(slot: &mut String, value: &str) {
    slot.clear();
    slot.push_str(value);
}

fn overwrite_optional(slot: &mut Option<String>, value: Option<&str>) {
    match value {
        Some(v) => overwrite(slot.get_or_insert_with(String::new), v),
        None => *slot = None,
    }
}

/// A protobuf `Timestamp` as [`UnixMillis`] (sub-millisecond digits are
/// dropped; out-of-range nanos are clamped; overflow saturates).
pub fn millis_from_timestamp(t: &Timestamp) -> UnixMillis {
    UnixMillis::from_seconds_nanos(t.seconds, t.nanos)
}

/// Whether `t` is a valid `google.protobuf.Timestamp`: 0001-01-01 to
/// 9999-12-31, nanos in `0..1e9`.
pub fn timestamp_in_range(t: &Timestamp) -> bool {
    (-62_135_596_800..=253_402_300_799).contains(&t.seconds) && (0..1_000_000_000).contains(&t.nanos)
}

/// [`UnixMillis`] as a protobuf `Timestamp`.
/// Clamped to the range `google.protobuf.Timestamp` allows (0001-01-01 to
/// 9999-12-31), so protojson tools can always print the answer.
pub fn timestamp_from_millis(t: UnixMillis) -> Timestamp {
    let (seconds, nanos) = t.clamp_to_timestamp_range().to_seconds_nanos();
    Timestamp { seconds, nanos }
}

/// Wire number → [`Operation`]; unknown numbers are "not given".
pub fn operation_from_proto(n: i32) -> Operation {
    match pb::OperationKind::try_from(n) {
        Ok(pb::OperationKind::Read) => Operation::Read,
        Ok(pb::OperationKind::Write) => Operation::Write,
        Ok(pb::OperationKind::Unspecified) | Err(_) => Operation::Unspecified,
    }
}

/// [`Operation`] → proto enum.
pub fn operation_to_proto(op: Operation) -> pb::OperationKind {
    match op {
        Operation::Unspecified => pb::OperationKind::Unspecified,
        Operation::Read => pb::OperationKind::Read,
        Operation::Write => pb::OperationKind::Write,
    }
}

/// Wire number → [`ReadBack`]; unknown numbers mean no read-back was done.
pub fn read_back_from_proto(n: i32) -> ReadBack {
    match pb::ReadBack::try_from(n) {
        Ok(pb::ReadBack::EffectPresent) => ReadBack::EffectPresent,
        Ok(pb::ReadBack::EffectAbsent) => ReadBack::EffectAbsent,
        Ok(pb::ReadBack::Inconclusive) => ReadBack::Inconclusive,
        Ok(pb::ReadBack::Unspecified) | Err(_) => ReadBack::NotDone,
    }
}

/// Wire number → [`SideEffectState`]; unspecified and unknown numbers are "none".
pub fn side_effect_from_proto(n: i32) -> SideEffectState {
    match pb::SideEffectState::try_from(n) {
        Ok(pb::SideEffectState::Possible) => SideEffectState::Possible,
        Ok(pb::SideEffectState::Confirmed) => SideEffectState::Confirmed,
        Ok(pb::SideEffectState::Unknown) => SideEffectState::Unknown,
        Ok(pb::SideEffectState::None | pb::SideEffectState::Unspecified) | Err(_) => SideEffectState::None,
    }
}

/// [`SideEffectState`] → proto enum.
pub fn side_effect_to_proto(s: SideEffectState) -> pb::SideEffectState {
    match s {
        SideEffectState::None => pb::SideEffectState::None,
        SideEffectState::Possible => pb::SideEffectState::Possible,
        SideEffectState::Confirmed => pb::SideEffectState::Confirmed,
        SideEffectState::Unknown => pb::SideEffectState::Unknown,
    }
}

/// Wire number → [`Strategy`]; unspecified and unknown numbers are "none".
pub fn strategy_from_proto(n: i32) -> Strategy {
    match pb::Strategy::try_from(n) {
        Ok(pb::Strategy::ExponentialBackoff) => Strategy::ExponentialBackoff,
        Ok(pb::Strategy::RetryAfter) => Strategy::RetryAfter,
        Ok(pb::Strategy::Schedule) => Strategy::Schedule,
        Ok(pb::Strategy::Hold) => Strategy::Hold,
        Ok(pb::Strategy::Budget) => Strategy::Budget,
        Ok(pb::Strategy::None | pb::Strategy::Unspecified) | Err(_) => Strategy::None,
    }
}

/// [`Strategy`] → proto enum.
pub fn strategy_to_proto(s: Strategy) -> pb::Strategy {
    match s {
        Strategy::None => pb::Strategy::None,
        Strategy::ExponentialBackoff => pb::Strategy::ExponentialBackoff,
        Strategy::RetryAfter => pb::Strategy::RetryAfter,
        Strategy::Schedule => pb::Strategy::Schedule,
        Strategy::Hold => pb::Strategy::Hold,
        Strategy::Budget => pb::Strategy::Budget,
    }
}

/// [`Verdict`] → proto enum.
pub fn verdict_to_proto(v: Verdict) -> pb::Verdict {
    match v {
        Verdict::RetryWithLimit => pb::Verdict::RetryWithLimit,
        Verdict::StateVerificationRequired => pb::Verdict::StateVerificationRequired,
        Verdict::FixBeforeRetry => pb::Verdict::FixBeforeRetry,
        Verdict::DoNotRetry => pb::Verdict::DoNotRetry,
        Verdict::AlreadyApplied => pb::Verdict::AlreadyApplied,
    }
}

/// [`TargetReached`] → proto enum.
pub fn target_reached_to_proto(t: TargetReached) -> pb::TargetReached {
    match t {
        TargetReached::No => pb::TargetReached::No,
        TargetReached::Yes => pb::TargetReached::Yes,
        TargetReached::Unknown => pb::TargetReached::Unknown,
    }
}

/// [`Scope`] → proto enum.
pub fn scope_to_proto(s: Scope) -> pb::Scope {
    match s {
        Scope::Request => pb::Scope::Request,
        Scope::Tenant => pb::Scope::Tenant,
    }
}

/// [`HoldScope`] → proto enum.
pub fn hold_scope_to_proto(s: HoldScope) -> pb::Scope {
    match s {
        HoldScope::Tenant => pb::Scope::Tenant,
        HoldScope::Dependency => pb::Scope::Dependency,
        HoldScope::Method => pb::Scope::Method,
    }
}

/// [`HoldKind`] → proto enum.
pub fn hold_kind_to_proto(k: HoldKind) -> pb::HoldKind {
    match k {
        HoldKind::Pause => pb::HoldKind::Pause,
        HoldKind::QuotaStop => pb::HoldKind::QuotaStop,
        HoldKind::Quarantine => pb::HoldKind::Quarantine,
        HoldKind::CircuitOpen => pb::HoldKind::CircuitOpen,
    }
}

/// A hold as the wire carries it; `tenant` is what the caller may see (the
/// raw tenant for operators, its keyed hash for everyone else).
pub fn hold_to_proto(h: &Hold, tenant: &str) -> pb::Hold {
    hold_to_proto_at(h, tenant, UnixMillis::now())
}

/// [`hold_to_proto`] with its end and probe state shown as of `now`.
pub fn hold_to_proto_at(h: &Hold, tenant: &str, now: UnixMillis) -> pb::Hold {
    pb::Hold {
        id: h.id.clone(),
        catalog: h.key.catalog.clone(),
        dependency: h.key.dependency.clone(),
        tenant: tenant.to_owned(),
        method: h.key.method().to_owned(),
        scope: hold_scope_to_proto(h.key.scope) as i32,
        kind: hold_kind_to_proto(h.kind) as i32,
        since: Some(timestamp_from_millis(h.since)),
        until: Some(timestamp_from_millis(h.shown_until(now))),
        code: h.code.clone(),
        rule: h.rule.clone(),
        reason: h.reason.clone(),
        probing: h.probing(now),
        next_probe_at: h.next_probe_at(now).map(timestamp_from_millis),
    }
}

/// A hold with the tenant as the caller may see it.
pub fn shown_to_proto(s: &Shown) -> pb::Hold {
    hold_to_proto(&s.hold, &s.tenant)
}

/// [`shown_to_proto`] taking the hold, whose strings are moved rather than
/// copied: a watch's events are converted once each, from holds already
/// copied out of the mirror for them (the copies were a tenth of the server's
/// CPU with 2 000 streams watching every hold).
pub fn shown_into_proto(s: Shown) -> pb::Hold {
    let now = UnixMillis::now();
    let Shown { hold: h, tenant } = s;
    let (scope, kind) = (
        hold_scope_to_proto(h.key.scope) as i32,
        hold_kind_to_proto(h.kind) as i32,
    );
    let (until, probing) = (h.shown_until(now), h.probing(now));
    let next_probe_at = h.next_probe_at(now).map(timestamp_from_millis);
    let method = if h.key.scope == HoldScope::Method {
        h.key.subject
    } else {
        String::new()
    };
    pb::Hold {
        id: h.id,
        catalog: h.key.catalog,
        dependency: h.key.dependency,
        tenant,
        method,
        scope,
        kind,
        since: Some(timestamp_from_millis(h.since)),
        until: Some(timestamp_from_millis(until)),
        code: h.code,
        rule: h.rule,
        reason: h.reason,
        probing,
        next_probe_at,
    }
}

/// Wire number → [`HoldKind`] (unknown numbers: `None`).
pub fn hold_kind_from_proto(n: i32) -> Option<HoldKind> {
    match pb::HoldKind::try_from(n) {
        Ok(pb::HoldKind::Pause) => Some(HoldKind::Pause),
        Ok(pb::HoldKind::QuotaStop) => Some(HoldKind::QuotaStop),
        Ok(pb::HoldKind::Quarantine) => Some(HoldKind::Quarantine),
        Ok(pb::HoldKind::CircuitOpen) => Some(HoldKind::CircuitOpen),
        Ok(pb::HoldKind::Unspecified) | Err(_) => None,
    }
}

/// Wire number → [`HoldScope`] (request, unspecified and unknown: `None`).
pub fn hold_scope_from_proto(n: i32) -> Option<HoldScope> {
    match pb::Scope::try_from(n) {
        Ok(pb::Scope::Tenant) => Some(HoldScope::Tenant),
        Ok(pb::Scope::Dependency) => Some(HoldScope::Dependency),
        Ok(pb::Scope::Method) => Some(HoldScope::Method),
        Ok(pb::Scope::Request | pb::Scope::Unspecified) | Err(_) => None,
    }
}

/// Wire number → [`HoldEventKind`] (unknown numbers: `None`).
pub fn hold_event_from_proto(n: i32) -> Option<HoldEventKind> {
    match pb::HoldEventKind::try_from(n) {
        Ok(pb::HoldEventKind::Placed) => Some(HoldEventKind::Placed),
        Ok(pb::HoldEventKind::Extended) => Some(HoldEventKind::Extended),
        Ok(pb::HoldEventKind::Lifted) => Some(HoldEventKind::Lifted),
        Ok(pb::HoldEventKind::Probing) => Some(HoldEventKind::Probing),
        Ok(pb::HoldEventKind::Synced) => Some(HoldEventKind::Synced),
        Ok(pb::HoldEventKind::Unspecified) | Err(_) => None,
    }
}

/// What happened to a hold → proto enum.
pub fn hold_event_to_proto(k: HoldEventKind) -> pb::HoldEventKind {
    match k {
        HoldEventKind::Placed => pb::HoldEventKind::Placed,
        HoldEventKind::Extended => pb::HoldEventKind::Extended,
        HoldEventKind::Lifted => pb::HoldEventKind::Lifted,
        HoldEventKind::Probing => pb::HoldEventKind::Probing,
        HoldEventKind::Synced => pb::HoldEventKind::Synced,
    }
}

/// A decision's budget for the wire.
pub fn budget_view_to_proto(v: &BudgetView) -> pb::RetryBudget {
    pb::RetryBudget {
        scope_key: v.scope_key.clone(),
        requests: v.requests,
        retries: v.retries,
        allowed: v.allowed,
        window_start: Some(timestamp_from_millis(v.window_start)),
        deferred: v.deferred,
        next_room_at: Some(timestamp_from_millis(v.next_room_at)),
    }
}

/// Where `j` stands, for ListBudgets.
pub fn judged_to_proto(j: &Judged) -> pb::RetryBudget {
    pb::RetryBudget {
        scope_key: j.shown.clone(),
        requests: j.standing.requests,
        retries: j.standing.retries,
        allowed: j.standing.allowed,
        window_start: Some(timestamp_from_millis(j.standing.window_start)),
        deferred: j.standing.deferred,
        next_room_at: Some(timestamp_from_millis(j.standing.room_at)),
    }
}

/// Wire number → [`Verdict`] (unknown numbers: `None`).
pub fn verdict_from_proto(n: i32) -> Option<Verdict> {
    match pb::Verdict::try_from(n) {
        Ok(pb::Verdict::RetryWithLimit) => Some(Verdict::RetryWithLimit),
        Ok(pb::Verdict::StateVerificationRequired) => Some(Verdict::StateVerificationRequired),
        Ok(pb::Verdict::FixBeforeRetry) => Some(Verdict::FixBeforeRetry),
        Ok(pb::Verdict::DoNotRetry) => Some(Verdict::DoNotRetry),
        Ok(pb::Verdict::AlreadyApplied) => Some(Verdict::AlreadyApplied),
        Ok(pb::Verdict::Unspecified) | Err(_) => None,
    }
}

/// A refusal as a status; a field violation carries a `google.rpc.BadRequest`.
pub fn status_of(e: Error) -> Status {
    match e.violation {
        Some(v) => violation_status(v),
        None => {
            let code = code_of(e.kind);
            let status = Status::new(code, e.message);
            match crate::doors::overload::advice_for(code) {
                Some(delay) => crate::doors::overload::advise(status, delay),
                None => status,
            }
        }
    }
}

/// INVALID_ARGUMENT with a BadRequest detail naming the field, for a whole call.
pub fn violation_status(v: Violation) -> Status {
    let message = v.message();
    Status::with_error_details(
        Code::InvalidArgument,
        message,
        ErrorDetails::with_bad_request_violation(v.field, v.description),
    )
}

/// The same as a `google.rpc.Status` message, for one batch item.
pub fn violation_rpc_status(v: &Violation) -> tonic_types::Status {
    let bad_request = tonic_types::pb::BadRequest::from(tonic_types::BadRequest::with_violation(
        v.field.clone(),
        v.description.clone(),
    ));
    tonic_types::Status {
        code: Code::InvalidArgument as i32,
        message: v.message(),
        details: vec![prost_types::Any {
            type_url: tonic_types::BadRequest::TYPE_URL.to_owned(),
            value: bad_request.encode_to_vec(),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_moved_into_the_wire_equals_the_hold_copied() {
        let now = UnixMillis::now();
        for (scope, subject) in [(HoldScope::Method, "charge"), (HoldScope::Tenant, "acme")] {
            let shown = Shown {
                hold: Hold {
                    id: "0123456789abcdef".into(),
                    key: crate::core::hold::HoldKey {
                        scope,
                        catalog: "frontspin".into(),
                        dependency: "portal".into(),
                        subject: subject.into(),
                    },
                    kind: HoldKind::QuotaStop,
                    since: now,
                    until: now.plus_ms(3_600_000),
                    probe_every_ms: 0,
                    probe_window_ms: 30_000,
                    rank: Default::default(),
                    code: "RATE_LIMITED".into(),
                    rule: "r".into(),
                    reason: "quota".into(),
                },
                tenant: "t-hash".into(),
            };
            assert_eq!(shown_into_proto(shown.clone()), shown_to_proto(&shown), "{scope:?}");
        }
    }

    #[test]
    fn unknown_enum_numbers_map_to_not_given() {
        assert_eq!(operation_from_proto(99), Operation::Unspecified);
        assert_eq!(operation_from_proto(-1), Operation::Unspecified);
        assert_eq!(read_back_from_proto(42), ReadBack::NotDone);
        assert_eq!(side_effect_from_proto(7), SideEffectState::None);
        assert_eq!(strategy_from_proto(1000), Strategy::None);
        assert_eq!(operation_from_proto(2), Operation::Write);
        assert_eq!(read_back_from_proto(1), ReadBack::EffectPresent);
    }

    #[test]
    fn upstream_unspecified_side_effect_is_none() {
        let c = pb::RetryContract {
            side_effect_state: 0,
            ..Default::default()
        };
        assert_eq!(contract_from_proto(&c).side_effect_state, SideEffectState::None);
        let c = pb::RetryContract {
            side_effect_state: pb::SideEffectState::Unknown as i32,
            ..Default::default()
        };
        assert_eq!(contract_from_proto(&c).side_effect_state, SideEffectState::Unknown);
    }

    #[test]
    fn timestamps_round_trip_through_millis() {
        let t = Timestamp {
            seconds: 1_786_190_700,
            nanos: 250_000_000,
        };
        let ms = millis_from_timestamp(&t);
        assert_eq!(ms, UnixMillis(1_786_190_700_250));
        assert_eq!(timestamp_from_millis(ms), t);
        let before_epoch = Timestamp {
            seconds: -2,
            nanos: 500_000_000,
        };
        assert_eq!(
            timestamp_from_millis(millis_from_timestamp(&before_epoch)),
            before_epoch
        );
    }

    #[test]
    fn failure_borrows_from_the_request() {
        let f = pb::Failure {
            catalog: "asc".into(),
            code: "X".into(),
            upstream: Some(pb::RetryContract {
                idempotency_key: Some("k".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let core = failure_from_proto(&f, "ru-RU");
        assert!(std::ptr::eq(core.catalog, f.catalog.as_str()));
        assert_eq!(core.locale, "ru-RU");
        assert_eq!(core.upstream.and_then(|u| u.idempotency_key), Some("k"));
        assert_eq!(core.deadline, None);
    }

    /// A decision written over a slot that held another one equals the
    /// decision built fresh: no string, warning, option or number of the
    /// earlier one survives.
    #[test]
    fn a_reused_slot_keeps_nothing_of_the_earlier_decision() {
        let policy = crate::core::Policy::embedded().expect("embedded policy");
        let now = UnixMillis(1_786_190_400_000);
        let failures = [
            pb::Failure {
                code: "QUERY_LIMIT_EXCEEDED".into(),
                operation: pb::OperationKind::Write as i32,
                idempotency_key: "order-1".into(),
                idempotency_key_enforced: true,
                request_id: "r-1".into(),
                retry_after: "tomorrow".into(),
                ..Default::default()
            },
            pb::Failure {
                catalog: "asc".into(),
                code: "RESULT_STATE_UNKNOWN".into(),
                operation: pb::OperationKind::Write as i32,
                idempotency_key: "k".into(),
                idempotency_key_enforced: true,
                ..Default::default()
            },
            pb::Failure {
                code: "NO_SUCH_CODE".into(),
                method: "crm.deal.get".into(),
                ..Default::default()
            },
            pb::Failure::default(),
        ];
        let decisions: Vec<Decision<'_>> = failures
            .iter()
            .map(|f| crate::core::decide(&policy, &failure_from_proto(f, "ru"), now).expect("decides"))
            .collect();
        assert!(
            decisions.iter().any(|d| !d.warnings.is_empty()),
            "one decision must warn"
        );
        assert!(decisions.iter().any(|d| d.retry.reconciliation_action.is_some()));
        assert!(decisions.iter().any(|d| d.retry.idempotency_key.is_some()));
        let junk = pb::Decision {
            verdict: 99,
            retry: Some(pb::RetryContract {
                retryable: true,
                safe: true,
                after_ms: 7,
                max_after_ms: 7,
                strategy: 99,
                attempt: 7,
                max_attempts: 7,
                deadline: Some(Timestamp { seconds: 7, nanos: 7 }),
                idempotency_key: Some("junk".repeat(100)),
                side_effect_state: 99,
                reconciliation_action: Some("junk".into()),
            }),
            target_reached: 99,
            catalog: "junk".into(),
            code: "junk".into(),
            known_code: true,
            operation: 99,
            operation_inferred: true,
            reason: "junk".repeat(100),
            rule: "junk".into(),
            policy_version: "junk".into(),
            required_transition: "junk".into(),
            scope: 99,
            request_id: "junk".into(),
            hold: Some(pb::Hold::default()),
            budget: Some(pb::RetryBudget::default()),
            terminal_state: "junk".into(),
            warnings: vec!["junk".into(); 5],
        };
        let mut earlier: Vec<pb::Decision> = decisions.iter().map(decision_to_proto).collect();
        earlier.push(junk);
        for d in &decisions {
            for before in &earlier {
                let mut slot = before.clone();
                decision_into_proto(d, &mut slot);
                assert_eq!(slot, decision_to_proto(d));
            }
        }
    }
}
