//! `retryd policy check` and `retryd policy matrix` (`test` and `diff` are in
//! [`super::policy_test`]): catalogs as data that
//! operators can validate in their own CI and read as a table.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::core::catalog::{Catalog, amend, compile_catalog};
use crate::core::hold::HoldKind;
use crate::core::policy::duplicate_name;
use crate::core::{Locale, TargetReached, Verdict};
use crate::load;

/// `retryd policy …`
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate catalog files: exit 0, or print every error and exit 1.
    Check(CheckArgs),
    /// Print a catalog's decision matrix as a Markdown table.
    Matrix(MatrixArgs),
    /// Run policy tests (`*.test.toml` beside catalogs, or `[[tests]]`): 0 all pass, 1 a case fails, 2 an error.
    Test(super::policy_test::TestArgs),
    /// Decide every input under two policies and print what changes: 0 nothing, 1 changes, 2 an error.
    Diff(super::policy_test::DiffArgs),
}

/// Flags of `retryd policy check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Catalog files (`.toml`) or directories of them.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Largest catalog file accepted, in bytes (as `retryd serve --max-policy-bytes`).
    #[arg(long, env = "RETRYD_MAX_POLICY_BYTES", default_value_t = load::DEFAULT_MAX_POLICY_BYTES)]
    pub max_policy_bytes: u64,
}

/// Flags of `retryd policy matrix`.
#[derive(Debug, Args)]
pub struct MatrixArgs {
    /// The catalog.
    #[arg(long, default_value = "vibecode")]
    pub catalog: String,
    /// Language of the conditions: en or ru.
    #[arg(long, default_value = "en")]
    pub locale: String,
    /// Catalog files or directories loaded on top of the embedded catalogs (repeatable).
    #[arg(long, env = "RETRYD_POLICY", value_delimiter = ',')]
    pub policy: Vec<PathBuf>,
}

/// Runs a `policy` subcommand.
pub fn run(cmd: &PolicyCommand) -> ExitCode {
    match cmd {
        PolicyCommand::Check(args) => check(args),
        PolicyCommand::Matrix(args) => matrix_command(args),
        PolicyCommand::Test(args) => super::policy_test::run_test(args),
        PolicyCommand::Diff(args) => super::policy_test::run_diff(args),
    }
}

fn check(args: &CheckArgs) -> ExitCode {
    let files = match load::catalog_files(&args.paths) {
        Ok(files) => files,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    // A test table named as such (`policy check examples/policies/*.toml`
    // names payments.test.toml too) is run as a test, never read as a
    // catalog; it brings the catalog it sits beside.
    let (tests, mut files): (Vec<_>, Vec<_>) = files.into_iter().partition(|f| load::is_test_file(f));
    for t in &tests {
        let beside = super::policy_test::catalog_beside(t);
        if beside.is_file() && !files.contains(&beside) {
            files.push(beside);
        }
    }
    if files.is_empty() && !tests.is_empty() {
        return match super::policy_test::check_tests(&files, &tests) {
            Some(false) => ExitCode::FAILURE,
            _ => ExitCode::SUCCESS,
        };
    }
    if files.is_empty() {
        let paths: Vec<String> = args.paths.iter().map(|p| p.display().to_string()).collect();
        eprintln!(
            "{}: no .toml catalog file here (a directory contributes the .toml files directly in it); nothing to check",
            paths.join(", ")
        );
        return ExitCode::FAILURE;
    }
    let mut failed = false;
    // (catalog name, file) of each file that compiled, for duplicate names.
    let mut declared: Vec<(String, String)> = Vec::new();
    for file in &files {
        let name = file.display().to_string();
        let text = match load::read_file(file, args.max_policy_bytes) {
            Ok(text) => text,
            Err(e) => {
                failed = true;
                eprintln!("{e}");
                continue;
            }
        };
        if crate::core::catalog::amend::extends_of(&text).is_some() {
            // An amendment is checked merged onto its base, below.
            continue;
        }
        match compile_catalog(&name, &text) {
            Ok(c) => match declared.iter().find(|(n, _)| *n == *c.name) {
                Some((_, first)) => {
                    failed = true;
                    eprintln!("{}", duplicate_name(&name, &text, &c.name, first));
                }
                None => declared.push((c.name.to_string(), name)),
            },
            Err(errors) => {
                failed = true;
                for e in errors {
                    eprintln!("{e}");
                }
            }
        }
    }
    if failed {
        return ExitCode::FAILURE;
    }
    // The files together with the embedded catalogs: amendments merged onto
    // their bases, and an embedded catalog replaced whole only on purpose.
    match load::load_policy_limited(&files, crate::core::policy::DEFAULT_CATALOG, args.max_policy_bytes) {
        Ok(policy) => {
            if !policy.notes().is_empty() {
                for note in policy.notes() {
                    eprintln!("error: {note}");
                }
                return ExitCode::FAILURE;
            }
        }
        Err(e) => {
            for line in e.lines() {
                eprintln!("{line}");
            }
            return ExitCode::FAILURE;
        }
    }
    println!("{} catalog file(s) OK", files.len());
    // The policy tests beside the files checked (x.test.toml, [[tests]]).
    match super::policy_test::check_tests(&files, &tests) {
        Some(false) => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    }
}

fn matrix_command(args: &MatrixArgs) -> ExitCode {
    let policy = match load::load_policy(&args.policy, crate::core::policy::DEFAULT_CATALOG) {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "retryd policy matrix: {}: {e}",
                crate::cli::classify::policy_origin(std::env::args_os())
            );
            return ExitCode::from(2);
        }
    };
    let Some(locale) = Locale::parse(&args.locale) else {
        eprintln!(
            "retryd policy matrix: --locale: {:?} is not supported; use en or ru",
            args.locale
        );
        return ExitCode::from(2);
    };
    match policy.catalog(&args.catalog) {
        Some(c) => {
            print!("{}", matrix(c, locale));
            ExitCode::SUCCESS
        }
        None => {
            eprintln!(
                "retryd policy matrix: --catalog: unknown catalog {:?}; catalogs: {}",
                args.catalog,
                policy.catalog_names()
            );
            ExitCode::from(2)
        }
    }
}

