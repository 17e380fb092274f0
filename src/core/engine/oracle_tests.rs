//! The seed's own JavaScript classifier as an oracle: for every Vibecode
//! code (and unknown and empty codes) × read / write / unspecified, the
//! engine's verdict equals `classifyRetry(code, operationKind)`.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use super::matrix_tests::{NOW, policy};
use super::*;
use crate::core::model::{Failure, Operation};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/seed_classifier.js");

fn run_oracle(cases: &[(String, Option<&str>)]) -> Vec<String> {
    let mut child = Command::new("node")
        .arg(FIXTURE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node must be installed to run the seed's classifier (see .ci/run)");
    let input = serde_json::to_vec(cases).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "node failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn engine_agrees_with_the_seed_classifier() {
    let p = policy();
    let catalog = p.catalog("vibecode").unwrap();
    let mut codes: Vec<String> = catalog.codes().iter().map(|e| e.code.to_string()).collect();
    codes.extend(["UNKNOWN_CODE".into(), String::new(), "bitrix_timeout".into()]);
    let ops = [
        (Operation::Read, Some("read")),
        (Operation::Write, Some("write")),
        (Operation::Unspecified, None),
    ];
    let cases: Vec<(String, Option<&str>)> = codes
        .iter()
        .flat_map(|c| ops.iter().map(move |(_, js)| (c.clone(), *js)))
        .collect();
    let expected = run_oracle(&cases);
    assert_eq!(expected.len(), cases.len());
    let mut i = 0;
    for code in &codes {
        for (op, js) in ops {
            let d = decide(
                p,
                &Failure {
                    code,
                    operation: op,
                    ..Failure::default()
                },
                NOW,
            )
            .unwrap();
            assert_eq!(d.verdict.as_str(), expected[i], "{code:?} × {js:?}");
            i += 1;
        }
    }
}

/// The fixture's classifier is the seed's, byte for byte, when the
/// specification is checked out beside the repository (as in CI).
#[test]
fn fixture_matches_the_seed() {
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/seeds/000_d79a45692f9971f5.txt");
    let Ok(seed) = std::fs::read_to_string(&seed) else {
        eprintln!("specification not beside the repository; fixture comparison not possible here");
        return;
    };
    let fixture = std::fs::read_to_string(FIXTURE).unwrap();
    let between = |s: &str, a: &str, b: &str| -> String {
        let start = s.find(a).unwrap() + a.len();
        let end = start + s[start..].find(b).unwrap();
        s[start..end].trim().to_owned()
    };
    assert_eq!(
        between(&fixture, "// --- seed begin ---", "// --- seed end ---"),
        between(&seed, "```javascript", "```")
    );
}
