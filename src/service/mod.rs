//! The service layer: every operation of retryd, protocol-neutral, taking
//! and returning domain types (`core` and `fleet` types, never `pb` or
//! JSON). The gRPC and HTTP doors are thin mappers onto it; the shadow
//! policy, `retryd replay`, policy tests and diffs decide through it.
//!
//! - [`decide`]: **what a retry is under holds and budgets** — the one
//!   decision path (decide → place holds → hold as floor → budget judge and
//!   withdrawal), live or read-only;
//! - [`classify`]: Classify and ClassifyBatch (validation, metrics, the
//!   decision hook);
//! - [`holds`]: Admit, ReportOutcomes, ListHolds, ReleaseHold, WatchHolds;
//! - [`budgets`]: deposits and ListBudgets; [`reports`]: ReportOutcomes
//!   deposits, limited per caller; [`catalogs`]: ListCatalogs;
//! - [`observe`]: the hook the shadow policy and the decision log hang on;
//!   [`outcome`] and [`record`]: how they compare and log a decision;
//! - [`error`]: refusals in words both doors map; [`caller`]: who places a hold.

pub mod budget_step;
pub mod budgets;
pub mod caller;
pub mod catalogs;
pub mod classify;
pub mod decide;
pub mod error;
pub mod explain;
pub mod holds;
pub mod observe;
pub mod outcome;
pub mod record;
pub mod reports;
pub mod stall;
pub mod watch;
mod watch_filter;
pub mod watch_out;
mod watch_snapshot;

#[cfg(test)]
mod budget_tests;

use std::sync::Arc;

use arc_swap::ArcSwap;

pub use caller::Caller;
pub use classify::{BatchSummary, DECISIONS_TOTAL, DEFAULT_MAX_BATCH};
pub use decide::{Decided, InputNotes};
pub use error::{Error, ErrorKind, Violation};

use crate::core::Policy;
use crate::fleet::Fleet;
use observe::DecisionObserver;

/// The policy in force, shared with whatever reloads it.
pub type PolicyHandle = Arc<ArcSwap<Policy>>;

/// Limits of the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceConfig {
    /// Most failures one ClassifyBatch may carry (`--max-batch`).
    pub max_batch: usize,
    /// How WatchHolds streams are bounded.
    pub watch: watch::WatchLimits,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            max_batch: DEFAULT_MAX_BATCH,
            watch: watch::WatchLimits::default(),
        }
    }
}

/// retryd's operations over the policy in force and the fleet memory.
/// Cheap to clone (every part is shared).
#[derive(Debug, Clone)]
pub struct Service {
    policy: PolicyHandle,
    config: ServiceConfig,
    counters: Arc<ArcSwap<classify::DecisionCounters>>,
    fleet: Option<Arc<Fleet>>,
    draining: tokio::sync::watch::Receiver<bool>,
    observer: Option<Arc<dyn DecisionObserver>>,
    watchers: Arc<watch::Watchers>,
}

impl Service {
    /// A service deciding by whatever policy `policy` holds at each call,
    /// without fleet memory.
    pub fn new(policy: PolicyHandle, config: ServiceConfig) -> Self {
        Service {
            policy,
            config,
            counters: Arc::new(ArcSwap::from_pointee(classify::DecisionCounters::default())),
            fleet: None,
            draining: tokio::sync::watch::channel(false).1,
            observer: None,
            watchers: Arc::default(),
        }
    }

    /// Decides with fleet memory: holds placed by decisions, Admit and the
    /// hold operations; `draining` turning true ends watches.
    pub fn with_fleet(mut self, fleet: Arc<Fleet>, draining: tokio::sync::watch::Receiver<bool>) -> Self {
        self.fleet = Some(fleet);
        self.draining = draining;
        self
    }

    /// Shows every decision answered to `observer` (the shadow policy, the
    /// decision log), after it is made and before it is sent.
    pub fn with_observer(mut self, observer: Arc<dyn DecisionObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The policy in force now.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.load_full()
    }

    /// Whether the server runs with fleet memory.
    pub fn has_fleet(&self) -> bool {
        self.fleet.is_some()
    }

    /// The fleet memory, or FAILED_PRECONDITION when the server runs without it.
    pub fn fleet(&self) -> Result<&Arc<Fleet>, Error> {
        self.fleet.as_ref().ok_or_else(Error::no_fleet)
    }
}
