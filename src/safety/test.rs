//! Policy tests: tables of cases that sit beside catalogs
//! (`<name>.test.toml`, or a `[[tests]]` section of the catalog file). Each
//! case gives a failure (and `now`, and the holds in force where relevant)
//! and the fields of the decision it expects; [`run_file`] decides each case
//! with the policy under test, read-only, exactly as the server would, and
//! reports every case whose decision differs, with its file and line.

use serde::Deserialize;
use toml::Spanned;

use crate::core::hold::{Hold, HoldKey, HoldKind, HoldScope};
use crate::core::{Failure, Policy, UnixMillis};
use crate::service::decide::{Given, read_only};
use crate::service::outcome::Outcome;
use crate::service::record;

/// The embedded catalogs' test tables: `(file, text)`, run by `cargo test`
/// and by `retryd policy test` without a path.
pub const EMBEDDED_TESTS: &[(&str, &str)] = &[
    (
        "policies/vibecode.test.toml",
        include_str!("../../policies/vibecode.test.toml"),
    ),
    (
        "policies/frontspin.test.toml",
        include_str!("../../policies/frontspin.test.toml"),
    ),
    ("policies/asc.test.toml", include_str!("../../policies/asc.test.toml")),
];

/// `now` of a case that gives none.
pub const DEFAULT_NOW: &str = "2026-01-15T12:00:00Z";

