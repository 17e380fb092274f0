//! `retryd classify`: decide one failure locally, on the embedded policy.

use std::io::Write as _;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

pub use crate::doors::render::{Format, asc_contract, render};

use crate::core::{Failure, Operation, ReadBack, UnixMillis, decide, limits};

/// Flags of `retryd classify`.
#[derive(Debug, Args)]
pub struct ClassifyArgs {
    /// Catalog of codes; empty: the default catalog, vibecode.
    #[arg(long, default_value = "")]
    pub catalog: String,
    /// The error code; empty means no platform envelope (a network error).
    #[arg(long, default_value = "")]
    pub code: String,
    /// Read or write; omitted: inferred from --method, else write.
    #[arg(long, value_enum)]
    pub operation: Option<OperationArg>,
    /// The dependency's method, e.g. crm.deal.add.
    #[arg(long, default_value = "")]
    pub method: String,
    /// 1-based number of the attempt that failed.
    #[arg(long, default_value_t = 1)]
    pub attempt: u32,
    /// The caller's attempt limit (0: the catalog's).
    #[arg(long, default_value_t = 0)]
    pub max_attempts: u32,
    /// Raw Retry-After: delta-seconds or an HTTP-date.
    #[arg(long, default_value = "")]
    pub retry_after: String,
    /// Already parsed delay in milliseconds.
    #[arg(long)]
    pub retry_after_ms: Option<u64>,
    /// No attempt after this time (RFC 3339, e.g. 2026-08-08T12:05:00Z).
    #[arg(long, value_parser = parse_deadline)]
    pub deadline: Option<UnixMillis>,
    /// The idempotency key the call was sent with.
    #[arg(long, default_value = "")]
    pub idempotency_key: String,
    /// The dependency deduplicates by the idempotency key.
    #[arg(long)]
    pub idempotency_key_enforced: bool,
    /// What a read-back of the state found.
    #[arg(long, value_enum)]
    pub read_back: Option<ReadBackArg>,
    /// There is no reliable way to verify the write's effect.
    #[arg(long)]
    pub cannot_verify_effect: bool,
    /// X-Request-Id of the failed response (diagnostics only).
    #[arg(long, default_value = "")]
    pub request_id: String,
    /// The caller's tenant.
    #[arg(long, default_value = "")]
    pub tenant: String,
    /// Which instance of the dependency (a portal, a host): the key of dependency holds.
    #[arg(long, default_value = "")]
    pub dependency: String,
    /// The dependency's own word on when its allowance resets (RFC 3339).
    #[arg(long, value_parser = parse_deadline)]
    pub quota_resets_at: Option<UnixMillis>,
    /// Language of the reason: en or ru.
    #[arg(long, default_value = "en")]
    pub locale: String,
    /// Output: text for people, json for the whole decision, asc for the seed's contract shape.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Catalog files or directories loaded on top of the embedded catalogs (repeatable).
    #[arg(long, env = "RETRYD_POLICY", value_delimiter = ',')]
    pub policy: Vec<std::path::PathBuf>,
    /// Decide as of this time instead of now (RFC 3339), for reproducible output.
    #[arg(long, value_parser = parse_deadline)]
    pub now: Option<UnixMillis>,
}

/// `--operation` values.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OperationArg {
    /// Does not change data.
    Read,
    /// Changes data.
    Write,
}

/// `--read-back` values.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReadBackArg {
    /// The effect was found.
    Present,
    /// The effect is verifiably absent.
    Absent,
    /// The read-back could not tell.
    Inconclusive,
}

fn parse_deadline(s: &str) -> Result<UnixMillis, String> {
    UnixMillis::parse_rfc3339(s).ok_or_else(|| format!("{s:?} is not an RFC 3339 time such as 2026-08-08T12:05:00Z"))
}

impl ClassifyArgs {
    /// The failure these flags describe.
    pub fn failure(&self) -> Failure<'_> {
        Failure {
            catalog: &self.catalog,
            code: &self.code,
            operation: match self.operation {
                None => Operation::Unspecified,
                Some(OperationArg::Read) => Operation::Read,
                Some(OperationArg::Write) => Operation::Write,
            },
            method: &self.method,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            retry_after: &self.retry_after,
            retry_after_ms: self.retry_after_ms,
            deadline: self.deadline,
            idempotency_key: &self.idempotency_key,
            idempotency_key_enforced: self.idempotency_key_enforced,
            read_back: match self.read_back {
                None => ReadBack::NotDone,
                Some(ReadBackArg::Present) => ReadBack::EffectPresent,
                Some(ReadBackArg::Absent) => ReadBack::EffectAbsent,
                Some(ReadBackArg::Inconclusive) => ReadBack::Inconclusive,
            },
            cannot_verify_effect: self.cannot_verify_effect,
            request_id: &self.request_id,
            tenant: &self.tenant,
            upstream: None,
            locale: &self.locale,
            dependency: &self.dependency,
            quota_resets_at: self.quota_resets_at,
            probe_token: "",
        }
    }
}

/// Runs `retryd classify`: 0 on a decision, 2 on bad input.
pub fn run(args: &ClassifyArgs) -> ExitCode {
    let policy = match crate::load::load_policy(&args.policy, crate::core::policy::DEFAULT_CATALOG) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("retryd classify: {}: {e}", policy_origin(std::env::args_os()));
            return ExitCode::from(2);
        }
    };
    let failure = args.failure();
    if let Err(v) = limits::check(&failure) {
        eprintln!("retryd classify: --{}: {}", v.field.replace('_', "-"), v.description);
        return ExitCode::from(2);
    }
    let now = args.now.unwrap_or_else(UnixMillis::now);
    match decide(&policy, &failure, now) {
        Ok(decision) => {
            // A closed pipe (`| head -1`) ends the output, not in a panic.
            let _ = writeln!(std::io::stdout().lock(), "{}", render(&decision, args.format));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("retryd classify: --catalog: {e}");
            ExitCode::from(2)
        }
    }
}

/// Where the policy paths came from, for an error message: `--policy`, or
/// its environment twin when the command line has no `--policy`.
pub fn policy_origin(args: impl IntoIterator<Item = std::ffi::OsString>) -> &'static str {
    let on_command_line = args.into_iter().any(|a| {
        let a = a.to_string_lossy();
        a == "--policy" || a.starts_with("--policy=")
    });
    if on_command_line { "--policy" } else { "RETRYD_POLICY" }
}
