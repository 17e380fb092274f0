//! `retryd policy diff`: decides every input that changes answers under two
//! policies and reports each decision that differs, grouped by code and
//! field, with the changes that make a write less safe first.
//!
//! The inputs, per catalog: every code of either policy, an unknown code
//! and no envelope; read and write; for writes also with and without an
//! enforced idempotency key and each read-back; with and without a
//! Retry-After; every attempt from the first to the last either policy
//! allows (schedules step by attempt). Failures carry a dependency and a
//! tenant so that hold rules apply; no hold is in force.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::core::{Failure, Operation, Policy, ReadBack, UnixMillis};
use crate::service::decide::{Given, read_only};
use crate::service::outcome::Outcome;
use crate::service::record;

/// The code the diff uses for "a code the catalog does not know".
pub const UNKNOWN_CODE: &str = "RETRYD_DIFF_UNKNOWN_CODE";
/// The instant every input is decided at.
pub const DIFF_NOW: UnixMillis = UnixMillis(1_768_478_400_000); // 2026-01-15T12:00:00Z
/// Attempts beyond this many are represented by the last one.
const MAX_ATTEMPTS_ENUMERATED: u32 = 12;

/// One input the diff decides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiffInput {
    /// `read` or `write`.
    pub operation: &'static str,
    /// The attempt that failed.
    pub attempt: u32,
    /// `Retry-After: 30` was given.
    pub retry_after: bool,
    /// An idempotency key the dependency enforces was given.
    pub key_enforced: bool,
    /// What a read-back found.
    pub read_back: &'static str,
}

impl DiffInput {
    /// A short description, e.g. `attempt=1 retry_after=30s key=enforced read_back=absent`.
    pub fn label(&self) -> String {
        format!(
            "attempt={} retry_after={} key={} read_back={}",
            self.attempt,
            if self.retry_after { "30s" } else { "none" },
            if self.key_enforced { "enforced" } else { "none" },
            self.read_back
        )
    }
}

/// One field of one code and operation that changes, with the inputs it changes for.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    /// `read` or `write`.
    pub operation: &'static str,
    /// The field.
    pub field: String,
    /// Its value under OLD.
    pub old: String,
    /// Its value under NEW.
    pub new: String,
    /// How many of this code's inputs of this operation it changes for.
    pub inputs_changed: usize,
    /// How many inputs of this code and operation were decided.
    pub inputs_total: usize,
    /// The first input it changes for.
    pub example: String,
}

/// The changes of one code.
#[derive(Debug, Clone, Serialize)]
pub struct CodeChanges {
    /// The catalog.
    pub catalog: String,
    /// The code (`(unknown code)`, `(no envelope)` for the fallbacks).
    pub code: String,
    /// Field by field.
    pub changes: Vec<Change>,
}

/// A change that makes a write less safe.
#[derive(Debug, Clone, Serialize)]
pub struct UnsafeChange {
    /// The catalog.
    pub catalog: String,
    /// The code.
    pub code: String,
    /// `read` or `write`.
    pub operation: &'static str,
    /// What got less safe.
    pub why: String,
    /// How many inputs.
    pub inputs: usize,
    /// The first of them.
    pub example: String,
}

/// The whole diff.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyDiff {
    /// OLD's version.
    pub old_version: String,
    /// NEW's version.
    pub new_version: String,
    /// Decisions compared.
    pub decisions: usize,
    /// Decisions that differ.
    pub changed: usize,
    /// Catalogs only one side has (`+name` new, `-name` gone).
    pub catalogs: Vec<String>,
    /// Changes that make a write less safe (reported first).
    #[serde(rename = "unsafe")]
    pub unsafe_changes: Vec<UnsafeChange>,
    /// Every change, by code.
    pub codes: Vec<CodeChanges>,
}

impl PolicyDiff {
    /// Nothing differs.
    pub fn is_empty(&self) -> bool {
        self.changed == 0 && self.catalogs.is_empty()
    }
}

