//! Writes the committed seed corpora (`fuzz/corpus/<target>/seed-*`):
//! encoded requests for `classify_request`; for `policy_file`, small
//! catalogs that each carry a hold, a budget and a `[[tests]]` table
//! (`catalogs.rs`), and broken variants of them. Run from the repository root:
//! `cargo run --manifest-path fuzz/Cargo.toml --example gen_corpus`.

mod catalogs;

use std::fs;
use std::path::Path;

use prost::Message as _;
use prost_types::Timestamp;
use retryd::core::Policy;
use retryd::core::catalog::compile_catalog;
use retryd::grpc::pb;
use retryd::safety::test::{has_tests_section, run_file};

fn failure(catalog: &str, code: &str, op: pb::OperationKind, method: &str) -> pb::Failure {
    pb::Failure {
        catalog: catalog.into(),
        code: code.into(),
        operation: op as i32,
        method: method.into(),
        attempt: 1,
        ..Default::default()
    }
}

fn requests() -> Vec<(&'static str, Vec<u8>)> {
    use pb::OperationKind::{Read, Unspecified, Write};
    let one = |f: pb::Failure, locale: &str| {
        pb::ClassifyRequest {
            failure: Some(Box::new(f)),
            locale: locale.into(),
        }
        .encode_to_vec()
    };
    let mut out = vec![
        ("empty", Vec::new()),
        (
            "write-timeout",
            one(failure("vibecode", "BITRIX_TIMEOUT", Write, "crm.deal.add"), ""),
        ),
        (
            "read-inferred-ru",
            one(failure("", "BITRIX_TIMEOUT", Unspecified, "crm.deal.get"), "ru-RU"),
        ),
    ];
    let mut f = failure("http", "429", Read, "orders.list");
    f.retry_after = "Fri, 31 Dec 1999 23:59:59 GMT".into();
    f.deadline = Some(Timestamp {
        seconds: 1_786_190_760,
        nanos: 5,
    });
    out.push(("http-date-deadline", one(f, "en")));
    let mut f = failure("frontspin", "RATE_LIMITED", Write, "");
    f.attempt = 4;
    f.tenant = "acme".into();
    f.retry_after = "5".into();
    f.retry_after_ms = Some(1500);
    out.push(("tenant-schedule", one(f, "")));
    let mut f = failure("asc", "RESULT_STATE_UNKNOWN", Write, "payments.charge");
    f.idempotency_key = "deal-42".into();
    f.idempotency_key_enforced = true;
    f.read_back = pb::ReadBack::Inconclusive as i32;
    f.cannot_verify_effect = true;
    f.request_id = "req-1".into();
    f.upstream = Some(pb::RetryContract {
        retryable: true,
        safe: false,
        after_ms: 2000,
        max_after_ms: 4000,
        strategy: pb::Strategy::RetryAfter as i32,
        attempt: 1,
        max_attempts: 3,
        deadline: Some(Timestamp {
            seconds: i64::MAX,
            nanos: -1,
        }),
        idempotency_key: Some("deal-42".into()),
        side_effect_state: 42,
        reconciliation_action: Some("read_back_by_business_key".into()),
    });
    out.push(("upstream-odd-enums", one(f, "")));
    let mut f = failure("grpc", "UNAVAILABLE", Unspecified, "");
    f.operation = 99;
    f.read_back = -5;
    f.attempt = u32::MAX;
    f.max_attempts = u32::MAX;
    f.retry_after = "-1".into();
    out.push(("extremes", one(f, "")));
    out.push((
        "no-failure",
        pb::ClassifyRequest {
            failure: None,
            locale: "en".into(),
        }
        .encode_to_vec(),
    ));
    out.push((
        "batch-mixed",
        pb::ClassifyBatchRequest {
            failures: vec![
                failure("vibecode", "BITRIX_TIMEOUT", Write, "crm.deal.add"),
                failure("nope", "X", Read, ""),
                failure("http", "503", Read, "orders.list"),
                pb::Failure::default(),
            ],
            locale: "ru".into(),
        }
        .encode_to_vec(),
    ));
    out
}