#[derive(Debug, Deserialize)]
struct TestsTable {
    #[serde(default)]
    tests: Vec<Spanned<CaseSource>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseSource {
    name: String,
    catalog: Option<String>,
    #[serde(default)]
    code: String,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    method: String,
    #[serde(default = "one")]
    attempt: u32,
    #[serde(default)]
    max_attempts: u32,
    #[serde(default)]
    retry_after: String,
    retry_after_ms: Option<u64>,
    deadline: Option<String>,
    #[serde(default)]
    idempotency_key: String,
    #[serde(default)]
    idempotency_key_enforced: bool,
    #[serde(default)]
    read_back: String,
    #[serde(default)]
    cannot_verify_effect: bool,
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    dependency: String,
    quota_resets_at: Option<String>,
    now: Option<String>,
    #[serde(default)]
    holds: Vec<HoldSource>,
    expect: Expect,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HoldSource {
    kind: String,
    scope: String,
    until: String,
    since: Option<String>,
    #[serde(default)]
    probe_every_ms: u64,
}

/// An exact value or an inclusive `[low, high]` range.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
enum Range {
    Exact(u64),
    Within([u64; 2]),
}

impl Range {
    fn contains(self, v: u64) -> bool {
        match self {
            Range::Exact(x) => v == x,
            Range::Within([lo, hi]) => lo <= v && v <= hi,
        }
    }

    fn describe(self) -> String {
        match self {
            Range::Exact(x) => x.to_string(),
            Range::Within([lo, hi]) => format!("in [{lo}, {hi}]"),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    verdict: Option<String>,
    safe: Option<bool>,
    retryable: Option<bool>,
    after_ms: Option<Range>,
    max_after_ms: Option<Range>,
    strategy: Option<String>,
    max_attempts: Option<u32>,
    side_effect_state: Option<String>,
    /// `""` expects none.
    reconciliation_action: Option<String>,
    /// `""` expects none.
    required_transition: Option<String>,
    /// `""` expects none.
    terminal_state: Option<String>,
    /// `kind/scope` of the hold the decision reports (placed or in force), or `none`.
    hold: Option<String>,
    hold_until: Option<String>,
    rule: Option<String>,
}

/// One field a case expected differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The field.
    pub field: &'static str,
    /// What the case expects.
    pub expected: String,
    /// What the decision says.
    pub got: String,
}

/// A case that failed.
#[derive(Debug, Clone)]
pub struct CaseFailure {
    /// The test file.
    pub file: String,
    /// The line of its `[[tests]]` header.
    pub line: usize,
    /// The case's name.
    pub name: String,
    /// Every field that differs (or one `error` pseudo-field).
    pub mismatches: Vec<Mismatch>,
}

/// What running test files found.
#[derive(Debug, Default)]
pub struct Report {
    /// Test files read.
    pub files: usize,
    /// Cases that passed.
    pub passed: usize,
    /// Cases that failed.
    pub failed: Vec<CaseFailure>,
    /// Files that could not be read as test tables: `file:line: message`.
    pub errors: Vec<String>,
}

impl Report {
    /// Adds another report's counts.
    pub fn merge(&mut self, other: Report) {
        self.files += other.files;
        self.passed += other.passed;
        self.failed.extend(other.failed);
        self.errors.extend(other.errors);
    }

    /// Runner-like text: each failing case with file:line, expected against
    /// got, then a summary line.
    pub fn to_text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        for e in &self.errors {
            let _ = writeln!(s, "ERROR {e}");
        }
        for f in &self.failed {
            let _ = writeln!(s, "FAIL {}:{}: {}", f.file, f.line, f.name);
            for m in &f.mismatches {
                let shown = |v: &str| {
                    if v.is_empty() {
                        "(none)".to_owned()
                    } else {
                        v.to_owned()
                    }
                };
                let _ = writeln!(
                    s,
                    "    {}: expected {}, got {}",
                    m.field,
                    shown(&m.expected),
                    shown(&m.got)
                );
            }
        }
        let _ = writeln!(
            s,
            "{} passed, {} failed, {} error(s) in {} test file(s)",
            self.passed,
            self.failed.len(),
            self.errors.len(),
            self.files
        );
        s
    }
}

/// Whether `text` (a catalog file) has a `[[tests]]` section.
pub fn has_tests_section(text: &str) -> bool {
    text.lines().any(|l| l.trim_start().starts_with("[[tests]]"))
}

/// Runs the cases of one test table (`file`, `text`) against `policy`;
/// `catalog` is the catalog cases without a `catalog` key test (the one
/// the table sits beside), `None` for the policy's default.
pub fn run_file(file: &str, text: &str, policy: &Policy, catalog: Option<&str>) -> Report {
    let mut report = Report {
        files: 1,
        ..Report::default()
    };
    let table: TestsTable = match toml::from_str(text) {
        Ok(t) => t,
        Err(e) => {
            let line = e.span().map_or(0, |s| line_of(text, s.start));
            report.errors.push(format!("{file}:{line}: {}", one_line(e.message())));
            return report;
        }
    };
    if table.tests.is_empty() {
        report.errors.push(format!("{file}:1: no [[tests]] case in this file"));
    }
    for case in table.tests {
        let line = header_line(text, case.span().start);
        let case = case.into_inner();
        match run_case(&case, policy, catalog) {
            Ok(m) if m.is_empty() => report.passed += 1,
            Ok(mismatches) => report.failed.push(CaseFailure {
                file: file.to_owned(),
                line,
                name: case.name.clone(),
                mismatches,
            }),
            Err(message) => report.errors.push(format!("{file}:{line}: {}: {message}", case.name)),
        }
    }
    report
}

fn run_case(case: &CaseSource, policy: &Policy, catalog: Option<&str>) -> Result<Vec<Mismatch>, String> {
    let time = |key: &str, v: &str| {
        UnixMillis::parse_rfc3339(v).ok_or_else(|| format!("{key}: {v:?} is not an RFC 3339 time"))
    };
    let now = time("now", case.now.as_deref().unwrap_or(DEFAULT_NOW))?;
    let operation = record::operation_from_str(&case.operation)
        .ok_or_else(|| format!("operation: {:?} is not read or write", case.operation))?;
    let read_back = record::read_back_from_str(&case.read_back).ok_or_else(|| {
        format!(
            "read_back: {:?} is not effect_present, effect_absent or inconclusive",
            case.read_back
        )
    })?;
    let catalog_name = case.catalog.as_deref().or(catalog).unwrap_or("");
    let failure = Failure {
        catalog: catalog_name,
        code: &case.code,
        operation,
        method: &case.method,
        attempt: case.attempt,
        max_attempts: case.max_attempts,
        retry_after: &case.retry_after,
        retry_after_ms: case.retry_after_ms,
        deadline: case.deadline.as_deref().map(|d| time("deadline", d)).transpose()?,
        idempotency_key: &case.idempotency_key,
        idempotency_key_enforced: case.idempotency_key_enforced,
        read_back,
        cannot_verify_effect: case.cannot_verify_effect,
        tenant: &case.tenant,
        dependency: &case.dependency,
        quota_resets_at: case
            .quota_resets_at
            .as_deref()
            .map(|d| time("quota_resets_at", d))
            .transpose()?,
        ..Default::default()
    };
    let mut holds = Vec::new();
    for (i, h) in case.holds.iter().enumerate() {
        holds.push(hold_of(h, i, &failure, policy, now).map_err(|e| format!("holds[{i}].{e}"))?);
    }
    let decided = read_only(policy, &failure, now, Given::new(&holds, None)).map_err(|e| e.to_string())?;
    let (d, hold) = (decided.decision, decided.hold);
    let got = Outcome::of(&d);
    Ok(compare(&case.expect, &got, hold.as_deref()))
}

fn hold_of(h: &HoldSource, i: usize, f: &Failure<'_>, policy: &Policy, now: UnixMillis) -> Result<Hold, String> {
    let kind = HoldKind::ALL
        .into_iter()
        .find(|k| k.as_str() == h.kind)
        .ok_or_else(|| {
            format!(
                "kind: {:?} is not pause, quota_stop, quarantine or circuit_open",
                h.kind
            )
        })?;
    let scope = [HoldScope::Tenant, HoldScope::Dependency, HoldScope::Method]
        .into_iter()
        .find(|s| s.as_str() == h.scope)
        .ok_or_else(|| format!("scope: {:?} is not tenant, dependency or method", h.scope))?;
    let until =
        UnixMillis::parse_rfc3339(&h.until).ok_or_else(|| format!("until: {:?} is not an RFC 3339 time", h.until))?;
    let since = match &h.since {
        Some(s) => UnixMillis::parse_rfc3339(s).ok_or_else(|| format!("since: {s:?} is not an RFC 3339 time"))?,
        None => now,
    };
    let catalog = match f.catalog {
        "" => policy.default_catalog().name.to_string(),
        c => c.to_owned(),
    };
    Ok(Hold {
        id: format!("test-{i}"),
        key: HoldKey {
            scope,
            catalog,
            dependency: f.dependency.to_owned(),
            subject: match scope {
                HoldScope::Tenant => f.tenant.to_owned(),
                HoldScope::Method => f.method.to_owned(),
                HoldScope::Dependency => String::new(),
            },
        },
        kind,
        since,
        until,
        probe_every_ms: h.probe_every_ms,
        probe_window_ms: 0,
        rank: Default::default(),
        code: String::new(),
        rule: "policy test".to_owned(),
        reason: String::new(),
    })
}

fn compare(e: &Expect, got: &Outcome, hold: Option<&Hold>) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let mut check = |field: &'static str, expected: Option<String>, actual: String| {
        if let Some(expected) = expected {
            if expected != actual {
                out.push(Mismatch {
                    field,
                    expected,
                    got: actual,
                });
            }
        }
    };
    let none = |o: &Option<String>| o.clone().unwrap_or_default();
    check("verdict", e.verdict.clone(), got.verdict.to_string());
    check("safe", e.safe.map(|b| b.to_string()), got.safe.to_string());
    check(
        "retryable",
        e.retryable.map(|b| b.to_string()),
        got.retryable.to_string(),
    );
    check("strategy", e.strategy.clone(), got.strategy.to_string());
    check(
        "max_attempts",
        e.max_attempts.map(|n| n.to_string()),
        got.max_attempts.to_string(),
    );
    check(
        "side_effect_state",
        e.side_effect_state.clone(),
        got.side_effect_state.to_string(),
    );
    check(
        "reconciliation_action",
        e.reconciliation_action.clone(),
        none(&got.reconciliation_action),
    );
    check(
        "required_transition",
        e.required_transition.clone(),
        none(&got.required_transition),
    );
    check("terminal_state", e.terminal_state.clone(), none(&got.terminal_state));
    check("rule", e.rule.clone(), got.rule.clone());
    let hold_word = hold.map_or_else(
        || "none".to_owned(),
        |h| format!("{}/{}", h.kind.as_str(), h.key.scope.as_str()),
    );
    check("hold", e.hold.clone(), hold_word);
    check(
        "hold_until",
        e.hold_until.clone(),
        hold.map_or_else(|| "none".to_owned(), |h| h.until.to_rfc3339()),
    );
    for (field, range, v) in [
        ("after_ms", e.after_ms, got.after_ms),
        ("max_after_ms", e.max_after_ms, got.max_after_ms),
    ] {
        if let Some(r) = range.filter(|r| !r.contains(v)) {
            out.push(Mismatch {
                field,
                expected: r.describe(),
                got: v.to_string(),
            });
        }
    }
    out
}

