//! `serve --decision-log PATH|stderr`: one JSON line per decision (format
//! [`crate::service::record::LogRecord`], version in `v`), written by its own
//! thread from a bounded queue, so a slow disk never slows a call: when the
//! queue is full the decision is not logged and
//! `retryd_decision_log_dropped_total{reason="queue_full"}` counts it. A
//! regular file is rotated by the bytes that reached it (`PATH` → `PATH.1`
//! → … → `PATH.N`, the oldest removed); see [`super::log_file`] for what a
//! full disk, a file-size limit or a FIFO do.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use super::log_file::LogFile;
use super::tap::DecisionEvent;
use crate::service::record::{FORMAT_VERSION, Hasher, LoggedBudget, logged_hold};
#[cfg(doc)]
use crate::service::record::{LogRecord, LoggedFailure};

/// Counter of lines that reached the log whole.
pub const DECISION_LOG_LINES_TOTAL: &str = "retryd_decision_log_lines_total";
/// Counter of decisions not logged, by `reason`: `queue_full` (the writer
/// fell behind), `disk_full`, `file_too_large` (`RLIMIT_FSIZE` or the file
/// system's limit), `reader_stalled` (a FIFO's reader), `write_error`.
pub const DECISION_LOG_DROPPED_TOTAL: &str = "retryd_decision_log_dropped_total";
/// Every `reason` of [`DECISION_LOG_DROPPED_TOTAL`], shown from the start.
pub const DROP_REASONS: [&str; 5] = [
    "queue_full",
    "disk_full",
    "file_too_large",
    "reader_stalled",
    "write_error",
];
/// Counter of write or rotation errors.
pub const DECISION_LOG_ERRORS_TOTAL: &str = "retryd_decision_log_errors_total";

/// Where and how the log is written.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// A file, or `None` for stderr.
    pub path: Option<PathBuf>,
    /// Rotate at this size.
    pub max_bytes: u64,
    /// Rotated files kept.
    pub keep: u32,
    /// Hashes personal values (or writes them raw).
    pub hasher: Hasher,
}

/// The line for `ev` (serialized from borrowed parts: no copy of the event).
pub fn line(ev: &DecisionEvent, hasher: &Hasher) -> String {
    let mut buf = Vec::new();
    write_line(ev, hasher, &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

/// Appends the line for `ev` (without the newline) to `buf`.
pub fn write_line(ev: &DecisionEvent, hasher: &Hasher, buf: &mut Vec<u8>) {
    let f = &ev.failure;
    let upstream = f.upstream.as_ref().map(|u| {
        let mut u = u.clone();
        u.idempotency_key = u.idempotency_key.as_deref().map(|k| hasher.hash(k));
        u
    });
    let out = LineOut {
        v: FORMAT_VERSION,
        ts: ev.now.to_rfc3339(),
        ts_ms: ev.now.0,
        policy_version: &ev.policy_version,
        hashed: hasher.is_keyed(),
        failure: FailureOut {
            catalog: &f.catalog,
            code: &f.code,
            operation: &f.operation,
            method: &f.method,
            attempt: f.attempt,
            max_attempts: f.max_attempts,
            retry_after: &f.retry_after,
            retry_after_ms: f.retry_after_ms,
            deadline_ms: f.deadline_ms,
            idempotency_key: hasher.hash(&f.idempotency_key),
            idempotency_key_enforced: f.idempotency_key_enforced,
            read_back: &f.read_back,
            cannot_verify_effect: f.cannot_verify_effect,
            request_id: hasher.hash(&f.request_id),
            tenant: hasher.hash(&f.tenant),
            locale: &f.locale,
            dependency: &f.dependency,
            quota_resets_at_ms: f.quota_resets_at_ms,
            upstream,
        },
        decision: &ev.decision,
        hold: ev.hold.as_ref().map(|h| logged_hold(h, hasher)),
        budget: ev.budget.as_ref().map(LoggedBudget::of),
    };
    let _ = serde_json::to_writer(buf, &out);
}

/// [`LogRecord`] as written: the same fields, borrowed from the event.
#[derive(serde::Serialize)]
struct LineOut<'a> {
    v: u32,
    ts: String,
    ts_ms: i64,
    policy_version: &'a str,
    hashed: bool,
    failure: FailureOut<'a>,
    decision: &'a crate::service::outcome::Outcome,
    hold: Option<crate::core::hold::Hold>,
    #[serde(skip_serializing_if = "Option::is_none")]
    budget: Option<LoggedBudget>,
}

/// [`LoggedFailure`] as written, personal values hashed.
#[derive(serde::Serialize)]
struct FailureOut<'a> {
    catalog: &'a str,
    code: &'a str,
    operation: &'a str,
    method: &'a str,
    attempt: u32,
    max_attempts: u32,
    retry_after: &'a str,
    retry_after_ms: Option<u64>,
    deadline_ms: Option<i64>,
    idempotency_key: String,
    idempotency_key_enforced: bool,
    read_back: &'a str,
    cannot_verify_effect: bool,
    request_id: String,
    tenant: String,
    locale: &'a str,
    dependency: &'a str,
    quota_resets_at_ms: Option<i64>,
    upstream: Option<crate::service::record::LoggedContract>,
}

