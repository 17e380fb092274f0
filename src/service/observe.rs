//! The hook the service calls after each decision, so the shadow policy and
//! the decision log see every decision (from either door) without living in
//! the service's code.

use super::decide::Decided;
use crate::core::{Failure, UnixMillis};

/// Sees each decision the service answers. Called on the response path:
/// an implementation must only copy what it needs and hand it off (a
/// bounded queue), never block, never fail the call.
pub trait DecisionObserver: Send + Sync + std::fmt::Debug {
    /// `decided` was made for `failure` at `now`: the decision, the hold in
    /// force on its scope (after the decision's own hold was placed) and
    /// the budget it was judged against.
    fn observe(&self, failure: &Failure<'_>, decided: &Decided<'_>, now: UnixMillis);
}
