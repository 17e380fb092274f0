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
//! Every shed answer carries retry advice (`google.rpc.RetryInfo` and
//! `grpc-retry-pushback-ms` over gRPC, `Retry-After` over HTTP), jittered so
//! the callers shed together spread out; a draining server's UNAVAILABLE
//! advises 0: go to another replica at once.
//!
//! RESOURCE_EXHAUSTED rather than UNAVAILABLE so that clients (and retryd's
//! own metrics) can tell "shed by overload, back off" from "shutting down,
//! go to another replica"; the call was not started, so retrying it is safe.

/// Counter of calls refused for want of a call slot or buffer room.
pub const SHED_TOTAL: &str = "retryd_calls_shed_total";

/// What a shed answer advises, before jitter: a server-wide overload is
/// given longer than one connection's own queue, which drains as its own
/// calls finish; a refused stream (a watch cap) longer still, since streams
/// free their places slowly.
pub const SERVER_SHED_DELAY: std::time::Duration = std::time::Duration::from_millis(500);
/// See [`SERVER_SHED_DELAY`].
pub const CONNECTION_SHED_DELAY: std::time::Duration = std::time::Duration::from_millis(100);
/// See [`SERVER_SHED_DELAY`].
pub const STREAM_SHED_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// `base` jittered ±50 %, so callers shed together do not come back together.
pub fn jittered(base: std::time::Duration) -> std::time::Duration {
    base.mul_f64(rand::random_range(0.5..1.5))
}

/// The advice on a service error answered with `code`: back off on
/// RESOURCE_EXHAUSTED, go to another replica at once on UNAVAILABLE (the
/// server is draining); none on anything else.
pub fn advice_for(code: tonic::Code) -> Option<std::time::Duration> {
    match code {
        tonic::Code::ResourceExhausted => Some(jittered(STREAM_SHED_DELAY)),
        tonic::Code::Unavailable => Some(std::time::Duration::ZERO),
        _ => None,
    }
}

/// The metadata key of gRPC's retry pushback (gRFC A6).
pub const PUSHBACK: &str = "grpc-retry-pushback-ms";

/// `status` carrying the advice to retry after `delay`: a
/// `google.rpc.RetryInfo` detail and `grpc-retry-pushback-ms`.
pub fn advise(status: tonic::Status, delay: std::time::Duration) -> tonic::Status {
    use tonic_types::{ErrorDetails, StatusExt as _};
    let mut out = tonic::Status::with_error_details(
        status.code(),
        status.message(),
        ErrorDetails::with_retry_info(Some(delay)),
    );
    if let Ok(v) = delay.as_millis().to_string().parse() {
        out.metadata_mut().insert(PUSHBACK, v);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tonic_types::StatusExt as _;

    use super::*;

    #[test]
    fn shed_answers_carry_jittered_advice_and_draining_says_elsewhere_now() {
        for _ in 0..100 {
            let d = jittered(SERVER_SHED_DELAY);
            assert!(
                (Duration::from_millis(250)..Duration::from_millis(750)).contains(&d),
                "{d:?}"
            );
        }
        assert_eq!(advice_for(tonic::Code::Unavailable), Some(Duration::ZERO));
        assert_eq!(advice_for(tonic::Code::InvalidArgument), None);
        let s = advise(tonic::Status::unavailable("draining"), Duration::ZERO);
        assert_eq!(s.metadata().get(PUSHBACK).and_then(|v| v.to_str().ok()), Some("0"));
        let s = advise(tonic::Status::resource_exhausted("full"), Duration::from_millis(1234));
        assert_eq!((s.code(), s.message()), (tonic::Code::ResourceExhausted, "full"));
        assert_eq!(s.metadata().get(PUSHBACK).and_then(|v| v.to_str().ok()), Some("1234"));
        assert_eq!(
            s.get_details_retry_info().and_then(|r| r.retry_delay),
            Some(Duration::from_millis(1234))
        );
    }
}
