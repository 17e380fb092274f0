//! A catalog: the codes of one dependency family and, for each, what a read
//! and a write may do. Catalogs are data (TOML under `policies/`); this module
//! parses, validates and compiles them into the lookup form the engine uses.

pub mod amend;
pub mod budgets;
mod compile;
pub mod guess;
pub mod holds;
mod locate;
pub mod source;

pub use compile::{CatalogError, compile_catalog};
pub use holds::{HoldRule, QuotaReset};
pub use locate::line_of_key;

use rustc_hash::FxHashMap;

use crate::core::model::{Locale, Operation, Scope, SideEffectState, TargetReached, TerminalState, Verdict};

/// A text in every supported locale (missing locales fall back to English).
#[derive(Debug, Clone)]
pub struct LocalText([Box<str>; 2]);

impl LocalText {
    /// The text in `locale`.
    pub fn get(&self, locale: Locale) -> &str {
        &self.0[locale.index()]
    }
}

/// How the wait before the next attempt is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayKind {
    /// Bounded exponential backoff with jitter; a Retry-After, if any, is still a floor.
    Backoff,
    /// Honour Retry-After; back off when there is none.
    RetryAfter,
    /// Never before the full Retry-After; back off when there is none.
    StrictRetryAfter,
    /// The catalog's fixed schedule (a Retry-After, if any, is a floor).
    Schedule,
}

impl DelayKind {
    /// The catalog word.
    pub fn as_str(self) -> &'static str {
        match self {
            DelayKind::Backoff => "backoff",
            DelayKind::RetryAfter => "retry_after",
            DelayKind::StrictRetryAfter => "strict_retry_after",
            DelayKind::Schedule => "schedule",
        }
    }
}

/// Bounded exponential backoff parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay after the first attempt, ms.
    pub base_ms: u64,
    /// Growth per attempt.
    pub multiplier: f64,
    /// Largest delay, ms.
    pub cap_ms: u64,
}

impl Backoff {
    /// The equal-jitter window after attempt `attempt` (1-based):
    /// `[expo/2, expo]` with `expo = min(cap, base · multiplier^(attempt−1))`.
    pub fn window(&self, attempt: u32) -> (u64, u64) {
        let exponent = attempt.saturating_sub(1).min(64) as i32;
        let expo = (self.base_ms as f64) * self.multiplier.powi(exponent);
        let expo = if expo.is_finite() && expo < self.cap_ms as f64 {
            expo as u64
        } else {
            self.cap_ms
        };
        (expo / 2, expo)
    }
}

/// The compiled answer for one code and one operation.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Stable id, e.g. `vibecode/BITRIX_TIMEOUT/write`.
    pub id: Box<str>,
    /// The verdict before limits, read-back and idempotency keys.
    pub verdict: Verdict,
    /// What is known of the failed call's effects.
    pub side_effect: SideEffectState,
    /// State change needed before a retry.
    pub required_transition: Option<Box<str>>,
    /// Machine-readable action for the caller.
    pub reconciliation_action: Option<Box<str>>,
    /// The reason in every locale.
    pub reason: LocalText,
    /// Request or tenant.
    pub scope: Scope,
    /// An idempotency key does not replace reconciliation.
    pub reconcile_before_retry: bool,
    /// The fleet hold this rule places, if any.
    pub hold: Option<HoldRule>,
}

/// One code of a catalog with its read and write rules.
#[derive(Debug, Clone)]
pub struct CodeEntry {
    /// The canonical code (`unknown` / `no_envelope` for the fallbacks).
    pub code: Box<str>,
    /// Other spellings.
    pub aliases: Vec<Box<str>>,
    /// Did the target call reach the dependency?
    pub target_reached: TargetReached,
    /// How the wait is computed.
    pub delay: DelayKind,
    /// The matrix's condition text.
    pub condition: LocalText,
    /// Rule for reads.
    pub read: Rule,
    /// Rule for writes.
    pub write: Rule,
    /// Rule for a write on a retried attempt (attempt > 1), if it differs.
    pub retried_write: Option<Rule>,
    /// Rule for a write that came with a Retry-After, if it differs.
    pub write_with_retry_after: Option<Rule>,
    /// The cap on this code's delays and holds (the catalog's unless overridden).
    pub max_delay_ms: u64,
}

