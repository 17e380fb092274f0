//! `retryd policy test`, `retryd policy diff`, the tests `policy check`
//! runs, and `retryd replay`: output and exit codes (0 nothing to report,
//! 1 something to report, 2 usage or error).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn retryd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retryd"))
        .args(args)
        .output()
        .expect("run retryd")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("retryd-cli-safety-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
    fn s(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn policies() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/policies")
}

/// The embedded vibecode as an operator's full copy of it: a copy that is
/// edited replaces the embedded catalog on purpose (`replaces = true`, which
/// `policy check` asks for).
fn vibecode() -> String {
    let text = std::fs::read_to_string(Path::new(policies()).join("vibecode.toml")).unwrap();
    format!("replaces = true\n{text}")
}

/// vibecode with BITRIX_TIMEOUT's write turned from a verification into a retry.
fn unsafe_vibecode() -> String {
    let text = vibecode();
    let needle = "code = \"BITRIX_TIMEOUT\"";
    let (head, tail) = text.split_once(needle).unwrap();
    let tail = tail.replacen(
        "write = { verdict = \"state_verification_required\" }",
        "write = { verdict = \"retry_with_limit\" }",
        1,
    );
    format!("{head}{needle}{tail}")
}

#[test]
fn the_embedded_catalogs_tests_pass() {
    let out = retryd(&["policy", "test"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("0 failed, 0 error(s) in 3 test file(s)"),
        "{}",
        text(&out)
    );
    let out = retryd(&["policy", "test", policies()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn a_failing_case_prints_file_line_expected_and_got_and_exits_1() {
    let d = Dir::new("fail");
    d.write("vibecode.toml", &unsafe_vibecode());
    let tests = d.write(
        "vibecode.test.toml",
        "# checks the seed's matrix\n[[tests]]\nname = \"BITRIX_TIMEOUT write reads back first\"\ncode = \"BITRIX_TIMEOUT\"\noperation = \"write\"\nexpect = { verdict = \"state_verification_required\", safe = false }\n",
    );
    let out = retryd(&["policy", "test", d.s()]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!(
            "FAIL {}:2: BITRIX_TIMEOUT write reads back first",
            tests.display()
        )),
        "{t}"
    );
    assert!(
        t.contains("verdict: expected state_verification_required, got retry_with_limit"),
        "{t}"
    );
    assert!(t.contains("safe: expected false, got true"), "{t}");
    // policy check runs the tests beside the files it checks
    let out = retryd(&["policy", "check", d.s()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("1 catalog file(s) OK") && text(&out).contains("FAIL "),
        "{}",
        text(&out)
    );
}

#[test]
fn broken_test_files_are_errors_with_file_line_and_exit_2() {
    let d = Dir::new("broken");
    let typo = d.write(
        "a.test.toml",
        "[[tests]]\nname = \"typo\"\ncode = \"QUEUE_OVERFLOW\"\nexpect = { verdikt = \"retry_with_limit\" }\n",
    );
    let syntax = d.write("b.test.toml", "[[tests]]\nname = \"cut\"\ncode = \n");
    let out = retryd(&["policy", "test", typo.to_str().unwrap(), syntax.to_str().unwrap()]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("ERROR {}:4:", typo.display())) && t.contains("verdikt"),
        "{t}"
    );
    assert!(t.contains(&format!("ERROR {}:3:", syntax.display())), "{t}");
    // a usage error is 2 as well
    assert_eq!(retryd(&["policy", "test", "--no-such-flag"]).status.code(), Some(2));
    let empty = Dir::new("empty");
    assert_eq!(retryd(&["policy", "test", empty.s()]).status.code(), Some(2));
}

#[test]
fn a_catalog_may_carry_its_tests() {
    let d = Dir::new("inline");
    let with_tests = format!(
        "{}\n[[tests]]\nname = \"inline\"\ncode = \"QUEUE_OVERFLOW\"\noperation = \"write\"\nexpect = {{ verdict = \"retry_with_limit\" }}\n",
        vibecode()
    );
    d.write("vibecode.toml", &with_tests);
    let out = retryd(&["policy", "test", d.s()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("1 passed"), "{}", text(&out));
    // and the catalog still loads as a catalog
    assert_eq!(retryd(&["policy", "check", d.s()]).status.code(), Some(0));
}

#[test]
fn diff_of_a_policy_against_itself_finds_nothing() {
    let out = retryd(&["policy", "diff", policies(), "embedded"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("0 of "), "{}", text(&out));
}

#[test]
fn diff_finds_a_planted_unsafe_change_and_exits_1() {
    let d = Dir::new("diff");
    d.write("vibecode.toml", &unsafe_vibecode());
    let out = retryd(&["policy", "diff", "embedded", d.s()]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    let unsafe_at = t.find("UNSAFE").expect("marked unsafe");
    assert!(
        unsafe_at < t.find("\nvibecode BITRIX_TIMEOUT\n").unwrap(),
        "unsafe first: {t}"
    );
    assert!(
        t.contains("verdict state_verification_required → retry_with_limit, safe false → true"),
        "{t}"
    );
    let out = retryd(&[
        "policy",
        "diff",
        "embedded",
        d.s(),
        "--catalog",
        "vibecode",
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["unsafe"]
            .as_array()
            .unwrap()
            .iter()
            .all(|u| u["code"] == "BITRIX_TIMEOUT")
    );
    assert!(
        v["codes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["code"] == "BITRIX_TIMEOUT")
    );
    // other catalogs are not decided with --catalog
    let out = retryd(&["policy", "diff", "embedded", d.s(), "--catalog", "frontspin"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn diff_usage_and_load_errors_exit_2() {
    assert_eq!(retryd(&["policy", "diff", "embedded"]).status.code(), Some(2));
    assert_eq!(
        retryd(&["policy", "diff", "embedded", "/no/such/dir"]).status.code(),
        Some(2)
    );
    let out = retryd(&["policy", "diff", "embedded", "embedded", "--catalog", "nope"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn replay_refuses_an_unsupported_format_version() {
    let d = Dir::new("replay");
    let log = d.write("future.jsonl", "{\"v\":99,\"ts\":\"x\"}\n");
    let out = retryd(&["replay", log.to_str().unwrap(), "--policy", "embedded"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("format version 99 is not supported"),
        "{}",
        text(&out)
    );
    let junk = d.write("junk.jsonl", "not json\n");
    let out = retryd(&["replay", junk.to_str().unwrap(), "--policy", "embedded"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("line 1"), "{}", text(&out));
    assert_eq!(
        retryd(&["replay", log.to_str().unwrap()]).status.code(),
        Some(2),
        "--policy is required"
    );
}
