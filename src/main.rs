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
    retryd::cli::run(retryd::cli::Cli::parse())
}
