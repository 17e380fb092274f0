//! Flags of `retryd serve` and `retryd health`, each with an environment twin.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::ValueEnum;

use crate::service::DEFAULT_MAX_BATCH;

/// Flags of `retryd serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to serve gRPC on; port 0 picks a free port (the bound address is logged).
    #[arg(long, env = "RETRYD_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Address of the Prometheus endpoint (GET /metrics), or `off`.
    #[arg(long, env = "RETRYD_METRICS_LISTEN", default_value = "127.0.0.1:9464")]
    pub metrics_listen: MetricsListen,
    /// Catalog file (`.toml`) or directory of them, loaded on top of the
    /// embedded catalogs (a catalog with an embedded one's name replaces it);
    /// repeatable. The environment twin takes a comma-separated list (empty:
    /// none). Reloaded on SIGHUP and when a file in a watched directory changes.
    #[arg(long = "policy", value_name = "PATH", env = "RETRYD_POLICY", value_delimiter = ',', value_parser = parse_policy_path)]
    pub policy: Vec<PathBuf>,
    /// Watch the `--policy` directories and reload on changes (`false`:
    /// reload only on SIGHUP).
    #[arg(long, env = "RETRYD_POLICY_WATCH", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub policy_watch: bool,
    /// Largest catalog file read, in bytes; a larger one (or one that is not
    /// a regular file) is an error of its path, and a reload is refused.
    #[arg(long, env = "RETRYD_MAX_POLICY_BYTES", default_value_t = crate::load::DEFAULT_MAX_POLICY_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_policy_bytes: u64,
    /// Catalog used when a failure names none.
    #[arg(long, env = "RETRYD_DEFAULT_CATALOG", default_value = crate::core::policy::DEFAULT_CATALOG)]
    pub default_catalog: String,
    /// Log format on stderr.
    #[arg(long, env = "RETRYD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log filter, e.g. `info` or `retryd=debug`; RUST_LOG overrides it.
    #[arg(long, env = "RETRYD_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Most failures one ClassifyBatch may carry. The default keeps the
    /// largest possible answer within the 4 MiB gRPC clients accept by default.
    #[arg(long, env = "RETRYD_MAX_BATCH", default_value_t = DEFAULT_MAX_BATCH as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_batch: u32,
    /// Largest request message in bytes; larger ones are answered RESOURCE_EXHAUSTED.
    #[arg(long, env = "RETRYD_MAX_MESSAGE_BYTES", default_value_t = 4 * 1024 * 1024, value_parser = clap::value_parser!(u32).range(1024..))]
    pub max_message_bytes: u32,
    /// How long, after SIGTERM/SIGINT, health answers NOT_SERVING while the
    /// listener still accepts and answers calls, so load balancers and
    /// Kubernetes endpoints stop sending new calls before the drain closes
    /// the listener; `0` drains at once.
    #[arg(long, env = "RETRYD_SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// How long in-flight calls may take to finish once the drain begins
    /// (after `--shutdown-delay`), e.g. `30s`, `500ms`, `2m` or plain
    /// seconds. Unary calls still in flight then are abandoned, counted in
    /// `retryd_shutdown_abandoned_calls_total`, and make the exit status 1.
    #[arg(long, env = "RETRYD_SHUTDOWN_GRACE", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Most calls handled at once, over all connections (health checks not
    /// counted). A call over the limit is answered RESOURCE_EXHAUSTED at once
    /// instead of being queued; 0 means no limit.
    #[arg(long, env = "RETRYD_MAX_CONCURRENT_CALLS", default_value_t = DEFAULT_MAX_CONCURRENT_CALLS)]
    pub max_concurrent_calls: u32,
    /// Most calls one connection may have in flight (its share of
    /// `--max-concurrent-calls`; default: a quarter of it, at least 1); over
    /// it, that connection's calls are answered RESOURCE_EXHAUSTED. 0 means
    /// no limit of its own.
    #[arg(long, env = "RETRYD_MAX_CALLS_PER_CONNECTION", value_name = "N")]
    pub max_calls_per_connection: Option<u32>,
    /// Most bytes of requests being read and answers not yet taken by their
    /// clients, over all connections; a call that would go over it is
    /// answered RESOURCE_EXHAUSTED. Accepts `64MiB`, `512KiB` or bytes; 0
    /// means no limit.
    #[arg(long, env = "RETRYD_MAX_BUFFERED_BYTES", default_value = "64MiB", value_parser = parse_bytes)]
    pub max_buffered_bytes: u64,
    /// The same for one connection (its share of `--max-buffered-bytes`;
    /// default: a quarter of it, and at least room for one largest call: a
    /// request of `--max-message-bytes` and a `--max-batch` answer).
    #[arg(long, env = "RETRYD_MAX_BUFFERED_BYTES_PER_CONNECTION", value_name = "BYTES", value_parser = parse_bytes)]
    pub max_buffered_bytes_per_connection: Option<u64>,
    /// Most HTTP/2 streams one connection may have open at once (advertised
    /// in SETTINGS; a client wanting more waits on its side).
    #[arg(long, env = "RETRYD_MAX_STREAMS_PER_CONNECTION", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams_per_connection: u32,
    /// Time a call's request message has to arrive whole after its headers;
    /// a call still waiting is answered DEADLINE_EXCEEDED. A call takes a
    /// slot only once its request is in.
    #[arg(long, env = "RETRYD_FIRST_MESSAGE_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub first_message_timeout: Duration,
    /// Time a new connection has to send a complete HTTP/2 preface (or an
    /// HTTP/1.1 request line), TLS handshake included; one still silent is
    /// closed (counted in `retryd_connections_closed_total{reason="handshake_timeout"}`).
    #[arg(long, env = "RETRYD_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,
    /// Time a connection may have no open stream (a WatchHolds stream is
    /// open as long as it runs) before it is closed; `0` never closes one.
    #[arg(long, env = "RETRYD_IDLE_CONNECTION_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub idle_connection_timeout: Duration,
    /// Most connections open at once in all (each costs about 10 KiB
    /// idle); at it the oldest ones still in their handshake are closed
    /// first, else a new one is closed at once. 0 means no limit.
    #[arg(long, env = "RETRYD_MAX_CONNECTIONS", default_value_t = super::conns::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: u32,
    /// Most connections open at once from one caller (its IP address); a
    /// new one over it is closed at once. 0 means no limit.
    #[arg(long, env = "RETRYD_MAX_CONNECTIONS_PER_CALLER", default_value_t = super::conns::DEFAULT_MAX_CONNECTIONS_PER_CALLER)]
    pub max_connections_per_caller: u32,
    /// An answer its client reads nothing of for this long is dropped and
    /// its stream reset, giving back its memory and call slot.
    #[arg(long, env = "RETRYD_STALL_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub stall_timeout: Duration,
    /// Serve TLS with this certificate chain (PEM, leaf first); needs `--tls-key`.
    #[arg(long, env = "RETRYD_TLS_CERT", value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1) of `--tls-cert`.
    #[arg(long, env = "RETRYD_TLS_KEY", value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: require a client certificate signed by one of these CA
    /// certificates (PEM); a client without one is refused at the handshake.
    /// Needs `--tls-cert`.
    #[arg(long, env = "RETRYD_TLS_CLIENT_CA", value_name = "PEM", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Export OpenTelemetry traces over OTLP/gRPC to this endpoint, e.g.
    /// `http://otel-collector:4317`; when unset, `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// is honoured. Off by default.
    #[arg(long, env = "RETRYD_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Fraction of calls traced when the caller's trace does not decide
    /// (a `traceparent` from the caller keeps its sampled flag), 0 to 1.
    #[arg(long, env = "RETRYD_TRACE_SAMPLE_RATIO", default_value_t = 0.1)]
    pub trace_sample_ratio: f64,
    /// Serve the HTTP/JSON door (`/v1/*`, `/healthz`, `/readyz`) on the
    /// gRPC port, routed by path; `false`: gRPC only.
    #[arg(long, env = "RETRYD_HTTP", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub http: bool,
    /// An origin (e.g. `https://dash.example.com`) whose browser pages may
    /// call the HTTP/JSON door (CORS); repeatable or comma-separated; `*`
    /// allows any. None: CORS off.
    #[arg(
        long = "http-cors-origin",
        value_name = "ORIGIN",
        env = "RETRYD_HTTP_CORS_ORIGIN",
        value_delimiter = ','
    )]
    pub http_cors_origin: Vec<String>,
    /// Serve the operator console (`/ui/`, pages embedded in the binary
    /// using the HTTP routes) on the HTTP/JSON door, or on `--ui-listen`;
    /// `false`: no console.
    #[arg(long, env = "RETRYD_UI", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub ui: bool,
    /// Serve the console on its own address instead (e.g. a loopback one,
    /// `127.0.0.1:8080`), with only the routes it uses (the holds, their
    /// event stream and release, the budgets, explain, the catalogs, the
    /// probes); port 0 picks a free port. TLS as on the gRPC port.
    #[arg(long, env = "RETRYD_UI_LISTEN", value_name = "ADDR")]
    pub ui_listen: Option<SocketAddr>,
    /// Fleet memory: where holds live and who manages them.
    #[command(flatten)]
    pub fleet: super::fleet::FleetArgs,
    /// Shadow policy and decision log.
    #[command(flatten)]
    pub tap: super::observe::tap::TapArgs,
}

