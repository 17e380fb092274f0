//! `retryd replay LOG --policy NEW`: what a policy change would have done to
//! the traffic of a decision log. Exit 0 when no decision changes, 1 when
//! some do, 2 on a usage error or any other error (an unreadable log, a line
//! of an unsupported format version, a policy that does not load).

use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::policy_test::{EXIT_ERROR, ReportFormat, load_side};
use crate::safety::replay;

/// Flags of `retryd replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A decision log written by `retryd serve --decision-log` (`-`: stdin).
    pub log: PathBuf,
    /// The candidate policy: catalog files or directories on top of the
    /// embedded catalogs (repeatable), or `embedded`.
    #[arg(long, required = true)]
    pub policy: Vec<PathBuf>,
    /// `text` or `json`.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

/// Runs `retryd replay`.
pub fn run(args: &ReplayArgs) -> ExitCode {
    let fail = |m: String| {
        eprintln!("retryd replay: {m}");
        ExitCode::from(EXIT_ERROR)
    };
    let policy = match load_side(&args.policy) {
        Ok(p) => p,
        Err(e) => return fail(format!("--policy: {e}")),
    };
    let result = if args.log.as_os_str() == "-" {
        replay::replay(std::io::stdin().lock(), &policy)
    } else {
        match std::fs::File::open(&args.log) {
            Ok(f) => replay::replay(BufReader::new(f), &policy),
            Err(e) => return fail(format!("{}: {e}", args.log.display())),
        }
    };
    let report = match result {
        Ok(r) => r,
        Err(e) => return fail(format!("{}: {e}", args.log.display())),
    };
    for w in &report.warnings {
        eprintln!("retryd replay: warning: {}: {w}", args.log.display());
    }
    match args.format {
        ReportFormat::Text => print!("{}", replay::to_text(&report)),
        ReportFormat::Json => match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => return fail(e.to_string()),
        },
    }
    if report.changed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