impl CodeEntry {
    /// The rule for `op` (unspecified is treated as a write) on attempt
    /// `attempt`, with or without a Retry-After. A retried write's rule wins
    /// over the Retry-After one: what the earlier attempt may have done
    /// matters more than when to come back.
    pub fn rule(&self, op: Operation, attempt: u32, has_retry_after: bool) -> &Rule {
        match op {
            Operation::Read => &self.read,
            Operation::Write | Operation::Unspecified => {
                let retried = self.retried_write.as_ref().filter(|_| attempt > 1);
                let deferred = self.write_with_retry_after.as_ref().filter(|_| has_retry_after);
                retried.or(deferred).unwrap_or(&self.write)
            }
        }
    }
}

/// A validated, compiled catalog.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// Name callers use.
    pub name: Box<str>,
    /// One line for people.
    pub description: Box<str>,
    /// Locales its texts carry.
    pub locales: Vec<Locale>,
    /// Attempts allowed in all.
    pub max_attempts: u32,
    /// Backoff parameters.
    pub backoff: Backoff,
    /// Waits for `schedule` codes, one per retry.
    pub schedule_ms: Box<[u64]>,
    /// State to record when retries run out.
    pub exhausted_terminal_state: Option<TerminalState>,
    /// The cap on every delay and hold, unless a code overrides it.
    pub max_delay_ms: u64,
    /// When an exhausted allowance resets.
    pub quota: Option<QuotaReset>,
    /// The fleet retry budgets (`[[budgets]]`), in file order.
    pub budgets: Vec<crate::core::budget::BudgetRule>,
    read_words: Vec<Box<str>>,
    write_words: Vec<Box<str>>,
    codes: Vec<CodeEntry>,
    /// The characters of each code and alias, in `codes`' order (code,
    /// then its aliases): "did you mean" skips most spellings by them.
    spelling_letters: Box<[u64]>,
    index: FxHashMap<Box<str>, usize>,
    unknown: CodeEntry,
    no_envelope: CodeEntry,
    /// What this catalog amends and where each code came from; `None` for a
    /// catalog written whole.
    amended: Option<Amended>,
}

/// What an amending file made of its base (see [`amend`]).
#[derive(Debug, Clone)]
pub struct Amended {
    /// The base catalog's name (`extends`).
    pub base: Box<str>,
    /// Each code of the merged catalog and where it came from.
    pub origins: Vec<(Box<str>, amend::CodeOrigin)>,
}

impl Catalog {
    /// The entry for `code` or one of its aliases (case-sensitive).
    pub fn lookup(&self, code: &str) -> Option<&CodeEntry> {
        self.index.get(code).map(|&i| &self.codes[i])
    }

    /// The spelling (code or alias) that `code` matches only when ASCII case
    /// is ignored, for a "did you mean" warning; lookups stay case-sensitive.
    /// A scan: it runs only for unknown codes.
    pub fn lookup_ignore_case(&self, code: &str) -> Option<&str> {
        self.codes
            .iter()
            .flat_map(|e| std::iter::once(&e.code).chain(e.aliases.iter()))
            .find(|spelling| spelling.eq_ignore_ascii_case(code))
            .map(|s| &**s)
    }

    /// Gives the rules of `codes` (which an amending file left as the base
    /// had them) the base's rule ids, so a catalog amended under a new name
    /// still reports `vibecode/QUEUE_OVERFLOW/read` for what vibecode decides.
    pub fn keep_rule_ids(&mut self, base: &Catalog, codes: &[&str]) {
        for entry in self.codes.iter_mut().filter(|e| codes.contains(&&*e.code)) {
            let Some(from) = base.lookup(&entry.code) else { continue };
            entry.read.id = from.read.id.clone();
            entry.write.id = from.write.id.clone();
            if let (Some(r), Some(f)) = (entry.retried_write.as_mut(), from.retried_write.as_ref()) {
                r.id = f.id.clone();
            }
            if let (Some(r), Some(f)) = (
                entry.write_with_retry_after.as_mut(),
                from.write_with_retry_after.as_ref(),
            ) {
                r.id = f.id.clone();
            }
        }
    }

