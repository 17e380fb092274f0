//! A code's entry and its rules (read, write, and the write variants),
//! and the stand-ins for parts that failed to load.

use super::*;

impl Compiler<'_> {
    pub(super) fn fallback(&mut self, key: &str, field: Field<CodeSource>) -> Option<CodeEntry> {
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
    pub(super) fn entry(&mut self, key: &str, code: &str, s: CodeSource, has_schedule: Option<bool>) -> CodeEntry {
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
    pub(super) fn rule_field(
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

    pub(super) fn rule(
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

    pub(super) fn text(&mut self, key: &str, t: &TextSource) -> LocalText {
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

// Stand-ins for parts that failed to load: the catalog they go into is
// never used, because its file has errors.
pub(super) fn placeholder_text() -> LocalText {
    LocalText(Default::default())
}

pub(super) fn placeholder_rule() -> Rule {
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

pub(super) fn placeholder_entry() -> CodeEntry {
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
pub(super) fn rank(v: Verdict) -> u8 {
    match v {
        Verdict::RetryWithLimit => 0,
        Verdict::StateVerificationRequired => 1,
        Verdict::FixBeforeRetry => 2,
        Verdict::DoNotRetry | Verdict::AlreadyApplied => 3,
    }
}
