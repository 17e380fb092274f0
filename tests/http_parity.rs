//! The HTTP door and gRPC decide alike: for every code × operation of every
//! embedded catalog, the HTTP answer and the gRPC answer are the same
//! decision field by field; `?format=asc` is byte for byte what
//! `retryd classify --format asc` prints for the same failure and `now`;
//! and seed 002's `should_retry` consumer algorithm, run on the HTTP answer,
//! agrees with the verdict.
//!
//! No failure names a dependency or a tenant, so no comparison places a
//! fleet hold that could change the next one.

mod grpc_support;

use std::process::Command;

use grpc_support::{PATIENCE, Server};
use retryd::grpc::pb;
use serde_json::{Value, json};

fn verdict(n: i32) -> &'static str {
    match pb::Verdict::try_from(n).expect("verdict") {
        pb::Verdict::RetryWithLimit => "retry_with_limit",
        pb::Verdict::StateVerificationRequired => "state_verification_required",
        pb::Verdict::FixBeforeRetry => "fix_before_retry",
        pb::Verdict::DoNotRetry => "do_not_retry",
        pb::Verdict::AlreadyApplied => "already_applied",
        pb::Verdict::Unspecified => "unspecified",
    }
}

fn strategy(n: i32) -> &'static str {
    match pb::Strategy::try_from(n).expect("strategy") {
        pb::Strategy::None => "none",
        pb::Strategy::ExponentialBackoff => "exponential_backoff",
        pb::Strategy::RetryAfter => "retry_after",
        pb::Strategy::Schedule => "schedule",
        pb::Strategy::Hold => "hold",
        pb::Strategy::Budget => "budget",
        pb::Strategy::Unspecified => "unspecified",
    }
}

fn side_effect(n: i32) -> &'static str {
    match pb::SideEffectState::try_from(n).expect("side effect") {
        pb::SideEffectState::None => "none",
        pb::SideEffectState::Possible => "possible",
        pb::SideEffectState::Confirmed => "confirmed",
        pb::SideEffectState::Unknown => "unknown",
        pb::SideEffectState::Unspecified => "unspecified",
    }
}

fn reached(n: i32) -> &'static str {
    match pb::TargetReached::try_from(n).expect("target reached") {
        pb::TargetReached::No => "no",
        pb::TargetReached::Yes => "yes",
        pb::TargetReached::Unknown => "unknown",
        pb::TargetReached::Unspecified => "unspecified",
    }
}

fn operation(n: i32) -> &'static str {
    match pb::OperationKind::try_from(n).expect("operation") {
        pb::OperationKind::Read => "read",
        pb::OperationKind::Write => "write",
        pb::OperationKind::Unspecified => "unspecified",
    }
}

fn scope(n: i32) -> &'static str {
    match pb::Scope::try_from(n).expect("scope") {
        pb::Scope::Request => "request",
        pb::Scope::Tenant => "tenant",
        pb::Scope::Dependency => "dependency",
        pb::Scope::Method => "method",
        pb::Scope::Unspecified => "unspecified",
    }
}

fn or_null(s: &str) -> Value {
    if s.is_empty() { Value::Null } else { json!(s) }
}

/// The gRPC decision written field by field in the JSON form's words.
fn grpc_decision_as_json(d: &pb::Decision) -> Value {
    let r = d.retry.as_ref().expect("retry");
    assert!(d.hold.is_none(), "no comparison places a hold: {d:?}");
    json!({
        "verdict": verdict(d.verdict),
        "retry": {
            "retryable": r.retryable,
            "safe": r.safe,
            "after_ms": r.after_ms,
            "max_after_ms": r.max_after_ms,
            "strategy": strategy(r.strategy),
            "attempt": r.attempt,
            "max_attempts": r.max_attempts,
            "deadline": r.deadline.as_ref().map(|t| retryd::grpc::convert::millis_from_timestamp(t).to_rfc3339()),
            "idempotency_key": r.idempotency_key,
            "side_effect_state": side_effect(r.side_effect_state),
            "reconciliation_action": r.reconciliation_action,
        },
        "target_reached": reached(d.target_reached),
        "catalog": d.catalog,
        "code": d.code,
        "known_code": d.known_code,
        "operation": operation(d.operation),
        "operation_inferred": d.operation_inferred,
        "reason": d.reason,
        "rule": d.rule,
        "policy_version": d.policy_version,
        "required_transition": or_null(&d.required_transition),
        "scope": scope(d.scope),
        "request_id": d.request_id,
        "terminal_state": or_null(&d.terminal_state),
        "warnings": d.warnings,
        "hold": null,
        // The scope's retry budget, as gRPC answers it (no comparison names
        // a dependency, so no budget counts it).
        "budget": d.budget.as_ref().map(|b| json!({
            "scope_key": b.scope_key,
            "requests": b.requests,
            "retries": b.retries,
            "allowed": b.allowed,
            "window_start": b.window_start.as_ref().map(|t| retryd::grpc::convert::millis_from_timestamp(t).to_rfc3339()),
        })),
    })
}

