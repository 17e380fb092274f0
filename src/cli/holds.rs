//! `retryd holds list|release|watch`: the fleet's holds, from a running server.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tokio_stream::StreamExt as _;
use tonic::Request;
use tonic::transport::Channel;

use crate::core::UnixMillis;
use crate::grpc::convert::{hold_event_from_proto, hold_kind_from_proto, hold_scope_from_proto, millis_from_timestamp};
use crate::grpc::pb::{self, retry_decision_service_client::RetryDecisionServiceClient};

/// Exit code: bad arguments or files.
const EXIT_USAGE: u8 = 2;
/// Exit code: the server could not be reached or refused the call.
const EXIT_FAILED: u8 = 1;

/// Where the server is and how to reach it.
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// The server.
    #[arg(long, env = "RETRYD_ADDR", default_value = "http://127.0.0.1:50051")]
    pub addr: String,
    /// Time allowed for connecting and for each call (not for a watch), e.g. `5s`.
    #[arg(long, default_value = "5s", value_parser = crate::server::config::parse_duration)]
    pub timeout: Duration,
    /// The operator's bearer token, read from this file (release; tenants in clear).
    #[arg(long, env = "RETRYD_OPERATOR_TOKEN_FILE", value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// Connect with TLS (implied by `https://` and by any other `--tls-*` flag).
    #[arg(long, default_value_t = false)]
    pub tls: bool,
    /// CA certificate(s) (PEM) to verify the server with.
    #[arg(long, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS; needs `--tls-key`.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `--tls-cert`.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The name to verify the server's certificate against.
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
}

/// Which holds.
#[derive(Debug, Clone, clap::Args)]
pub struct Filter {
    /// Only this catalog.
    #[arg(long, default_value = "")]
    pub catalog: String,
    /// Only this dependency instance.
    #[arg(long, default_value = "")]
    pub dependency: String,
    /// Only this tenant.
    #[arg(long, default_value = "")]
    pub tenant: String,
    /// `text` (a line per hold) or `json` (a JSON object per line).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub format: String,
}

/// `retryd holds …`.
#[derive(Debug, clap::Subcommand)]
pub enum HoldsCommand {
    /// List the holds in force, ending soonest first.
    List {
        /// The server.
        #[command(flatten)]
        conn: Connection,
        /// Which holds, and how to print them.
        #[command(flatten)]
        filter: Filter,
    },
    /// Lift a hold now (operators only: `--token-file` or an operator's client certificate).
    Release {
        /// The server.
        #[command(flatten)]
        conn: Connection,
        /// The hold's id (from `holds list`).
        id: String,
    },
    /// Print hold events as they happen: the holds in force first, then
    /// every placement, extension and lift, until interrupted.
    Watch {
        /// The server.
        #[command(flatten)]
        conn: Connection,
        /// Which holds, and how to print them.
        #[command(flatten)]
        filter: Filter,
    },
}

/// Runs `retryd holds …`: 0 on success, 1 when the server fails the call, 2 on bad arguments.
pub fn run(cmd: HoldsCommand) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("retryd holds: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    ExitCode::from(runtime.block_on(execute(cmd)))
}

