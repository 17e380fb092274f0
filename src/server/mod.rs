//! `retryd serve` and `retryd health`: the assembly layer, above both doors
//! (see `docs/architecture.md`) — it builds one [`crate::service::Service`],
//! puts the gRPC and HTTP doors in front of it on one listener with their
//! tower layers, and runs reload, the shadow policy and the decision log
//! ([`observe`]) beside it; and a built-in health probe.
//!
//! - [`config`]: flags (each with a `RETRYD_*` environment twin);
//! - [`mod@run`]: assembly; [`BoundServer`] / [`run()`] are the library entry
//!   points tests use in-process;
//! - [`metrics`] (with the process's own), [`drain`], [`mod@panic`], [`message_limit`], [`logging`], [`shutdown`]:
//!   the plumbing;
//! - [`wire`], [`admission`]: what a client may send and hold (gRPC wire
//!   rules; call slots, buffered bytes and stalled answers are counted by
//!   `crate::doors`' ledger and answers, shared with the HTTP door);
//! - [`mod@reload`]: `--policy` loading and hot reload (SIGHUP, file watch);
//! - [`health_probe`]: `retryd health`;
//! - [`observe`]: `--shadow-policy` and `--decision-log`, fed by the
//!   service's decision observer.
//!
//! Exit codes of `retryd serve`: 0 after a graceful stop (SIGTERM/SIGINT),
//! 1 when the server cannot start or fails (e.g. the address is in use), a
//! second SIGTERM/SIGINT stopped it before the drain ended, or the drain's
//! grace period ran out with unary calls still in flight (they are counted
//! in `retryd_shutdown_abandoned_calls_total`),
//! 2 for a bad configuration (a `--policy` that does not load — every error
//! is logged as `file:line: key: message` —, an unknown default catalog, an
//! invalid log filter, a TLS certificate or key that cannot be read or used; clap's own usage errors also exit 2).

pub mod accept;
pub mod admission;
pub mod config;
pub mod conn_io;
pub mod conn_streams;
pub mod conns;
pub mod drain;
pub mod fleet;
pub mod health_probe;
pub mod log_fields;
pub mod logging;
pub mod message_limit;
pub mod metrics;
pub mod observe;
pub mod panic;
pub mod reload;
pub mod run;
pub mod serve;
pub mod shutdown;
pub mod socket;
pub mod state_check;
pub mod stream_task;
pub mod tls;
pub mod wire;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

pub use config::{HealthArgs, LogFormat, MetricsListen, ServeArgs};
pub use health_probe::health_main;
pub use run::{BoundServer, ServerConfig, ServerError, run};

use crate::core::PolicyError;
use crate::load::LoadError;

/// Exit code: a bad configuration.
pub const EXIT_CONFIG: u8 = 2;
/// Exit code: the server could not start or failed.
pub const EXIT_FAILED: u8 = 1;

/// How the server stopped.
enum Stopped {
    /// The first signal's drain ended (or its grace period ran out).
    Gracefully,
    /// A second signal came during the drain.
    Forced,
}

/// A `--state` problem at start as the server's error: the configuration's
/// (exit 2) or the environment's (exit 1).
fn state_error(p: state_check::StateProblem) -> ServerError {
    match p {
        state_check::StateProblem::Config(e) => ServerError::Config(e),
        state_check::StateProblem::Unreachable(e) => ServerError::StateUnreachable(e),
    }
}

