//! Ready-made mappers from an error to a [`Failure`].

use std::fmt;

use tonic_types::StatusExt;

use crate::Failure;

/// An error that may be a dependency failure: `Some(failure)` when it is,
/// `None` to return it untouched.
pub trait IntoFailure {
    /// The Failure fields this error carries.
    fn to_failure(&self) -> Option<Failure>;
}

/// A dependency failure by its code, for callers that know it.
#[derive(Clone, Debug, Default)]
pub struct DependencyError {
    /// The code, e.g. `BITRIX_TIMEOUT`.
    pub code: String,
    /// Raw Retry-After.
    pub retry_after: Option<String>,
    /// A parsed delay.
    pub retry_after_ms: Option<u64>,
    /// A catalog other than the client's.
    pub catalog: Option<String>,
}

impl DependencyError {
    /// A failure with this code.
    pub fn new(code: impl Into<String>) -> Self {
        DependencyError {
            code: code.into(),
            ..Default::default()
        }
    }
    /// With a raw Retry-After.
    pub fn retry_after(mut self, v: impl Into<String>) -> Self {
        self.retry_after = Some(v.into());
        self
    }
    /// With a parsed delay.
    pub fn retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }
    /// Judged by another catalog than the client's.
    pub fn catalog(mut self, c: impl Into<String>) -> Self {
        self.catalog = Some(c.into());
        self
    }
}

impl fmt::Display for DependencyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "dependency failed: {}", self.code)
    }
}

impl std::error::Error for DependencyError {}

impl IntoFailure for DependencyError {
    fn to_failure(&self) -> Option<Failure> {
        Some(Failure {
            catalog: self.catalog.clone().unwrap_or_default(),
            code: self.code.clone(),
            retry_after: self.retry_after.clone().unwrap_or_default(),
            retry_after_ms: self.retry_after_ms,
            ..Default::default()
        })
    }
}

/// An HTTP answer that failed: its status and headers (name, value).
#[derive(Clone, Debug, Default)]
pub struct HttpStatusError {
    /// The status, e.g. 503.
    pub status: u16,
    /// Response headers.
    pub headers: Vec<(String, String)>,
}

impl fmt::Display for HttpStatusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HTTP {}", self.status)
    }
}

impl std::error::Error for HttpStatusError {}

impl IntoFailure for HttpStatusError {
    fn to_failure(&self) -> Option<Failure> {
        Some(from_http(
            self.status,
            self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ))
    }
}

impl IntoFailure for tonic::Status {
    fn to_failure(&self) -> Option<Failure> {
        Some(from_grpc(self))
    }
}

fn header<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>, name: &str) -> Option<String> {
    headers
        .into_iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.to_string())
}

/// An HTTP status and headers: code = the status (catalog `http`),
/// Retry-After and X-Request-Id from the headers.
pub fn from_http<'a>(status: u16, headers: impl IntoIterator<Item = (&'a str, &'a str)> + Clone) -> Failure {
    Failure {
        catalog: "http".into(),
        code: status.to_string(),
        retry_after: header(headers.clone(), "retry-after").unwrap_or_default(),
        request_id: header(headers, "x-request-id").unwrap_or_default(),
        ..Default::default()
    }
}

/// A gRPC status: its code name (catalog `grpc`), `google.rpc.RetryInfo`
/// or `grpc-retry-pushback-ms` as `retry_after_ms`.
pub fn from_grpc(status: &tonic::Status) -> Failure {
    let name = match status.code() {
        tonic::Code::Ok => "OK",
        tonic::Code::Cancelled => "CANCELLED",
        tonic::Code::Unknown => "UNKNOWN",
        tonic::Code::InvalidArgument => "INVALID_ARGUMENT",
        tonic::Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        tonic::Code::NotFound => "NOT_FOUND",
        tonic::Code::AlreadyExists => "ALREADY_EXISTS",
        tonic::Code::PermissionDenied => "PERMISSION_DENIED",
        tonic::Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        tonic::Code::FailedPrecondition => "FAILED_PRECONDITION",
        tonic::Code::Aborted => "ABORTED",
        tonic::Code::OutOfRange => "OUT_OF_RANGE",
        tonic::Code::Unimplemented => "UNIMPLEMENTED",
        tonic::Code::Internal => "INTERNAL",
        tonic::Code::Unavailable => "UNAVAILABLE",
        tonic::Code::DataLoss => "DATA_LOSS",
        tonic::Code::Unauthenticated => "UNAUTHENTICATED",
    };
    let mut retry_after_ms = None;
    if let Some(ri) = status.get_details_retry_info() {
        if let Some(d) = ri.retry_delay {
            retry_after_ms = Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        }
    }
    let values = status.metadata().get_all("grpc-retry-pushback-ms");
    let (ms, no_retry) = pushback(values.iter().map(|v| v.to_str().unwrap_or("")));
    if no_retry {
        retry_after_ms = None;
    } else if ms.is_some() {
        retry_after_ms = retry_after_ms.max(ms);
    }
    Failure {
        catalog: "grpc".into(),
        code: name.into(),
        retry_after_ms,
        no_retry,
        ..Default::default()
    }
}

