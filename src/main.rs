//! The `retryd` binary: parses the command line and dispatches.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    retryd::cli::run(retryd::cli::Cli::parse())
}
