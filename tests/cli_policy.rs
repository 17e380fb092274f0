//! `retryd policy check` and `retryd policy matrix`, and the README's
//! matrices, which must be exactly what the command prints.

use std::process::Command;

fn retryd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_retryd"))
        .args(args)
        .output()
        .expect("run retryd")
}

#[test]
fn docs_matrices_are_what_the_command_prints() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/matrices.md")).unwrap();
    let mut seen = 0;
    for block in docs.split("<!-- matrix ").skip(1) {
        let (head, rest) = block.split_once(" -->\n").unwrap();
        let (catalog, locale) = head.split_once(' ').unwrap();
        let body = rest.split("<!-- /matrix -->").next().unwrap();
        let out = retryd(&["policy", "matrix", "--catalog", catalog, "--locale", locale]);
        assert!(out.status.success());
        assert_eq!(
            body,
            String::from_utf8(out.stdout).unwrap(),
            "docs/matrices.md: the matrix of {catalog} ({locale}) is stale: regenerate it with `retryd policy matrix --catalog {catalog} --locale {locale}`"
        );
        seen += 1;
    }
    // every embedded catalog, and vibecode in Russian too
    assert_eq!(seen, 6, "docs/matrices.md has {seen} matrices");
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(readme.contains("(docs/matrices.md)"), "the README links the matrices");
}

