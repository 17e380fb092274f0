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
fn readme_matrices_are_what_the_command_prints() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut seen = 0;
    for block in readme.split("<!-- matrix ").skip(1) {
        let (head, rest) = block.split_once(" -->\n").unwrap();
        let (catalog, locale) = head.split_once(' ').unwrap();
        let body = rest.split("<!-- /matrix -->").next().unwrap();
        let out = retryd(&["policy", "matrix", "--catalog", catalog, "--locale", locale]);
        assert!(out.status.success());
        assert_eq!(
            body,
            String::from_utf8(out.stdout).unwrap(),
            "README matrix for {catalog} ({locale}) is stale: regenerate it with `retryd policy matrix`"
        );
        seen += 1;
    }
    assert!(seen >= 3, "README has {seen} matrices");
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