/// Default of `--max-concurrent-calls`: far above what two cores answer
/// without queueing (a Classify takes microseconds), low enough that a flood
/// is shed instead of piling up requests in memory.
pub const DEFAULT_MAX_CONCURRENT_CALLS: u32 = 1024;

impl ServeArgs {
    /// `--otlp-endpoint`, else a non-empty `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn otlp_endpoint(&self) -> Option<String> {
        self.otlp_endpoint
            .clone()
            .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
            .filter(|e| !e.trim().is_empty())
    }

    /// `--max-calls-per-connection`, or its default: a quarter of
    /// `--max-concurrent-calls` (at least 1; no limit when that is 0).
    pub fn calls_per_connection(&self) -> u32 {
        self.max_calls_per_connection
            .unwrap_or(match self.max_concurrent_calls {
                0 => 0,
                n => (n / 4).max(1),
            })
    }

    /// `--max-buffered-bytes-per-connection`, or its default: a quarter of
    /// `--max-buffered-bytes`, and at least room for one largest call (see
    /// [`ServeArgs::largest_call_bytes`]), within `--max-buffered-bytes`
    /// (no limit when that is 0).
    pub fn buffered_bytes_per_connection(&self) -> u64 {
        self.max_buffered_bytes_per_connection
            .unwrap_or(match self.max_buffered_bytes {
                0 => 0,
                n => (n / 4).max(self.largest_call_bytes()).min(n),
            })
    }

    /// What the largest call holds at once: a request of
    /// `--max-message-bytes` and the estimate of a `--max-batch` answer.
    pub fn largest_call_bytes(&self) -> u64 {
        let per_item = u64::try_from(super::admission::ITEM_ANSWER_BYTES).unwrap_or(u64::MAX);
        u64::from(self.max_message_bytes)
            .saturating_add(u64::from(self.max_batch).saturating_mul(per_item))
            .saturating_add(2048)
    }

    /// The `--policy` paths given, empty entries (`RETRYD_POLICY=`, `a,,b`) dropped.
    pub fn policy_paths(&self) -> Vec<PathBuf> {
        self.policy
            .iter()
            .filter(|p| !p.as_os_str().is_empty())
            .cloned()
            .collect()
    }
}

