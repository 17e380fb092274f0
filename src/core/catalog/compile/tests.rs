use super::*;

const MINIMAL: &str = r#"
name = "t"
description = "test"
locales = ["en", "ru"]
max_attempts = 3
[backoff]
base_ms = 100
multiplier = 2.0
cap_ms = 1000
[operations]
read = ["get"]
write = ["add"]
[[codes]]
code = "A"
target_reached = "no"
condition = { en = "a", ru = "а" }
read = { verdict = "retry_with_limit" }
write = { verdict = "retry_with_limit" }
[unknown]
target_reached = "unknown"
condition = { en = "u", ru = "у" }
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }
[no_envelope]
target_reached = "unknown"
condition = { en = "n", ru = "н" }
read = { verdict = "retry_with_limit" }
write = { verdict = "state_verification_required" }
"#;

fn errors(text: &str) -> Vec<CatalogError> {
    compile_catalog("t.toml", text).expect_err("must be refused")
}

fn has(errs: &[CatalogError], key: &str, words: &str) -> bool {
    errs.iter().any(|e| e.key == key && e.message.contains(words))
}

#[test]
fn minimal_catalog_compiles() {
    let c = compile_catalog("t.toml", MINIMAL).unwrap();
    assert_eq!(c.lookup("A").unwrap().read.id.as_ref(), "t/A/read");
    assert!(c.lookup("a").is_none(), "codes are case-sensitive");
}

#[test]
fn unknown_keys_are_refused_with_a_line() {
    let e = errors(&MINIMAL.replace("max_attempts = 3", "max_attempts = 3\nmax_attemps = 4"));
    assert_eq!((e[0].line, e[0].key.as_str()), (Some(6), "max_attemps"), "{e:?}");
    assert!(e[0].message.contains("did you mean `max_attempts`"), "{e:?}");
}

#[test]
fn every_unknown_key_of_a_file_is_reported_with_its_line_and_path() {
    let text = MINIMAL
        .replace("max_attempts = 3", "max_attempts = 3\nmax_attemps = 4")
        .replace("cap_ms = 1000", "cap_ms = 1000\njitter = true")
        .replace(
            "write = { verdict = \"retry_with_limit\" }\n[unknown]",
            "write = { verdict = \"retry_with_limit\", acknowledge = true }\nwirte = 1\n[unknown]",
        );
    let e = errors(&text);
    let found: Vec<String> = e.iter().map(ToString::to_string).collect();
    assert_eq!(e.len(), 4, "{found:#?}");
    assert!(found[0].starts_with("t.toml:6: max_attemps: unknown key"), "{found:#?}");
    assert!(
        found[1].starts_with("t.toml:11: backoff.jitter: unknown key"),
        "{found:#?}"
    );
    assert!(
        found[2].starts_with("t.toml:20: codes[0].write.acknowledge: unknown key"),
        "{found:#?}"
    );
    assert!(
        found[3].starts_with("t.toml:21: codes[0].wirte: unknown key `wirte`; did you mean `write`?"),
        "{found:#?}"
    );
}

#[test]
fn syntax_errors_and_wrong_types_do_not_hide_the_rest_of_the_file() {
    let text = MINIMAL
        .replace("description = \"test\"", "description = test")
        .replace("max_attempts = 3", "max_attempts = \"three\"")
        .replace("[operations]", "[operations]\nrid = [\"get\"]");
    let e = errors(&text);
    let found: Vec<String> = e.iter().map(ToString::to_string).collect();
    assert!(
        found[0].starts_with("t.toml:3: description: TOML syntax: "),
        "{found:#?}"
    );
    assert!(
        found[1].starts_with("t.toml:5: max_attempts: invalid type"),
        "{found:#?}"
    );
    assert!(
        found[2].starts_with("t.toml:11: operations.rid: unknown key"),
        "{found:#?}"
    );
    // the line the parser skipped held a required key: no "missing" error for it
    assert_eq!(e.len(), 3, "{found:#?}");
}

#[test]
fn a_misspelled_verdict_is_one_error_not_two() {
    // A read rule that is not do_not_retry: a bad write verdict must not
    // be compared with it as if it were one.
    let e = errors(&MINIMAL.replace(
        "write = { verdict = \"retry_with_limit\" }\n[unknown]",
        "write = { verdict = \"retry_maybe\" }\n[unknown]",
    ));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(e[0].key, "codes[0].write.verdict");
    let e = errors(&MINIMAL.replace(
        "read = { verdict = \"retry_with_limit\" }\nwrite = { verdict = \"retry_with_limit\" }\n[unknown]",
        "read = { verdict = \"retry_maybe\" }\nwrite = { verdict = \"retry_with_limit\" }\n[unknown]",
    ));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(e[0].key, "codes[0].read.verdict");
}

