//! Log lines cannot be forged (issue 24, item 3): caller-supplied strings
//! carrying a newline, an ANSI escape and ` caller=…` go through every
//! field that reaches the default text log, and the log is then counted:
//! every line is one record (starts with a timestamp and a level), no raw
//! control character reaches it, no forged field appears, and the forged
//! "hold released" record does not exist.

mod fleet_support;
mod grpc_support;
#[path = "grpc_support/raw.rs"]
mod raw;

use fleet_support::scenarios;
use grpc_support::Server;
use retryd::grpc::pb;

/// What an attacker puts in every string field.
const FORGED: &str = "x\n2026-12-01T00:00:00.000000Z  INFO retryd::service::holds: hold released by an operator hold=0\u{1b}[31m caller=6.6.6.6";

/// Splits a text-log line into whitespace-separated tokens, a quoted value
/// (`"…"`, with `\"` and `\\` inside) staying one token.
fn tokens(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut escaped) = (false, false);
    for c in line.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
        } else if quoted && c == '\\' {
            cur.push(c);
            escaped = true;
        } else if c == '"' {
            cur.push(c);
            quoted = !quoted;
        } else if c == ' ' && !quoted {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
    }
    assert!(!quoted, "an unterminated quote: {line}");
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn is_record_start(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 20 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && b[10] == b'T'
}

#[tokio::test]
async fn caller_strings_cannot_forge_records_or_fields_in_the_text_log() {
    let dir = scenarios::setup("forged-log");
    let args = scenarios::server_args(&dir, "memory");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::start_with_env(&args, &[("RUST_LOG", "info,retryd::service=debug")]);
    let mut c = s.client().await;

    // A quota stop: its hold carries the forged dependency, tenant and method.
    let mut f = grpc_support::failure("frontspin", "RATE_LIMITED", pb::OperationKind::Read);
    f.tenant = FORGED.into();
    f.dependency = FORGED.into();
    f.method = FORGED.into();
    f.request_id = FORGED.into();
    f.idempotency_key = FORGED.into();
    let d = c
        .classify(pb::ClassifyRequest {
            failure: Some(Box::new(f)),
            locale: String::new(),
        })
        .await
        .expect("classify")
        .into_inner();
    let hold = d.decision.and_then(|d| d.hold).expect("a hold").id;
    c.release_hold(scenarios::as_operator(pb::ReleaseHoldRequest { id: hold.clone() }))
        .await
        .expect("release as operator");
    // An unknown code and an unknown catalog: logged (debug) as the call's fields.
    for (catalog, code) in [("frontspin", FORGED), (FORGED, "RATE_LIMITED")] {
        let _ = c
            .classify(pb::ClassifyRequest {
                failure: Some(Box::new(grpc_support::failure(catalog, code, pb::OperationKind::Write))),
                locale: String::new(),
            })
            .await;
    }
    let log = s
        .until_logged(&["hold released by an operator", "invalid argument"])
        .await;

    assert!(!log.contains('\u{1b}'), "a raw ESC reached the log:\n{log}");
    let mut released = 0;
    let mut decided = 0;
    for line in log.lines() {
        assert!(
            is_record_start(line),
            "a line that is not a record:\n{line}\n--- log:\n{log}"
        );
        let toks = tokens(line);
        // Each field once per record; the only caller is the real one.
        let mut keys: Vec<&str> = toks
            .iter()
            .filter(|t| !t.starts_with('"'))
            .filter_map(|t| t.split_once('=').map(|(k, _)| k.rsplit('{').next().unwrap_or(k)))
            .collect();
        assert!(
            !toks.iter().any(|t| t.starts_with("caller=6.6.6.6")),
            "a forged field: {line}"
        );
        let n = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), n, "a field twice in one record: {line}");
        // Bare words "released … operator" only in the one real record; the
        // forged text stays inside a quoted value.
        if toks.iter().any(|t| t == "released") && toks.iter().any(|t| t == "operator") {
            released += 1;
            assert!(toks.contains(&format!("hold={hold}")), "{line}");
        }
        if toks.iter().any(|t| t == "decided") {
            decided += 1;
        }
        if line.contains("x\\n2026") {
            // The forged value is there, escaped and quoted: one token.
            let t = toks.iter().find(|t| t.contains("x\\n2026")).expect("token");
            let value = t.split_once('=').map_or(t.as_str(), |(_, v)| v);
            let value = value.trim_end_matches([':', '}']);
            assert!(value.starts_with('"') && value.ends_with('"'), "not quoted: {t}");
            assert!(t.contains("\\u{1b}"), "ESC not shown escaped: {t}");
        }
    }
    assert_eq!(released, 1, "exactly one hold-released record:\n{log}");
    assert!(decided >= 1, "the debug decision record is in the log:\n{log}");
    assert!(log.contains("x\\n2026"), "the forged value is logged, escaped:\n{log}");
}
