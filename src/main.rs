//! The `retryd` binary: parses the command line and dispatches.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::process::ExitCode;

use clap::Parser;

/// mimalloc: the server allocates per call and per batch item (protobuf
/// strings, response buffers); it beat glibc's malloc on that path.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    retryd::cli::run(retryd::cli::Cli::parse())
}
