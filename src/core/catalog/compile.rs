//! Parsing and validating one catalog file into a [`Catalog`]. Every problem
//! is collected, not just the first, so `retryd policy check` can list them:
//! TOML syntax errors (the parser recovers and goes on), unknown keys, values
//! of the wrong type, and meaning. A value that could not be read does not
//! feed later checks, so one mistake is reported once.

use serde::Deserialize as _;
use serde::de::IntoDeserializer as _;
use toml::de::DeTable;

use super::holds::{DEFAULT_MAX_DELAY_MS, compile_hold, compile_quota};
use super::locate::{key_on_line, line_of, line_of_key};
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
    let mut errors: Vec<CatalogError> = syntax
        .iter()
        .map(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            CatalogError {
                file: file.to_owned(),
                line,
                key: line
                    .and_then(|l| key_on_line(root.get_ref(), text, l))
                    .unwrap_or_else(|| "toml".to_owned()),
                message: format!("TOML syntax: {}", one_line(e.message())),
            }
        })
        .collect();
    // The parser's first complaint about a line is the one that says what
    // is wrong; the others on that line follow from it.
    errors.dedup_by(|later, first| later.line.is_some() && later.line == first.line);
    let catalog = match CatalogSource::deserialize(root.into_deserializer()) {
        Ok(source) => Some(c.catalog(source)),
        Err(e) => {
            c.errors.push(CatalogError {
                file: file.to_owned(),
                line: e.span().map(|s| line_of(text, s.start)),
                key: "toml".to_owned(),
                message: one_line(e.message()),
            });
            None
        }
    };
    let syntax_lines: Vec<usize> = errors.iter().filter_map(|e| e.line).collect();
    for mut e in c.errors {
        if e.line.is_none() {
            e.line = line_of_key(text, &e.key);
        }
        // The parser's stand-in for a value it could not read is no value of
        // the file's: its syntax error is the one to report on that line.
        if !e.line.is_some_and(|l| syntax_lines.contains(&l)) {
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

impl Compiler<'_> {
    fn err(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.errors.push(CatalogError {
            file: self.file.to_owned(),
            line: None,
            key: key.into(),
            message: message.into(),
        });
    }

    /// A required key: its value, or an error and `None`.
    fn required<T>(&mut self, key: &str, field: Field<T>) -> Option<T> {
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
    fn optional<T>(&mut self, key: &str, field: Field<T>) -> Option<Option<T>> {
        match field {
            Field::Value(v) => Some(Some(v)),
            Field::Missing => Some(None),
            Field::Invalid(message) => {
                self.err(key, message);
                None
            }
        }
    }

    fn unknown_keys(&mut self, parent: &str, keys: UnknownKeys, known: &[&str]) {
        for name in keys.into_keys() {
            let hint = match closest(&name, known) {
                Some(k) => format!("; did you mean `{k}`?"),
                None => format!("; known keys here: {}", known.join(", ")),
            };
            self.err(join(parent, &name), format!("unknown key `{name}`{hint}"));
        }
    }

    fn catalog(&mut self, s: CatalogSource) -> Catalog {
        self.unknown_keys("", s.unknown_keys, CatalogSource::KEYS);
        let name = self.required("name", s.name);
        let valid = |n: &str| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if name.as_deref().is_some_and(|n| !valid(n)) {
            self.err("name", "must be non-empty ASCII letters, digits, '_' or '-'");
        }
        self.name = name.unwrap_or_default();
        let description = self.required("description", s.description).unwrap_or_default();
        match self.optional("locales", s.locales) {
            None => {
                self.locales_known = false;
                self.locales = Locale::ALL.to_vec();
            }
            Some(tags) => {
                let tags = tags.unwrap_or_else(|| vec!["en".to_owned()]);
                for (i, tag) in tags.iter().enumerate() {
                    match Locale::from_tag(tag) {
                        Some(l) if !self.locales.contains(&l) => self.locales.push(l),
                        Some(_) => self.err(format!("locales[{i}]"), format!("duplicate locale {tag:?}")),
                        None => self.err(
                            format!("locales[{i}]"),
                            format!("unsupported locale {tag:?}; supported: en, ru"),
                        ),
                    }
                }
                if !self.locales.contains(&Locale::En) {
                    self.err("locales", "must include \"en\"");
                }
            }
        }
        let max_attempts = self.required("max_attempts", s.max_attempts);
        if max_attempts == Some(0) {
            self.err("max_attempts", "must be at least 1");
        }
        let backoff = self.backoff(s.backoff);
        let schedule_ms = self.optional("schedule_ms", s.schedule_ms);
        for (i, ms) in schedule_ms.iter().flatten().flatten().enumerate() {
            if *ms == 0 {
                self.err(format!("schedule_ms[{i}]"), "must be positive");
            }
        }
        let terminal = match self.optional("exhausted_terminal_state", s.exhausted_terminal_state) {
            Some(Some(state)) if state == "FAILED_PERMANENT" => Some(TerminalState::FailedPermanent),
            Some(Some(other)) => {
                self.err(
                    "exhausted_terminal_state",
                    format!("unknown state {other:?}; known: FAILED_PERMANENT"),
                );
                None
            }
            _ => None,
        };
        match self.optional("max_delay_ms", s.max_delay_ms) {
            Some(Some(0)) => self.err("max_delay_ms", "must be positive"),
            Some(Some(ms)) => self.max_delay_ms = ms,
            _ => {}
        }
        let quota = match self.optional("quota", s.quota) {
            Some(Some(q)) => {
                self.has_quota = true;
                match compile_quota(&q) {
                    Ok(q) => Some(q),
                    Err(errors) => {
                        for (k, m) in errors {
                            self.err(format!("quota.{k}"), m);
                        }
                        None
                    }
                }
            }
            Some(None) => None,
            None => {
                // Unreadable: do not also call every quota stop unresolvable.
                self.has_quota = true;
                None
            }
        };
        let mut budgets = Vec::new();
        for (i, b) in self
            .optional("budgets", s.budgets)
            .flatten()
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            match super::budgets::compile_budget(b) {
                Ok(rule) => {
                    if budgets
                        .iter()
                        .any(|o: &crate::core::budget::BudgetRule| o.scope == rule.scope)
                    {
                        self.err(
                            format!("budgets[{i}].scope"),
                            format!("a second {} budget; one budget per scope", rule.scope.as_str()),
                        );
                    }
                    budgets.push(rule);
                }
                Err(errors) => {
                    for (k, m) in errors {
                        self.err(format!("budgets[{i}].{k}"), m);
                    }
                }
            }
        }
        let (read_words, write_words) = match self.required("operations", s.operations) {
            Some(ops) => {
                self.unknown_keys("operations", ops.unknown_keys, super::source::OperationsSource::KEYS);
                (self.words("read", ops.read), self.words("write", ops.write))
            }
            None => (Vec::new(), Vec::new()),
        };

        let mut index = rustc_hash::FxHashMap::default();
        let mut codes = Vec::new();
        for (i, code) in self
            .optional("codes", s.codes)
            .flatten()
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let key = format!("codes[{i}]");
            let name = match self.required(&format!("{key}.code"), code.code.clone()) {
                Some(n) if n.is_empty() => {
                    self.err(format!("{key}.code"), "must not be empty");
                    None
                }
                other => other,
            };
            let aliases = self
                .optional(&format!("{key}.aliases"), code.aliases.clone())
                .flatten()
                .unwrap_or_default();
            if let Some(name) = &name {
                for spelling in std::iter::once(name).chain(aliases.iter()) {
                    if index.insert(spelling.clone().into_boxed_str(), codes.len()).is_some() {
                        self.err(
                            &key,
                            format!("duplicate code or alias {spelling:?} (codes are case-sensitive)"),
                        );
                    }
                }
            }
            let mut entry = self.entry(
                &key,
                name.as_deref().unwrap_or(""),
                code,
                schedule_ms.as_ref().map(|s| s.as_ref().is_some_and(|s| !s.is_empty())),
            );
            entry.aliases = aliases.into_iter().map(Into::into).collect();
            codes.push(entry);
        }
        let unknown = self.fallback("unknown", s.unknown);
        let no_envelope = self.fallback("no_envelope", s.no_envelope);

        Catalog {
            name: self.name.as_str().into(),
            description: description.into(),
            locales: self.locales.clone(),
            max_attempts: max_attempts.unwrap_or(1),
            backoff: backoff.unwrap_or(Backoff {
                base_ms: 1,
                multiplier: 1.0,
                cap_ms: 1,
            }),
            schedule_ms: schedule_ms.flatten().unwrap_or_default().into(),
            exhausted_terminal_state: terminal,
            max_delay_ms: self.max_delay_ms,
            quota,
            budgets,
            read_words,
            write_words,
            codes,
            index,
            unknown: unknown.unwrap_or_else(placeholder_entry),
            no_envelope: no_envelope.unwrap_or_else(placeholder_entry),
        }
    }

    fn backoff(&mut self, field: Field<super::source::BackoffSource>) -> Option<Backoff> {
        let b = self.required("backoff", field)?;
        self.unknown_keys("backoff", b.unknown_keys, super::source::BackoffSource::KEYS);
        let base_ms = self.required("backoff.base_ms", b.base_ms);
        let multiplier = self.required("backoff.multiplier", b.multiplier);
        let cap_ms = self.required("backoff.cap_ms", b.cap_ms);
        if base_ms == Some(0) {
            self.err("backoff.base_ms", "must be positive");
        }
        if let (Some(base), Some(cap)) = (base_ms, cap_ms) {
            if cap < base {
                self.err("backoff.cap_ms", format!("must be >= backoff.base_ms ({base} > {cap})"));
            }
        }
        if multiplier.is_some_and(|m| !(m.is_finite() && m >= 1.0)) {
            self.err("backoff.multiplier", "must be a finite number >= 1");
        }
        Some(Backoff {
            base_ms: base_ms?,
            multiplier: multiplier?,
            cap_ms: cap_ms?,
        })
    }

    fn words(&mut self, which: &str, field: Field<Vec<String>>) -> Vec<Box<str>> {
        let key = format!("operations.{which}");
        let list = self.optional(&key, field).flatten().unwrap_or_default();
        for (i, w) in list.iter().enumerate() {
            if w.is_empty() || !w.chars().all(|c| c.is_ascii_alphanumeric()) {
                self.err(format!("{key}[{i}]"), "must be a non-empty ASCII word");
            }
        }
        list.into_iter().map(Into::into).collect()
    }

    fn fallback(&mut self, key: &str, field: Field<CodeSource>) -> Option<CodeEntry> {
        let code = self.required(key, field)?;
        if !matches!(code.code, Field::Missing) || !matches!(code.aliases, Field::Missing) {
            self.err(key, "a fallback rule has no code or aliases");
        }
        if matches!(&code.delay, Field::Value(d) if d == "schedule") {
            self.err(format!("{key}.delay"), "a fallback rule cannot use the schedule");
        }
        Some(self.entry(key, key, code, None))
    }

    /// `has_schedule`: whether the catalog has a non-empty `schedule_ms`
    /// (`None` when that is unknown, or for fallbacks).
    fn entry(&mut self, key: &str, code: &str, s: CodeSource, has_schedule: Option<bool>) -> CodeEntry {
        self.unknown_keys(key, s.unknown_keys, CodeSource::KEYS);
        let delay = match self.optional(&format!("{key}.delay"), s.delay) {
            Some(Some(word)) => match word.as_str() {
                "backoff" => DelayKind::Backoff,
                "retry_after" => DelayKind::RetryAfter,
                "strict_retry_after" => DelayKind::StrictRetryAfter,
                "schedule" => {
                    if has_schedule == Some(false) {
                        self.err(format!("{key}.delay"), "\"schedule\" needs a non-empty schedule_ms");
                    }
                    DelayKind::Schedule
                }
                other => {
                    self.err(
                        format!("{key}.delay"),
                        format!("unknown delay {other:?}; known: backoff, retry_after, strict_retry_after, schedule"),
                    );
                    DelayKind::Backoff
                }
            },
            _ => DelayKind::Backoff,
        };
        let max_delay_ms = match self.optional(&format!("{key}.max_delay_ms"), s.max_delay_ms) {
            Some(Some(0)) => {
                self.err(format!("{key}.max_delay_ms"), "must be positive");
                self.max_delay_ms
            }
            Some(Some(ms)) => ms,
            _ => self.max_delay_ms,
        };
        let target_reached = self.required(&format!("{key}.target_reached"), s.target_reached);
        let condition = match self.required(&format!("{key}.condition"), s.condition) {
            Some(t) => self.text(&format!("{key}.condition"), &t),
            None => placeholder_text(),
        };
        let write_default = match target_reached {
            Some(TargetReached::No) => SideEffectState::None,
            Some(TargetReached::Yes) => SideEffectState::Possible,
            Some(TargetReached::Unknown) | None => SideEffectState::Unknown,
        };
        let read = self.rule_field(key, "read", code, s.read, SideEffectState::None, &condition, true);
        let write = self.rule_field(key, "write", code, s.write, write_default, &condition, true);
        let retried_write = self.rule_field(
            key,
            "retried_write",
            code,
            s.retried_write,
            write_default,
            &condition,
            false,
        );
        let write_with_retry_after = self.rule_field(
            key,
            "write_with_retry_after",
            code,
            s.write_with_retry_after,
            write_default,
            &condition,
            false,
        );
        // Only verdicts that were read are compared: a misspelled one is
        // reported once, where it is.
        let verdicts = match (&read, &write) {
            (Some((_, Some(rv), _)), Some((_, Some(wv), Some(false)))) => Some((*rv, *wv)),
            _ => None,
        };
        if let Some((rv, wv)) = verdicts.filter(|(rv, wv)| rank(*wv) < rank(*rv)) {
            self.err(
                format!("{key}.write.verdict"),
                format!(
                    "{} is less conservative than the read rule's {}; set acknowledge_less_conservative = true if that is meant",
                    wv.as_str(),
                    rv.as_str()
                ),
            );
        }
        CodeEntry {
            code: code.into(),
            aliases: Vec::new(),
            target_reached: target_reached.unwrap_or(TargetReached::Unknown),
            delay,
            condition,
            read: read.map_or_else(placeholder_rule, |r| r.0),
            write: write.map_or_else(placeholder_rule, |r| r.0),
            retried_write: retried_write.map(|r| r.0),
            write_with_retry_after: write_with_retry_after.map(|r| r.0),
            max_delay_ms,
        }
    }

    /// The rule under `key.op`, with its verdict if that was read and
    /// whether it acknowledges being less conservative (if that was read).
    #[allow(clippy::too_many_arguments)]
    fn rule_field(
        &mut self,
        key: &str,
        op: &str,
        code: &str,
        field: Field<RuleSource>,
        default_side_effect: SideEffectState,
        condition: &LocalText,
        required: bool,
    ) -> Option<(Rule, Option<Verdict>, Option<bool>)> {
        let path = format!("{key}.{op}");
        let source = if required {
            self.required(&path, field)?
        } else {
            self.optional(&path, field)??
        };
        Some(self.rule(&path, code, op, source, default_side_effect, condition))
    }

    fn rule(
        &mut self,
        key: &str,
        code: &str,
        op: &str,
        s: RuleSource,
        default_side_effect: SideEffectState,
        condition: &LocalText,
    ) -> (Rule, Option<Verdict>, Option<bool>) {
        self.unknown_keys(key, s.unknown_keys, RuleSource::KEYS);
        let verdict = match self.required(&format!("{key}.verdict"), s.verdict) {
            Some(word) => match Verdict::from_catalog_word(&word) {
                Some(v) => Some(v),
                None => {
                    self.err(
                        format!("{key}.verdict"),
                        format!(
                            "unknown verdict {word:?}; known: retry_with_limit, state_verification_required, fix_before_retry, do_not_retry"
                        ),
                    );
                    None
                }
            },
            None => None,
        };
        let required_transition = self
            .optional(&format!("{key}.required_transition"), s.required_transition)
            .map(|t| t.map(String::into_boxed_str));
        if verdict == Some(Verdict::FixBeforeRetry) && required_transition == Some(None) {
            self.err(
                format!("{key}.required_transition"),
                "fix_before_retry needs the transition it waits for",
            );
        }
        let side_effect = self.optional(&format!("{key}.side_effect"), s.side_effect).flatten();
        if side_effect == Some(SideEffectState::Confirmed) {
            self.err(
                format!("{key}.side_effect"),
                "\"confirmed\" is only known from a read-back, not from a code",
            );
        }
        let reconciliation_action = self
            .optional(&format!("{key}.reconciliation_action"), s.reconciliation_action)
            .flatten();
        let reason = match self.optional(&format!("{key}.reason"), s.reason) {
            Some(Some(t)) => self.text(&format!("{key}.reason"), &t),
            _ => condition.clone(),
        };
        let scope = self
            .optional(&format!("{key}.scope"), s.scope)
            .flatten()
            .unwrap_or_default();
        let reconcile_before_retry = self
            .optional(&format!("{key}.reconcile_before_retry"), s.reconcile_before_retry)
            .flatten()
            .unwrap_or(false);
        let acknowledged = self
            .optional(
                &format!("{key}.acknowledge_less_conservative"),
                s.acknowledge_less_conservative,
            )
            .map(|a| a.unwrap_or(false));
        let hold = match self.optional(&format!("{key}.hold"), s.hold) {
            Some(Some(h)) => match compile_hold(&h) {
                Ok(rule) => {
                    if rule.kind == crate::core::hold::HoldKind::QuotaStop && !self.has_quota && rule.hold_ms.is_none()
                    {
                        self.err(
                            format!("{key}.hold"),
                            "a quota_stop needs the catalog's [quota] reset rule or its own hold_ms",
                        );
                    }
                    Some(rule)
                }
                Err(errors) => {
                    for (k, m) in errors {
                        self.err(format!("{key}.hold.{k}"), m);
                    }
                    None
                }
            },
            _ => None,
        };
        let rule = Rule {
            id: format!("{}/{code}/{op}", self.name).into(),
            verdict: verdict.unwrap_or(Verdict::DoNotRetry),
            side_effect: side_effect.unwrap_or(default_side_effect),
            required_transition: required_transition.flatten(),
            reconciliation_action: reconciliation_action.map(Into::into),
            reason,
            scope,
            reconcile_before_retry,
            hold,
        };
        (rule, verdict, acknowledged)
    }

    fn text(&mut self, key: &str, t: &TextSource) -> LocalText {
        if self.locales_known {
            for tag in t.keys() {
                if !Locale::from_tag(tag).is_some_and(|l| self.locales.contains(&l)) {
                    self.err(format!("{key}.{tag}"), "locale not declared in `locales`");
                }
            }
        }
        let mut out: [Box<str>; 2] = Default::default();
        for l in Locale::ALL {
            let text = t.get(l.as_str()).filter(|s| !s.trim().is_empty());
            match text {
                Some(s) => out[l.index()] = s.as_str().into(),
                None if self.locales_known && self.locales.contains(&l) => {
                    self.err(format!("{key}.{}", l.as_str()), "missing text")
                }
                None => {}
            }
        }
        if out[Locale::Ru.index()].is_empty() {
            out[Locale::Ru.index()] = out[Locale::En.index()].clone();
        }
        LocalText(out)
    }
}

