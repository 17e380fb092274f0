//! The fleet-memory operations — Admit, ReportOutcomes, ListHolds,
//! ReleaseHold, WatchHolds — over [`Fleet`], in domain types. Who is an
//! operator is the doors' question; they pass the answer in.

use std::sync::Arc;

use super::Service;
use super::budgets::deposit;
use super::caller::Caller;
use super::error::{Error, ErrorKind, Violation, check_len};
pub use super::reports::OutcomeCount;
use super::reports::deposit_report;
use crate::core::hold::{Hold, parse_probe_token};
use crate::core::{Policy, UnixMillis, limits};
use crate::fleet::{AdmitOutcome, Fleet, MalformedToken, matches};

/// Most counts one ReportOutcomes may carry.
pub const MAX_OUTCOME_COUNTS: usize = 1_000;
/// Largest count of one kind per entry of one report (a bigger one is cut to it).
pub const MAX_COUNT_PER_REPORT: u64 = 1_000_000;
/// Longest hold id or probe token.
pub const MAX_ID: usize = 128;
/// Default and largest ListHolds page.
const PAGE_DEFAULT: usize = 100;
const PAGE_MAX: usize = 1_000;
/// Counter of first attempts reported through ReportOutcomes.
pub const OUTCOME_REQUESTS_TOTAL: &str = "retryd_outcome_requests_total";

/// The message of a refused ReleaseHold.
pub const RELEASE_DENIED: &str = "ReleaseHold is for operators: a bearer token (--operator-token-file) or a client certificate in --operator-identities";

/// A hold with the tenant as this caller may see it: in clear for operators
/// and for the caller that named it, else hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The hold.
    pub hold: Hold,
    /// Its tenant as shown (empty when it is not a tenant hold).
    pub tenant: String,
}

impl Shown {
    /// `hold` with its tenant in clear.
    pub fn clear(hold: Hold) -> Self {
        let tenant = hold.key.tenant().to_owned();
        Shown { hold, tenant }
    }
}

/// Which holds a list or a watch covers (empty matches all).
#[derive(Debug, Clone, Copy, Default)]
pub struct HoldFilter<'a> {
    /// Catalog.
    pub catalog: &'a str,
    /// Dependency instance.
    pub dependency: &'a str,
    /// Tenant, raw.
    pub tenant: &'a str,
}

impl HoldFilter<'_> {
    fn check(&self) -> Result<(), Violation> {
        check_len("catalog", self.catalog, limits::MAX_CATALOG)?;
        check_scope_fields(self.dependency, self.tenant, "", "")
    }
}

/// One page of ListHolds.
#[derive(Debug, Clone, Default)]
pub struct HoldPage {
    /// The holds, in id order.
    pub holds: Vec<Shown>,
    /// Where the next page starts (empty: no more).
    pub next_page_token: String,
}

/// What Admit is asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct AdmitAsk<'a> {
    /// Catalog (empty: the default).
    pub catalog: &'a str,
    /// Dependency instance.
    pub dependency: &'a str,
    /// Tenant.
    pub tenant: &'a str,
    /// Method.
    pub method: &'a str,
    /// The attempt about to be made (≤ 1: a first attempt, a deposit).
    pub attempt: u32,
    /// Who asks, when the door knows: a first attempt that adds a budget
    /// scope is held to the caller's new-scope rate.
    pub caller: Option<Caller<'a>>,
}

/// What a ReportOutcomes did with its probe token.
#[derive(Debug, Clone, Default)]
pub struct ProbeAnswer {
    /// The hold the token names, after the report (none without a token).
    pub hold: Option<Shown>,
    /// The token was valid and its outcome counted.
    pub accepted: bool,
}

fn check_scope_fields(dependency: &str, tenant: &str, method: &str, prefix: &str) -> Result<(), Violation> {
    // The field's name is written only for a violation: an Admit that
    // passes (nearly all) allocates nothing here.
    for (field, value, max) in [
        ("dependency", dependency, limits::MAX_DEPENDENCY),
        ("tenant", tenant, limits::MAX_TENANT),
        ("method", method, limits::MAX_METHOD),
    ] {
        if value.len() > max {
            return check_len(&format!("{prefix}{field}"), value, max);
        }
    }
    Ok(())
}

/// The catalog a request names (empty: the default), or a violation of `field`.
fn resolve_catalog<'p>(policy: &'p Policy, name: &str, field: &str) -> Result<&'p str, Violation> {
    check_len(field, name, limits::MAX_CATALOG)?;
    if name.is_empty() {
        return Ok(&policy.default_catalog().name);
    }
    match policy.catalog(name) {
        Some(c) => Ok(&c.name),
        None => Err(Violation::new(
            field,
            format!("unknown catalog {name:?}; catalogs: {}", policy.catalog_names()),
        )),
    }
}

/// `h` with the tenant as a caller who is (or is not) an operator may see
/// it: in clear for operators, and for the tenant the caller named in this
/// request (`named`); every other tenant hashed.
pub fn shown(fleet: &Fleet, h: Hold, operator: bool, named: &str) -> Shown {
    if operator || (!named.is_empty() && h.key.tenant() == named) {
        return Shown::clear(h);
    }
    let tenant = fleet.hash_tenant(h.key.tenant());
    Shown { hold: h, tenant }
}