/// Diffs `old` against `new`, over the catalogs named in `only` (empty: all).
pub fn diff(old: &Policy, new: &Policy, only: &[String]) -> PolicyDiff {
    let mut names: Vec<&str> = old.catalogs().iter().map(|c| &*c.name).collect();
    for c in new.catalogs() {
        if !names.contains(&&*c.name) {
            names.push(&c.name);
        }
    }
    names.retain(|n| only.is_empty() || only.iter().any(|o| o == n));
    let mut out = PolicyDiff {
        old_version: old.version().to_owned(),
        new_version: new.version().to_owned(),
        decisions: 0,
        changed: 0,
        catalogs: Vec::new(),
        unsafe_changes: Vec::new(),
        codes: Vec::new(),
    };
    for name in names {
        let (Some(a), Some(b)) = (old.catalog(name), new.catalog(name)) else {
            let sign = if old.catalog(name).is_some() { '-' } else { '+' };
            out.catalogs.push(format!("{sign}{name}"));
            continue;
        };
        let mut codes: Vec<&str> = a.codes().iter().map(|e| &*e.code).collect();
        for e in b.codes() {
            if !codes.contains(&&*e.code) {
                codes.push(&e.code);
            }
        }
        codes.push(UNKNOWN_CODE);
        codes.push("");
        let last = a.max_attempts.max(b.max_attempts).max(1);
        let mut attempts: Vec<u32> = (1..=last.min(MAX_ATTEMPTS_ENUMERATED)).collect();
        if last > MAX_ATTEMPTS_ENUMERATED {
            attempts.push(last);
        }
        for code in codes {
            let changes = diff_code(old, new, name, code, &attempts, &mut out);
            if !changes.is_empty() {
                out.codes.push(CodeChanges {
                    catalog: name.to_owned(),
                    code: code_label(code),
                    changes,
                });
            }
        }
    }
    out
}

fn code_label(code: &str) -> String {
    match code {
        "" => "(no envelope)".to_owned(),
        UNKNOWN_CODE => "(unknown code)".to_owned(),
        c => c.to_owned(),
    }
}

/// Every input of one code.
pub fn inputs(attempts: &[u32]) -> Vec<DiffInput> {
    let mut v = Vec::new();
    for &attempt in attempts {
        for retry_after in [false, true] {
            v.push(DiffInput {
                operation: "read",
                attempt,
                retry_after,
                key_enforced: false,
                read_back: "not_done",
            });
            for key_enforced in [false, true] {
                for read_back in ["not_done", "effect_present", "effect_absent", "inconclusive"] {
                    v.push(DiffInput {
                        operation: "write",
                        attempt,
                        retry_after,
                        key_enforced,
                        read_back,
                    });
                }
            }
        }
    }
    v
}

/// (operation, field, old, new).
type ChangeKey = (&'static str, String, String, String);

fn diff_code(
    old: &Policy,
    new: &Policy,
    catalog: &str,
    code: &str,
    attempts: &[u32],
    out: &mut PolicyDiff,
) -> Vec<Change> {
    // (operation, field, old, new) -> (count, first example); insertion order kept.
    let mut grouped: Vec<(ChangeKey, usize, String)> = Vec::new();
    let mut unsafe_grouped: BTreeMap<(&'static str, String), (usize, String)> = BTreeMap::new();
    let mut totals: BTreeMap<&'static str, usize> = BTreeMap::new();
    for input in inputs(attempts) {
        let failure = Failure {
            catalog,
            code,
            operation: if input.operation == "read" {
                Operation::Read
            } else {
                Operation::Write
            },
            attempt: input.attempt,
            retry_after: if input.retry_after { "30" } else { "" },
            idempotency_key: if input.key_enforced { "diff-key" } else { "" },
            idempotency_key_enforced: input.key_enforced,
            read_back: record::read_back_from_str(input.read_back).unwrap_or(ReadBack::NotDone),
            tenant: "diff-tenant",
            dependency: "diff-dependency",
            method: "diff.method",
            ..Default::default()
        };
        let decided = |p: &Policy| {
            read_only(p, &failure, DIFF_NOW, Given::new(&[], None))
                .map(|d| Outcome::of(&d.decision))
                .ok()
        };
        let (a, b) = (decided(old), decided(new));
        out.decisions += 1;
        *totals.entry(input.operation).or_default() += 1;
        let (Some(a), Some(b)) = (a, b) else { continue };
        let changes = b.changes_from(&a);
        if changes.is_empty() {
            continue;
        }
        out.changed += 1;
        if input.operation == "write" {
            if let Some(why) = b.less_safe_than(&a) {
                let e = unsafe_grouped
                    .entry((input.operation, why))
                    .or_insert((0, input.label()));
                e.0 += 1;
            }
        }
        for c in changes {
            let key = (input.operation, c.field, c.old, c.new);
            match grouped.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, n, _)) => *n += 1,
                None => grouped.push((key, 1, input.label())),
            }
        }
    }
    for ((operation, why), (inputs, example)) in unsafe_grouped {
        out.unsafe_changes.push(UnsafeChange {
            catalog: catalog.to_owned(),
            code: code_label(code),
            operation,
            why,
            inputs,
            example,
        });
    }
    grouped
        .into_iter()
        .map(|((operation, field, old, new), n, example)| Change {
            operation,
            field,
            old,
            new,
            inputs_changed: n,
            inputs_total: totals.get(operation).copied().unwrap_or(0),
            example,
        })
        .collect()
}