/// The catalog's decision matrix in the seed's shape: code, did the target
/// call reach, read, write, condition.
pub fn matrix(c: &Catalog, locale: Locale) -> String {
    let ru = locale == Locale::Ru;
    let mut out = String::new();
    let head = if ru {
        "| Код | Дошёл ли целевой вызов | Чтение | Запись | Условие и пояснение |"
    } else {
        "| Code | Did the target call reach the dependency | Read | Write | Condition and explanation |"
    };
    if let Some(base) = c.extends() {
        let _ = if ru {
            writeln!(
                out,
                "Дополняет каталог `{base}`: коды с пометкой *(amended)* изменены, *(added)* добавлены.\n"
            )
        } else {
            writeln!(
                out,
                "Amends `{base}`: codes marked *(amended)* are changed, *(added)* are new; the rest are `{base}`'s as they are.\n"
            )
        };
    }
    let _ = writeln!(out, "{head}\n|---|---|---|---|---|");
    let mark = |code: &str| match c.origin_of(code) {
        Some(o @ (amend::CodeOrigin::Amended(_) | amend::CodeOrigin::Added(_))) => format!(" *({})*", o.as_str()),
        _ => String::new(),
    };
    let rows = c
        .codes()
        .iter()
        .map(|e| (format!("`{}`{}", e.code, mark(&e.code)), e))
        .chain([
            (
                if ru {
                    "*неизвестный код*"
                } else {
                    "*unknown code*"
                }
                .to_owned(),
                c.unknown(),
            ),
            (
                if ru {
                    "*нет конверта*"
                } else {
                    "*no envelope*"
                }
                .to_owned(),
                c.no_envelope(),
            ),
        ]);
    for (code, e) in rows {
        let aliases: String = e.aliases.iter().map(|a| format!(" (`{a}`)")).collect();
        let _ = writeln!(
            out,
            "| {code}{aliases} | {} | {} | {} | {} |",
            reached(e.target_reached, ru),
            verdict(e.read.verdict, ru),
            verdict(e.write.verdict, ru),
            e.condition.get(locale).replace('|', "\\|")
        );
    }
    holds_list(&mut out, c, ru);
    budgets_list(&mut out, c, ru);
    out
}

