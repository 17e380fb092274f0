//! Log output: text or JSON lines on stderr, filtered by `--log-level`
//! unless RUST_LOG is set.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

use super::config::LogFormat;

/// Installs the global subscriber. Fails on an invalid filter; if a
/// subscriber is already installed (e.g. in tests), that one is kept.
pub fn init(format: LogFormat, level: &str) -> Result<(), String> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.trim().is_empty() => {
            EnvFilter::try_new(&env).map_err(|e| format!("RUST_LOG={env:?} is not a valid filter: {e}"))?
        }
        _ => EnvFilter::try_new(level).map_err(|e| format!("--log-level {level:?} is not a valid filter: {e}"))?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        // Caller-supplied strings are escaped and quoted (one record, one
        // line; no forged fields): see log_fields.
        LogFormat::Text => builder
            .fmt_fields(super::log_fields::EscapedFields)
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).try_init(),
    };
    if installed.is_err() {
        tracing::debug!("a tracing subscriber was already installed; keeping it");
    }
    Ok(())
}

/// Routes panic messages through the log (so JSON logs stay JSON lines).
pub fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(non-string panic payload)");
        tracing::error!(location, panic = message, "panic");
    }));
}
