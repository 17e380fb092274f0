//! retryd's decision as the library returns it, and why a call ended
//! without a result.

use std::fmt;

use crate::{Strategy, Verdict, pb};

/// retryd's answer for one failure.
#[derive(Clone, Debug)]
pub struct Decision {
    /// The verdict; prints `retry_with_limit`, `do_not_retry`, … (the CLI's and HTTP's words).
    pub verdict: Verdict,
    /// How the wait was computed.
    pub strategy: Strategy,
    /// Why.
    pub reason: String,
    /// The catalog rule that decided (`client_fallback/…` for the fallback).
    pub rule: String,
    /// The state change needed first, e.g. `authorization_restored`.
    pub required_transition: String,
    /// A final state to record, e.g. `FAILED_PERMANENT`.
    pub terminal_state: String,
    /// The wait window.
    pub after_ms: u64,
    /// Top of the wait window.
    pub max_after_ms: u64,
    /// The fleet hold in force, if any.
    pub hold: Option<pb::Hold>,
    /// The whole decision as retryd sent it (None for the fallback's).
    pub raw: Option<pb::Decision>,
}

impl From<pb::Decision> for Decision {
    fn from(d: pb::Decision) -> Self {
        let r = d.retry.clone().unwrap_or_default();
        Decision {
            verdict: Verdict::from_pb(d.verdict),
            strategy: Strategy::from_pb(r.strategy),
            reason: d.reason.clone(),
            rule: d.rule.clone(),
            required_transition: d.required_transition.clone(),
            terminal_state: d.terminal_state.clone(),
            after_ms: r.after_ms,
            max_after_ms: r.max_after_ms,
            hold: d.hold.clone(),
            raw: Some(d),
        }
    }
}

/// Why a call ended without a result.
#[derive(Debug)]
pub enum Error<E> {
    /// retryd's decision said stop (`decision.verdict`); `source` is the dependency's last error.
    Refused { decision: Box<Decision>, source: E },
    /// A fleet hold refuses the call past the deadline.
    Held { hold: Option<Box<pb::Hold>> },
    /// The next attempt would pass the deadline.
    DeadlineExceeded { source: Option<E> },
    /// retryd was unreachable or slow and the fallback does not retry.
    Unavailable { decision: Box<Decision>, source: E },
    /// An error no mapper understands, returned untouched.
    Dependency(E),
    /// retryd refused the request itself (`INVALID_ARGUMENT`, `NOT_FOUND`,
    /// `PERMISSION_DENIED`): a mistake in the client's configuration or in
    /// what a mapper sent, not an outage, so no fallback ran. `field` is the
    /// field retryd named (`failure.catalog`); `source` the dependency's
    /// error, when there was one.
    Rejected {
        code: tonic::Code,
        field: String,
        message: String,
        source: Option<E>,
    },
}

/// retryd's status says the request is wrong (None otherwise); its messages
/// start with the field they are about (`failure.catalog: …`).
pub(crate) fn rejection<E>(status: &tonic::Status, source: Option<E>) -> Option<Error<E>> {
    if !matches!(
        status.code(),
        tonic::Code::InvalidArgument | tonic::Code::NotFound | tonic::Code::PermissionDenied
    ) {
        return None;
    }
    let message = status.message().to_string();
    let field = match message.split_once(':') {
        Some((head, _)) if !head.is_empty() && !head.contains(char::is_whitespace) => head.to_string(),
        _ => String::new(),
    };
    Some(Error::Rejected {
        code: status.code(),
        field,
        message,
        source,
    })
}

impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Refused { decision, source } | Error::Unavailable { decision, source } => {
                write!(f, "retryd: {} ({}): {source}", decision.verdict, decision.reason)
            }
            Error::Held { hold } => write!(
                f,
                "retryd: held: {}",
                hold.as_ref().map(|h| h.reason.as_str()).unwrap_or("")
            ),
            Error::DeadlineExceeded { .. } => write!(f, "retryd: the next attempt would pass the deadline"),
            Error::Dependency(e) => write!(f, "{e}"),
            Error::Rejected { code, message, .. } => {
                write!(f, "retryd rejected the request ({code:?}): {message}")
            }
        }
    }
}

/// `source()` is the dependency's error, so anyhow/eyre chains and `{:#}`
/// reports keep it. The bound is `E: Error + 'static`, as `source()`'s type
/// requires: an opaque inner error that is no `std::error::Error`
/// (`anyhow::Error`, `Box<dyn Error>`) is turned into one with
/// [`Error::map_source`] (e.g. into `std::io::Error::other`), or the call's
/// error type is a concrete one (thiserror).
impl<E: std::error::Error + 'static> std::error::Error for Error<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Refused { source, .. } | Error::Unavailable { source, .. } | Error::Dependency(source) => {
                Some(source)
            }
            Error::DeadlineExceeded { source } | Error::Rejected { source, .. } => {
                source.as_ref().map(|e| e as &(dyn std::error::Error + 'static))
            }
            Error::Held { .. } => None,
        }
    }
}

impl<E> Error<E> {
    /// The same error with the dependency's error mapped by `f`.
    pub fn map_source<F, E2>(self, f: F) -> Error<E2>
    where
        F: FnOnce(E) -> E2,
    {
        match self {
            Error::Refused { decision, source } => Error::Refused {
                decision,
                source: f(source),
            },
            Error::Held { hold } => Error::Held { hold },
            Error::DeadlineExceeded { source } => Error::DeadlineExceeded { source: source.map(f) },
            Error::Unavailable { decision, source } => Error::Unavailable {
                decision,
                source: f(source),
            },
            Error::Dependency(e) => Error::Dependency(f(e)),
            Error::Rejected {
                code,
                field,
                message,
                source,
            } => Error::Rejected {
                code,
                field,
                message,
                source: source.map(f),
            },
        }
    }

    /// The dependency's error, when there is one.
    pub fn dependency_error(&self) -> Option<&E> {
        match self {
            Error::Refused { source, .. } | Error::Unavailable { source, .. } | Error::Dependency(source) => {
                Some(source)
            }
            Error::DeadlineExceeded { source } | Error::Rejected { source, .. } => source.as_ref(),
            Error::Held { .. } => None,
        }
    }
}
