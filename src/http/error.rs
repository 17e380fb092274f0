//! Errors of the HTTP door: the HTTP status Google's HTTP/JSON transcoding
//! gives each gRPC code, and a `google.rpc.Status` JSON body (its proto3
//! JSON form: `code` is the gRPC code number, `details` carries a
//! `google.rpc.BadRequest` naming the field).

use axum::body::Body;
use http::{HeaderValue, StatusCode};
use serde_json::{Value, json};
use tonic::Code;

use crate::service::{Error, Violation};

/// The `@type` of a BadRequest detail.
pub const BAD_REQUEST_TYPE: &str = "type.googleapis.com/google.rpc.BadRequest";

/// An error answer: HTTP status, gRPC code, message and field violations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status sent.
    pub http: StatusCode,
    /// The gRPC code in the body.
    pub code: Code,
    /// The human message.
    pub message: String,
    /// `(field, description)` pairs of a BadRequest detail.
    pub violations: Vec<(String, String)>,
    /// Retry advice on a shed answer: `Retry-After` (whole seconds, rounded
    /// up) and a `google.rpc.RetryInfo` detail.
    pub retry_after: Option<std::time::Duration>,
}

/// The `@type` of a RetryInfo detail.
pub const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The HTTP status of a gRPC code, as `google/rpc/code.proto` and Google's
/// HTTP/JSON transcoding (and grpc-gateway) map it.
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl ApiError {
    /// An error with the transcoding status of `code`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ApiError {
            http: http_status(code),
            code,
            message: message.into(),
            violations: Vec::new(),
            retry_after: None,
        }
    }

    /// This error advising a retry after `delay`.
    pub fn retry_after(mut self, delay: std::time::Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }

    /// A refused service operation: its kind's code and status, and the
    /// field at fault.
    pub fn from_error(e: &Error) -> Self {
        let code = crate::doors::code_of(e.kind);
        let mut out = ApiError::new(code, e.message.clone());
        if let Some(v) = &e.violation {
            out.violations.push((v.field.clone(), v.description.clone()));
        }
        out.retry_after = crate::doors::overload::advice_for(code);
        out
    }
    /// INVALID_ARGUMENT (400) naming `field`.
    pub fn invalid(field: impl Into<String>, description: impl Into<String>) -> Self {
        let (field, description) = (field.into(), description.into());
        let mut e = ApiError::new(Code::InvalidArgument, format!("{field}: {description}"));
        e.violations.push((field, description));
        e
    }

    /// A field violation of the decision service.
    pub fn from_violation(v: &Violation) -> Self {
        ApiError::invalid(v.field.clone(), v.description.clone())
    }

    /// 413: the body is over `--max-message-bytes` (RESOURCE_EXHAUSTED, as gRPC answers it).
    pub fn too_large(size: Option<u64>, limit: usize) -> Self {
        let what = size.map_or_else(
            || "the request body is".to_owned(),
            |n| format!("the request body is {n} bytes;"),
        );
        let message = match size {
            Some(_) => format!("{what} the limit is {limit} (--max-message-bytes)"),
            None => format!("{what} over the limit of {limit} bytes (--max-message-bytes)"),
        };
        ApiError {
            http: StatusCode::PAYLOAD_TOO_LARGE,
            ..ApiError::new(Code::ResourceExhausted, message)
        }
    }

    /// 415: the body is not `application/json`.
    pub fn unsupported_media_type(given: Option<&HeaderValue>) -> Self {
        let given = given.map_or_else(
            || "no content-type".to_owned(),
            |v| format!("content-type {:?}", v.to_str().unwrap_or("(not text)")),
        );
        ApiError {
            http: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ..ApiError::new(
                Code::InvalidArgument,
                format!("{given}; send the body as application/json"),
            )
        }
    }

    /// 404 for a path that is not a route.
    pub fn no_route(path: &str) -> Self {
        ApiError::new(
            Code::NotFound,
            format!("no route {path:?}; the routes are listed at /v1/openapi.json"),
        )
    }

    /// 405 for a route asked with another method.
    pub fn method_not_allowed(method: &http::Method, allowed: &str) -> Self {
        ApiError {
            http: StatusCode::METHOD_NOT_ALLOWED,
            ..ApiError::new(
                Code::Unimplemented,
                format!("{method} is not served here; use {allowed}"),
            )
        }
    }

    /// The `google.rpc.Status` JSON body.
    pub fn body(&self) -> Value {
        let mut status = status_json(self.code, &self.message, &self.violations);
        if let Some(delay) = self.retry_after {
            let info = json!({ "@type": RETRY_INFO_TYPE, "retryDelay": format!("{}.{:03}s", delay.as_secs(), delay.subsec_millis()) });
            match status["details"].as_array_mut() {
                Some(details) => details.push(info),
                None => status["details"] = json!([info]),
            }
        }
        status
    }

    /// The whole response.
    pub fn into_response(self) -> http::Response<Body> {
        let mut r = super::json_response(self.http, &self.body());
        if let Some(delay) = self.retry_after {
            // Whole seconds, rounded up (RFC 9110 §10.2.3); 0 means "now, elsewhere".
            let secs = delay.as_millis().div_ceil(1000);
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                r.headers_mut().insert(http::header::RETRY_AFTER, v);
            }
        }
        r
    }
}

/// A `google.rpc.Status` in proto3 JSON.
pub fn status_json(code: Code, message: &str, violations: &[(String, String)]) -> Value {
    let mut status = json!({ "code": code as i32, "message": message });
    if !violations.is_empty() {
        let fv: Vec<Value> = violations
            .iter()
            .map(|(f, d)| json!({ "field": f, "description": d }))
            .collect();
        status["details"] = json!([{ "@type": BAD_REQUEST_TYPE, "fieldViolations": fv }]);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcoding_statuses() {
        assert_eq!(http_status(Code::InvalidArgument), 400);
        assert_eq!(http_status(Code::ResourceExhausted), 429);
        assert_eq!(http_status(Code::Unavailable), 503);
        assert_eq!(http_status(Code::PermissionDenied), 403);
        assert_eq!(http_status(Code::NotFound), 404);
        assert_eq!(http_status(Code::FailedPrecondition), 400);
        assert_eq!(http_status(Code::Cancelled), 499);
    }

    #[test]
    fn body_names_the_field() {
        let e = ApiError::invalid("failure.operation", "unknown value");
        assert_eq!(
            e.body(),
            json!({"code": 3, "message": "failure.operation: unknown value", "details": [
                {"@type": BAD_REQUEST_TYPE, "fieldViolations": [{"field": "failure.operation", "description": "unknown value"}]}
            ]})
        );
    }
}
