//! `promtool check metrics` in Rust: the real server's `/metrics` page,
//! after calls of every kind, parsed strictly as the Prometheus text format
//! and checked by client_golang's promlint rules (HELP and TYPE for every
//! family, `_total` exactly on counters, base units, snake_case names and
//! labels, whole histograms, no duplicate series); and every metric the
//! Grafana dashboard (deploy/grafana/retryd-dashboard.json) queries exists.

mod grpc_support;

use std::collections::{BTreeMap, BTreeSet};

use grpc_support::{Server, failure, reflect};
use retryd::grpc::pb;

#[derive(Debug, Default)]
struct Family {
    help: Option<String>,
    kind: Option<String>,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses `{a="x",b="y"}` (with escapes), strictly.
fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").ok_or(format!("bad labels {s}"))?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    other => return Err(format!("bad escape {other:?} in {s}")),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err(format!("unterminated label value in {s}")),
            }
        };
        if !valid_name(name) || name.starts_with("__") {
            return Err(format!("bad label name {name:?}"));
        }
        if labels.insert(name.to_owned(), value).is_some() {
            return Err(format!("label {name} twice in {s}"));
        }
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    Ok(labels)
}

fn parse(page: &str) -> Result<BTreeMap<String, Family>, String> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for line in page.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').ok_or(format!("HELP without text: {line}"))?;
            let f = families.entry(name.to_owned()).or_default();
            if f.help.replace(help.to_owned()).is_some() {
                return Err(format!("HELP twice for {name}"));
            }
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or(format!("bad TYPE: {line}"))?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(format!("unknown type {kind}"));
            }
            let f = families.entry(name.to_owned()).or_default();
            if f.kind.replace(kind.to_owned()).is_some() {
                return Err(format!("TYPE twice for {name}"));
            }
        } else if line.starts_with('#') {
            continue;
        } else {
            let (series, value) = line.rsplit_once(' ').ok_or(format!("no value: {line}"))?;
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().map_err(|_| format!("bad value: {line}"))?,
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (
                    n,
                    parse_labels(l.strip_suffix('}').ok_or(format!("bad series {series}"))?)?,
                ),
                None => (series, BTreeMap::new()),
            };
            if !valid_name(name) {
                return Err(format!("bad metric name {name}"));
            }
            if !seen.insert(series.to_owned()) {
                return Err(format!("duplicate series {series}"));
            }
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|base| families.get(*base).and_then(|f| f.kind.as_deref()) == Some("histogram"))
                })
                .unwrap_or(name);
            families
                .get_mut(family)
                .ok_or(format!("sample {name} before its HELP/TYPE"))?
                .samples
                .push((name.to_owned(), labels, value));
        }
    }
    Ok(families)
}

/// promlint's rules on one family; returns the problems found.
fn lint(name: &str, f: &Family) -> Vec<String> {
    let mut problems = Vec::new();
    let kind = f.kind.as_deref().unwrap_or("");
    if f.help.as_deref().unwrap_or("").trim().is_empty() {
        problems.push(format!("{name}: no help text"));
    }
    if kind.is_empty() {
        problems.push(format!("{name}: no TYPE"));
    }
    if name.chars().any(|c| c.is_ascii_uppercase()) {
        problems.push(format!("{name}: metric names should be snake_case"));
    }
    if kind == "counter" && !name.ends_with("_total") {
        problems.push(format!("{name}: counter metrics should have \"_total\" suffix"));
    }
    if kind != "counter" && name.ends_with("_total") {
        problems.push(format!("{name}: non-counter metrics should not have \"_total\" suffix"));
    }
    let words: Vec<&str> = name.split('_').collect();
    for unit in [
        "milliseconds",
        "microseconds",
        "nanoseconds",
        "minutes",
        "hours",
        "days",
        "kilobytes",
        "megabytes",
        "gigabytes",
        "ms",
        "us",
        "ns",
        "kb",
        "mb",
        "percent",
    ] {
        if words.contains(&unit) {
            problems.push(format!("{name}: use base units (seconds, bytes, ratios), not {unit}"));
        }
    }
    if name.ends_with("_count") || name.ends_with("_sum") || name.ends_with("_bucket") {
        problems.push(format!("{name}: reserved suffix"));
    }
    for (sample, labels, _) in &f.samples {
        for label in labels.keys() {
            if label.chars().any(|c| c.is_ascii_uppercase()) {
                problems.push(format!("{sample}: label {label} should be snake_case"));
            }
        }
    }
    if kind == "histogram" {
        let mut groups: BTreeMap<BTreeMap<String, String>, (bool, bool, bool)> = BTreeMap::new();
        for (sample, labels, _) in &f.samples {
            let mut key = labels.clone();
            let le = key.remove("le");
            let g = groups.entry(key).or_default();
            if sample.ends_with("_bucket") && le.as_deref() == Some("+Inf") {
                g.0 = true;
            }
            if sample.ends_with("_sum") {
                g.1 = true;
            }
            if sample.ends_with("_count") {
                g.2 = true;
            }
        }
        for (labels, (inf, sum, count)) in groups {
            if !(inf && sum && count) {
                problems.push(format!(
                    "{name}{labels:?}: histogram without +Inf bucket, _sum or _count"
                ));
            }
        }
    }
    problems
}

