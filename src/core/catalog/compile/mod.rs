//! Parsing and validating one catalog file into a [`Catalog`]. Every problem
//! is collected, not just the first, so `retryd policy check` can list them:
//! TOML syntax errors (the parser recovers and goes on), unknown keys, values
//! of the wrong type, and meaning. A value that could not be read does not
//! feed later checks, so one mistake is reported once.
//!
//! Here: the compiler's state and its bookkeeping; [`catalog`] reads the
//! catalog's own keys, [`codes`] its codes and rules, [`suggest`] the
//! "did you mean" hints.

use serde::Deserialize as _;
use serde::de::IntoDeserializer as _;
use toml::de::DeTable;

use super::holds::{DEFAULT_MAX_DELAY_MS, compile_hold, compile_quota};
use super::locate::{Lines, keys_on_lines, line_of_key_in};
use super::source::{CatalogSource, CodeSource, Field, RuleSource, TextSource, UnknownKeys};
use super::{Backoff, Catalog, CodeEntry, DelayKind, LocalText, Rule};
use crate::core::model::{Locale, SideEffectState, TargetReached, TerminalState, Verdict};

/// One problem in a catalog file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{}: {key}: {message}", line.map_or_else(|| "?".to_owned(), |l| l.to_string()))]
pub struct CatalogError {
    /// The file (or embedded name) the catalog came from.
    pub file: String,
    /// The 1-based line of the key (or of the nearest enclosing key that exists).
    pub line: Option<usize>,
    /// The key path, e.g. `codes[3].write.verdict`; for a TOML syntax error,
    /// the key on that line, or `toml` when there is none.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// Parses and validates `text` (from `file`) into a catalog.
pub fn compile_catalog(file: &str, text: &str) -> Result<Catalog, Vec<CatalogError>> {
    let (root, syntax) = DeTable::parse_recoverable(text);
    let lines = Lines::of_text(text);
    let mut c = Compiler {
        file,
        errors: Vec::new(),
        locales: Vec::new(),
        locales_known: true,
        name: String::new(),
        // A line the parser had to skip may have held a required key: say
        // nothing is missing until the syntax is fixed.
        report_missing: syntax.is_empty(),
        max_delay_ms: DEFAULT_MAX_DELAY_MS,
        has_quota: false,
    };
    let mut located: Vec<_> = syntax
        .iter()
        .map(|e| (e.span().map(|s| lines.line(s.start)), e))
        .collect();
    // The parser's first complaint about a line is the one that says what
    // is wrong; the others on that line follow from it (and are dropped
    // before their messages are formatted: garbage gives many per line).
    located.dedup_by(|later, first| later.0.is_some() && later.0 == first.0);
    let mut errors: Vec<CatalogError> = located
        .into_iter()
        .map(|(line, e)| CatalogError {
            file: file.to_owned(),
            line,
            key: String::new(),
            message: format!("TOML syntax: {}", one_line(e.message())),
        })
        .collect();
    let mut syntax_lines: Vec<usize> = errors.iter().filter_map(|e| e.line).collect();
    syntax_lines.sort_unstable();
    syntax_lines.dedup();
    let keys = keys_on_lines(root.get_ref(), &lines, &syntax_lines);
    for e in &mut errors {
        let key = e
            .line
            .and_then(|l| syntax_lines.binary_search(&l).ok())
            .and_then(|i| keys[i].clone());
        e.key = key.unwrap_or_else(|| "toml".to_owned());
    }
    // The deserializer consumes a tree; a copy of it (strings borrowed from
    // `text`) is kept to place the errors found later, not a second parse.
    let tree = root.get_ref().clone();
    let catalog = match CatalogSource::deserialize(root.into_deserializer()) {
        Ok(source) => Some(c.catalog(source)),
        Err(e) => {
            c.errors.push(CatalogError {
                file: file.to_owned(),
                line: e.span().map(|s| lines.line(s.start)),
                key: "toml".to_owned(),
                message: one_line(e.message()),
            });
            None
        }
    };
    for mut e in c.errors {
        if e.line.is_none() {
            e.line = line_of_key_in(&tree, &lines, &e.key);
        }
        // The parser's stand-in for a value it could not read is no value of
        // the file's: its syntax error is the one to report on that line.
        if e.line.is_none_or(|l| syntax_lines.binary_search(&l).is_err()) {
            errors.push(e);
        }
    }
    match catalog {
        Some(catalog) if errors.is_empty() => Ok(catalog),
        _ => {
            // In file order; errors without a line last.
            errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
            Err(errors)
        }
    }
}

fn one_line(message: &str) -> String {
    message.trim().lines().map(str::trim).collect::<Vec<_>>().join("; ")
}

/// `parent.key`, or `key` at the top.
fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

struct Compiler<'f> {
    file: &'f str,
    errors: Vec<CatalogError>,
    locales: Vec<Locale>,
    /// `locales` was read (if not, texts are not checked against it).
    locales_known: bool,
    name: String,
    report_missing: bool,
    /// The catalog's cap on delays and holds (codes may override it).
    max_delay_ms: u64,
    /// The catalog has a `[quota]` reset rule.
    has_quota: bool,
}

mod catalog;
mod codes;
mod suggest;
#[cfg(test)]
mod tests;

use codes::placeholder_entry;
use suggest::closest;

impl Compiler<'_> {
    pub(super) fn err(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.errors.push(CatalogError {
            file: self.file.to_owned(),
            line: None,
            key: key.into(),
            message: message.into(),
        });
    }

    /// A required key: its value, or an error and `None`.
    pub(super) fn required<T>(&mut self, key: &str, field: Field<T>) -> Option<T> {
        match field {
            Field::Value(v) => Some(v),
            Field::Missing => {
                if self.report_missing {
                    self.err(key, "missing (required)");
                }
                None
            }
            Field::Invalid(message) => {
                self.err(key, message);
                None
            }
        }
    }

    /// An optional key: `Some(None)` when absent, `None` (and an error) when
    /// its value could not be read.
    pub(super) fn optional<T>(&mut self, key: &str, field: Field<T>) -> Option<Option<T>> {
        match field {
            Field::Value(v) => Some(Some(v)),
            Field::Missing => Some(None),
            Field::Invalid(message) => {
                self.err(key, message);
                None
            }
        }
    }

    pub(super) fn unknown_keys(&mut self, parent: &str, keys: UnknownKeys, known: &[&str]) {
        for name in keys.into_keys() {
            let hint = match closest(&name, known) {
                Some(k) => format!("; did you mean `{k}`?"),
                None => format!("; known keys here: {}", known.join(", ")),
            };
            self.err(join(parent, &name), format!("unknown key `{name}`{hint}"));
        }
    }
}
