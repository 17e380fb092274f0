//! The operator console in a real browser: scripts/ui-check.py (headless
//! Chromium from Debian's packages, driven by Selenium) against this
//! build's binary — a hold placed through gRPC appears, explain shows the
//! verdict, no release button without a token, release with one. Skipped,
//! saying so, where Chromium, its driver or the Selenium venv that
//! scripts/ui-check.sh makes is missing; CI runs that script as a step of
//! its own.

use std::path::Path;
use std::process::Command;

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

#[test]
fn the_console_in_headless_chromium() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let missing: Vec<&str> = ["chromium", "chromedriver"]
        .into_iter()
        .filter(|p| !on_path(p))
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "SKIPPED the_console_in_headless_chromium: {} not installed (apt-get install chromium \
             chromium-driver, or run scripts/ui-check.sh, which CI does)",
            missing.join(" and ")
        );
        return;
    }
    let python = root.join("target/ui-venv/bin/python");
    let has_selenium = Command::new(&python)
        .args(["-c", "import selenium"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_selenium {
        eprintln!(
            "SKIPPED the_console_in_headless_chromium: no Selenium venv at {} (scripts/ui-check.sh makes it)",
            python.display()
        );
        return;
    }
    let out = Command::new(&python)
        .arg(root.join("scripts/ui-check.py"))
        .args(["--binary", env!("CARGO_BIN_EXE_retryd")])
        .env("SE_OFFLINE", "true")
        .output()
        .expect("run scripts/ui-check.py");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "scripts/ui-check.py failed:\n{printed}");
    assert!(printed.contains(" passed, 0 failed"), "{printed}");
}