#[tokio::test]
async fn metrics_pass_promlint_rules_and_feed_the_dashboard() {
    let server = Server::start(&[]);
    let channel = server.channel().await;
    let mut client = pb::retry_decision_service_client::RetryDecisionServiceClient::new(channel.clone());
    client
        .classify(pb::ClassifyRequest {
            failure: Some(Box::new(failure(
                "vibecode",
                "BITRIX_TIMEOUT",
                pb::OperationKind::Write,
            ))),
            locale: String::new(),
        })
        .await
        .expect("classify");
    let bad = client.classify(pb::ClassifyRequest::default()).await;
    assert!(bad.is_err());
    client
        .classify_batch(pb::ClassifyBatchRequest {
            failures: vec![failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Read); 3],
            locale: String::new(),
        })
        .await
        .expect("batch");
    tonic_health::pb::health_client::HealthClient::new(channel.clone())
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await
        .expect("health");
    reflect(
        channel,
        tonic_reflection::pb::v1::server_reflection_request::MessageRequest::ListServices(String::new()),
    )
    .await;

    let page = server.scrape();
    let families = parse(&page).unwrap_or_else(|e| panic!("{e}\n{page}"));
    let problems: Vec<String> = families.iter().flat_map(|(n, f)| lint(n, f)).collect();
    assert!(problems.is_empty(), "{problems:#?}\n{page}");

    // go-grpc-prometheus' families and labels.
    for (name, kind) in [
        ("grpc_server_started_total", "counter"),
        ("grpc_server_handled_total", "counter"),
        ("grpc_server_msg_received_total", "counter"),
        ("grpc_server_msg_sent_total", "counter"),
        ("grpc_server_handling_seconds", "histogram"),
        ("process_cpu_seconds_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
        ("retryd_build_info", "gauge"),
        ("retryd_pooled_values", "gauge"),
        ("retryd_pooled_bytes", "gauge"),
        ("retryd_shutdown_abandoned_calls_total", "counter"),
    ] {
        let f = families.get(name).unwrap_or_else(|| panic!("{name} missing\n{page}"));
        assert_eq!(f.kind.as_deref(), Some(kind), "{name}");
    }
    let types: BTreeSet<&str> = families["grpc_server_started_total"]
        .samples
        .iter()
        .filter_map(|(_, l, _)| l.get("grpc_type").map(String::as_str))
        .collect();
    assert!(types.contains("unary") && types.contains("bidi_stream"), "{types:?}");

    // Every metric the dashboard queries is on the page.
    let dashboard = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/grafana/retryd-dashboard.json"
    ))
    .expect("dashboard");
    let json: serde_json::Value = serde_json::from_str(&dashboard).expect("dashboard is JSON");
    let mut exprs = Vec::new();
    for panel in json["panels"].as_array().expect("panels") {
        // Rows have no queries.
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    let dashboard_used = metric_names(&exprs);
    assert!(dashboard_used.len() >= 25, "{dashboard_used:?}");
    // The families every server has once called are on the page; the rest
    // (holds, budgets, the state store, the decision log) appear once their
    // event happens, and must at least be a name the server registers.
    let exported = exported_names();
    for name in &dashboard_used {
        let base = base_name(name);
        assert!(
            families.contains_key(base) || exported.contains(base),
            "the dashboard queries {name}, which the server does not export:\n{page}"
        );
    }
}

