//! The `retryd` binary: parses the command line and dispatches.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::process::ExitCode;

use clap::Parser;

/// With `--features mimalloc`: faster on the per-item allocations of big
/// batches, but about twice the RSS under many connections (see Cargo.toml).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match retryd::cli::Cli::try_parse() {
        Ok(cli) => retryd::cli::run(cli),
        Err(e) => {
            // --help and --version print to stdout and exit 0; a usage error
            // exits with its subcommand's code (`retryd health`: 1, as
            // grpc_health_probe; the others: 2).
            let _ = e.print();
            if e.use_stderr() {
                ExitCode::from(retryd::cli::usage_error_code(std::env::args_os()))
            } else {
                ExitCode::SUCCESS
            }
        }
    }
}
