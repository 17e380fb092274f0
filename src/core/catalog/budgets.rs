//! The `[[budgets]]` part of a catalog: fleet retry budgets, declared per
//! scope (see `core::budget` for what they mean).

use serde::Deserialize;

use crate::core::budget::{BudgetRule, BudgetScope, MAX_WINDOW_MS, MIN_WINDOW_MS};

/// One `[[budgets]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSource {
    /// `dependency` (catalog + dependency) or `tenant` (catalog + dependency + tenant).
    pub scope: String,
    /// The window: whole seconds, minutes, hours or days, e.g. `10s`, `15m`, `1h`, `1d`.
    pub window: String,
    /// Share of the window's first attempts (of the allowance when
    /// `requests` is set) that retries may be, in percent (0–100).
    pub retry_percent: u32,
    /// The floor for quiet scopes, in retries per second of window (default 0).
    #[serde(default)]
    pub min_retries_per_sec: Option<u32>,
    /// An allowance budget: first attempts allowed per window.
    #[serde(default)]
    pub requests: Option<u64>,
}

/// Parses `10s`, `15m`, `1h`, `1d` into milliseconds.
pub fn parse_window(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    let unit_ms = match unit.trim() {
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(unit_ms)
}

/// Compiles one budget, returning `(key suffix, message)` problems.
pub fn compile_budget(s: &BudgetSource) -> Result<BudgetRule, Vec<(&'static str, String)>> {
    let mut errors = Vec::new();
    let scope = match s.scope.as_str() {
        "dependency" => Some(BudgetScope::Dependency),
        "tenant" => Some(BudgetScope::Tenant),
        other => {
            errors.push((
                "scope",
                format!("unknown budget scope {other:?}; known: dependency, tenant"),
            ));
            None
        }
    };
    let window_ms = match parse_window(&s.window) {
        Some(ms) if (MIN_WINDOW_MS..=MAX_WINDOW_MS).contains(&ms) => Some(ms),
        Some(_) => {
            errors.push(("window", format!("{:?} is outside 1s … 1d", s.window)));
            None
        }
        None => {
            errors.push((
                "window",
                format!(
                    "{:?} is not a window such as \"10s\", \"15m\", \"1h\", \"1d\"",
                    s.window
                ),
            ));
            None
        }
    };
    if s.retry_percent > 100 {
        errors.push(("retry_percent", "must be between 0 and 100".to_owned()));
    }
    if s.requests == Some(0) {
        errors.push(("requests", "must be positive".to_owned()));
    }
    if s.retry_percent == 0 && s.min_retries_per_sec.unwrap_or(0) == 0 {
        errors.push((
            "retry_percent",
            "with no min_retries_per_sec, 0 % would defer every retry; give one of them".to_owned(),
        ));
    }
    match (scope, window_ms) {
        (Some(scope), Some(window_ms)) if errors.is_empty() => Ok(BudgetRule {
            scope,
            window_ms,
            retry_percent: s.retry_percent,
            min_retries_per_sec: s.min_retries_per_sec.unwrap_or(0),
            requests: s.requests,
        }),
        _ => Err(errors),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(scope: &str, window: &str, pct: u32) -> BudgetSource {
        BudgetSource {
            scope: scope.into(),
            window: window.into(),
            retry_percent: pct,
            min_retries_per_sec: Some(10),
            requests: None,
        }
    }

    #[test]
    fn windows_parse_in_whole_units() {
        assert_eq!(parse_window("10s"), Some(10_000));
        assert_eq!(parse_window("15m"), Some(900_000));
        assert_eq!(parse_window("1d"), Some(86_400_000));
        assert_eq!(parse_window("10"), None);
        assert_eq!(parse_window("s"), None);
        assert_eq!(parse_window("2w"), None);
    }

    #[test]
    fn budgets_are_validated() {
        let ok = compile_budget(&source("dependency", "10s", 20)).unwrap();
        assert_eq!((ok.window_ms, ok.floor(), ok.allowed(1_000)), (10_000, 100, 300));
        let bad = compile_budget(&BudgetSource {
            requests: Some(0),
            ..source("planet", "2d", 101)
        })
        .unwrap_err();
        let keys: Vec<_> = bad.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["scope", "window", "retry_percent", "requests"]);
    }
}
