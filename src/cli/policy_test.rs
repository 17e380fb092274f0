//! `retryd policy test` and `retryd policy diff`, and the policy tests that
//! `retryd policy check` runs beside the files it checks.
//!
//! Exit codes (both commands): 0 nothing to report (every case passes; no
//! decision changes), 1 something to report (a case fails; a decision
//! changes, like `git diff --exit-code`), 2 a usage error or any other error
//! (a test file that cannot be read as one, a policy that does not load).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use crate::core::Policy;
use crate::core::policy::DEFAULT_CATALOG;
use crate::load;
use crate::safety::{diff, test};

/// Output format of `policy diff` and `replay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// For people.
    Text,
    /// One JSON object.
    Json,
}

/// Flags of `retryd policy test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Catalog files, test tables (`*.test.toml`) or directories of them;
    /// none: the embedded catalogs' own tests.
    pub paths: Vec<PathBuf>,
}

/// Flags of `retryd policy diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The policy in force: catalog files or a directory (on top of the
    /// embedded catalogs), or `embedded` for the embedded catalogs alone.
    pub old: PathBuf,
    /// The candidate, the same way.
    pub new: PathBuf,
    /// Only these catalogs (repeatable or comma-separated; default: every catalog).
    #[arg(long, value_delimiter = ',')]
    pub catalog: Vec<String>,
    /// `text` or `json`.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

/// Exit code 2: a usage error or any other error.
pub const EXIT_ERROR: u8 = 2;

/// What `paths` hold: catalog files and test tables.
#[derive(Debug, Default)]
struct Found {
    catalogs: Vec<PathBuf>,
    tests: Vec<PathBuf>,
}

fn find(paths: &[PathBuf]) -> Result<Found, String> {
    let mut found = Found::default();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut entries = Vec::new();
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))? {
                let p = entry.map_err(|e| format!("{}: {e}", path.display()))?.path();
                let visible = p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| !n.starts_with('.'));
                if visible && p.extension().is_some_and(|x| x == "toml") {
                    entries.push(p);
                }
            }
            entries.sort();
        } else {
            entries.push(path.clone());
        }
        for p in entries {
            if load::is_test_file(&p) {
                if !found.tests.contains(&p) {
                    found.tests.push(p);
                }
            } else if !found.catalogs.contains(&p) {
                found.catalogs.push(p);
            }
        }
    }
    // A test table given alone brings the catalog it sits beside.
    for t in found.tests.clone() {
        let beside = catalog_beside(&t);
        if beside.is_file() && !found.catalogs.contains(&beside) {
            found.catalogs.push(beside);
        }
    }
    Ok(found)
}

/// `x.toml` for `x.test.toml`.
pub(super) fn catalog_beside(test_file: &Path) -> PathBuf {
    let name = test_file.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    test_file.with_file_name(format!("{}.toml", name.trim_end_matches(".test.toml")))
}

/// `x.test.toml` for `x.toml`.
fn tests_beside(catalog: &Path) -> PathBuf {
    let stem = catalog.file_stem().and_then(|n| n.to_str()).unwrap_or_default();
    catalog.with_file_name(format!("{stem}.test.toml"))
}

/// The `name` a catalog file declares, if it can be read.
fn declared_name(text: &str) -> Option<String> {
    let v: toml::Table = toml::from_str(text).ok()?;
    v.get("name").and_then(|n| n.as_str()).map(str::to_owned)
}

/// Runs the test tables of `catalogs` (their `[[tests]]` and their
/// `x.test.toml`) and the `extra` test tables, against `policy`.
fn run_tables(catalogs: &[PathBuf], extra: &[PathBuf], policy: &Policy) -> test::Report {
    let mut report = test::Report::default();
    let mut seen: Vec<PathBuf> = Vec::new();
    for c in catalogs {
        let Ok(text) = load::read_file(c, load::DEFAULT_MAX_POLICY_BYTES) else {
            continue;
        };
        let name = declared_name(&text);
        if test::has_tests_section(&text) {
            report.merge(test::run_file(&c.display().to_string(), &text, policy, name.as_deref()));
        }
        let beside = tests_beside(c);
        if beside.is_file() {
            seen.push(beside.clone());
            report.merge(run_path(&beside, policy, name.as_deref()));
        }
    }
    for t in extra.iter().filter(|t| !seen.contains(t)) {
        let beside = catalog_beside(t);
        let name = std::fs::read_to_string(&beside).ok().and_then(|t| declared_name(&t));
        report.merge(run_path(t, policy, name.as_deref()));
    }
    report
}