/// A `--policy` entry; empty is allowed here (an empty `RETRYD_POLICY` means
/// no paths) and dropped by [`ServeArgs::policy_paths`].
fn parse_policy_path(s: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(s.trim()))
}

/// Flags of `retryd health` (the exit codes of grpc_health_probe).
#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// The server to probe.
    #[arg(long, env = "RETRYD_HEALTH_ADDR", default_value = "http://127.0.0.1:50051")]
    pub addr: String,
    /// The service whose health to ask for; empty means the whole server.
    #[arg(long, default_value = "")]
    pub service: String,
    /// Time allowed for connecting and for the call, e.g. `1s` or `500ms`
    /// (checked by the probe, so a bad value exits 1 like grpc_health_probe).
    #[arg(long, default_value = "1s")]
    pub timeout: String,
    /// Connect with TLS (implied by an `https://` address and by any other
    /// `--tls-*` flag). Without `--tls-ca` the system's roots are trusted.
    #[arg(long, env = "RETRYD_HEALTH_TLS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub tls: bool,
    /// CA certificate(s) (PEM) to verify the server with.
    #[arg(long, env = "RETRYD_HEALTH_TLS_CA", value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS; needs `--tls-key`.
    #[arg(long, env = "RETRYD_HEALTH_TLS_CERT", value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `--tls-cert`.
    #[arg(long, env = "RETRYD_HEALTH_TLS_KEY", value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// The name to verify the server's certificate against (default: the
    /// host of `--addr`).
    #[arg(long, env = "RETRYD_HEALTH_TLS_SERVER_NAME", value_name = "NAME")]
    pub tls_server_name: Option<String>,
}