#[test]
fn check_accepts_the_embedded_catalogs() {
    let out = retryd(&["policy", "check", concat!(env!("CARGO_MANIFEST_DIR"), "/policies")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("5 catalog file(s) OK"));
}

#[test]
fn check_prints_every_error_and_exits_1() {
    let dir = std::env::temp_dir().join(format!("retryd-policy-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/policies/vibecode.toml")).unwrap();
    let bad = good
        .replace("cap_ms = 60000", "cap_ms = 10")
        .replace("code = \"QUEUE_TIMEOUT\"", "code = \"QUEUE_OVERFLOW\"");
    std::fs::write(dir.join("bad.toml"), bad).unwrap();
    std::fs::write(dir.join("typo.toml"), "name = \"x\"\nmax_attemps = 3\n").unwrap();
    let out = retryd(&["policy", "check", dir.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");

    assert!(err.contains("duplicate code or alias \"QUEUE_OVERFLOW\""), "{err}");
    assert!(
        err.contains("typo.toml:2: max_attemps: unknown key `max_attemps`; did you mean `max_attempts`?"),
        "{err}"
    );
    assert!(err.contains("bad.toml:14: backoff.cap_ms"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn matrix_refuses_unknown_catalogs_and_locales() {
    let out = retryd(&["policy", "matrix", "--catalog", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("catalogs: vibecode, asc, frontspin"));
    let out = retryd(&["policy", "matrix", "--locale", "de"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn classify_and_matrix_read_user_catalogs() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policies");
    let out = retryd(&["policy", "matrix", "--catalog", "payments", "--policy", dir]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("| Code |"));
    let out = retryd(&["classify", "--catalog", "payments", "--policy", dir, "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["catalog"], "payments");
    let out = retryd(&["classify", "--policy", "/nonexistent"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--policy: /nonexistent"));
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("retryd-policy-check-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn vibecode() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/policies/vibecode.toml")).unwrap()
}

#[test]
fn check_reports_every_unknown_key_with_its_line_and_one_error_for_a_bad_verdict() {
    let dir = temp_dir("keys");
    let text = vibecode()
        .replace("max_attempts = 5", "max_attemps = 5\nmax_attempts = 5")
        .replacen(
            "target_reached = \"no\"",
            "target_reached = \"no\"\nretry_after = true",
            1,
        )
        .replacen(
            "read = { verdict = \"retry_with_limit\"",
            "read = { verdict = \"retry_with_limt\"",
            1,
        );
    std::fs::write(dir.join("typos.toml"), &text).unwrap();
    let out = retryd(&["policy", "check", dir.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(
        lines[0].contains("typos.toml:") && lines[0].contains(": max_attemps: unknown key"),
        "{err}"
    );
    assert!(lines[1].contains(": codes[0].retry_after: unknown key"), "{err}");
    assert!(
        lines[2].contains(": codes[0].read.verdict: unknown verdict \"retry_with_limt\""),
        "{err}"
    );
    assert!(!err.contains("less conservative"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_refuses_two_files_with_one_catalog_name() {
    let dir = temp_dir("dup");
    let mine = vibecode().replace("name = \"vibecode\"", "name = \"mine\"");
    std::fs::write(dir.join("a.toml"), &mine).unwrap();
    std::fs::write(dir.join("b.toml"), &mine).unwrap();
    let out = retryd(&["policy", "check", dir.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("b.toml:4: name: catalog \"mine\" is already declared in"),
        "{err}"
    );
    assert!(err.contains("a.toml; one file per catalog name"), "{err}");
    // replacing an embedded catalog is what one file with its name is for
    std::fs::remove_file(dir.join("b.toml")).unwrap();
    std::fs::write(dir.join("b.toml"), vibecode()).unwrap();
    let out = retryd(&["policy", "check", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_of_a_folder_without_catalogs_says_so_and_exits_1() {
    let dir = temp_dir("empty");
    std::fs::write(dir.join("notes.txt"), "not a catalog").unwrap();
    let out = retryd(&["policy", "check", dir.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no .toml catalog file here"), "{err}");
    assert!(out.stdout.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_validates_budgets_and_matrix_lists_them() {
    let dir = temp_dir("budgets");
    let bad = vibecode().replace("window = \"10s\"", "window = \"3w\"").replace(
        "retry_percent = 20\nmin_retries_per_sec = 10",
        "retry_percent = 120\nmin_retries_per_sec = 10\nburst = 3",
    );
    std::fs::write(dir.join("vibecode.toml"), bad).unwrap();
    let out = retryd(&["policy", "check", dir.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("budgets: unknown field `burst`"), "{err}");
    let fixed = vibecode().replace("window = \"10s\"", "window = \"3w\"");
    std::fs::write(dir.join("vibecode.toml"), fixed).unwrap();
    let err = String::from_utf8_lossy(&retryd(&["policy", "check", dir.to_str().unwrap()]).stderr).into_owned();
    assert!(err.contains("budgets[0].window: \"3w\" is not a window"), "{err}");
    let out = retryd(&["policy", "matrix", "--catalog", "frontspin"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("- per tenant of a dependency: retries at most 20 % of 500 requests per 1 d"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_given_a_test_table_by_name_runs_it_as_a_test() {
    // `retryd policy check examples/policies/*.toml`, as the shell expands it.
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policies");
    let out = retryd(&[
        "policy",
        "check",
        &format!("{examples}/payments.test.toml"),
        &format!("{examples}/payments.toml"),
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("1 catalog file(s) OK"), "{stdout}");
    assert!(
        stdout.contains("9 passed, 0 failed, 0 error(s) in 1 test file(s)"),
        "{stdout}"
    );
    assert!(!stderr.contains("missing"), "{stderr}");

    // A failing case in a test table given by name fails the check.
    let dir = temp_dir("glob");
    std::fs::copy(format!("{examples}/payments.toml"), dir.join("payments.toml")).unwrap();
    let tests = std::fs::read_to_string(format!("{examples}/payments.test.toml")).unwrap();
    let broken = tests.replacen(
        "verdict = \"state_verification_required\"",
        "verdict = \"do_not_retry\"",
        1,
    );
    assert_ne!(broken, tests, "the example's tests expect a verification somewhere");
    std::fs::write(dir.join("payments.test.toml"), broken).unwrap();
    let out = retryd(&["policy", "check", dir.join("payments.test.toml").to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("FAIL ") && stderr.contains("payments.test.toml:"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_matrix_of_an_amended_catalog_marks_what_the_amendment_changed() {
    let dir = std::env::temp_dir().join(format!("retryd-matrix-amend-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("vibecode-eu.toml"),
        r#"name = "vibecode-eu"
extends = "vibecode"
remove = ["DB_TRANSIENT"]

[[codes]]
code = "BITRIX_TIMEOUT"
write = { verdict = "do_not_retry" }

[[codes]]
code = "PORTAL_MOVED"
target_reached = "no"
condition.en = "The portal moved."
condition.ru = "Портал переехал."
read = { verdict = "do_not_retry" }
write = { verdict = "do_not_retry" }
"#,
    )
    .unwrap();
    let out = retryd(&[
        "policy",
        "matrix",
        "--policy",
        dir.to_str().unwrap(),
        "--catalog",
        "vibecode-eu",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert!(out.status.success(), "{text}");
    assert!(text.starts_with("Amends `vibecode`"), "{text}");
    assert!(text.contains("| `BITRIX_TIMEOUT` *(amended)* |"), "{text}");
    assert!(text.contains("| `PORTAL_MOVED` *(added)* |"), "{text}");
    assert!(
        text.contains("| `QUEUE_OVERFLOW` |"),
        "unchanged codes carry no mark: {text}"
    );
    assert!(!text.contains("DB_TRANSIENT"), "removed: {text}");
}
