//! `retryd serve`'s fleet-memory flags and how they become a [`Fleet`].

use std::path::PathBuf;
use std::sync::Arc;

use super::state_check::{CHECK_TIMEOUT, StateProblem, check, redacted, wait_connected};
use crate::doors::peers::Operators;
use crate::fleet::{Fleet, FleetConfig, PlacementLimits};

/// Where the holds live, and who may manage them.
#[derive(Debug, Clone, clap::Args)]
pub struct FleetArgs {
    /// Where fleet memory (holds) lives: `memory` (this replica only), or
    /// shared by every replica: `redis://[user:pass@]host:port[/db]`,
    /// `rediss://…` (TLS), `redis://h1:p1,redis://h2:p2` (Cluster seeds),
    /// `redis+sentinel://s1:26379,s2/<service>[/db]`.
    #[arg(long, env = "RETRYD_STATE", default_value = "memory")]
    pub state: String,
    /// Most holds kept; over it tenant holds are dropped first, oldest placed first.
    #[arg(long, env = "RETRYD_MAX_HOLDS", default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_holds: u32,
    /// New holds one caller (mTLS identity, else peer address) may place per second.
    #[arg(long, env = "RETRYD_HOLD_PLACEMENTS_PER_SEC", default_value_t = 50.0)]
    pub hold_placements_per_sec: f64,
    /// New dependency-wide or method holds one caller may place per second.
    #[arg(long, env = "RETRYD_DEPENDENCY_HOLDS_PER_SEC", default_value_t = 5.0)]
    pub dependency_holds_per_sec: f64,
    /// A file holding the operators' bearer token (ReleaseHold, tenants in clear).
    #[arg(long, env = "RETRYD_OPERATOR_TOKEN_FILE", value_name = "PATH")]
    pub operator_token_file: Option<PathBuf>,
    /// Client-certificate subjects (CN) or SANs that are operators under mTLS (comma-separated).
    #[arg(long, env = "RETRYD_OPERATOR_IDENTITIES", value_delimiter = ',')]
    pub operator_identities: Vec<String>,
    /// Treat any caller on a loopback address as an operator (a sidecar proxy
    /// arrives from loopback too: off by default).
    #[arg(long, env = "RETRYD_OPERATOR_ALLOW_LOOPBACK", default_value_t = false)]
    pub operator_allow_loopback: bool,
    /// Proxies (addresses or CIDRs, comma-separated) whose `x-forwarded-for`
    /// names the caller for per-caller limits. A caller is its mTLS
    /// identity, else what a trusted proxy forwards, else its address (an
    /// IPv6 /64 as one caller).
    #[arg(long, env = "RETRYD_TRUSTED_PROXIES", value_delimiter = ',', value_parser = parse_net)]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Key of the hash shown instead of tenant names to non-operators (a
    /// file of at least 16 bytes). Default: with --state redis, one key
    /// generated once and kept in the store, shared by every replica; in
    /// memory, random per process.
    #[arg(long, env = "RETRYD_TENANT_HASH_KEY_FILE", value_name = "PATH")]
    pub tenant_hash_key_file: Option<PathBuf>,
    /// Most retry-budget scopes counted (dependency and tenant scopes
    /// together, under 1 KiB each); over it those with the fewest first
    /// attempts in their window are dropped first.
    #[arg(long, env = "RETRYD_MAX_BUDGET_SCOPES", default_value_t = crate::fleet::DEFAULT_MAX_BUDGET_SCOPES as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_budget_scopes: u32,
    /// With --state redis: how often each replica flushes its budget counts
    /// and reads the fleet's totals back, in ms (1 to 100). The fleet may
    /// overshoot a budget by about the retries approved in one such period.
    #[arg(long, env = "RETRYD_BUDGET_FLUSH_MS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub budget_flush_ms: u64,
    /// Most WatchHolds streams one caller may hold open (one stream can
    /// watch many dependencies; sized for a node's pods behind one address).
    #[arg(long, env = "RETRYD_MAX_WATCH_STREAMS_PER_CALLER", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_watch_streams_per_caller: u32,
    /// Most WatchHolds streams open in all.
    #[arg(long, env = "RETRYD_MAX_WATCH_STREAMS", default_value_t = 1_024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_watch_streams: u32,
    /// First attempts one caller may report (ReportOutcomes) per budget
    /// scope per second; the burst is one second's worth. What is over it
    /// is cut and counted (retryd_reported_requests_clamped_total). Admit's
    /// deposits are not limited (each is one real call).
    #[arg(long, env = "RETRYD_MAX_REPORTED_REQUESTS_PER_SEC", default_value_t = 50_000.0)]
    pub max_reported_requests_per_sec: f64,
    /// New retry-budget scopes one caller (Classify, ReportOutcomes, Admit) may add
    /// per second (burst twice that); over it the scope is not budgeted for
    /// that call (retryd_budget_scopes_refused_total).
    #[arg(long, env = "RETRYD_BUDGET_SCOPES_PER_SEC_PER_CALLER", default_value_t = 100.0)]
    pub budget_scopes_per_sec_per_caller: f64,
    /// Refuse to start (exit 1) when the `--state` store cannot be reached at
    /// start. Without it the server starts, decides from its own memory and
    /// keeps trying. A `--state` that cannot work (a bad URL, a database index
    /// out of range, refused credentials) stops the start either way (exit 2).
    #[arg(long, env = "RETRYD_STATE_REQUIRED", default_value_t = false)]
    pub state_required: bool,
}