#[test]
fn duplicate_codes_and_aliases_are_refused() {
    let dup = MINIMAL.replace(
        "[unknown]",
        "[[codes]]\ncode = \"B\"\naliases = [\"A\"]\ntarget_reached = \"no\"\ncondition = { en = \"b\", ru = \"б\" }\nread = { verdict = \"retry_with_limit\" }\nwrite = { verdict = \"retry_with_limit\" }\n[unknown]",
    );
    let e = errors(&dup);
    assert!(has(&e, "codes[1]", "duplicate code or alias \"A\""));
    assert_eq!(e[0].line, Some(19), "{e:?}");
    assert!(
        e[0].to_string().starts_with("t.toml:19: codes[1]: duplicate"),
        "{}",
        e[0]
    );
}

#[test]
fn a_write_less_conservative_than_its_read_needs_acknowledgement() {
    let text = MINIMAL.replace(
        "read = { verdict = \"retry_with_limit\" }\nwrite = { verdict = \"retry_with_limit\" }\n[unknown]",
        "read = { verdict = \"do_not_retry\" }\nwrite = { verdict = \"retry_with_limit\" }\n[unknown]",
    );
    assert!(has(&errors(&text), "codes[0].write.verdict", "less conservative"));
    let ok = text.replace(
        "write = { verdict = \"retry_with_limit\" }\n[unknown]",
        "write = { verdict = \"retry_with_limit\", acknowledge_less_conservative = true }\n[unknown]",
    );
    assert!(compile_catalog("t.toml", &ok).is_ok());
}

#[test]
fn delays_must_be_positive_and_ordered() {
    let e = errors(
        &MINIMAL
            .replace("base_ms = 100", "base_ms = 0")
            .replace("cap_ms = 1000", "cap_ms = 0"),
    );
    assert!(has(&e, "backoff.base_ms", "positive"));
    let e = errors(&MINIMAL.replace("cap_ms = 1000", "cap_ms = 10"));
    assert!(has(&e, "backoff.cap_ms", ">= backoff.base_ms"));
    let e = errors(&MINIMAL.replace("multiplier = 2.0", "multiplier = 0.5"));
    assert!(has(&e, "backoff.multiplier", ">= 1"));
}

#[test]
fn schedule_codes_need_a_schedule() {
    let e = errors(&MINIMAL.replace(
        "target_reached = \"no\"",
        "target_reached = \"no\"\ndelay = \"schedule\"",
    ));
    assert!(has(&e, "codes[0].delay", "non-empty schedule_ms"));
}

#[test]
fn every_declared_locale_needs_its_text() {
    let e = errors(&MINIMAL.replace("condition = { en = \"a\", ru = \"а\" }", "condition = { en = \"a\" }"));
    assert!(has(&e, "codes[0].condition.ru", "missing text"));
}

#[test]
fn unknown_words_are_refused() {
    let e = errors(&MINIMAL.replace(
        "write = { verdict = \"retry_with_limit\" }\n[unknown]",
        "write = { verdict = \"retry_maybe\" }\n[unknown]",
    ));
    assert!(has(&e, "codes[0].write.verdict", "unknown verdict \"retry_maybe\""));
    let e = errors(&MINIMAL.replace(
        "target_reached = \"no\"",
        "target_reached = \"no\"\ndelay = \"sometimes\"",
    ));
    assert!(has(&e, "codes[0].delay", "unknown delay"));
    let e = errors(&MINIMAL.replace(
        "write = { verdict = \"retry_with_limit\" }\n[unknown]",
        "write = { verdict = \"retry_with_limit\", side_effect = \"maybe\" }\n[unknown]",
    ));
    assert!(e[0].message.contains("maybe"), "{e:?}");
}

#[test]
fn fix_before_retry_names_its_transition() {
    let e = errors(&MINIMAL.replace("read = { verdict = \"retry_with_limit\" }\nwrite = { verdict = \"retry_with_limit\" }\n[unknown]", "read = { verdict = \"fix_before_retry\" }\nwrite = { verdict = \"fix_before_retry\", required_transition = \"x\" }\n[unknown]"));
    assert!(has(&e, "codes[0].read.required_transition", "transition"));
}

#[test]
fn broken_files_never_panic_and_missing_lines_are_not_reported_twice() {
    let text = crate::core::policy::EMBEDDED[0].1;
    let lines: Vec<&str> = text.lines().collect();
    // Each line dropped in turn, and the file cut every 61 bytes.
    for i in 0..lines.len() {
        let mut cut = lines.clone();
        cut.remove(i);
        let _ = compile_catalog("t.toml", &cut.join("\n"));
    }
    for end in (0..text.len()).step_by(61).filter(|e| text.is_char_boundary(*e)) {
        let _ = compile_catalog("t.toml", &text[..end]);
    }
    // A line broken in the middle is one syntax error, with no "missing"
    // error for the key the parser could not read.
    let broken = text.replacen("max_attempts = 5", "max_attempts = = 5", 1);
    let e = errors(&broken);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(e[0].message.starts_with("TOML syntax"), "{e:#?}");
}

#[test]
fn every_embedded_catalog_compiles() {
    for (file, text) in crate::core::policy::EMBEDDED {
        if let Err(e) = compile_catalog(file, text) {
            panic!("{file}: {e:?}");
        }
    }
}