    /// The catalog this one amends, if it was made with `extends`.
    pub fn extends(&self) -> Option<&str> {
        self.amended.as_ref().map(|a| &*a.base)
    }

    /// Where `code` came from, in a catalog made with `extends`.
    pub fn origin_of(&self, code: &str) -> Option<amend::CodeOrigin> {
        let a = self.amended.as_ref()?;
        a.origins.iter().find(|(c, _)| **c == *code).map(|(_, o)| *o)
    }

    /// Records that this catalog amends `base`, with its codes' origins.
    pub fn set_amended(&mut self, base: &str, origins: &[(String, amend::CodeOrigin)]) {
        self.amended = Some(Amended {
            base: base.into(),
            origins: origins.iter().map(|(c, o)| (c.as_str().into(), *o)).collect(),
        });
    }

    /// Every known code, in file order.
    pub fn codes(&self) -> &[CodeEntry] {
        &self.codes
    }

    /// The rule set for codes the catalog does not know.
    pub fn unknown(&self) -> &CodeEntry {
        &self.unknown
    }

    /// The rule set for failures without a platform envelope.
    pub fn no_envelope(&self) -> &CodeEntry {
        &self.no_envelope
    }

    /// Infers read or write from the method's meaning: its last segment
    /// (after `.`, `/` or `:`) matched against the catalog's words. No match,
    /// or no method, is a write — the conservative answer.
    pub fn infer_operation(&self, method: &str) -> Operation {
        // A byte search: the separators are ASCII, so the byte after one
        // starts a character (`str::rsplit` with a set of chars decodes
        // every character: 4 % of a batch).
        let last = match method.bytes().rposition(|b| matches!(b, b'.' | b'/' | b':')) {
            Some(at) => &method[at + 1..],
            None => method,
        };
        if last.is_empty() {
            return Operation::Write;
        }
        // Writes are checked first: a word in both lists must not turn a write into a read.
        if self.write_words.iter().any(|w| word_matches(last, w)) {
            Operation::Write
        } else if self.read_words.iter().any(|w| word_matches(last, w)) {
            Operation::Read
        } else {
            Operation::Write
        }
    }

    /// The words that mark reads.
    pub fn read_words(&self) -> &[Box<str>] {
        &self.read_words
    }

    /// The words that mark writes.
    pub fn write_words(&self) -> &[Box<str>] {
        &self.write_words
    }
}

/// `segment` is `word` (any ASCII case), or starts with it followed by a
/// word break: `add`, `ADD`, `addDeal`, `add_deal` match `add`; `address` does not.
fn word_matches(segment: &str, word: &str) -> bool {
    let (s, w) = (segment.as_bytes(), word.as_bytes());
    if s.len() < w.len() || !s[..w.len()].eq_ignore_ascii_case(w) {
        return false;
    }
    match s.get(w.len()) {
        None => true,
        Some(b) => b.is_ascii_uppercase() || *b == b'_' || *b == b'-',
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_matching_respects_word_breaks() {
        assert!(word_matches("add", "add"));
        assert!(word_matches("Add", "add"));
        assert!(word_matches("addDeal", "add"));
        assert!(word_matches("add_deal", "add"));
        assert!(!word_matches("address", "add"));
        assert!(!word_matches("ad", "add"));
    }

    #[test]
    fn backoff_window_is_bounded_and_never_overflows() {
        let b = Backoff {
            base_ms: 1000,
            multiplier: 2.0,
            cap_ms: 30_000,
        };
        assert_eq!(b.window(1), (500, 1000));
        assert_eq!(b.window(3), (2000, 4000));
        assert_eq!(b.window(10), (15_000, 30_000));
        assert_eq!(b.window(u32::MAX), (15_000, 30_000));
    }
}
