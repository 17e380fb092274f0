//! `retryd budgets list`: the busiest fleet retry-budget scopes of a running
//! server, where each stands in its window.

use std::process::ExitCode;

use super::holds::{Connection, connect};
use crate::grpc::convert::millis_from_timestamp;
use crate::grpc::pb;

/// `retryd budgets …`.
#[derive(Debug, clap::Subcommand)]
pub enum BudgetsCommand {
    /// List the busiest budget scopes (retries / allowed, highest first).
    List {
        /// The server.
        #[command(flatten)]
        conn: Connection,
        /// Only this catalog.
        #[arg(long, default_value = "")]
        catalog: String,
        /// Only this dependency instance.
        #[arg(long, default_value = "")]
        dependency: String,
        /// At most this many scopes (1 to 1 000).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(i32).range(1..=1_000))]
        limit: i32,
        /// `text` (a line per scope) or `json` (a JSON object per line).
        #[arg(long, default_value = "text", value_parser = ["text", "json"])]
        format: String,
    },
}

/// Runs `retryd budgets …`: 0 on success, 1 when the server fails the call, 2 on bad arguments.
pub fn run(cmd: BudgetsCommand) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("retryd budgets: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    ExitCode::from(runtime.block_on(execute(cmd)))
}

async fn execute(cmd: BudgetsCommand) -> u8 {
    let BudgetsCommand::List {
        conn,
        catalog,
        dependency,
        limit,
        format,
    } = cmd;
    let mut client = match connect(&conn).await {
        Ok(c) => c,
        Err((code, e)) => {
            eprintln!("retryd budgets: {e}");
            return code;
        }
    };
    let req = pb::ListBudgetsRequest {
        catalog,
        dependency,
        limit,
    };
    let resp = match tokio::time::timeout(conn.timeout, client.list_budgets(req)).await {
        Ok(Ok(r)) => r.into_inner(),
        Ok(Err(s)) => {
            eprintln!("retryd budgets: {:?}: {}", s.code(), s.message());
            return 1;
        }
        Err(_) => {
            eprintln!("retryd budgets: no answer in time");
            return 1;
        }
    };
    for b in &resp.budgets {
        println!("{}", render(b, &format));
    }
    0
}

/// One scope as a line of text or JSON.
fn render(s: &pb::BudgetStanding, format: &str) -> String {
    let b = s.budget.clone().unwrap_or_default();
    let start = b
        .window_start
        .as_ref()
        .map(|t| millis_from_timestamp(t).to_rfc3339())
        .unwrap_or_default();
    if format == "json" {
        return serde_json::json!({
            "catalog": s.catalog,
            "scope": s.scope,
            "scope_key": b.scope_key,
            "rule": s.rule,
            "requests": b.requests,
            "retries": b.retries,
            "allowed": b.allowed,
            "window_start": start,
            "deferred": b.deferred,
            "next_room_at": b.next_room_at.as_ref().map(|t| millis_from_timestamp(t).to_rfc3339()),
        })
        .to_string();
    }
    let pct = b.retries.saturating_mul(100).checked_div(b.allowed).unwrap_or(0);
    format!(
        "{} retries {}/{} allowed ({pct} %) requests {} deferred {} since {start} budget {}",
        b.scope_key, b.retries, b.allowed, b.requests, b.deferred, s.rule
    )
}