async fn execute(cmd: HoldsCommand) -> u8 {
    let conn = match &cmd {
        HoldsCommand::List { conn, .. } | HoldsCommand::Release { conn, .. } | HoldsCommand::Watch { conn, .. } => {
            conn.clone()
        }
    };
    let token = match &conn.token_file {
        Some(p) => match crate::load::read_secret(p).map(String::from_utf8) {
            Ok(Ok(t)) => Some(t),
            Ok(Err(_)) => {
                eprintln!("retryd holds: --token-file {}: not UTF-8 text", p.display());
                return EXIT_USAGE;
            }
            Err(e) => {
                eprintln!("retryd holds: --token-file {e}");
                return EXIT_USAGE;
            }
        },
        None => None,
    };
    let mut client = match connect(&conn).await {
        Ok(c) => c,
        Err((code, e)) => {
            eprintln!("retryd holds: {e}");
            return code;
        }
    };
    let failed = |s: tonic::Status| {
        match s.code() {
            tonic::Code::PermissionDenied => {
                eprintln!("retryd holds: PermissionDenied: {}", not_an_operator(&s, &conn))
            }
            code => eprintln!("retryd holds: {code:?}: {}", s.message()),
        }
        EXIT_FAILED
    };
    match cmd {
        HoldsCommand::List { filter, .. } => {
            let mut page_token = String::new();
            loop {
                let req = authorized(
                    pb::ListHoldsRequest {
                        catalog: filter.catalog.clone(),
                        dependency: filter.dependency.clone(),
                        tenant: filter.tenant.clone(),
                        page_size: 1_000,
                        page_token,
                    },
                    token.as_deref(),
                );
                let resp = match tokio::time::timeout(conn.timeout, client.list_holds(req)).await {
                    Ok(Ok(r)) => r.into_inner(),
                    Ok(Err(s)) => return failed(s),
                    Err(_) => return failed(tonic::Status::deadline_exceeded("no answer in time")),
                };
                for h in &resp.holds {
                    println!("{}", render(None, h, &filter.format));
                }
                if resp.next_page_token.is_empty() {
                    return 0;
                }
                page_token = resp.next_page_token;
            }
        }
        HoldsCommand::Release { id, .. } => {
            match tokio::time::timeout(
                conn.timeout,
                client.release_hold(authorized(pb::ReleaseHoldRequest { id }, token.as_deref())),
            )
            .await
            {
                Ok(Ok(r)) => {
                    if let Some(h) = r.into_inner().hold {
                        println!("released {}", render(None, &h, "text"));
                    }
                    0
                }
                Ok(Err(s)) => failed(s),
                Err(_) => failed(tonic::Status::deadline_exceeded("no answer in time")),
            }
        }
        HoldsCommand::Watch { filter, .. } => {
            let req = authorized(
                pb::WatchHoldsRequest {
                    catalog: filter.catalog.clone(),
                    dependency: filter.dependency.clone(),
                    tenant: filter.tenant.clone(),
                    ..Default::default()
                },
                token.as_deref(),
            );
            let mut stream = match client.watch_holds(req).await {
                Ok(s) => s.into_inner(),
                Err(s) => return failed(s),
            };
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(ev) => {
                        if let Some(h) = &ev.hold {
                            println!("{}", render(Some(ev.kind()), h, &filter.format));
                        }
                    }
                    Err(s) => return failed(s),
                }
            }
            0
        }
    }
}

/// What to do when the server says the caller is not an operator, in this
/// command's own flags: the server names which of the three cases it saw
/// (`no_operators_configured`, `wrong_token`, `no_credentials`; see
/// `doors::peers::Refusal`); a server that does not say is judged by
/// whether a token was sent.
fn not_an_operator(s: &tonic::Status, conn: &Connection) -> String {
    let said = s.message();
    let addr = &conn.addr;
    let certificate =
        "or connect with a client certificate the server lists in --operator-identities (--tls-cert and --tls-key)";
    if said.contains("no_operators_configured") {
        format!(
            "the server at {addr} has no operators: start it with --operator-token-file PATH (then pass the same file here as --token-file PATH), --operator-identities or --operator-allow-loopback"
        )
    } else if let Some(path) = conn.token_file.as_ref().filter(|_| !said.contains("no_credentials")) {
        format!(
            "the token in --token-file {} is not the operator token of the server at {addr}: pass the file the server reads with --operator-token-file, {certificate}",
            path.display()
        )
    } else {
        format!(
            "this needs an operator: pass the operator token with --token-file PATH (env RETRYD_OPERATOR_TOKEN_FILE; the file the server at {addr} reads with --operator-token-file), {certificate}"
        )
    }
}

/// `msg` with the operator's token, if any.
fn authorized<T>(msg: T, token: Option<&str>) -> Request<T> {
    let mut req = Request::new(msg);
    if let Some(v) = token.and_then(|t| format!("Bearer {t}").parse().ok()) {
        req.metadata_mut().insert("authorization", v);
    }
    req
}