/// The `grpc-retry-pushback-ms` values of one response, read as gRFC A6
/// does: one value, or the same value repeated, is a delay
/// (`(Some(ms), false)`); a negative, unparsable or too large (past 2^64)
/// value, or values that disagree, mean "do not retry" (`(None, true)`);
/// none: `(None, false)`.
pub fn pushback<'a>(values: impl IntoIterator<Item = &'a str>) -> (Option<u64>, bool) {
    let mut got = None;
    for v in values {
        let v = v.trim();
        // u64's parser takes a leading '+'; gRFC A6's integer does not.
        let n = match v.parse::<u64>() {
            Ok(n) if !v.starts_with('+') => n,
            _ => return (None, true),
        };
        if got.is_some_and(|g| g != n) {
            return (None, true);
        }
        got = Some(n);
    }
    (got, false)
}

/// The Vibecode / Bitrix24 JSON envelope: `{"error":{"code":"QUEUE_OVERFLOW",…}}`
/// or `{"error":"CODE","error_description":…}` (catalog `vibecode`), with
/// Retry-After and X-Request-Id from the headers. A body without an envelope
/// gives an empty code (a network error to retryd).
pub fn from_envelope<'a>(body: &str, headers: impl IntoIterator<Item = (&'a str, &'a str)> + Clone) -> Failure {
    Failure {
        catalog: "vibecode".into(),
        code: envelope_code(body).unwrap_or_default(),
        retry_after: header(headers.clone(), "retry-after").unwrap_or_default(),
        request_id: header(headers, "x-request-id").unwrap_or_default(),
        ..Default::default()
    }
}

/// The error code of an envelope, found without a JSON library: the string
/// value of `"error"`, or of `"code"` inside an `"error"` object.
fn envelope_code(body: &str) -> Option<String> {
    let rest = &body[body.find("\"error\"")? + 7..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        return Some(s[..s.find('"')?].to_string());
    }
    let obj = rest.strip_prefix('{')?;
    let at = obj.find("\"code\"")?;
    let v = obj[at + 6..]
        .trim_start()
        .strip_prefix(':')?
        .trim_start()
        .strip_prefix('"')?;
    Some(v[..v.find('"')?].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushback_as_grpc_a6_reads_it() {
        assert_eq!(pushback(["250", "250"]), (Some(250), false));
        assert_eq!(pushback([]), (None, false));
        for vs in [
            &["-1"][..],
            &["xxx"],
            &[""],
            &["100", "200"],
            &["99999999999999999999"],
            &["+5"],
            &["1.5"],
        ] {
            assert_eq!(pushback(vs.iter().copied()), (None, true), "{vs:?}");
        }
        let mut st = tonic::Status::unavailable("x");
        st.metadata_mut().insert(
            "grpc-retry-pushback-ms",
            tonic::metadata::MetadataValue::from_static("-1"),
        );
        let f = from_grpc(&st);
        assert!(f.no_retry && f.retry_after_ms.is_none(), "{f:?}");
    }

    #[test]
    fn envelope_codes() {
        assert_eq!(
            envelope_code(r#"{"error":{"code":"QUEUE_OVERFLOW","message":"x"}}"#).as_deref(),
            Some("QUEUE_OVERFLOW")
        );
        assert_eq!(
            envelope_code(r#"{"error": "BITRIX_ERROR", "error_description": "y"}"#).as_deref(),
            Some("BITRIX_ERROR")
        );
        assert_eq!(envelope_code("<html>"), None);
    }

    #[test]
    fn http_headers_any_case() {
        let f = from_http(429, [("retry-after", "5"), ("X-Request-ID", "r1")]);
        assert_eq!(
            (f.code.as_str(), f.retry_after.as_str(), f.request_id.as_str()),
            ("429", "5", "r1")
        );
    }

    #[test]
    fn grpc_retry_info() {
        let st = tonic::Status::with_error_details(
            tonic::Code::Unavailable,
            "x",
            tonic_types::ErrorDetails::with_retry_info(Some(std::time::Duration::from_millis(300))),
        );
        let f = from_grpc(&st);
        assert_eq!((f.code.as_str(), f.retry_after_ms), ("UNAVAILABLE", Some(300)));
    }
}
