//! Catalogs you can amend: `extends` keeps the base and changes what the
//! file names, `remove` drops codes, an embedded catalog replaced whole
//! without `replaces = true` is warned about by the server and refused by
//! `policy check`; cycles, unknown bases, alias clashes and mistakes in the
//! amendment are errors at the amending file's lines. The real binary.

mod grpc_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn retryd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retryd"))
        .args(args)
        .env_remove("RETRYD_POLICY")
        .output()
        .expect("run retryd")
}

fn dir(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let d = std::env::temp_dir().join(format!("retryd-amend-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    for (f, text) in files {
        std::fs::write(d.join(f), text).unwrap();
    }
    d
}

fn decide(policy: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["classify", "--policy", policy.to_str().unwrap(), "--format", "json"];
    all.extend_from_slice(args);
    let out = retryd(&all);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

const AMEND: &str = r#"name = "vibecode"
extends = "vibecode"
remove = ["DB_TRANSIENT"]
max_attempts = 3

[[codes]]
code = "BITRIX_TIMEOUT"
write = { verdict = "do_not_retry" }

[[codes]]
code = "PORTAL_MOVED"
target_reached = "no"
condition.en = "The portal moved."
condition.ru = "Портал переехал."
read = { verdict = "retry_with_limit" }
write = { verdict = "retry_with_limit" }
"#;

#[test]
fn extends_keeps_the_base_and_changes_what_the_file_names() {
    let d = dir("in-place", &[("vibecode.toml", AMEND)]);
    let out = retryd(&["policy", "check", d.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // The amended code's write rule changed; its read did not.
    assert_eq!(
        decide(&d, &["--code", "BITRIX_TIMEOUT", "--operation", "write"])["verdict"],
        "do_not_retry"
    );
    let read = decide(&d, &["--code", "BITRIX_TIMEOUT", "--operation", "read"]);
    assert_eq!(read["verdict"], "retry_with_limit");
    // An unchanged code keeps its rule and id; max_attempts is the file's.
    let q = decide(&d, &["--code", "QUEUE_OVERFLOW", "--operation", "read"]);
    assert_eq!(q["rule"], "vibecode/QUEUE_OVERFLOW/read");
    assert_eq!(q["retry"]["max_attempts"], 3);
    // A removed code is unknown; an added one is known.
    let removed = decide(&d, &["--code", "DB_TRANSIENT"]);
    assert_eq!(removed["known_code"], false);
    assert_eq!(
        decide(&d, &["--code", "PORTAL_MOVED"])["rule"],
        "vibecode/PORTAL_MOVED/write"
    );

    // The policy version covers the merged result: it differs from the embedded one's.
    let embedded = retryd(&["classify", "--code", "QUEUE_OVERFLOW", "--format", "json"]);
    let embedded: serde_json::Value = serde_json::from_slice(&embedded.stdout).unwrap();
    assert_ne!(q["policy_version"], embedded["policy_version"]);

    // policy matrix shows the merge: 16 − 1 + 1 codes.
    let out = retryd(&[
        "policy",
        "matrix",
        "--policy",
        d.to_str().unwrap(),
        "--catalog",
        "vibecode",
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("`PORTAL_MOVED`") && !table.contains("`DB_TRANSIENT`"),
        "{table}"
    );
    assert!(table.contains("`QUEUE_OVERFLOW`"), "{table}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn extends_under_a_new_name_keeps_the_base_and_its_rule_ids() {
    let text = AMEND.replacen("name = \"vibecode\"", "name = \"my_vibecode\"", 1);
    let d = dir("new-name", &[("mine.toml", &text)]);
    let mine = decide(
        &d,
        &[
            "--catalog",
            "my_vibecode",
            "--code",
            "QUEUE_OVERFLOW",
            "--operation",
            "read",
        ],
    );
    assert_eq!(
        mine["rule"], "vibecode/QUEUE_OVERFLOW/read",
        "an unchanged code keeps the base's rule id"
    );
    let changed = decide(
        &d,
        &[
            "--catalog",
            "my_vibecode",
            "--code",
            "BITRIX_TIMEOUT",
            "--operation",
            "write",
        ],
    );
    assert_eq!(changed["rule"], "my_vibecode/BITRIX_TIMEOUT/write");
    // The base itself is untouched.
    let base = decide(&d, &["--code", "BITRIX_TIMEOUT", "--operation", "write"]);
    assert_eq!(base["verdict"], "state_verification_required");
    assert_eq!(decide(&d, &["--code", "DB_TRANSIENT"])["known_code"], true);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_catalog_replacing_an_embedded_one_is_an_error_in_check_unless_it_says_so() {
    let payments =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policies/payments.toml")).unwrap();
    let whole = payments.replacen("name = \"payments\"", "name = \"vibecode\"", 1);
    assert_ne!(whole, payments);
    let d = dir("replace", &[("vibecode.toml", &whole)]);
    let out = retryd(&["policy", "check", d.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("catalog vibecode replaces the embedded one: 8 code(s) instead of 16; amend it with extends = \"vibecode\" (or say replaces = true to replace it whole)"),
        "{err}"
    );
    // Served, it replaces as documented (and the server warns).
    assert_eq!(decide(&d, &["--code", "DB_TRANSIENT"])["known_code"], false);
    // With replaces = true it is what the operator meant.
    std::fs::write(d.join("vibecode.toml"), format!("replaces = true\n{whole}")).unwrap();
    let out = retryd(&["policy", "check", d.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&d).unwrap();
}

type Case = (&'static str, &'static [(&'static str, &'static str)], &'static str);

#[test]
fn mistakes_in_an_amendment_are_errors_at_its_own_lines() {
    // (case, its files, what the error says)
    let cases: [Case; 5] = [
        (
            "unknown-base",
            &[("a.toml", "name = \"a\"\nextends = \"nope\"\n")],
            "a.toml:2: extends: unknown catalog \"nope\"",
        ),
        (
            "cycle",
            &[
                ("a.toml", "name = \"a\"\nextends = \"b\"\n"),
                ("b.toml", "name = \"b\"\nextends = \"a\"\n"),
            ],
            "extends: extends cycle: a extends b, b extends a",
        ),
        (
            "remove-unknown",
            &[(
                "v.toml",
                "name = \"v2\"\nextends = \"vibecode\"\nremove = [\"NOT_THERE\"]\n",
            )],
            "v.toml:3: remove: \"NOT_THERE\" is not a code of \"vibecode\"",
        ),
        (
            "alias-clash",
            &[(
                "v.toml",
                "name = \"v2\"\nextends = \"vibecode\"\n\n[[codes]]\ncode = \"NEW_ONE\"\naliases = [\"QUEUE_OVERFLOW\"]\ntarget_reached = \"no\"\ncondition.en = \"x\"\ncondition.ru = \"x\"\nread = { verdict = \"retry_with_limit\" }\nwrite = { verdict = \"retry_with_limit\" }\n",
            )],
            "QUEUE_OVERFLOW",
        ),
        (
            "bad-rule",
            &[(
                "v.toml",
                "name = \"v2\"\nextends = \"vibecode\"\n\n[[codes]]\ncode = \"BITRIX_TIMEOUT\"\nwrite = { verdict = \"retry_sometimes\" }\n",
            )],
            "v.toml:6: codes[0].write.verdict",
        ),
    ];
    for (name, files, expected) in cases {
        let d = dir(name, files);
        let out = retryd(&["policy", "check", d.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains(expected), "{name}: expected {expected:?} in\n{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[tokio::test]
async fn list_catalogs_says_where_each_code_came_from() {
    let text = AMEND.replacen("name = \"vibecode\"", "name = \"my_vibecode\"", 1);
    let d = dir("list", &[("mine.toml", &text)]);
    let server = grpc_support::Server::start(&["--policy", d.to_str().unwrap()]);
    let mut client = server.client().await;
    let catalogs = client
        .list_catalogs(retryd::grpc::pb::ListCatalogsRequest::default())
        .await
        .expect("ListCatalogs")
        .into_inner()
        .catalogs;
    let mine = catalogs.iter().find(|c| c.name == "my_vibecode").expect("my_vibecode");
    assert_eq!(mine.extends, "vibecode");
    let origin = |code: &str| mine.codes.iter().find(|c| c.code == code).map(|c| c.origin.clone());
    assert_eq!(origin("QUEUE_OVERFLOW").as_deref(), Some("base"));
    assert_eq!(origin("BITRIX_TIMEOUT").as_deref(), Some("amended"));
    assert_eq!(origin("PORTAL_MOVED").as_deref(), Some("added"));
    assert_eq!(origin("DB_TRANSIENT"), None, "removed");
    let vibecode = catalogs.iter().find(|c| c.name == "vibecode").expect("vibecode");
    assert!(vibecode.extends.is_empty() && vibecode.codes.iter().all(|c| c.origin.is_empty()));

    // The HTTP door says the same.
    let body = grpc_support::http_get(server.addr, "/v1/catalogs");
    let v: serde_json::Value = serde_json::from_str(&dechunk(&body)).expect("JSON");
    let mine = v["catalogs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "my_vibecode")
        .unwrap()
        .clone();
    assert_eq!(mine["extends"], "vibecode");
    let added = mine["codes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["code"] == "PORTAL_MOVED")
        .unwrap()
        .clone();
    assert_eq!(added["origin"], "added");
    std::fs::remove_dir_all(&d).unwrap();
}

/// The body of a chunked HTTP/1.1 answer (a body that is not chunked as is).
fn dechunk(body: &str) -> String {
    if body.starts_with('{') {
        return body.to_owned();
    }
    let (mut out, mut rest) = (String::new(), body);
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if n == 0 {
            break;
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
    out
}
