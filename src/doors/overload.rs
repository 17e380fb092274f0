//! Load shedding: what the server does when it has no room for a call.
//!
//! A decision call over a limit of [`super::ledger`] (calls in flight or
//! bytes buffered, server-wide or on its connection) is answered
//! RESOURCE_EXHAUSTED at once, before its handler runs (see
//! [`crate::server::admission`]), so an overload turns into fast, retryable
//! refusals instead of a queue growing without bound. Health checks
//! (`grpc.health.v1.Health/*`) are never shed: an overloaded server is busy,
//! not unhealthy, and must not be restarted for it.
//!
//! RESOURCE_EXHAUSTED rather than UNAVAILABLE so that clients (and retryd's
//! own metrics) can tell "shed by overload, back off" from "shutting down,
//! go to another replica"; the call was not started, so retrying it is safe.

/// Counter of calls refused for want of a call slot or buffer room.
pub const SHED_TOTAL: &str = "retryd_calls_shed_total";