/// The metric names a PromQL expression list names.
fn metric_names(exprs: &[String]) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for expr in exprs {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if ["grpc_server_", "http_server_", "retryd_", "process_"]
                .iter()
                .any(|p| word.starts_with(p))
            {
                used.insert(word.to_owned());
            }
        }
    }
    used
}

/// A histogram series' family name.
fn base_name(name: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name)
}

/// Every metric name the server registers: the string literals of `src/`
/// that name one (`"retryd_…"`, `"http_server_…"`, `"grpc_server_…"`,
/// `"process_…"`), each of which is also documented in docs/metrics.md.
fn exported_names() -> BTreeSet<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(std::fs::read_to_string(&path).expect("source"));
            }
        }
    }
    let mut sources = Vec::new();
    walk(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
        &mut sources,
    );
    let mut names = BTreeSet::new();
    for text in &sources {
        for piece in text.split('"').skip(1).step_by(2) {
            let is_name = ["retryd_", "http_server_", "grpc_server_", "process_"]
                .iter()
                .any(|p| piece.starts_with(p))
                && piece.len() > 8
                && piece
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if is_name {
                names.insert(piece.to_owned());
            }
        }
    }
    names
}

/// The Helm chart's alert rules query only metrics the server exports and
/// docs/metrics.md documents, and each alert has its runbook section.
#[test]
fn alerts_query_exported_metrics_and_have_runbooks() {
    let root = env!("CARGO_MANIFEST_DIR");
    let rules = std::fs::read_to_string(format!("{root}/deploy/helm/retryd/files/alerts.yaml")).expect("alerts");
    let runbook = std::fs::read_to_string(format!("{root}/docs/runbook.md")).expect("runbook");
    let documented = std::fs::read_to_string(format!("{root}/docs/metrics.md")).expect("metrics doc");
    let mut exprs = Vec::new();
    let mut alerts = Vec::new();
    let mut lines = rules.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("- alert: ") {
            alerts.push(name.to_owned());
        } else if let Some(expr) = t.strip_prefix("expr: ") {
            let mut e = expr.trim_start_matches('|').to_owned();
            // A block scalar: the lines indented deeper than `expr:`.
            let indent = line.len() - line.trim_start().len();
            while let Some(next) = lines.peek() {
                if next.trim().is_empty() || next.len() - next.trim_start().len() <= indent {
                    break;
                }
                e.push(' ');
                e.push_str(next.trim());
                lines.next();
            }
            exprs.push(e);
        }
    }
    assert_eq!(alerts.len(), exprs.len(), "one expr per alert: {alerts:?}");
    assert!(alerts.len() >= 11, "{alerts:?}");
    for alert in &alerts {
        assert!(
            runbook.contains(&format!("## {alert}\n")),
            "no runbook section for {alert}"
        );
        assert!(
            rules.contains(&format!("runbook.md#{}", alert.to_lowercase())),
            "{alert}'s runbook_url"
        );
    }
    let exported = exported_names();
    for name in metric_names(&exprs) {
        let base = base_name(&name);
        assert!(
            exported.contains(base),
            "an alert queries {name}, which the server does not export"
        );
        assert!(documented.contains(base), "{base} is not in docs/metrics.md");
    }
    // Every name the server registers is documented, so an operator can look it up.
    let undocumented: Vec<&String> = exported.iter().filter(|n| !documented.contains(n.as_str())).collect();
    assert!(undocumented.is_empty(), "not in docs/metrics.md: {undocumented:?}");
}
