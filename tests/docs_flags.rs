//! docs/flags.md names every flag of `retryd serve`, `classify` and
//! `health`, with its environment twin where it has one: the reference
//! stays true as flags are added.

use std::process::Command;

/// The long flags and `[env: …]` names of `retryd <cmd> --help`.
fn flags_of(cmd: &str) -> Vec<(String, Option<String>)> {
    let out = Command::new(env!("CARGO_BIN_EXE_retryd"))
        .args([cmd, "--help"])
        .output()
        .expect("run retryd");
    let help = String::from_utf8(out.stdout).expect("utf-8");
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        // `--flag …` or `-x, --flag …`: a flag line starts with a dash.
        let long = t.starts_with('-').then(|| t.find("--").map(|i| &t[i..])).flatten();
        if let Some(rest) = long.and_then(|l| l.strip_prefix("--")) {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if name != "help" && name != "version" {
                flags.push((format!("--{name}"), None));
            }
        } else if let Some(env) = t.strip_prefix("[env: ") {
            let env: String = env
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if let Some(last) = flags.last_mut() {
                last.1 = Some(env);
            }
        }
    }
    flags
}

#[test]
fn every_flag_and_its_environment_twin_is_in_the_reference() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/flags.md")).expect("docs/flags.md");
    let mut missing = Vec::new();
    for cmd in ["serve", "classify", "health"] {
        let flags = flags_of(cmd);
        assert!(flags.len() >= 3, "{cmd}: {flags:?}");
        for (flag, env) in flags {
            if !names(&doc, &flag) {
                missing.push(format!("{cmd} {flag}"));
            }
            // `serve`'s table gives each flag's twin; the others name theirs in prose.
            if let Some(env) = env.filter(|e| cmd == "serve" && !names(&doc, e)) {
                missing.push(format!("{cmd} {flag}: {env}"));
            }
        }
    }
    assert!(missing.is_empty(), "not in docs/flags.md: {missing:#?}");
}

/// Whether `doc` names `word` whole (not as the start of a longer flag).
fn names(doc: &str, word: &str) -> bool {
    doc.match_indices(word).any(|(i, _)| {
        let after = doc[i + word.len()..].chars().next();
        let before = doc[..i].chars().next_back();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}
