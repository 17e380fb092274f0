//! Which holds a watch covers, and how each is shown to its watcher.

use super::error::{Error, check_len};
use super::holds::{Shown, shown};
use crate::core::hold::{Hold, HoldScope, RESUME_BUCKETS};
use crate::core::limits;
use crate::fleet::Fleet;

/// Most dependencies one watch may name.
pub const MAX_WATCH_DEPENDENCIES: usize = 256;
/// Most tenants one watch may name.
pub const MAX_WATCH_TENANTS: usize = 256;

/// Which holds a watch covers (empty matches all).
#[derive(Debug, Clone, Default)]
pub struct WatchFilter {
    /// Catalog.
    pub catalog: String,
    /// Any of these dependency instances (empty: all).
    pub dependencies: Vec<String>,
    /// Tenant, raw: only this tenant's holds.
    pub tenant: String,
    /// A client mirror's tenants, raw: tenant holds only of these (shown in
    /// clear: the caller named them), dependency and method holds of any.
    pub tenants: Vec<String>,
    /// Not a filter: a reconnecting mirror's 256 bucket digests of the
    /// holds it has (empty: a full snapshot). See `core::hold::resume`.
    pub resume: Vec<u64>,
}

impl WatchFilter {
    pub(super) fn check(&self) -> Result<(), Error> {
        check_len("catalog", &self.catalog, limits::MAX_CATALOG)?;
        check_len("tenant", &self.tenant, limits::MAX_TENANT)?;
        if self.dependencies.len() > MAX_WATCH_DEPENDENCIES {
            return Err(Error::invalid(
                "dependencies",
                format!(
                    "{} entries; the limit is {MAX_WATCH_DEPENDENCIES}",
                    self.dependencies.len()
                ),
            ));
        }
        for (i, d) in self.dependencies.iter().enumerate() {
            check_len(&format!("dependencies[{i}]"), d, limits::MAX_DEPENDENCY)?;
        }
        if self.tenants.len() > MAX_WATCH_TENANTS {
            return Err(Error::invalid(
                "tenants",
                format!("{} entries; the limit is {MAX_WATCH_TENANTS}", self.tenants.len()),
            ));
        }
        if !self.tenants.is_empty() && !self.tenant.is_empty() {
            return Err(Error::invalid(
                "tenants",
                "set either tenant (only that tenant's holds) or tenants (a mirror's), not both",
            ));
        }
        for (i, t) in self.tenants.iter().enumerate() {
            check_len(&format!("tenants[{i}]"), t, limits::MAX_TENANT)?;
        }
        if !self.resume.is_empty() && self.resume.len() != RESUME_BUCKETS {
            return Err(Error::invalid(
                "resume_digests",
                format!(
                    "{} entries; send none (a full snapshot) or exactly {RESUME_BUCKETS}, one per bucket",
                    self.resume.len()
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn matches(&self, h: &Hold) -> bool {
        (self.catalog.is_empty() || h.key.catalog == self.catalog)
            && (self.dependencies.is_empty() || self.dependencies.contains(&h.key.dependency))
            && (self.tenant.is_empty() || h.key.tenant() == self.tenant)
            && (self.tenants.is_empty() || h.key.scope != HoldScope::Tenant || self.named(h))
    }

    /// The watch named this hold's tenant (in `tenants`).
    fn named(&self, h: &Hold) -> bool {
        self.tenants.iter().any(|t| t == h.key.tenant())
    }

    /// The hold as this watcher may see it: tenants it named in clear.
    pub(super) fn show(&self, fleet: &Fleet, h: Hold, operator: bool) -> Shown {
        let in_clear = operator || (h.key.scope == HoldScope::Tenant && self.named(&h));
        shown(fleet, h, in_clear, &self.tenant)
    }
}