/// Opens the log and starts its writer thread; the thread ends (writing
/// what is buffered) when every sender of `rx` is gone.
pub fn spawn(config: LogConfig, rx: Receiver<Arc<DecisionEvent>>) -> std::io::Result<std::thread::JoinHandle<()>> {
    metrics::describe_counter!(
        DECISION_LOG_LINES_TOTAL,
        "Decision-log lines that reached the log whole."
    );
    metrics::describe_counter!(
        DECISION_LOG_DROPPED_TOTAL,
        "Decisions not logged, by reason (queue_full, disk_full, file_too_large, reader_stalled, write_error)."
    );
    metrics::describe_counter!(
        DECISION_LOG_ERRORS_TOTAL,
        "Decision-log writes and rotations that failed."
    );
    for c in [DECISION_LOG_LINES_TOTAL, DECISION_LOG_ERRORS_TOTAL] {
        metrics::counter!(c).increment(0);
    }
    for reason in DROP_REASONS {
        metrics::counter!(DECISION_LOG_DROPPED_TOTAL, "reason" => reason).increment(0);
    }
    let sink = match &config.path {
        None => LogFile::stderr(),
        Some(p) => LogFile::open(p)?,
    };
    std::thread::Builder::new()
        .name("retryd-decision-log".to_owned())
        .spawn(move || run(&config, sink, &rx))
}

fn run(config: &LogConfig, sink: LogFile, rx: &Receiver<Arc<DecisionEvent>>) {
    let writer = std::cell::RefCell::new(Writer {
        config,
        sink,
        warned: None,
        lines: metrics::counter!(DECISION_LOG_LINES_TOTAL),
        text: Vec::with_capacity(2048),
    });
    super::tap::consume(
        rx,
        |ev| writer.borrow_mut().write(ev),
        // Nothing waiting: write what is buffered, then wait.
        || writer.borrow_mut().flush(),
    );
    writer.borrow_mut().flush();
}

struct Writer<'c> {
    config: &'c LogConfig,
    sink: LogFile,
    warned: Option<Instant>,
    lines: metrics::Counter,
    text: Vec<u8>,
}

impl Writer<'_> {
    fn fail(&mut self, what: &str, e: &std::io::Error) {
        metrics::counter!(DECISION_LOG_ERRORS_TOTAL).increment(1);
        if self.warned.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
            self.warned = Some(Instant::now());
            tracing::warn!(error = %e, "decision log: {what} failed");
        }
    }

    fn write(&mut self, ev: &DecisionEvent) {
        self.text.clear();
        write_line(ev, &self.config.hasher, &mut self.text);
        self.text.push(b'\n');
        if self.sink.push(&self.text, self.config.max_bytes) {
            self.flush();
        }
    }

    /// Writes the batch, counts it, and rotates only after a batch that
    /// reached the file in full.
    fn flush(&mut self) {
        let w = self.sink.write_batch();
        self.lines.increment(w.lines);
        if let Some(e) = &w.torn {
            self.fail("taking back a line cut short", e);
        }
        if let Some((n, reason, e)) = w.dropped {
            metrics::counter!(DECISION_LOG_DROPPED_TOTAL, "reason" => reason).increment(n);
            self.fail("write", &e);
            return;
        }
        if self.sink.rotation_due(self.config.max_bytes) {
            if let Err(e) = self.sink.rotate(self.config.keep) {
                self.fail("rotation", &e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::UnixMillis;
    use crate::service::outcome::Outcome;
    use crate::service::record::LoggedFailure;

    fn event() -> DecisionEvent {
        let policy = crate::core::Policy::embedded().expect("policy");
        let f = crate::core::Failure {
            code: "BITRIX_TIMEOUT",
            operation: crate::core::Operation::Write,
            attempt: 1,
            tenant: "acme",
            idempotency_key: "deal-42",
            ..Default::default()
        };
        let d = crate::core::decide(&policy, &f, UnixMillis(1_768_478_400_000)).expect("decided");
        DecisionEvent {
            now: UnixMillis(1_768_478_400_000),
            failure: LoggedFailure::from_failure(&f, &Hasher::raw()),
            decision: Outcome::of(&d),
            catalog: "vibecode".to_owned(),
            policy_version: policy.version().to_owned(),
            hold: None,
            budget: None,
        }
    }

    #[test]
    fn lines_carry_a_version_and_hash_personal_values() {
        let l = line(&event(), &Hasher::keyed(b"k"));
        let v: serde_json::Value = serde_json::from_str(&l).expect("json");
        assert_eq!(v["v"], 1);
        assert_eq!(v["hashed"], true);
        assert!(
            v["failure"]["tenant"].as_str().is_some_and(|t| t.starts_with("h:")),
            "{l}"
        );
        assert!(!l.contains("acme") && !l.contains("deal-42"), "{l}");
        let raw = line(&event(), &Hasher::raw());
        assert!(raw.contains("\"tenant\":\"acme\""), "{raw}");
    }

    #[test]
    fn the_file_rotates_by_size() {
        let dir = std::env::temp_dir().join(format!("retryd-dlog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("decisions.jsonl");
        let (tx, rx) = std::sync::mpsc::sync_channel(1000);
        let config = LogConfig {
            path: Some(path.clone()),
            max_bytes: 2048,
            keep: 2,
            hasher: Hasher::raw(),
        };
        let writer = spawn(config, rx).expect("spawn");
        let ev = Arc::new(event());
        for _ in 0..40 {
            tx.send(Arc::clone(&ev)).expect("send");
        }
        drop(tx);
        writer.join().expect("join");
        let count = |p: &std::path::Path| std::fs::read_to_string(p).map_or(0, |t| t.lines().count());
        let one = PathBuf::from(format!("{}.1", path.display()));
        let two = PathBuf::from(format!("{}.2", path.display()));
        assert!(one.exists() && two.exists());
        assert!(!PathBuf::from(format!("{}.3", path.display())).exists());
        assert!(std::fs::metadata(&one).expect("meta").len() >= 2048);
        assert!(count(&path) + count(&one) + count(&two) < 40, "the oldest was removed");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
