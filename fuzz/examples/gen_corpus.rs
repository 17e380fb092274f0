//! Writes the committed seed corpora (`fuzz/corpus/<target>/seed-*`):
//! encoded requests for `classify_request`, the embedded catalogs and broken
//! variants of them for `policy_file`. Run from the repository root:
//! `cargo run --manifest-path fuzz/Cargo.toml --example gen_corpus`.

use std::fs;
use std::path::Path;

use prost::Message as _;
use prost_types::Timestamp;
use retryd::core::policy::EMBEDDED;
use retryd::grpc::pb;

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

/// Broken variants of a valid catalog text, each a plausible editing mistake.
fn broken(name: &str, text: &str) -> Vec<(String, String)> {
    let mut half = text.len() / 2;
    while !text.is_char_boundary(half) {
        half -= 1;
    }
    let mut out = vec![
        (format!("{name}-truncated"), text[..half].to_owned()),
        (
            format!("{name}-bad-verdict"),
            text.replacen("retry_with_limit", "retry_forever", 1),
        ),
        (format!("{name}-no-name"), text.replacen("name = ", "nam = ", 1)),
        (
            format!("{name}-negative-attempts"),
            text.replacen("max_attempts = ", "max_attempts = -", 1),
        ),
        (
            format!("{name}-huge-multiplier"),
            text.replacen("multiplier = ", "multiplier = 1e308 #", 1),
        ),
    ];
    if let Some(start) = text.find("[[codes]]") {
        let end = text[start + 9..]
            .find("[[codes]]")
            .map_or(text.len(), |e| start + 9 + e);
        let mut dup = text.to_owned();
        dup.push('\n');
        dup.push_str(&text[start..end]);
        out.push((format!("{name}-duplicate-code"), dup));
    }
    out
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
    for (file, text) in EMBEDDED {
        let name = Path::new(file).file_stem().and_then(|s| s.to_str()).unwrap_or("policy");
        fs::write(dir.join(format!("seed-{name}.toml")), text)?;
        if name == "vibecode" || name == "http" {
            for (bad, text) in broken(name, text) {
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