/// Seed 002's consumer algorithm, verbatim in meaning.
fn should_retry(name: &str, retry: &Value, operation_is_idempotent: bool, attempts_remaining: bool) -> bool {
    if !attempts_remaining {
        return false;
    }
    if name == "RESULT_STATE_UNKNOWN" {
        return false;
    }
    retry["retryable"] == true
        && retry["safe"] == true
        && (operation_is_idempotent || !retry["idempotency_key"].is_null())
}

async fn http_classify(client: &reqwest::Client, server: &Server, query: &str, body: &Value) -> (u16, String) {
    let r = client
        .post(format!("{}/v1/classify{query}", server.url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("POST /v1/classify");
    (r.status().as_u16(), r.text().await.expect("body"))
}

/// Every code of every embedded catalog (with the unknown code and the no
/// envelope case), as `(catalog, code)`.
async fn every_code(server: &Server) -> Vec<(String, String)> {
    let catalogs = server
        .client()
        .await
        .list_catalogs(pb::ListCatalogsRequest::default())
        .await
        .expect("ListCatalogs")
        .into_inner()
        .catalogs;
    assert!(catalogs.len() >= 5);
    let mut all = Vec::new();
    for c in &catalogs {
        for code in &c.codes {
            all.push((c.name.clone(), code.code.clone()));
        }
        all.push((c.name.clone(), "NOT_A_CODE_OF_THIS_CATALOG".to_owned()));
        all.push((c.name.clone(), String::new()));
    }
    all
}

#[tokio::test]
async fn http_and_grpc_answers_are_the_same_decision_for_every_code_and_operation() {
    let server = Server::start(&[]);
    let http = reqwest::Client::builder().timeout(PATIENCE).build().expect("client");
    let mut grpc = server.client().await;
    let mut compared = 0;
    for (catalog, code) in every_code(&server).await {
        for op in [pb::OperationKind::Read, pb::OperationKind::Write] {
            for locale in ["en", "ru"] {
                let failure = grpc_support::failure(&catalog, &code, op);
                let g = grpc
                    .classify(pb::ClassifyRequest {
                        failure: Some(Box::new(failure)),
                        locale: locale.to_owned(),
                    })
                    .await
                    .expect("gRPC Classify")
                    .into_inner()
                    .decision
                    .expect("decision");
                // The seeds' word in one case, the proto name in the other.
                let op_word = match (op, locale) {
                    (pb::OperationKind::Read, "en") => json!("read"),
                    (pb::OperationKind::Write, "en") => json!("write"),
                    _ => json!(op.as_str_name()),
                };
                let body = json!({"failure": {"catalog": catalog, "code": code, "operation": op_word, "attempt": 1},
                                  "locale": locale});
                let (status, text) = http_classify(&http, &server, "", &body).await;
                assert_eq!(status, 200, "{body}: {text}");
                let h: Value = serde_json::from_str(&text).expect("JSON");
                let expected = grpc_decision_as_json(&g);
                let got = &h["decision"];
                for (field, value) in expected.as_object().expect("object") {
                    assert_eq!(&got[field], value, "{catalog}/{code}/{op:?}/{locale}: field {field}");
                }
                assert_eq!(got, &expected, "{catalog}/{code}/{op:?}/{locale}: no extra fields");
                compared += 1;
            }
        }
    }
    assert!(compared > 200, "compared {compared}");
}

#[tokio::test]
async fn asc_format_is_byte_for_byte_the_cli_and_seed_002_agrees() {
    let server = Server::start(&[]);
    let http = reqwest::Client::builder().timeout(PATIENCE).build().expect("client");
    let mut agreed = 0;
    for (catalog, code) in every_code(&server).await {
        for op in ["read", "write"] {
            for attempt in [1u32, 3] {
                let body = json!({"failure": {"catalog": catalog, "code": code, "operation": op, "attempt": attempt}});
                let now = retryd::core::UnixMillis::now().to_rfc3339();
                let (status, asc) = http_classify(&http, &server, "?format=asc", &body).await;
                assert_eq!(status, 200, "{body}: {asc}");
                let cli = Command::new(env!("CARGO_BIN_EXE_retryd"))
                    .args(["classify", "--catalog", &catalog, "--operation", op, "--format", "asc"])
                    .arg(format!("--code={code}"))
                    .arg(format!("--attempt={attempt}"))
                    .arg(format!("--now={now}"))
                    .env_remove("RETRYD_POLICY")
                    .output()
                    .expect("retryd classify");
                assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));
                assert_eq!(
                    asc,
                    String::from_utf8(cli.stdout).expect("utf-8"),
                    "{catalog}/{code}/{op}/attempt {attempt}: ?format=asc vs the CLI"
                );

                // Seed 002's consumer, on the full answer.
                let (_, full) = http_classify(&http, &server, "", &body).await;
                let d: Value = serde_json::from_str(&full).expect("JSON");
                let d = &d["decision"];
                let asc: Value = serde_json::from_str(&asc).expect("JSON");
                let mut retry = d["retry"].clone();
                retry.as_object_mut().expect("retry").remove("max_after_ms");
                assert_eq!(asc["retry"], retry, "the ASC form is the decision's contract");
                let remaining = d["retry"]["attempt"].as_u64().expect("attempt")
                    < d["retry"]["max_attempts"].as_u64().expect("max");
                let consumer = should_retry(d["code"].as_str().expect("code"), &d["retry"], op == "read", remaining);
                let verdict = d["verdict"].as_str().expect("verdict");
                if consumer {
                    assert_eq!(
                        verdict, "retry_with_limit",
                        "{catalog}/{code}/{op}: should_retry says retry, the verdict does not"
                    );
                }
                if matches!(verdict, "do_not_retry" | "fix_before_retry" | "already_applied") {
                    assert!(!consumer, "{catalog}/{code}/{op}: the consumer would retry a {verdict}");
                }
                agreed += 1;
            }
        }
    }
    assert!(agreed > 100, "{agreed}");

    // The seed's example object: a timed-out idempotent call with a key the
    // dependency enforces, the second attempt of five, before its deadline.
    let deadline = retryd::core::UnixMillis(retryd::core::UnixMillis::now().0 + 3_600_000).to_rfc3339();
    let body = json!({"failure": {"catalog": "asc", "code": "TIMEOUT", "operation": "read", "attempt": 2,
                                  "idempotency_key": "cal-7c27b9", "idempotency_key_enforced": true,
                                  "deadline": deadline}});
    let (_, text) = http_classify(&http, &server, "?format=asc", &body).await;
    let asc: Value = serde_json::from_str(&text).expect("JSON");
    let r = &asc["retry"];
    assert_eq!(r["attempt"], 2);
    assert_eq!(r["idempotency_key"], "cal-7c27b9");
    assert_eq!(r["deadline"], deadline.as_str());
    assert_eq!(r["side_effect_state"], "none");
    assert!(r["reconciliation_action"].is_null());
    let (_, full) = http_classify(&http, &server, "", &body).await;
    let d: Value = serde_json::from_str(&full).expect("JSON");
    assert_eq!(d["decision"]["verdict"], "retry_with_limit", "{full}");
    assert!(should_retry("TIMEOUT", r, true, true), "{asc}");
}
