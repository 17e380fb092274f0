//! ListCatalogs: the policy in force as data, with texts in one locale.

use std::sync::Arc;

use tracing::field::Empty;

use super::Service;
use super::error::{Violation, check_locale};
use crate::core::catalog::Catalog;
use crate::core::{Locale, Policy};

/// The catalogs of one policy snapshot, to be shown in `wanted`'s texts.
#[derive(Debug, Clone)]
pub struct CatalogList {
    /// The policy (one snapshot: every catalog of one answer is of one policy).
    pub policy: Arc<Policy>,
    /// The locale asked for (unknown tags give English).
    pub wanted: Locale,
}

impl CatalogList {
    /// The locale `c`'s texts are shown in: the one asked for when the
    /// catalog has it, else English.
    pub fn locale_of(&self, c: &Catalog) -> Locale {
        if c.locales.contains(&self.wanted) {
            self.wanted
        } else {
            Locale::En
        }
    }
}

impl Service {
    /// ListCatalogs for texts in `locale` (a tag such as `ru-RU`).
    pub fn list_catalogs(&self, locale: &str) -> Result<CatalogList, Violation> {
        let span = tracing::info_span!("ListCatalogs", policy_version = Empty);
        let _entered = span.enter();
        check_locale(locale)?;
        let policy = self.policy();
        span.record("policy_version", policy.version());
        Ok(CatalogList {
            policy,
            wanted: Locale::parse(locale).unwrap_or_default(),
        })
    }
}
