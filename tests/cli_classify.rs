//! `retryd classify` as a person or a script runs it: the real binary.

use std::process::{Command, Output};

fn classify(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retryd"))
        .arg("classify")
        .args(["--now", "2026-08-08T12:00:00Z"])
        .args(args)
        .output()
        .expect("run retryd")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = classify(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn json_format_prints_the_whole_decision_in_lowercase_words() {
    let d = json(&[
        "--code",
        "BITRIX_TIMEOUT",
        "--operation",
        "write",
        "--request-id",
        "r-1",
        "--format",
        "json",
    ]);
    assert_eq!(d["verdict"], "state_verification_required");
    assert_eq!(d["target_reached"], "yes");
    assert_eq!(d["operation"], "write");
    assert_eq!(d["rule"], "vibecode/BITRIX_TIMEOUT/write");
    assert_eq!(d["request_id"], "r-1");
    assert_eq!(d["retry"]["side_effect_state"], "possible");
    assert_eq!(d["retry"]["reconciliation_action"], "read_back_by_business_key");
    assert_eq!(d["retry"]["safe"], false);
    for key in [
        "catalog",
        "code",
        "known_code",
        "operation_inferred",
        "reason",
        "policy_version",
        "required_transition",
        "scope",
        "terminal_state",
        "warnings",
    ] {
        assert!(d.get(key).is_some(), "missing {key}");
    }
}

#[test]
fn asc_format_is_exactly_the_seed_contract_shape() {
    let d = json(&[
        "--code",
        "QUEUE_OVERFLOW",
        "--operation",
        "read",
        "--attempt",
        "2",
        "--retry-after",
        "2",
        "--deadline",
        "2026-08-08T12:05:00Z",
        "--format",
        "asc",
    ]);
    let retry = d["retry"].as_object().expect("retry object");
    let keys: Vec<&str> = retry.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "retryable",
            "safe",
            "after_ms",
            "strategy",
            "attempt",
            "max_attempts",
            "deadline",
            "idempotency_key",
            "side_effect_state",
            "reconciliation_action"
        ]
    );
    assert_eq!(d.as_object().unwrap().len(), 1);
    assert_eq!(retry["strategy"], "retry_after");
    assert_eq!(retry["after_ms"], 2000);
    assert_eq!(retry["deadline"], "2026-08-08T12:05:00Z");
    assert!(retry["idempotency_key"].is_null() && retry["reconciliation_action"].is_null());
}

#[test]
fn text_format_is_for_people_and_localized() {
    let out = classify(&["--code", "TOKEN_REFRESH_FAILED", "--locale", "ru"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("verdict:      fix_before_retry"), "{text}");
    assert!(text.contains("authorization_restored"), "{text}");
    assert!(text.contains("авторизац"), "{text}");
}

#[test]
fn bad_flags_exit_2_with_a_clear_message() {
    for (args, words) in [
        (&["--operation", "delete"][..], "invalid value 'delete'"),
        (&["--deadline", "tomorrow"][..], "RFC 3339"),
        (&["--attempt", "-1"][..], "unexpected argument"),
        (&["--catalog", "nope"][..], "catalogs: vibecode, asc, frontspin"),
    ] {
        let out = classify(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {err}");
    }
    let long = "k".repeat(300);
    let out = classify(&["--idempotency-key", &long]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--idempotency-key: is 300 bytes; the limit is 256"));
}

#[test]
fn a_code_in_another_case_gets_a_did_you_mean_warning() {
    let out = classify(&["--code", "bitrix_timeout", "--operation", "write"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(unknown)"), "{text}");
    assert!(
        text.contains("warning:      code_case_mismatch: did you mean BITRIX_TIMEOUT?"),
        "{text}"
    );
    let d = json(&["--code", "bitrix_timeout", "--format", "json"]);
    let warnings = d["warnings"].as_array().expect("warnings");
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("code_case_mismatch: did you mean BITRIX_TIMEOUT?")),
        "{d}"
    );
}

#[test]
fn a_policy_error_names_where_the_path_came_from() {
    let out = classify(&["--policy", "/nonexistent"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("retryd classify: --policy: /nonexistent"));
    let out = Command::new(env!("CARGO_BIN_EXE_retryd"))
        .args(["classify", "--code", "X"])
        .env("RETRYD_POLICY", "/nonexistent")
        .output()
        .expect("run retryd");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("retryd classify: RETRYD_POLICY: /nonexistent"), "{err}");
}

#[test]
fn the_read_reason_of_bitrix_timeout_speaks_of_the_read() {
    let d = json(&[
        "--code",
        "BITRIX_TIMEOUT",
        "--operation",
        "read",
        "--attempt",
        "1",
        "--format",
        "json",
    ]);
    let reason = d["reason"].as_str().unwrap();
    assert!(!reason.contains("write"), "{reason}");
    assert!(reason.contains("read"), "{reason}");
}

#[test]
fn a_misspelt_code_gets_a_guess_and_a_number_never_does() {
    let out = classify(&["--code", "BITRIX_TIMOUT", "--operation", "write"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("vibecode/BITRIX_TIMOUT (unknown)"), "{text}");
    assert!(
        text.contains("warning:      unknown_code: did you mean BITRIX_TIMEOUT?"),
        "{text}"
    );
    let d = json(&["--code", "QUEUE_OVERFLWO", "--format", "json"]);
    assert_eq!(d["rule"], "vibecode/unknown/write");
    assert!(
        d["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("unknown_code: did you mean QUEUE_OVERFLOW?"),
        "{d}"
    );
    // 509 is one digit from 503, but a number is another status, not a typo.
    for (catalog, code) in [("http", "509"), ("grpc", "99"), ("vibecode", "TOTALLY_UNRELATED")] {
        let d = json(&["--catalog", catalog, "--code", code, "--format", "json"]);
        let warnings = d["warnings"].as_array().expect("warnings");
        assert!(
            !warnings.iter().any(|w| w.as_str().unwrap().contains("did you mean")),
            "{catalog}/{code}: {d}"
        );
    }
}

#[test]
fn the_text_format_opens_with_what_to_do() {
    let first_line = |args: &[&str]| {
        let out = classify(args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    let cases: [(&[&str], &str); 6] = [
        (
            &["--code", "BITRIX_TIMEOUT", "--operation", "write"],
            "read back first: the write may have been applied; check (read_back_by_business_key) before sending it again",
        ),
        (
            &["--code", "BITRIX_TIMEOUT", "--operation", "read"],
            "retry after 500–1000 ms, attempt 2 of 5",
        ),
        (
            &["--catalog", "frontspin", "--code", "RATE_LIMITED", "--tenant", "acme"],
            "retry after 15 min",
        ),
        (&["--code", "BITRIX_ERROR", "--operation", "read"], "fix, then retry: "),
        (
            &["--code", "QUEUE_OVERFLOW", "--operation", "read", "--attempt", "5"],
            "do not retry: ",
        ),
        (
            &[
                "--code",
                "BITRIX_TIMEOUT",
                "--operation",
                "write",
                "--read-back",
                "present",
            ],
            "already applied: the write took effect; do not send it again",
        ),
    ];
    for (args, expected) in cases {
        let line = first_line(args);
        assert!(line.starts_with(expected), "{args:?}: {line:?}");
    }
    // The verdict still follows, on the line after.
    let out = classify(&["--code", "BITRIX_ERROR", "--operation", "read"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().next().unwrap().ends_with("(needs cause_fixed)"), "{text}");
    assert_eq!(text.lines().nth(1), Some("verdict:      fix_before_retry"), "{text}");
}
