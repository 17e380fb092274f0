//! `retryd-load`: a tonic load generator for retryd (see `bench/run.sh`;
//! `--call watch` and `--call place-holds` serve `bench/holds.sh`).
//!
//! Exit codes: 0 when at least one call was answered OK, 1 when none was,
//! 2 when the flags are bad or the server cannot be reached.

mod args;
mod report;
mod runner;
mod watch;
mod workload;

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let args = args::Args::parse();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(n) = args.threads {
        rt.worker_threads(n.max(1));
    }
    let rt = match rt.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("retryd-load: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    rt.block_on(async {
        if args.call == args::Call::Watch {
            return match watch::run(&args).await {
                Ok(report) => {
                    println!("{}", serde_json::to_string(&report).unwrap_or_default());
                    if report.opened == 0 {
                        ExitCode::from(1)
                    } else {
                        ExitCode::SUCCESS
                    }
                }
                Err(e) => {
                    eprintln!("retryd-load: {e}");
                    ExitCode::from(2)
                }
            };
        }
        let channels = match runner::connect(&args).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("retryd-load: {e}");
                return ExitCode::from(2);
            }
        };
        let report = report::Report::new(&args, runner::run(&args, &channels).await);
        if args.json {
            println!("{}", report.to_json());
        } else {
            print!("{}", report.to_text());
        }
        if report.ok() == 0 {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        }
    })
}
