//! Command-line flags of `retryd-load` (named like ghz's where they overlap).

use std::time::Duration;

use clap::{Parser, ValueEnum};

/// A gRPC load generator for retryd: closed-loop workers over pre-encoded
/// requests, latencies in an HDR histogram, a ghz-like summary.
#[derive(Debug, Clone, Parser)]
#[command(name = "retryd-load", version)]
pub struct Args {
    /// Server address (http://HOST:PORT).
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub addr: String,
    /// Which RPC to call.
    #[arg(long, value_enum, default_value_t = Call::Classify)]
    pub call: Call,
    /// Failures per ClassifyBatch request (`--call batch`).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: u32,
    /// Concurrent workers, each with one call in flight at a time.
    #[arg(short = 'c', long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: u32,
    /// HTTP/2 connections the workers are spread over (round robin).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// Number of calls to make (recorded calls; excludes warm-up).
    #[arg(short = 'n', long, conflicts_with = "duration")]
    pub total: Option<u64>,
    /// How long to make calls for, e.g. `10s`, `500ms`, `1m` (default 10s
    /// when neither -n nor -z is given).
    #[arg(short = 'z', long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Calls not recorded before the measurement: a duration (`2s`) or a count (`1000`).
    #[arg(long, value_parser = parse_warmup)]
    pub warmup: Option<Warmup>,
    /// Deadline of each call (sent as grpc-timeout and enforced locally).
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Time allowed for each connection to be established.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Distinct requests pre-built (and pre-encoded) before the run.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub pool: u32,
    /// Seed of the request mix, so runs send the same requests.
    #[arg(long, default_value_t = 0x5EED)]
    pub seed: u64,
    /// Tokio worker threads of the generator (default: one per CPU).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// `--call place-holds`: tenants to place a FrontSpin quota stop for
    /// (one Classify each; pass the same number as `-n`).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub tenants: u32,
    /// `--call place-holds`: spread the tenants over this many dependencies
    /// (`frontspin-bench-<n % N>`); `--call watch`: stream `s` watches
    /// dependency `s % N` only. 0: one dependency (`frontspin-bench`), and
    /// every stream watches every hold.
    #[arg(long, default_value_t = 0)]
    pub dependencies: u32,
    /// `--call list-holds`: ask only for this dependency's holds (empty: all).
    #[arg(long, default_value = "")]
    pub list_dependency: String,
    /// `--call watch`: WatchHolds streams to open (kept open for `-z`).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub streams: u32,
    /// `--call watch`: local addresses the connections are bound to, streams
    /// dealt round robin (the server counts streams per caller = address).
    #[arg(long = "source", value_delimiter = ',', default_value = "127.0.0.1")]
    pub sources: Vec<std::net::IpAddr>,
    /// `--call watch`: streams sharing one HTTP/2 connection.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub streams_per_connection: u32,
    /// `--call watch`: never read — the connections advertise an HTTP/2
    /// receive window of 0, so the server cannot send one byte of an event.
    #[arg(long)]
    pub never_read: bool,
    /// `--call watch`: write each watched scope's resume digests (the
    /// holds its first stream was sent before SYNCED) to this file, as the
    /// client mirrors would hold them when the server restarts.
    #[arg(long)]
    pub save_digests: Option<std::path::PathBuf>,
    /// `--call watch`: resume every stream from the digests in this file
    /// (written by `--save-digests`): a reconnect storm of mirrors.
    #[arg(long)]
    pub resume_digests: Option<std::path::PathBuf>,
}

/// The RPC under load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Call {
    /// `retryd.v1.RetryDecisionService/Classify`.
    Classify,
    /// `retryd.v1.RetryDecisionService/ClassifyBatch` with `--batch-size` items.
    Batch,
    /// `grpc.health.v1.Health/Check` (the floor: the server does no work).
    Health,
    /// `retryd.v1.RetryDecisionService/Admit` ("may I call now?").
    Admit,
    /// `ListHolds` with `page_size = 1` (the first hold by id).
    ListHolds,
    /// Classify FrontSpin RATE_LIMITED for `--tenants` tenants, resetting in
    /// an hour: one tenant quota stop each (`decisions` counts the answers
    /// that carry a hold).
    PlaceHolds,
    /// `WatchHolds` streams (see `--streams`, `--source`, `--never-read`).
    Watch,
}

impl Call {
    /// The name printed in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Call::Classify => "classify",
            Call::Batch => "batch",
            Call::Health => "health",
            Call::Admit => "admit",
            Call::ListHolds => "list-holds",
            Call::PlaceHolds => "place-holds",
            Call::Watch => "watch",
        }
    }
}

/// When the measurement stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// After this many calls.
    Count(u64),
    /// After this long (calls in flight are waited for).
    Time(Duration),
}

/// Unrecorded calls before the measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warmup {
    /// For this long.
    Time(Duration),
    /// This many calls.
    Count(u64),
}

impl Warmup {
    /// The same as a [`Stop`] condition.
    pub fn as_stop(self) -> Stop {
        match self {
            Warmup::Time(d) => Stop::Time(d),
            Warmup::Count(n) => Stop::Count(n),
        }
    }
}

impl Args {
    /// The measurement's stop condition: `-n`, else `-z`, else 10 s.
    pub fn stop(&self) -> Stop {
        match (self.total, self.duration) {
            (Some(n), _) => Stop::Count(n),
            (None, Some(d)) => Stop::Time(d),
            (None, None) => Stop::Time(Duration::from_secs(10)),
        }
    }
}

/// Durations read like `retryd serve`'s (`250ms`, `10s`, `2m`, `1h`, plain seconds).
pub use retryd::server::config::parse_duration;

/// A warm-up: a plain integer is a count of calls, anything with a unit a duration.
pub fn parse_warmup(s: &str) -> Result<Warmup, String> {
    match s.trim().parse::<u64>() {
        Ok(n) => Ok(Warmup::Count(n)),
        Err(_) => parse_duration(s).map(Warmup::Time),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmups() {
        assert_eq!(parse_warmup("1000"), Ok(Warmup::Count(1000)));
        assert_eq!(parse_warmup("2s"), Ok(Warmup::Time(Duration::from_secs(2))));
    }
}