impl Service {
    /// Admit: may this call go ahead now?
    pub async fn admit(&self, ask: AdmitAsk<'_>) -> Result<(AdmitOutcome, Option<Shown>), Error> {
        let fleet = self.fleet()?;
        let policy = self.policy();
        let catalog = resolve_catalog(&policy, ask.catalog, "catalog")?;
        check_scope_fields(ask.dependency, ask.tenant, ask.method, "")?;
        let now = UnixMillis::now();
        let mut out = fleet.admit(catalog, ask.dependency, ask.tenant, ask.method, now).await;
        if out.admitted && ask.attempt <= 1 {
            // A first attempt about to be made: the budget's deposit (a retry never adds to it).
            deposit(&policy, fleet, catalog, ask.dependency, ask.tenant, 1, ask.caller, now);
        }
        // The caller named its own tenant: it sees it in clear.
        let hold = out.hold.take().map(|h| Shown::clear(Arc::unwrap_or_clone(h)));
        Ok((out, hold))
    }

    /// ReportOutcomes: counts are validated and capped; their first attempts
    /// are deposits of the fleet retry budgets. A probe token reports that
    /// probe's result; the hold it names is returned.
    pub async fn report_outcomes(
        &self,
        caller: Caller<'_>,
        counts: &[OutcomeCount<'_>],
        probe_token: &str,
        probe_succeeded: bool,
    ) -> Result<ProbeAnswer, Error> {
        let fleet = self.fleet()?;
        let policy = self.policy();
        if counts.len() > MAX_OUTCOME_COUNTS {
            return Err(Error::invalid(
                "counts",
                format!("{} entries; the limit is {MAX_OUTCOME_COUNTS}", counts.len()),
            ));
        }
        for (i, c) in counts.iter().enumerate() {
            resolve_catalog(&policy, c.catalog, &format!("counts[{i}].catalog"))?;
            check_scope_fields(c.dependency, c.tenant, c.method, &format!("counts[{i}]."))?;
        }
        check_len("probe_token", probe_token, MAX_ID)?;
        if !probe_token.is_empty() && parse_probe_token(probe_token).is_none() {
            return Err(Error::invalid("probe_token", MalformedToken.to_string()));
        }
        let requests = counts
            .iter()
            .fold(0u64, |a, c| a.saturating_add(c.requests.min(MAX_COUNT_PER_REPORT)));
        metrics::counter!(OUTCOME_REQUESTS_TOTAL).increment(requests);
        // First attempts of callers that do not use Admit: the budgets'
        // deposits (a caller using Admit must not report them again), summed
        // per scope and limited per caller.
        deposit_report(&policy, fleet, &caller.name(), counts, UnixMillis::now());
        if probe_token.is_empty() {
            return Ok(ProbeAnswer::default());
        }
        let report = fleet
            .report_probe(probe_token, probe_succeeded, UnixMillis::now())
            .await
            .map_err(|e: MalformedToken| Error::invalid("probe_token", e.to_string()))?;
        Ok(ProbeAnswer {
            // Everyone can see hold ids; tenants stay hashed for a token's bearer.
            hold: report.hold.map(|h| shown(fleet, h, false, "")),
            accepted: report.accepted,
        })
    }

    /// ListHolds: one page of the holds in force matching `filter`.
    pub fn list_holds(
        &self,
        filter: HoldFilter<'_>,
        page_size: i32,
        page_token: &str,
        operator: bool,
    ) -> Result<HoldPage, Error> {
        let fleet = self.fleet()?;
        filter.check()?;
        if page_size < 0 {
            return Err(Error::invalid("page_size", "must not be negative"));
        }
        let size = match page_size {
            0 => PAGE_DEFAULT,
            n => usize::try_from(n).unwrap_or(PAGE_MAX).min(PAGE_MAX),
        };
        // The cursor is the last id sent: ids are 16 hex digits.
        let valid_cursor = page_token.len() <= MAX_ID && page_token.bytes().all(|b| b.is_ascii_hexdigit());
        if !valid_cursor {
            return Err(Error::invalid("page_token", "is not a token this server gave"));
        }
        // One more than asked: whether another page follows.
        // A dependency filter walks that dependency's index, in the same id order.
        let keep = |h: &Hold| matches(h, filter.catalog, filter.dependency, filter.tenant);
        let mut holds = if filter.dependency.is_empty() {
            fleet.mirror().page(page_token, size + 1, UnixMillis::now(), keep)
        } else {
            fleet
                .mirror()
                .page_of(filter.dependency, page_token, size + 1, UnixMillis::now(), keep)
        };
        let more = holds.len() > size;
        holds.truncate(size);
        let next_page_token = match holds.last() {
            Some(h) if more => h.id.clone(),
            _ => String::new(),
        };
        Ok(HoldPage {
            holds: holds
                .into_iter()
                .map(|h| shown(fleet, h, operator, filter.tenant))
                .collect(),
            next_page_token,
        })
    }

    /// ReleaseHold: lifts the hold `id` now, for an operator.
    pub fn release_hold(&self, id: &str, operator: bool) -> Result<Shown, Error> {
        let fleet = self.fleet()?;
        if !operator {
            return Err(Error::new(ErrorKind::PermissionDenied, RELEASE_DENIED));
        }
        check_len("id", id, MAX_ID)?;
        if id.is_empty() {
            return Err(Error::invalid("id", "is required"));
        }
        let h = fleet
            .release(id, UnixMillis::now())
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("no hold {id:?} is in force")))?;
        tracing::info!(hold = %h.id, kind = h.kind.as_str(), dependency = %h.key.dependency, "hold released by an operator");
        Ok(Shown::clear(h))
    }
}