/// An address (a /32 or /128) or a CIDR.
fn parse_net(s: &str) -> Result<ipnet::IpNet, String> {
    let s = s.trim();
    s.parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{s:?} is neither an address nor a CIDR such as 10.0.0.0/8"))
}

/// Shortest tenant hash key accepted.
pub const MIN_TENANT_HASH_KEY: usize = 16;

/// Builds the fleet memory and the operator rule from the flags. Must run
/// inside the runtime (the Redis store starts its tasks).
pub fn build(args: &FleetArgs) -> Result<(Arc<Fleet>, Operators), String> {
    for (flag, rate) in [
        ("--hold-placements-per-sec", args.hold_placements_per_sec),
        ("--dependency-holds-per-sec", args.dependency_holds_per_sec),
        ("--max-reported-requests-per-sec", args.max_reported_requests_per_sec),
        (
            "--budget-scopes-per-sec-per-caller",
            args.budget_scopes_per_sec_per_caller,
        ),
    ] {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(format!("{flag}: must be a positive number, not {rate}"));
        }
    }
    // Read as a policy file is (a FIFO or a device is refused, not waited
    // on), at most 4 KiB, surrounding whitespace such as a trailing newline
    // not part of the secret.
    let read = |flag: &str, path: &PathBuf| {
        let bytes = crate::load::read_secret(path).map_err(|e| format!("{flag}: {e}"))?;
        String::from_utf8(bytes).map_err(|_| format!("{flag}: {}: not UTF-8 text", path.display()))
    };
    let token = match &args.operator_token_file {
        Some(p) => {
            let t = read("--operator-token-file", p)?;
            if t.len() < 16 {
                return Err("--operator-token-file: the token must be at least 16 characters".to_owned());
            }
            Some(t)
        }
        None => None,
    };
    let tenant_hash_key = match &args.tenant_hash_key_file {
        Some(p) => {
            let key = read("--tenant-hash-key-file", p)?.into_bytes();
            if key.len() < MIN_TENANT_HASH_KEY {
                return Err(format!(
                    "--tenant-hash-key-file: the key is {} bytes; it must be at least {MIN_TENANT_HASH_KEY} (a short key is found offline from one known tenant)",
                    key.len()
                ));
            }
            key
        }
        None => Vec::new(),
    };
    let config = FleetConfig {
        max_holds: args.max_holds as usize,
        limits: PlacementLimits {
            per_sec: args.hold_placements_per_sec,
            dependency_per_sec: args.dependency_holds_per_sec,
        },
        tenant_hash_key,
        max_budget_scopes: args.max_budget_scopes as usize,
        budget_flush_every: std::time::Duration::from_millis(args.budget_flush_ms),
        max_reported_per_sec: args.max_reported_requests_per_sec,
        budget_scopes_per_sec_per_caller: args.budget_scopes_per_sec_per_caller,
    };
    let state = args.state.trim();
    let fleet = if state == "memory" {
        Fleet::in_memory(config)
    } else if ["redis://", "rediss://", "redis+sentinel://", "rediss+sentinel://"]
        .iter()
        .any(|scheme| state.starts_with(scheme))
    {
        let store = crate::fleet::redis::connect(state).map_err(|e| format!("--state: {e}"))?;
        Fleet::new(config, store)
    } else {
        return Err(format!(
            "--state: {state:?} is neither `memory` nor a redis://, rediss:// or redis+sentinel:// URL"
        ));
    };
    let operators = Operators {
        token,
        identities: args
            .operator_identities
            .iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect(),
        allow_loopback: args.operator_allow_loopback,
        trusted_proxies: args.trusted_proxies.clone(),
    };
    Ok((fleet, operators))
}

/// Checks `--state` before the store starts (see [`super::state_check`]):
/// a configuration error comes back as [`StateProblem::Config`] (exit 2); an
/// unreachable store as [`StateProblem::Unreachable`] (exit 1) only with
/// `--state-required`, else it is one warning.
pub async fn check_state(args: &FleetArgs) -> Result<(), StateProblem> {
    match check(&args.state, CHECK_TIMEOUT).await {
        Err(StateProblem::Config(e)) => Err(StateProblem::Config(format!("--state: {e}"))),
        Err(StateProblem::Unreachable(e)) if args.state_required => Err(StateProblem::Unreachable(format!(
            "--state-required: the state store is unreachable at start: {e}"
        ))),
        Err(StateProblem::Unreachable(e)) => {
            tracing::warn!(
                "--state: the state store is unreachable at start ({e}); deciding from this replica's memory and retrying (retryd_state_connected 0; --state-required refuses to start instead)"
            );
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

/// With `--state-required`, waits for the store's own connection (which
/// also covers Cluster seeds and Sentinel, which [`check_state`] does not
/// dial): [`StateProblem::Unreachable`] if it is not up within the check's timeout.
pub async fn require_connected(args: &FleetArgs, connected: impl Fn() -> bool) -> Result<(), StateProblem> {
    if !args.state_required || args.state.trim() == "memory" || wait_connected(connected, CHECK_TIMEOUT).await {
        return Ok(());
    }
    Err(StateProblem::Unreachable(format!(
        "--state-required: the state store {} did not connect within {} s of start",
        redacted(args.state.trim()),
        CHECK_TIMEOUT.as_secs()
    )))
}
