//! `serve --shadow-policy`: every decision is decided again by a candidate
//! policy on its own thread, off the response path, reading the hold that
//! was in force (never placing one, never spending a budget), and every
//! field that differs is counted in
//! `retryd_shadow_disagreements_total{catalog,field}` — `catalog` a live
//! catalog's name, `field` one of [`crate::service::outcome::FIELDS`] or
//! `undecidable` — and logged with both decisions, at most once per
//! interval. Callers always get the live answer.

use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use super::tap::DecisionEvent;
use crate::service::PolicyHandle;
use crate::service::decide::{Given, read_only};
use crate::service::outcome::{FieldChange, Outcome};

/// Counter of shadow disagreements, labelled `catalog` and `field`.
pub const SHADOW_DISAGREEMENTS_TOTAL: &str = "retryd_shadow_disagreements_total";
/// Counter of decisions the shadow policy compared.
pub const SHADOW_DECISIONS_TOTAL: &str = "retryd_shadow_decisions_total";
/// Counter of decisions the shadow policy never saw (its queue was full).
pub const SHADOW_DROPPED_TOTAL: &str = "retryd_shadow_dropped_total";
/// At most one disagreement is logged per this interval.
pub const LOG_EVERY: Duration = Duration::from_secs(1);

/// What the shadow policy says about one live decision: the fields that
/// differ, or `Err` when it cannot decide it (e.g. it lacks the catalog).
pub fn compare(shadow: &crate::core::Policy, ev: &DecisionEvent) -> Result<(Outcome, Vec<FieldChange>), String> {
    let failure = ev.failure.as_failure();
    let given = Given::as_logged(ev.hold.as_ref(), ev.budget.as_ref());
    let d = read_only(shadow, &failure, ev.now, given).map_err(|e| e.to_string())?;
    let outcome = Outcome::of(&d.decision);
    let changes = outcome.changes_from(&ev.decision);
    Ok((outcome, changes))
}

/// Starts the shadow's thread; it ends when every sender of `rx` is gone.
pub fn spawn(shadow: PolicyHandle, rx: Receiver<Arc<DecisionEvent>>) -> std::io::Result<std::thread::JoinHandle<()>> {
    metrics::counter!(SHADOW_DECISIONS_TOTAL).increment(0);
    std::thread::Builder::new()
        .name("retryd-shadow".to_owned())
        .spawn(move || run(&shadow, &rx))
}

fn run(shadow: &PolicyHandle, rx: &Receiver<Arc<DecisionEvent>>) {
    let mut last_logged: Option<Instant> = None;
    let mut unlogged = 0u64;
    let decided = metrics::counter!(SHADOW_DECISIONS_TOTAL);
    // Counted in steps, not one atomic add per decision.
    let pending = std::cell::Cell::new(0u64);
    super::tap::consume(
        rx,
        |ev| {
            pending.set(pending.get() + 1);
            if pending.get() >= 1024 {
                decided.increment(pending.take());
            }
            compare_one(shadow, ev, &mut last_logged, &mut unlogged);
        },
        || decided.increment(pending.take()),
    );
}

fn compare_one(shadow: &PolicyHandle, ev: &DecisionEvent, last_logged: &mut Option<Instant>, unlogged: &mut u64) {
    let policy = shadow.load();
    let (shadow_outcome, changes) = match compare(&policy, ev) {
        Ok((o, c)) => (Some(o), c),
        Err(e) => (
            None,
            vec![FieldChange {
                field: "undecidable".to_owned(),
                old: ev.decision.verdict.to_string(),
                new: e,
            }],
        ),
    };
    if changes.is_empty() {
        return;
    }
    for c in &changes {
        let field = crate::service::outcome::FIELDS
            .iter()
            .find(|f| **f == c.field)
            .copied()
            .unwrap_or("undecidable");
        metrics::counter!(SHADOW_DISAGREEMENTS_TOTAL, "catalog" => ev.catalog.clone(), "field" => field).increment(1);
    }
    if last_logged.is_some_and(|t| t.elapsed() < LOG_EVERY) {
        *unlogged += 1;
        return;
    }
    *last_logged = Some(Instant::now());
    let fields: Vec<&str> = changes.iter().map(|c| c.field.as_str()).collect();
    tracing::info!(
        catalog = %ev.catalog,
        code = %ev.failure.code,
        operation = %ev.failure.operation,
        attempt = ev.failure.attempt,
        fields = %fields.join(","),
        live = %serde_json::to_string(&ev.decision).unwrap_or_default(),
        shadow = %shadow_outcome.map(|o| serde_json::to_string(&o).unwrap_or_default()).unwrap_or_default(),
        shadow_policy_version = %policy.version(),
        not_logged_since = *unlogged,
        "shadow policy disagrees"
    );
    *unlogged = 0;
}