/// 1-based line of byte `offset`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset).map_or(1, |t| t.matches('\n').count() + 1)
}

/// The line of the `[[tests]]` header of the case whose content starts at `offset`.
fn header_line(text: &str, offset: usize) -> usize {
    let line = line_of(text, offset);
    let lines: Vec<&str> = text.lines().collect();
    (1..=line.min(lines.len()))
        .rev()
        .find(|&l| lines[l - 1].trim_start().starts_with("[[tests]]"))
        .unwrap_or(line)
}

fn one_line(message: &str) -> String {
    message.trim().lines().map(str::trim).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn embedded() -> Policy {
        Policy::embedded().expect("embedded policy")
    }

    #[test]
    fn the_embedded_catalogs_pass_their_tests() {
        let policy = embedded();
        let mut report = Report::default();
        for (file, text) in EMBEDDED_TESTS {
            let catalog = file.trim_start_matches("policies/").trim_end_matches(".test.toml");
            report.merge(run_file(file, text, &policy, Some(catalog)));
        }
        assert!(
            report.failed.is_empty() && report.errors.is_empty(),
            "{}",
            report.to_text()
        );
        // vibecode: 16 codes × read/write at least, plus the others
        assert!(report.passed >= 32 + 6 + 2, "{}", report.to_text());
    }

    #[test]
    fn a_failing_case_names_its_line_expected_and_got() {
        let text = "# a comment\n\n[[tests]]\nname = \"wrong on purpose\"\ncode = \"BITRIX_TIMEOUT\"\noperation = \"write\"\nexpect = { verdict = \"retry_with_limit\", safe = true, after_ms = [1, 2] }\n";
        let r = run_file("t.test.toml", text, &embedded(), Some("vibecode"));
        assert_eq!(r.failed.len(), 1, "{}", r.to_text());
        let out = r.to_text();
        assert!(out.contains("FAIL t.test.toml:3: wrong on purpose"), "{out}");
        assert!(
            out.contains("verdict: expected retry_with_limit, got state_verification_required"),
            "{out}"
        );
        assert!(out.contains("safe: expected true, got false"), "{out}");
        assert!(out.contains("after_ms: expected in [1, 2], got"), "{out}");
    }

    #[test]
    fn broken_files_are_errors_with_a_line() {
        let p = embedded();
        let typo = "[[tests]]\nname = \"x\"\ncode = \"A\"\nverdikt = \"y\"\nexpect = {}\n";
        let r = run_file("typo.test.toml", typo, &p, None);
        assert_eq!(r.errors.len(), 1, "{}", r.to_text());
        assert!(r.errors[0].starts_with("typo.test.toml:"), "{}", r.errors[0]);
        assert!(r.errors[0].contains("verdikt"), "{}", r.errors[0]);
        let syntax = "[[tests]]\nname = \"x\"\ncode = \n";
        let r = run_file("syntax.test.toml", syntax, &p, None);
        assert!(r.errors[0].starts_with("syntax.test.toml:3:"), "{}", r.errors[0]);
        let bad_value = "[[tests]]\nname = \"bad op\"\noperation = \"delete\"\nexpect = {}\n";
        let r = run_file("v.test.toml", bad_value, &p, None);
        assert!(
            r.errors[0].starts_with("v.test.toml:1: bad op: operation"),
            "{}",
            r.errors[0]
        );
    }

    #[test]
    fn holds_in_force_floor_the_wait() {
        let text = "[[tests]]\nname = \"paused dependency\"\ncatalog = \"vibecode\"\ncode = \"QUEUE_TIMEOUT\"\noperation = \"read\"\ndependency = \"portal\"\nnow = \"2026-01-15T12:00:00Z\"\nholds = [{ kind = \"pause\", scope = \"dependency\", until = \"2026-01-15T12:10:00Z\" }]\nexpect = { verdict = \"retry_with_limit\", strategy = \"hold\", after_ms = 600000, hold = \"pause/dependency\" }\n";
        let r = run_file("h.test.toml", text, &embedded(), None);
        assert_eq!(r.passed, 1, "{}", r.to_text());
    }
}
