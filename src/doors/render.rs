//! A decision in the forms people and tools read: text, the whole
//! decision as JSON ([`super::json`]), or exactly the ASC contract — what
//! `retryd classify --format` prints and what the HTTP door's
//! `?format=asc` answers, byte for byte.

use std::fmt::Write as _;

use clap::ValueEnum;
use serde_json::json;

use crate::core::{Decision, Strategy, Verdict};

/// `--format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For people.
    Text,
    /// The whole decision as JSON.
    Json,
    /// Exactly the ASC contract shape `{"retry": {...}}`.
    Asc,
}

/// Renders a decision in `format`.
pub fn render(d: &Decision<'_>, format: Format) -> String {
    match format {
        // The CLI has no fleet memory: `hold` and `budget` are null (see doors::json).
        Format::Json => serde_json::to_string_pretty(&super::json::DecisionJson::new(d, None)).unwrap_or_default(),
        Format::Asc => serde_json::to_string_pretty(&asc_contract(d)).unwrap_or_default(),
        Format::Text => text(d),
    }
}

/// The seed's contract shape: exactly its ten fields, nulls where it has nulls.
pub fn asc_contract(d: &Decision<'_>) -> serde_json::Value {
    let r = &d.retry;
    json!({
        "retry": {
            "retryable": r.retryable,
            "safe": r.safe,
            "after_ms": r.after_ms,
            "strategy": r.strategy,
            "attempt": r.attempt,
            "max_attempts": r.max_attempts,
            "deadline": r.deadline,
            "idempotency_key": r.idempotency_key,
            "side_effect_state": r.side_effect_state,
            "reconciliation_action": r.reconciliation_action,
        }
    })
}

/// What to do, in one line: the text format's first line, so a reader
/// meets "read back first" before any number that could read as "retry soon".
pub fn action_line(d: &Decision<'_>) -> String {
    let r = &d.retry;
    match d.verdict {
        Verdict::RetryWithLimit => {
            let why = match r.strategy {
                Strategy::Hold => " (a fleet hold is in force until then)",
                Strategy::Budget => " (the retry budget is spent until then)",
                _ => "",
            };
            format!(
                "retry after {}{why}, attempt {} of {}",
                span(r.after_ms, r.max_after_ms),
                r.attempt.saturating_add(1),
                r.max_attempts
            )
        }
        Verdict::StateVerificationRequired => match r.reconciliation_action {
            Some(a) => format!("read back first: the write may have been applied; check ({a}) before sending it again"),
            None => "read back first: the write may have been applied; check before sending it again".to_owned(),
        },
        Verdict::FixBeforeRetry => match d.required_transition {
            Some(t) => format!("fix, then retry: {} (needs {t})", d.reason),
            None => format!("fix, then retry: {}", d.reason),
        },
        Verdict::DoNotRetry => format!("do not retry: {}", d.reason),
        Verdict::AlreadyApplied => "already applied: the write took effect; do not send it again".to_owned(),
    }
}

/// `500–1000 ms`, `15–20 s`, `15–16 min`, `4–5 h`: a wait window in the
/// largest unit that keeps it readable.
fn span(from_ms: u64, to_ms: u64) -> String {
    let (unit, div) = match to_ms {
        0..10_000 => ("ms", 1),
        10_000..600_000 => ("s", 1_000),
        600_000..10_800_000 => ("min", 60_000),
        _ => ("h", 3_600_000),
    };
    let (a, b) = (from_ms / div, to_ms.div_ceil(div));
    if a == b {
        format!("{a} {unit}")
    } else {
        format!("{a}–{b} {unit}")
    }
}

fn text(d: &Decision<'_>) -> String {
    let r = &d.retry;
    let mut out = String::new();
    let _ = writeln!(out, "{}", action_line(d));
    let _ = writeln!(out, "verdict:      {}", d.verdict.as_str());
    let _ = writeln!(out, "reason:       {}", d.reason);
    let _ = writeln!(
        out,
        "code:         {}/{} ({}{})",
        d.catalog,
        if d.code.is_empty() { "<no envelope>" } else { d.code },
        if d.known_code { "known" } else { "unknown" },
        if d.operation_inferred {
            ", operation inferred"
        } else {
            ""
        }
    );
    let _ = writeln!(out, "operation:    {}", d.operation);
    let _ = writeln!(out, "reached:      {}", d.target_reached);
    let _ = writeln!(out, "retryable:    {}   safe: {}", r.retryable, r.safe);
    if r.retryable {
        let _ = writeln!(
            out,
            "wait:         {}–{} ms ({})",
            r.after_ms, r.max_after_ms, r.strategy
        );
    }
    let _ = writeln!(out, "attempt:      {} of {}", r.attempt, r.max_attempts);
    if let Some(dl) = r.deadline {
        let _ = writeln!(out, "deadline:     {}", dl.to_rfc3339());
    }
    let _ = writeln!(out, "side effect:  {}", r.side_effect_state);
    if let Some(a) = r.reconciliation_action {
        let _ = writeln!(out, "action:       {a}");
    }
    if let Some(k) = r.idempotency_key {
        let _ = writeln!(out, "resend key:   {k}");
    }
    if let Some(t) = d.required_transition {
        let _ = writeln!(out, "needs:        {t}");
    }
    if d.scope == crate::core::Scope::Tenant {
        let _ = writeln!(out, "scope:        tenant (stop calling this tenant)");
    }
    if let Some(t) = d.terminal_state {
        let _ = writeln!(out, "terminal:     {}", t.as_str());
    }
    if let Some(h) = d.hold_plan {
        // A server with fleet memory would place this hold for every caller.
        let _ = writeln!(
            out,
            "fleet hold:   {} on the {} until {}",
            h.kind.as_str(),
            h.scope.as_str(),
            h.until.to_rfc3339()
        );
    }
    if !d.request_id.is_empty() {
        let _ = writeln!(out, "request id:   {}", d.request_id);
    }
    for w in d.warnings.texts() {
        let _ = writeln!(out, "warning:      {w}");
    }
    let _ = write!(out, "rule:         {} ({})", d.rule, d.policy_version);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_in_one_unit() {
        assert_eq!(span(500, 1000), "500–1000 ms");
        assert_eq!(span(900_000, 900_000), "15 min");
        assert_eq!(span(15_000, 20_000), "15–20 s");
        assert_eq!(span(14_400_000, 18_000_000), "4–5 h");
        assert_eq!(span(0, 0), "0 ms");
    }
}