/// The fleet retry budgets the catalog declares, as a list under the table.
fn budgets_list(out: &mut String, c: &Catalog, ru: bool) {
    if c.budgets.is_empty() {
        return;
    }
    let head = if ru {
        "Бюджеты повторов для всего парка (fleet retry budgets; сверх бюджета повтор откладывается, а не запрещается):"
    } else {
        "Fleet retry budgets (over budget a retry is deferred, not refused):"
    };
    let _ = writeln!(out, "\n{head}\n");
    for b in &c.budgets {
        let per = match b.scope {
            crate::core::budget::BudgetScope::Dependency => "per dependency",
            crate::core::budget::BudgetScope::Tenant => "per tenant of a dependency",
        };
        let _ = writeln!(out, "- {per}: retries at most {}", b.describe());
    }
}

/// The fleet holds the catalog's rules place, as a list under the table
/// (the table keeps the seed's shape).
fn holds_list(out: &mut String, c: &Catalog, ru: bool) {
    let mut lines = Vec::new();
    for e in c.codes().iter().chain([c.unknown(), c.no_envelope()]) {
        let rules = [
            ("read", Some(&e.read)),
            ("write", Some(&e.write)),
            ("retried_write", e.retried_write.as_ref()),
            ("write_with_retry_after", e.write_with_retry_after.as_ref()),
        ];
        let present = rules.iter().filter(|(_, r)| r.is_some()).count();
        let mut ops: Vec<(&str, crate::core::catalog::HoldRule)> = Vec::new();
        for (op, rule) in rules {
            if let Some(h) = rule.and_then(|r| r.hold) {
                ops.push((op, h));
            }
        }
        let Some((_, h)) = ops.first().copied() else { continue };
        let same = ops.len() == present && ops.iter().all(|(_, o)| *o == h);
        let which = if same {
            String::new()
        } else {
            format!(" ({})", ops.iter().map(|(op, _)| *op).collect::<Vec<_>>().join(", "))
        };
        let until = match h.kind {
            HoldKind::Pause | HoldKind::Quarantine => match h.hold_ms {
                Some(ms) => format!("the Retry-After, else {ms} ms"),
                None => "the Retry-After (none: no hold)".to_owned(),
            },
            HoldKind::QuotaStop => match &c.quota {
                Some(q) => format!("the reset ({}), or the failure's `quota_resets_at`", q.describe()),
                None => "the failure's `quota_resets_at`, else the Retry-After".to_owned(),
            },
            HoldKind::CircuitOpen => format!("a probe succeeds (one per {} ms), at most the cap", h.probe_every_ms),
        };
        let until = if h.probe_window_ms > 0 {
            format!(
                "{until}, then one probe: lifted on its success or after {} ms without a failure",
                h.probe_window_ms
            )
        } else {
            until
        };
        lines.push(format!(
            "- `{}`{which}: {} on the {} until {until}",
            e.code,
            h.kind.as_str(),
            h.scope.as_str()
        ));
    }
    if lines.is_empty() {
        return;
    }
    let head = if ru {
        "Удержания для всего парка (fleet holds; потолок задержек"
    } else {
        "Fleet holds (every delay and hold capped at"
    };
    let _ = writeln!(out, "\n{head} {} ms):\n", c.max_delay_ms);
    for l in lines {
        let _ = writeln!(out, "{l}");
    }
}

fn reached(t: TargetReached, ru: bool) -> &'static str {
    match (t, ru) {
        (TargetReached::No, false) => "No",
        (TargetReached::Yes, false) => "Yes",
        (TargetReached::Unknown, false) => "Unknown",
        (TargetReached::No, true) => "Нет",
        (TargetReached::Yes, true) => "Да",
        (TargetReached::Unknown, true) => "Неизвестно",
    }
}

fn verdict(v: Verdict, ru: bool) -> &'static str {
    match (v, ru) {
        (Verdict::RetryWithLimit, false) => "Retry is safe",
        (Verdict::StateVerificationRequired, false) => "Read back first",
        (Verdict::FixBeforeRetry, false) => "Retry after fixing the cause",
        (Verdict::DoNotRetry, false) => "Do not retry automatically",
        (Verdict::AlreadyApplied, false) => "Already applied",
        (Verdict::RetryWithLimit, true) => "Повтор безопасен",
        (Verdict::StateVerificationRequired, true) => "Сначала перечитать",
        (Verdict::FixBeforeRetry, true) => "Повтор после исправления причины",
        (Verdict::DoNotRetry, true) => "Не повторять автоматически",
        (Verdict::AlreadyApplied, true) => "Уже применено",
    }
}
