//! `retryd replay`: re-decides every failure of a decision log under
//! another policy, at its logged time and with the hold logged beside it
//! (read-only), and counts the decisions that change, by code and field.

use std::collections::BTreeMap;
use std::io::BufRead;

use serde::Serialize;

use crate::core::{Policy, UnixMillis};
use crate::service::decide::{Given, read_only};
use crate::service::outcome::{FieldChange, Outcome};
use crate::service::record::{LogRecord, LoggedBudget, SUPPORTED_VERSIONS};

/// Examples kept per code.
const EXAMPLES_PER_CODE: usize = 3;

/// One changed decision, as an example.
#[derive(Debug, Clone, Serialize)]
pub struct Example {
    /// Line of the log.
    pub line: usize,
    /// The logged time.
    pub ts: String,
    /// `read`, `write` or empty.
    pub operation: String,
    /// The attempt.
    pub attempt: u32,
    /// What changed.
    pub changes: Vec<FieldChange>,
}

/// The changes of one code.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CodeReplay {
    /// Decisions of this code replayed.
    pub decisions: usize,
    /// Of them, changed.
    pub changed: usize,
    /// Changed decisions per field.
    pub fields: BTreeMap<String, usize>,
    /// Of them, less safe for a write.
    #[serde(rename = "unsafe")]
    pub unsafe_changes: usize,
    /// A few of them.
    pub examples: Vec<Example>,
}

/// What a replay found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayReport {
    /// The policy replayed under.
    pub policy_version: String,
    /// Log lines read as decisions.
    pub decisions: usize,
    /// Of them, decided differently.
    pub changed: usize,
    /// Of them, less safe for a write.
    #[serde(rename = "unsafe")]
    pub unsafe_changes: usize,
    /// Decisions whose catalog the policy does not have.
    pub undecidable: usize,
    /// By `catalog code` (`(no envelope)` for an empty code).
    pub codes: BTreeMap<String, CodeReplay>,
    /// What was read but not replayed (a torn last line).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Why a log cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The log could not be read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A line is not a decision-log record.
    #[error("line {line}: not a decision-log line: {message}")]
    Parse {
        /// 1-based line.
        line: usize,
        /// serde's message.
        message: String,
    },
    /// A line's format version is not one this retryd reads.
    #[error("line {line}: decision-log format version {version} is not supported (this retryd reads {supported:?})")]
    Version {
        /// 1-based line.
        line: usize,
        /// The line's `v`.
        version: u32,
        /// What is supported.
        supported: &'static [u32],
    },
}

/// Replays every line of `log` under `policy`.
pub fn replay(log: impl BufRead, policy: &Policy) -> Result<ReplayReport, ReplayError> {
    let mut report = ReplayReport {
        policy_version: policy.version().to_owned(),
        ..ReplayReport::default()
    };
    let mut log = log;
    let mut bytes = Vec::new();
    let mut line_no = 0;
    loop {
        bytes.clear();
        if log.read_until(b'\n', &mut bytes)? == 0 {
            break;
        }
        line_no += 1;
        // The last line without its newline: the writer was stopped (or
        // the disk filled) in the middle of it. It is reported, not read,
        // and the lines before it are replayed.
        if bytes.last() != Some(&b'\n') {
            let is_record = std::str::from_utf8(&bytes)
                .ok()
                .is_some_and(|l| serde_json::from_str::<LogRecord>(l).is_ok());
            if !is_record {
                report.warnings.push(format!(
                    "line {line_no}: the last line is cut short ({} bytes, no newline): not replayed",
                    bytes.len()
                ));
                break;
            }
        }
        let line = std::str::from_utf8(&bytes).map_err(|e| ReplayError::Parse {
            line: line_no,
            message: format!("not UTF-8 ({e})"),
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let version = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("v").and_then(serde_json::Value::as_u64));
        if let Some(v) = version.filter(|v| !SUPPORTED_VERSIONS.contains(&(*v as u32))) {
            return Err(ReplayError::Version {
                line: line_no,
                version: v as u32,
                supported: SUPPORTED_VERSIONS,
            });
        }
        let record: LogRecord = serde_json::from_str(line).map_err(|e| ReplayError::Parse {
            line: line_no,
            message: e.to_string(),
        })?;
        replay_one(&record, line_no, policy, &mut report);
    }
    Ok(report)
}

fn replay_one(record: &LogRecord, line: usize, policy: &Policy, report: &mut ReplayReport) {
    report.decisions += 1;
    let failure = record.failure.as_failure();
    let code = if failure.code.is_empty() {
        "(no envelope)"
    } else {
        failure.code
    };
    let catalog = if failure.catalog.is_empty() {
        policy.default_catalog().name.to_string()
    } else {
        failure.catalog.to_owned()
    };
    let entry = report.codes.entry(format!("{catalog} {code}")).or_default();
    entry.decisions += 1;
    // The hold and the budget the live decision met, fed back from the log.
    let budget = record.budget.as_ref().map(LoggedBudget::judged);
    let given = Given::as_logged(record.hold.as_ref(), budget.as_ref());
    let Ok(d) = read_only(policy, &failure, UnixMillis(record.ts_ms), given) else {
        report.undecidable += 1;
        return;
    };
    let now = Outcome::of(&d.decision);
    let changes = now.changes_from(&record.decision);
    if changes.is_empty() {
        return;
    }
    report.changed += 1;
    entry.changed += 1;
    if record.failure.operation != "read" && now.less_safe_than(&record.decision).is_some() {
        report.unsafe_changes += 1;
        entry.unsafe_changes += 1;
    }
    for c in &changes {
        *entry.fields.entry(c.field.clone()).or_default() += 1;
    }
    if entry.examples.len() < EXAMPLES_PER_CODE {
        entry.examples.push(Example {
            line,
            ts: record.ts.clone(),
            operation: record.failure.operation.to_string(),
            attempt: record.failure.attempt,
            changes,
        });
    }
}

/// The report as text: totals, then code by code with fields and examples.
pub fn to_text(r: &ReplayReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} of {} decision(s) change under {}{}",
        r.changed,
        r.decisions,
        r.policy_version,
        if r.unsafe_changes > 0 {
            format!("; UNSAFE: {} make a write less safe", r.unsafe_changes)
        } else {
            String::new()
        }
    );
    if r.undecidable > 0 {
        let _ = writeln!(
            s,
            "{} decision(s) name a catalog the policy does not have",
            r.undecidable
        );
    }
    for (code, c) in r.codes.iter().filter(|(_, c)| c.changed > 0) {
        let fields: Vec<String> = c.fields.iter().map(|(f, n)| format!("{f} {n}")).collect();
        let _ = writeln!(
            s,
            "\n{code}: {} of {} changed ({}){}",
            c.changed,
            c.decisions,
            fields.join(", "),
            if c.unsafe_changes > 0 {
                format!(", {} unsafe", c.unsafe_changes)
            } else {
                String::new()
            }
        );
        for e in &c.examples {
            let what: Vec<String> = e
                .changes
                .iter()
                .map(|c| format!("{}: {} → {}", c.field, c.old, c.new))
                .collect();
            let _ = writeln!(
                s,
                "  line {} ({} {} attempt {}): {}",
                e.line,
                e.ts,
                if e.operation.is_empty() {
                    "inferred"
                } else {
                    &e.operation
                },
                e.attempt,
                what.join(", ")
            );
        }
    }
    s
}
