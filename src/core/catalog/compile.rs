//! Parsing and validating one catalog file into a [`Catalog`]. Every problem
//! is collected, not just the first, so `retryd policy check` can list them.

use super::holds::{DEFAULT_MAX_DELAY_MS, compile_hold, compile_quota};
use super::locate::{line_of, line_of_key};
use super::source::{CatalogSource, CodeSource, RuleSource, TextSource};
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
    /// The key path, e.g. `codes[3].write.verdict`; `document` for syntax errors.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// Parses and validates `text` (from `file`) into a catalog.
pub fn compile_catalog(file: &str, text: &str) -> Result<Catalog, Vec<CatalogError>> {
    let source: CatalogSource = toml::from_str(text).map_err(|e| {
        vec![CatalogError {
            file: file.to_owned(),
            line: e.span().map(|span| line_of(text, span.start)),
            key: "document".to_owned(),
            message: e.message().to_owned(),
        }]
    })?;
    let mut c = Compiler {
        file,
        errors: Vec::new(),
        locales: Vec::new(),
        name: source.name.clone(),
        max_delay_ms: DEFAULT_MAX_DELAY_MS,
        has_quota: source.quota.is_some(),
    };
    let catalog = c.catalog(source);
    if c.errors.is_empty() {
        return Ok(catalog);
    }
    for e in &mut c.errors {
        e.line = line_of_key(text, &e.key);
    }
    Err(c.errors)
}