/// The diff as text: the unsafe changes first, then code by code, field by field.
pub fn to_text(d: &PolicyDiff) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "--- old {}\n+++ new {}", d.old_version, d.new_version);
    if !d.unsafe_changes.is_empty() {
        let _ = writeln!(
            s,
            "\nUNSAFE: {} change(s) make a write less safe:",
            d.unsafe_changes.len()
        );
        for u in &d.unsafe_changes {
            let _ = writeln!(
                s,
                "  ! {} {} {}: {} ({} input(s), e.g. {})",
                u.catalog, u.code, u.operation, u.why, u.inputs, u.example
            );
        }
    }
    for c in &d.catalogs {
        let _ = writeln!(s, "\ncatalog {c}");
    }
    for code in &d.codes {
        let _ = writeln!(s, "\n{} {}", code.catalog, code.code);
        for c in &code.changes {
            let _ = writeln!(
                s,
                "  {:<5} {}: {} → {}  ({} of {} inputs, e.g. {})",
                c.operation, c.field, c.old, c.new, c.inputs_changed, c.inputs_total, c.example
            );
        }
    }
    let _ = writeln!(
        s,
        "\n{} of {} decision(s) change in {} code(s){}",
        d.changed,
        d.decisions,
        d.codes.len(),
        if d.unsafe_changes.is_empty() {
            String::new()
        } else {
            format!("; {} unsafe", d.unsafe_changes.len())
        }
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::EMBEDDED;

    fn with_vibecode(edit: impl Fn(&str) -> String) -> Policy {
        let text = EMBEDDED[0].1;
        let edited = edit(text);
        let sources: Vec<(&str, &str)> = EMBEDDED
            .iter()
            .copied()
            .chain([("edited/vibecode.toml", edited.as_str())])
            .collect();
        Policy::from_sources(sources, "vibecode").expect("edited policy")
    }

    #[test]
    fn a_policy_against_itself_finds_nothing() {
        let p = Policy::embedded().expect("embedded");
        let d = diff(&p, &p, &[]);
        assert!(d.is_empty(), "{}", to_text(&d));
        assert!(d.decisions > 1000, "{} decisions", d.decisions);
    }

    #[test]
    fn a_planted_unsafe_change_is_found_and_marked() {
        let old = Policy::embedded().expect("embedded");
        let needle = "code = \"BITRIX_TIMEOUT\"";
        let new = with_vibecode(|t| {
            let (head, tail) = t.split_once(needle).expect("BITRIX_TIMEOUT in vibecode");
            let tail = tail.replacen(
                "verdict = \"state_verification_required\"",
                "verdict = \"retry_with_limit\"",
                1,
            );
            format!("{head}{needle}{tail}")
        });
        let d = diff(&old, &new, &["vibecode".to_owned()]);
        assert!(!d.is_empty());
        assert!(d.codes.iter().all(|c| c.code == "BITRIX_TIMEOUT"), "{}", to_text(&d));
        assert!(
            d.unsafe_changes.iter().any(|u| u.code == "BITRIX_TIMEOUT" && u.why.contains("state_verification_required → retry_with_limit")),
            "{}",
            to_text(&d)
        );
        assert!(to_text(&d).contains("UNSAFE"));
    }
}