/// The known key closest to `name` by edit distance (at most 2, or a
/// difference of case only), for a "did you mean" hint.
fn closest<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|k| (edit_distance(&name.to_ascii_lowercase(), k), *k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(row[j + 1])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

// Stand-ins for parts that failed to load: the catalog they go into is
// never used, because its file has errors.
fn placeholder_text() -> LocalText {
    LocalText(Default::default())
}

fn placeholder_rule() -> Rule {
    Rule {
        id: "".into(),
        verdict: Verdict::DoNotRetry,
        side_effect: SideEffectState::Unknown,
        required_transition: None,
        reconciliation_action: None,
        reason: placeholder_text(),
        scope: Default::default(),
        reconcile_before_retry: false,
        hold: None,
    }
}

fn placeholder_entry() -> CodeEntry {
    CodeEntry {
        code: "".into(),
        aliases: Vec::new(),
        target_reached: TargetReached::Unknown,
        delay: DelayKind::Backoff,
        condition: placeholder_text(),
        read: placeholder_rule(),
        write: placeholder_rule(),
        retried_write: None,
        write_with_retry_after: None,
        max_delay_ms: DEFAULT_MAX_DELAY_MS,
    }
}

/// Conservativeness order: a write rule must not rank below the read rule.
fn rank(v: Verdict) -> u8 {
    match v {
        Verdict::RetryWithLimit => 0,
        Verdict::StateVerificationRequired => 1,
        Verdict::FixBeforeRetry => 2,
        Verdict::DoNotRetry | Verdict::AlreadyApplied => 3,
    }
}

#[cfg(test)]
mod tests {
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
}