struct Compiler<'f> {
    file: &'f str,
    errors: Vec<CatalogError>,
    locales: Vec<Locale>,
    name: String,
    max_delay_ms: u64,
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

    fn catalog(&mut self, s: CatalogSource) -> Catalog {
        if s.name.is_empty()
            || !s
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            self.err("name", "must be non-empty ASCII letters, digits, '_' or '-'");
        }
        for (i, tag) in s.locales.iter().enumerate() {
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
        if s.max_attempts == 0 {
            self.err("max_attempts", "must be at least 1");
        }
        let b = &s.backoff;
        if b.base_ms == 0 {
            self.err("backoff.base_ms", "must be positive");
        }
        if b.cap_ms < b.base_ms {
            self.err(
                "backoff.cap_ms",
                format!("must be >= backoff.base_ms ({} > {})", b.base_ms, b.cap_ms),
            );
        }
        if !(b.multiplier.is_finite() && b.multiplier >= 1.0) {
            self.err("backoff.multiplier", "must be a finite number >= 1");
        }
        for (i, ms) in s.schedule_ms.iter().enumerate() {
            if *ms == 0 {
                self.err(format!("schedule_ms[{i}]"), "must be positive");
            }
        }
        let terminal = match s.exhausted_terminal_state.as_deref() {
            None => None,
            Some("FAILED_PERMANENT") => Some(TerminalState::FailedPermanent),
            Some(other) => {
                self.err(
                    "exhausted_terminal_state",
                    format!("unknown state {other:?}; known: FAILED_PERMANENT"),
                );
                None
            }
        };
        match s.max_delay_ms {
            Some(0) => self.err("max_delay_ms", "must be positive"),
            Some(ms) => self.max_delay_ms = ms,
            None => {}
        }
        let quota = s.quota.as_ref().and_then(|q| match compile_quota(q) {
            Ok(q) => Some(q),
            Err(errors) => {
                for (k, m) in errors {
                    self.err(format!("quota.{k}"), m);
                }
                None
            }
        });

        let mut words = |list: Vec<String>, key: &str| -> Vec<Box<str>> {
            for (i, w) in list.iter().enumerate() {
                if w.is_empty() || !w.chars().all(|c| c.is_ascii_alphanumeric()) {
                    self.err(format!("operations.{key}[{i}]"), "must be a non-empty ASCII word");
                }
            }
            list.into_iter().map(Into::into).collect()
        };
        let read_words = words(s.operations.read, "read");
        let write_words = words(s.operations.write, "write");
        let mut index = rustc_hash::FxHashMap::default();
        let mut codes = Vec::with_capacity(s.codes.len());
        for (i, code) in s.codes.into_iter().enumerate() {
            let key = format!("codes[{i}]");
            let Some(name) = code.code.clone().filter(|c| !c.is_empty()) else {
                self.err(format!("{key}.code"), "missing or empty");
                continue;
            };
            for spelling in std::iter::once(&name).chain(code.aliases.iter()) {
                if index.insert(spelling.clone().into_boxed_str(), codes.len()).is_some() {
                    self.err(
                        &key,
                        format!("duplicate code or alias {spelling:?} (codes are case-sensitive)"),
                    );
                }
            }
            let uses_schedule = code.delay == "schedule";
            let entry = self.entry(&key, &name, code);
            if uses_schedule && s.schedule_ms.is_empty() {
                self.err(format!("{key}.delay"), "\"schedule\" needs a non-empty schedule_ms");
            }
            codes.push(entry);
        }
        let unknown = self.fallback("unknown", s.unknown);
        let no_envelope = self.fallback("no_envelope", s.no_envelope);

        Catalog {
            name: s.name.into(),
            description: s.description.into(),
            locales: self.locales.clone(),
            max_attempts: s.max_attempts,
            backoff: Backoff {
                base_ms: b.base_ms,
                multiplier: b.multiplier,
                cap_ms: b.cap_ms,
            },
            schedule_ms: s.schedule_ms.into(),
            exhausted_terminal_state: terminal,
            max_delay_ms: self.max_delay_ms,
            quota,
            read_words,
            write_words,
            codes,
            index,
            unknown,
            no_envelope,
        }
    }

    fn fallback(&mut self, key: &str, code: CodeSource) -> CodeEntry {
        if code.code.is_some() || !code.aliases.is_empty() {
            self.err(key, "a fallback rule has no code or aliases");
        }
        if code.delay == "schedule" {
            self.err(format!("{key}.delay"), "a fallback rule cannot use the schedule");
        }
        self.entry(key, key, code)
    }

    fn entry(&mut self, key: &str, code: &str, s: CodeSource) -> CodeEntry {
        let delay = match s.delay.as_str() {
            "backoff" => DelayKind::Backoff,
            "retry_after" => DelayKind::RetryAfter,
            "strict_retry_after" => DelayKind::StrictRetryAfter,
            "schedule" => DelayKind::Schedule,
            other => {
                self.err(
                    format!("{key}.delay"),
                    format!("unknown delay {other:?}; known: backoff, retry_after, strict_retry_after, schedule"),
                );
                DelayKind::Backoff
            }
        };
        let condition = self.text(&format!("{key}.condition"), &s.condition);
        let read = self.rule(
            &format!("{key}.read"),
            code,
            "read",
            &s.read,
            SideEffectState::None,
            &condition,
        );
        let write_default = match s.target_reached {
            TargetReached::No => SideEffectState::None,
            TargetReached::Yes => SideEffectState::Possible,
            TargetReached::Unknown => SideEffectState::Unknown,
        };
        let write = self.rule(
            &format!("{key}.write"),
            code,
            "write",
            &s.write,
            write_default,
            &condition,
        );
        let mut variant = |name: &str, source: &Option<RuleSource>| {
            source
                .as_ref()
                .map(|r| self.rule(&format!("{key}.{name}"), code, name, r, write_default, &condition))
        };
        let retried_write = variant("retried_write", &s.retried_write);
        let write_with_retry_after = variant("write_with_retry_after", &s.write_with_retry_after);
        if rank(write.verdict) < rank(read.verdict) && !s.write.acknowledge_less_conservative {
            self.err(
                format!("{key}.write.verdict"),
                format!(
                    "{} is less conservative than the read rule's {}; set acknowledge_less_conservative = true if that is meant",
                    write.verdict.as_str(),
                    read.verdict.as_str()
                ),
            );
        }
        CodeEntry {
            code: code.into(),
            aliases: s.aliases.into_iter().map(Into::into).collect(),
            target_reached: s.target_reached,
            delay,
            condition,
            read,
            write,
            retried_write,
            write_with_retry_after,
            max_delay_ms: match s.max_delay_ms {
                Some(0) => {
                    self.err(format!("{key}.max_delay_ms"), "must be positive");
                    self.max_delay_ms
                }
                Some(ms) => ms,
                None => self.max_delay_ms,
            },
        }
    }

    fn rule(
        &mut self,
        key: &str,
        code: &str,
        op: &str,
        s: &RuleSource,
        default_side_effect: SideEffectState,
        condition: &LocalText,
    ) -> Rule {
        let verdict = match Verdict::from_catalog_word(&s.verdict) {
            Some(v) => v,
            None => {
                self.err(
                    format!("{key}.verdict"),
                    format!(
                        "unknown verdict {:?}; known: retry_with_limit, state_verification_required, fix_before_retry, do_not_retry",
                        s.verdict
                    ),
                );
                Verdict::DoNotRetry
            }
        };
        if verdict == Verdict::FixBeforeRetry && s.required_transition.is_none() {
            self.err(
                format!("{key}.required_transition"),
                "fix_before_retry needs the transition it waits for",
            );
        }
        let side_effect = s.side_effect.unwrap_or(default_side_effect);
        if side_effect == SideEffectState::Confirmed {
            self.err(
                format!("{key}.side_effect"),
                "\"confirmed\" is only known from a read-back, not from a code",
            );
        }
        let reason = match &s.reason {
            Some(t) => self.text(&format!("{key}.reason"), t),
            None => condition.clone(),
        };
        let hold = s.hold.as_ref().and_then(|h| match compile_hold(h) {
            Ok(rule) => {
                if rule.kind == crate::core::hold::HoldKind::QuotaStop && !self.has_quota && rule.hold_ms.is_none() {
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
        });
        Rule {
            id: format!("{}/{code}/{op}", self.name).into(),
            verdict,
            side_effect,
            required_transition: s.required_transition.clone().map(Into::into),
            reconciliation_action: s.reconciliation_action.clone().map(Into::into),
            reason,
            scope: s.scope,
            reconcile_before_retry: s.reconcile_before_retry,
            hold,
        }
    }

    fn text(&mut self, key: &str, t: &TextSource) -> LocalText {
        for tag in t.keys() {
            if !Locale::from_tag(tag).is_some_and(|l| self.locales.contains(&l)) {
                self.err(format!("{key}.{tag}"), "locale not declared in `locales`");
            }
        }
        let mut out: [Box<str>; 2] = Default::default();
        for l in Locale::ALL {
            let text = t.get(l.as_str()).filter(|s| !s.trim().is_empty());
            match text {
                Some(s) => out[l.index()] = s.as_str().into(),
                None if self.locales.contains(&l) => self.err(format!("{key}.{}", l.as_str()), "missing text"),
                None => {}
            }
        }
        if out[Locale::Ru.index()].is_empty() {
            out[Locale::Ru.index()] = out[Locale::En.index()].clone();
        }
        LocalText(out)
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
        assert_eq!((e[0].line, e[0].key.as_str()), (Some(6), "document"), "{e:?}");
        assert!(e[0].message.contains("max_attemps"), "{e:?}");
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
    fn every_embedded_catalog_compiles() {
        for (file, text) in crate::core::policy::EMBEDDED {
            if let Err(e) = compile_catalog(file, text) {
                panic!("{file}: {e:?}");
            }
        }
    }
}
