//! The hook the gRPC service calls after each decision, so the shadow
//! policy and the decision log see every decision without living in the
//! service's code.

use crate::core::hold::Hold;
use crate::core::{Decision, Failure, UnixMillis};

/// Sees each decision the service answers. Called on the response path:
/// an implementation must only copy what it needs and hand it off (a
/// bounded queue), never block, never fail the call.
pub trait DecisionObserver: Send + Sync + std::fmt::Debug {
    /// `decision` was made for `failure` at `now` with `hold` in force on
    /// its scope (after the decision's own hold was placed).
    fn observe(&self, failure: &Failure<'_>, decision: &Decision<'_>, hold: Option<&Hold>, now: UnixMillis);
}
