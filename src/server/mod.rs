//! Server assembly (owned by the gRPC work): placeholder until it lands.

use std::process::ExitCode;

/// Flags of `retryd serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {}

/// Flags of `retryd health`.
#[derive(Debug, clap::Args)]
pub struct HealthArgs {}

/// Runs the server.
pub fn serve_main(_args: ServeArgs) -> ExitCode {
    eprintln!("retryd serve: not built yet");
    ExitCode::from(2)
}

/// Probes health.
pub fn health_main(_args: HealthArgs) -> ExitCode {
    eprintln!("retryd health: not built yet");
    ExitCode::from(2)
}