/// Variants of a small catalog, each a plausible editing mistake that leaves
/// its hold, budget and tests in place (or breaks one of them), and whether
/// it must fail to compile (an extreme value is not a mistake).
fn broken(name: &str, text: &str) -> Vec<(String, String, bool)> {
    let edits: &[(&str, &str, &str, bool)] = &[
        ("bad-verdict", "retry_with_limit", "retry_forever", true),
        ("no-name", "name = ", "nam = ", true),
        ("negative-attempts", "max_attempts = ", "max_attempts = -", true),
        ("huge-multiplier", "multiplier = ", "multiplier = 1e308 #", false),
        ("bad-hold-kind", "kind = \"", "kind = \"snooze", true),
        ("hold-unknown-key", "hold = { ", "hold = { hold_sec = 5, ", true),
        ("bad-window", "window = \"", "window = \"10 parsecs ", true),
        ("budget-over-100", "retry_percent = ", "retry_percent = 1", true),
        ("tests-unclosed", "expect = {", "expect = {{", true),
        ("no-quota", "[quota]", "[quota_]", true),
    ];
    let mut out: Vec<(String, String, bool)> = edits
        .iter()
        .filter(|(_, from, _, _)| text.contains(from))
        .map(|(what, from, to, fails)| (format!("{name}-{what}"), text.replacen(from, to, 1), *fails))
        .collect();
    // Cut inside the last test's inline table: a syntax error at the end.
    let mut cut = text.len() - 20;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    out.push((format!("{name}-truncated"), text[..cut].to_owned(), true));
    if let Some(start) = text.find("[[codes]]") {
        let end = text[start + 9..]
            .find("[[codes]]")
            .map_or(text.len(), |e| start + 9 + e);
        let mut dup = text.to_owned();
        dup.push('\n');
        dup.push_str(&text[start..end]);
        out.push((format!("{name}-duplicate-code"), dup, true));
    }
    out
}

/// A seed that does not do what its name says would fuzz something else:
/// each small catalog compiles, has a hold rule, a budget and tests that
/// pass (each mistake of `broken` fails to compile, checked in `main`).
fn check(name: &str, text: &str) {
    let catalog = compile_catalog("seed.toml", text).unwrap_or_else(|e| panic!("seed {name}: {e:?}"));
    let holds = catalog
        .codes()
        .iter()
        .flat_map(|c| [&c.read, &c.write])
        .any(|r| r.hold.is_some());
    assert!(holds, "seed {name} has no hold rule");
    assert!(!catalog.budgets.is_empty(), "seed {name} has no budget");
    assert!(has_tests_section(text), "seed {name} has no [[tests]]");
    let policy = Policy::from_sources([("seed.toml", text)], &catalog.name).expect("it compiled");
    let report = run_file("seed.toml", text, &policy, Some(&catalog.name));
    assert!(
        report.failed.is_empty() && report.errors.is_empty() && report.passed > 0,
        "seed {name}: {}",
        report.to_text()
    );
}

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let dir = root.join("classify_request");
    fs::create_dir_all(&dir)?;
    for (name, bytes) in requests() {
        fs::write(dir.join(format!("seed-{name}.bin")), bytes)?;
    }
    let dir = root.join("policy_file");
    fs::create_dir_all(&dir)?;
    // The seeds are exactly what this writes (older seeds, such as the
    // embedded catalogs of issue 6, go).
    for entry in fs::read_dir(&dir)? {
        let path = entry?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("seed-"))
        {
            fs::remove_file(path)?;
        }
    }
    for (i, (name, text)) in catalogs::SMALL.iter().enumerate() {
        check(name, text);
        fs::write(dir.join(format!("seed-{name}.toml")), text)?;
        // Two catalogs' worth of broken variants: more would be more of the same.
        if i < 2 {
            for (bad, text, fails) in broken(name, text) {
                let compiled = compile_catalog("seed.toml", &text).is_ok();
                assert!(compiled != fails, "seed {bad}: compiles = {compiled}");
                fs::write(dir.join(format!("seed-{bad}.toml")), text)?;
            }
        }
    }
    fs::write(
        dir.join("seed-minimal.toml"),
        "name = \"mini\"\ndescription = \"d\"\nlocales = [\"en\"]\nmax_attempts = 2\n",
    )?;
    Ok(())
}
