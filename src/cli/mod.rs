//! The command line, the top layer (see `docs/architecture.md`): `retryd
//! classify`, `serve`, `health`, `policy`, `holds`, `budgets`, `replay`.

pub mod budgets;
pub mod classify;
pub mod holds;
pub mod policy;
pub mod policy_test;
pub mod replay;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// retryd: may this failed call be retried, when, and would a retry create a duplicate?
#[derive(Debug, Parser)]
#[command(name = "retryd", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Decide one failure locally and print the decision.
    Classify(Box<classify::ClassifyArgs>),
    /// Run the gRPC service.
    Serve(Box<crate::server::ServeArgs>),
    /// Probe a running server's health (grpc_health_probe's exit codes).
    Health(crate::server::HealthArgs),
    /// Validate catalog files or print a catalog's decision matrix.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Re-decide a decision log's failures under another policy: what would change.
    Replay(replay::ReplayArgs),
    /// List, release or watch the fleet's holds on a running server.
    #[command(subcommand)]
    Holds(holds::HoldsCommand),
    /// List the fleet retry budgets' busiest scopes on a running server.
    #[command(subcommand)]
    Budgets(budgets::BudgetsCommand),
}

/// Runs the parsed command and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Classify(args) => classify::run(&args),
        Command::Serve(args) => crate::server::serve_main(*args),
        Command::Health(args) => crate::server::health_main(args),
        Command::Policy(cmd) => policy::run(&cmd),
        Command::Holds(cmd) => holds::run(cmd),
        Command::Budgets(cmd) => budgets::run(cmd),
        Command::Replay(args) => replay::run(&args),
    }
}

/// The exit code of a command line that does not parse: 1 for `retryd
/// health` (grpc_health_probe's "bad arguments", which probes are configured
/// by; its 2 means "connection failure"), 2 (the usual usage code) for
/// everything else.
pub fn usage_error_code(args: impl IntoIterator<Item = std::ffi::OsString>) -> u8 {
    // The subcommand is the first argument: `retryd` has no global flags
    // besides --help and --version, which do not reach here.
    match args.into_iter().nth(1) {
        Some(sub) if sub == "health" => crate::server::health_probe::EXIT_BAD_ARGUMENTS,
        _ => 2,
    }
}