/// Runs `retryd serve` and returns its exit code.
pub fn serve_main(args: ServeArgs) -> ExitCode {
    if let Err(e) = logging::init(args.log_format, &args.log_level) {
        eprintln!("retryd serve: {e}");
        return ExitCode::from(EXIT_CONFIG);
    }
    logging::log_panics();
    // Before anything opens a descriptor: every one the hard limit allows.
    let (soft_was, soft, hard) = accept::raise_nofile();
    tracing::info!(
        soft_was,
        soft,
        hard,
        "file descriptors (RLIMIT_NOFILE): soft raised to hard"
    );
    let source = reload::PolicySource {
        paths: args.policy_paths(),
        default_catalog: args.default_catalog.clone(),
        max_file_bytes: args.max_policy_bytes,
    };
    let policy = match source.load() {
        Ok(p) => p,
        Err(e) => {
            let what = match e {
                LoadError::Policy(PolicyError::UnknownDefault { .. }) => "--default-catalog",
                _ => "--policy",
            };
            for line in reload::error_lines(&e) {
                tracing::error!("{what}: {line}");
            }
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        // the PID, so SIGHUP (reload) can be sent to this server only
        pid = std::process::id(),
        policy_version = policy.version(),
        catalogs = %policy.catalog_names(),
        default_catalog = %args.default_catalog,
        policy_paths = ?source.paths,
        "policy loaded"
    );
    for note in policy.notes() {
        tracing::warn!("{note}");
    }
    for dir in crate::load::empty_dirs(&source.paths) {
        tracing::warn!(dir = %dir.display(), "--policy directory holds no .toml file; only the embedded catalogs and other paths are served");
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    // Answers finished together go out in one write (see .cargo/config.toml).
    #[cfg(tokio_unstable)]
    runtime.disable_lifo_slot();
    let runtime = match runtime.build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let mut config = ServerConfig::from_args(&args);
    config.tls = match tls::ServerTls::from_flags(
        args.tls_cert.as_deref(),
        args.tls_key.as_deref(),
        args.tls_client_ca.as_deref(),
    ) {
        Ok(tls) => tls,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let handle = Arc::new(ArcSwap::from_pointee(policy));
    let mut observing = observe::Observing::default();
    let result = runtime.block_on(async {
        // The recorder first, so the policy metrics land in it; SIGHUP is
        // handled before the server listens.
        metrics::install();
        // After the recorder, so the shadow's and the log's counters land in it.
        observing = observe::build(&args.tap, &source).map_err(ServerError::Config)?;
        let _reload = reload::start(reload::Reloader::new(source, Arc::clone(&handle)), args.policy_watch);
        let _shadow_reload = observing
            .shadow_reloader
            .take()
            .map(|r| reload::start(r, args.policy_watch));
        // Before the store starts dialling, so a broken --state is named once.
        fleet::check_state(&args.fleet).await.map_err(state_error)?;
        let (fleet, operators) = match fleet::build(&args.fleet) {
            Ok(built) => built,
            Err(e) => return Err(ServerError::Config(e)),
        };
        tracing::info!(state = %fleet.store().describe(), max_holds = args.fleet.max_holds, "fleet memory");
        fleet::require_connected(&args.fleet, || fleet.store().connected())
            .await
            .map_err(state_error)?;
        fleet.spawn_upkeep(Duration::from_millis(500));
        let exporter = match args.otlp_endpoint() {
            None => None,
            Some(endpoint) => {
                let ratio = args.trace_sample_ratio;
                if !(0.0..=1.0).contains(&ratio) {
                    return Err(ServerError::Config(format!(
                        "--trace-sample-ratio: {ratio} is not between 0 and 1"
                    )));
                }
                let exporter =
                    crate::doors::traces::init(&endpoint, ratio).map_err(|e| ServerError::Config(e.to_string()))?;
                tracing::info!(%endpoint, sample_ratio = ratio, "traces exported over OTLP/gRPC");
                Some(exporter)
            }
        };
        let signals = shutdown::Signals::listen();
        let mut server = BoundServer::bind(config, handle).await?.with_fleet(fleet, operators);
        if let Some(tap) = observing.tap.take() {
            server = server.with_observer(tap);
        }
        let stopped = tokio::select! {
            result = server.serve(signals.received(1)) => result.map(|()| Stopped::Gracefully),
            () = signals.received(2) => Ok(Stopped::Forced),
        };
        if let Some(exporter) = exporter {
            // Flushes the spans still queued (bounded by its own timeout).
            let _ = tokio::task::spawn_blocking(move || exporter.shutdown()).await;
        }
        stopped
    });
    // Calls abandoned after the grace period must not keep the process alive.
    runtime.shutdown_timeout(Duration::from_secs(1));
    // The decision log's last lines: its queue's senders are gone with the service.
    observing.finish(Duration::from_secs(5));
    match result {
        Ok(Stopped::Gracefully) => ExitCode::SUCCESS,
        Ok(Stopped::Forced) => {
            tracing::error!("stopped by a second signal before the drain ended");
            ExitCode::from(EXIT_FAILED)
        }
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::from(if e.is_config() { EXIT_CONFIG } else { EXIT_FAILED })
        }
    }
}
