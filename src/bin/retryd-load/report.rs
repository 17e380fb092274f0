//! The summary: ghz's layout as text, or the same numbers as one JSON object.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::args::Args;
use crate::runner::Outcome;

/// The numbers of one run (latencies in milliseconds).
#[derive(Debug, Serialize)]
pub struct Report {
    /// `classify`, `batch` or `health`.
    pub call: &'static str,
    /// The server address.
    pub addr: String,
    /// Concurrent workers.
    pub concurrency: u32,
    /// HTTP/2 connections.
    pub connections: u32,
    /// Items per batch request (batch only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// Calls recorded (failed ones included).
    pub count: u64,
    /// Wall time of the measurement, seconds.
    pub total_s: f64,
    /// Calls per second.
    pub rps: f64,
    /// Decisions made per second (batch: items decided).
    pub decisions_per_s: f64,
    /// Decisions made in OK calls.
    pub decisions: u64,
    /// Batch items answered with an error.
    pub item_errors: u64,
    /// Mean latency.
    pub average_ms: f64,
    /// Fastest call.
    pub fastest_ms: f64,
    /// Slowest call.
    pub slowest_ms: f64,
    /// Median latency.
    pub p50_ms: f64,
    /// 90th percentile latency.
    pub p90_ms: f64,
    /// 95th percentile latency.
    pub p95_ms: f64,
    /// 99th percentile latency.
    pub p99_ms: f64,
    /// 99.9th percentile latency.
    pub p999_ms: f64,
    /// Calls per status code.
    pub status: BTreeMap<&'static str, u64>,
    /// Failed calls per "CODE: message".
    pub errors: BTreeMap<String, u64>,
}

fn ms(ns: f64) -> f64 {
    ns / 1e6
}

impl Report {
    /// The report of `outcome` for the run `args` described.
    pub fn new(args: &Args, outcome: Outcome) -> Self {
        let h = &outcome.latency;
        let count = h.len();
        let secs = outcome.elapsed.as_secs_f64().max(1e-9);
        let q = |p: f64| {
            if count == 0 {
                0.0
            } else {
                ms(h.value_at_quantile(p) as f64)
            }
        };
        Report {
            call: args.call.as_str(),
            addr: args.addr.clone(),
            concurrency: args.concurrency,
            connections: args.connections,
            batch_size: (args.call == crate::args::Call::Batch).then_some(args.batch_size),
            count,
            total_s: secs,
            rps: count as f64 / secs,
            decisions_per_s: outcome.decisions as f64 / secs,
            decisions: outcome.decisions,
            item_errors: outcome.item_errors,
            average_ms: if count == 0 { 0.0 } else { ms(h.mean()) },
            fastest_ms: if count == 0 { 0.0 } else { ms(h.min() as f64) },
            slowest_ms: if count == 0 { 0.0 } else { ms(h.max() as f64) },
            p50_ms: q(0.50),
            p90_ms: q(0.90),
            p95_ms: q(0.95),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
            status: outcome.codes,
            errors: outcome.errors,
        }
    }

    /// Calls answered OK.
    pub fn ok(&self) -> u64 {
        self.status.get("OK").copied().unwrap_or(0)
    }

    /// One JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }

    /// ghz's summary layout.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "\nSummary:");
        let _ = writeln!(s, "  Call:\t\t{} ({})", self.call, self.addr);
        if let Some(n) = self.batch_size {
            let _ = writeln!(s, "  Batch size:\t{n}");
        }
        let _ = writeln!(
            s,
            "  Concurrency:\t{} over {} connection(s)",
            self.concurrency, self.connections
        );
        let _ = writeln!(s, "  Count:\t{}", self.count);
        let _ = writeln!(s, "  Total:\t{:.2} s", self.total_s);
        let _ = writeln!(s, "  Slowest:\t{:.2} ms", self.slowest_ms);
        let _ = writeln!(s, "  Fastest:\t{:.2} ms", self.fastest_ms);
        let _ = writeln!(s, "  Average:\t{:.2} ms", self.average_ms);
        let _ = writeln!(s, "  Requests/sec:\t{:.2}", self.rps);
        if self.call != "health" {
            let _ = writeln!(s, "  Decisions/sec:\t{:.0}", self.decisions_per_s);
        }
        if self.item_errors > 0 {
            let _ = writeln!(s, "  Item errors:\t{}", self.item_errors);
        }
        let _ = writeln!(s, "\nLatency distribution:");
        for (p, v) in [
            ("50", self.p50_ms),
            ("90", self.p90_ms),
            ("95", self.p95_ms),
            ("99", self.p99_ms),
            ("99.9", self.p999_ms),
        ] {
            let _ = writeln!(s, "  {p} % in {v:.2} ms");
        }
        let _ = writeln!(s, "\nStatus code distribution:");
        for (code, n) in &self.status {
            let _ = writeln!(s, "  [{code}]\t{n} responses");
        }
        if !self.errors.is_empty() {
            let _ = writeln!(s, "\nError distribution:");
            for (e, n) in &self.errors {
                let _ = writeln!(s, "  [{n}]\t{e}");
            }
        }
        s
    }
}