pub(crate) async fn connect(conn: &Connection) -> Result<RetryDecisionServiceClient<Channel>, (u8, String)> {
    let tls = conn.tls
        || conn.addr.starts_with("https://")
        || conn.tls_ca.is_some()
        || conn.tls_cert.is_some()
        || conn.tls_server_name.is_some();
    let endpoint = crate::server::health_probe::endpoint(&conn.addr, conn.timeout, tls)
        .map_err(|e| (EXIT_USAGE, format!("--addr {:?}: {e}", conn.addr)))?
        // A watch lives as long as the user wants: no per-call timeout on the channel.
        .timeout(Duration::from_secs(365 * 24 * 3600));
    let endpoint = if tls {
        let config = crate::server::tls::client_config(
            conn.tls_ca.as_deref(),
            conn.tls_cert.as_deref(),
            conn.tls_key.as_deref(),
            conn.tls_server_name.as_deref(),
        )
        .map_err(|e| (EXIT_USAGE, e.to_string()))?;
        endpoint
            .tls_config(config)
            .map_err(|e| (EXIT_USAGE, format!("TLS settings: {e}")))?
    } else {
        endpoint
    };
    match tokio::time::timeout(conn.timeout, endpoint.connect()).await {
        Ok(Ok(ch)) => Ok(RetryDecisionServiceClient::new(ch)),
        Ok(Err(e)) => Err((EXIT_FAILED, format!("cannot connect to {}: {e}", conn.addr))),
        Err(_) => Err((EXIT_FAILED, format!("timed out connecting to {}", conn.addr))),
    }
}

// The words are the core's (`core::words`), as the server's logs and the
// HTTP door spell them; numbers this build does not know print as such.
fn kind_word(k: i32) -> &'static str {
    hold_kind_from_proto(k).map_or("unspecified", |k| k.as_str())
}

fn scope_word(s: i32) -> &'static str {
    hold_scope_from_proto(s).map_or("request", |s| s.as_str())
}

fn event_word(k: i32) -> &'static str {
    hold_event_from_proto(k).map_or("unspecified", |k| k.as_str())
}

fn instant(t: &Option<prost_types::Timestamp>) -> String {
    t.as_ref()
        .map(|t| millis_from_timestamp(t).to_rfc3339())
        .unwrap_or_default()
}

/// One hold (with its event, for a watch) as a line of text or JSON.
fn render(event: Option<pb::HoldEventKind>, h: &pb::Hold, format: &str) -> String {
    if format == "json" {
        let mut v = serde_json::json!({
            "id": h.id,
            "catalog": h.catalog,
            "dependency": h.dependency,
            "tenant": h.tenant,
            "method": h.method,
            "scope": scope_word(h.scope),
            "kind": kind_word(h.kind),
            "since": instant(&h.since),
            "until": instant(&h.until),
            "code": h.code,
            "rule": h.rule,
            "reason": h.reason,
        });
        if let (Some(e), Some(obj)) = (event, v.as_object_mut()) {
            obj.insert("event".to_owned(), serde_json::Value::from(event_word(e as i32)));
        }
        return v.to_string();
    }
    let left = h
        .until
        .as_ref()
        .map(|u| UnixMillis::now().ms_until(millis_from_timestamp(u)) / 1000)
        .unwrap_or_default();
    let subject = match h.scope() {
        pb::Scope::Tenant => format!(" tenant={}", h.tenant),
        pb::Scope::Method => format!(" method={}", h.method),
        _ => String::new(),
    };
    format!(
        "{}{} {} {}/{}{} until {} ({left} s left) code={} rule={}",
        event.map(|e| format!("{} ", event_word(e as i32))).unwrap_or_default(),
        h.id,
        kind_word(h.kind),
        h.catalog,
        h.dependency,
        subject,
        instant(&h.until),
        h.code,
        h.rule
    )
}