impl HealthArgs {
    /// Whether the probe connects with TLS.
    pub fn use_tls(&self) -> bool {
        self.tls
            || self.addr.starts_with("https://")
            || self.tls_ca.is_some()
            || self.tls_cert.is_some()
            || self.tls_key.is_some()
            || self.tls_server_name.is_some()
    }
}

/// `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `--metrics-listen`: an address, or `off` for no metrics endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsListen {
    /// Serve GET /metrics here.
    Addr(SocketAddr),
    /// No metrics endpoint.
    Off,
}

impl FromStr for MetricsListen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("off") {
            return Ok(MetricsListen::Off);
        }
        s.parse()
            .map(MetricsListen::Addr)
            .map_err(|_| format!("{s:?} is neither an address (host:port) nor `off`"))
    }
}

impl fmt::Display for MetricsListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetricsListen::Addr(a) => a.fmt(f),
            MetricsListen::Off => f.write_str("off"),
        }
    }
}

/// Parses a size in bytes: a number with an optional unit `KiB`, `MiB`,
/// `GiB` (or `K`, `M`, `G`, also powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a size like 64MiB, 512KiB or 1048576"))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        other => return Err(format!("{s:?}: unknown unit {other:?}; use KiB, MiB or GiB")),
    };
    value.checked_mul(scale).ok_or_else(|| format!("{s:?} is out of range"))
}

/// Parses a duration: a number with a unit `ms`, `s`, `m` or `h`
/// (`500ms`, `30s`, `2m`), or a plain number of seconds (`30`, `1.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 30s, 500ms or 2m"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("{s:?}: unknown unit {other:?}; use ms, s, m or h")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{s:?} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("15"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("1e999").is_err());
    }

    fn serve(args: &[&str]) -> ServeArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let argv = std::iter::once("retryd").chain(args.iter().copied());
        <Cli as clap::Parser>::try_parse_from(argv).unwrap().serve
    }

    #[test]
    fn connection_shares_default_to_a_quarter() {
        let d = serve(&[]);
        assert_eq!(
            (d.calls_per_connection(), d.buffered_bytes_per_connection()),
            (256, 16 << 20)
        );
        assert_eq!(serve(&["--max-concurrent-calls", "100"]).calls_per_connection(), 25);
        assert_eq!(serve(&["--max-concurrent-calls", "2"]).calls_per_connection(), 1);
        assert_eq!(serve(&["--max-concurrent-calls", "0"]).calls_per_connection(), 0);
        assert_eq!(serve(&["--max-calls-per-connection", "7"]).calls_per_connection(), 7);
        let bytes = |a: &[&str]| serve(a).buffered_bytes_per_connection();
        assert_eq!(bytes(&["--max-buffered-bytes", "256MiB"]), 64 << 20);
        assert_eq!(bytes(&["--max-buffered-bytes", "8MiB"]), d.largest_call_bytes());
        assert_eq!(bytes(&["--max-buffered-bytes", "4MiB"]), 4 << 20, "within the total");
        let largest = serve(&["--max-batch", "10000"]).largest_call_bytes();
        assert_eq!(
            largest,
            (4 << 20) + 10_000 * super::super::admission::ITEM_ANSWER_BYTES as u64 + 2048
        );
        assert_eq!(bytes(&["--max-batch", "10000"]), largest, "room for the largest call");
        assert_eq!(bytes(&["--max-buffered-bytes", "0"]), 0);
        assert_eq!(bytes(&["--max-buffered-bytes-per-connection", "1MiB"]), 1 << 20);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("512K"), Ok(512 << 10));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("0"), Ok(0));
        assert!(parse_bytes("1.5MiB").is_err());
        assert!(parse_bytes("1TB").is_err());
        assert!(parse_bytes("99999999999999G").is_err());
    }

    #[test]
    fn metrics_listen() {
        assert_eq!("off".parse(), Ok(MetricsListen::Off));
        assert_eq!(
            "127.0.0.1:0".parse(),
            Ok(MetricsListen::Addr("127.0.0.1:0".parse().unwrap()))
        );
        assert!("localhost".parse::<MetricsListen>().is_err());
    }
}