fn run_path(path: &Path, policy: &Policy, catalog: Option<&str>) -> test::Report {
    let file = path.display().to_string();
    match load::read_file(path, load::DEFAULT_MAX_POLICY_BYTES) {
        Ok(text) => test::run_file(&file, &text, policy, catalog),
        Err(e) => test::Report {
            files: 1,
            errors: vec![format!("{file}:0: {e}")],
            ..test::Report::default()
        },
    }
}

/// `retryd policy test`.
pub fn run_test(args: &TestArgs) -> ExitCode {
    let report = if args.paths.is_empty() {
        let policy = match Policy::embedded() {
            Ok(p) => p,
            Err(e) => return error(&format!("embedded policy: {e}")),
        };
        let mut report = test::Report::default();
        for (file, text) in test::EMBEDDED_TESTS {
            let name = file.trim_start_matches("policies/").trim_end_matches(".test.toml");
            report.merge(test::run_file(file, text, &policy, Some(name)));
        }
        report
    } else {
        let found = match find(&args.paths) {
            Ok(f) => f,
            Err(e) => return error(&e),
        };
        let policy = match load::load_policy(&found.catalogs, DEFAULT_CATALOG) {
            Ok(p) => p,
            Err(e) => {
                for line in e.lines() {
                    eprintln!("{line}");
                }
                return ExitCode::from(EXIT_ERROR);
            }
        };
        let report = run_tables(&found.catalogs, &found.tests, &policy);
        if report.files == 0 {
            return error("no policy test here: no *.test.toml file and no catalog with a [[tests]] section");
        }
        report
    };
    print!("{}", report.to_text());
    test_exit(&report)
}

fn test_exit(report: &test::Report) -> ExitCode {
    if !report.errors.is_empty() {
        ExitCode::from(EXIT_ERROR)
    } else if !report.failed.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The tests beside the catalog files `files` that `policy check` checked
/// (each a valid catalog), and the test tables `extra` it was given by
/// name: `None` when there are none, else whether all pass (the report is
/// printed).
pub fn check_tests(files: &[PathBuf], extra: &[PathBuf]) -> Option<bool> {
    let has_tests = !extra.is_empty()
        || files.iter().any(|f| {
            tests_beside(f).is_file()
                || load::read_file(f, load::DEFAULT_MAX_POLICY_BYTES).is_ok_and(|t| test::has_tests_section(&t))
        });
    if !has_tests {
        return None;
    }
    let policy = match load::load_policy(files, DEFAULT_CATALOG) {
        Ok(p) => p,
        Err(e) => {
            for line in e.lines() {
                eprintln!("{line}");
            }
            return Some(false);
        }
    };
    let report = run_tables(files, extra, &policy);
    let text = report.to_text();
    let ok = report.errors.is_empty() && report.failed.is_empty();
    if ok {
        print!("{text}");
    } else {
        eprint!("{text}");
    }
    Some(ok)
}

fn error(message: &str) -> ExitCode {
    eprintln!("{message}");
    ExitCode::from(EXIT_ERROR)
}

/// Loads one side of a diff or a replay's policy: `embedded`, or paths on top of the embedded catalogs.
pub fn load_side(paths: &[PathBuf]) -> Result<Policy, String> {
    if paths.len() == 1 && paths[0] == Path::new("embedded") {
        return Policy::embedded().map_err(|e| e.to_string());
    }
    load::load_policy(paths, DEFAULT_CATALOG).map_err(|e| e.lines().join("\n"))
}

/// `retryd policy diff`.
pub fn run_diff(args: &DiffArgs) -> ExitCode {
    let old = match load_side(std::slice::from_ref(&args.old)) {
        Ok(p) => p,
        Err(e) => return error(&format!("OLD {}: {e}", args.old.display())),
    };
    let new = match load_side(std::slice::from_ref(&args.new)) {
        Ok(p) => p,
        Err(e) => return error(&format!("NEW {}: {e}", args.new.display())),
    };
    for c in &args.catalog {
        if old.catalog(c).is_none() && new.catalog(c).is_none() {
            return error(&format!(
                "--catalog: unknown catalog {c:?}; catalogs: {}",
                new.catalog_names()
            ));
        }
    }
    let d = diff::diff(&old, &new, &args.catalog);
    match args.format {
        ReportFormat::Text => print!("{}", diff::to_text(&d)),
        ReportFormat::Json => match serde_json::to_string_pretty(&d) {
            Ok(s) => println!("{s}"),
            Err(e) => return error(&e.to_string()),
        },
    }
    if d.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
