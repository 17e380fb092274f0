//! The catalog's own keys: name, locales, limits, backoff, schedule,
//! words, quota, budgets, and its codes in order.

use super::*;

impl Compiler<'_> {
    pub(super) fn catalog(&mut self, s: CatalogSource) -> Catalog {
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
            match super::super::budgets::compile_budget(b) {
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
                self.unknown_keys(
                    "operations",
                    ops.unknown_keys,
                    super::super::source::OperationsSource::KEYS,
                );
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
            spelling_letters: super::super::guess::spelling_letters(&codes),
            codes,
            index,
            unknown: unknown.unwrap_or_else(placeholder_entry),
            no_envelope: no_envelope.unwrap_or_else(placeholder_entry),
            amended: None,
        }
    }

    pub(super) fn backoff(&mut self, field: Field<super::super::source::BackoffSource>) -> Option<Backoff> {
        let b = self.required("backoff", field)?;
        self.unknown_keys("backoff", b.unknown_keys, super::super::source::BackoffSource::KEYS);
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

    pub(super) fn words(&mut self, which: &str, field: Field<Vec<String>>) -> Vec<Box<str>> {
        let key = format!("operations.{which}");
        let list = self.optional(&key, field).flatten().unwrap_or_default();
        for (i, w) in list.iter().enumerate() {
            if w.is_empty() || !w.chars().all(|c| c.is_ascii_alphanumeric()) {
                self.err(format!("{key}[{i}]"), "must be a non-empty ASCII word");
            }
        }
        list.into_iter().map(Into::into).collect()
    }
}
