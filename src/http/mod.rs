//! The HTTP/JSON door: the decision service for callers without gRPC (PHP
//! apps, shell scripts, low-code tools, browsers), served on the gRPC port
//! and routed by path — `/v1/*`, `/healthz`, `/readyz` and the operator
//! console's `/ui/` come here, everything else is gRPC (see [`is_http_path`]).
//!
//! Every route calls the same service operation as its gRPC method
//! ([`crate::service`]); neither door imports the other. A decision is
//! written in the one JSON form `retryd classify --format json` prints
//! ([`crate::doors::json`]).
//!
//! - [`routes`]: the handlers; [`input`]: JSON bodies into domain types;
//! - [`error`]: gRPC codes as HTTP statuses, `google.rpc.Status` bodies;
//! - [`door`]: the service in front of them: limits, shedding, metrics,
//!   CORS, panics; [`guard`]: JSON bodies and the page's origin on
//!   state-changing routes;
//! - [`ui`]: the operator console, pages embedded in the binary that use
//!   only these routes;
//! - [`openapi`]: the OpenAPI 3.1 document of these routes.

pub mod catalogs;
pub mod door;
pub mod error;
pub mod fleet_routes;
pub mod guard;
pub mod input;
pub mod openapi;
pub mod routes;
pub mod ui;

use axum::body::Body;
use http::{HeaderValue, StatusCode, header};

pub use door::{HttpConfig, HttpDoor};

/// Whether a request path is the HTTP door's rather than gRPC's. gRPC
/// paths are `/package.Service/Method`; the door's are versioned (`/v1/…`),
/// the two probes, or the console's (`/ui/…`). Layers that only make sense
/// for gRPC (its metrics, shedding's trailers-only refusal, the gRPC wire
/// rules) skip these.
pub fn is_http_path(path: &str) -> bool {
    path.starts_with("/v1/") || path == "/healthz" || path == "/readyz" || ui::is_ui_path(path)
}

/// A JSON response.
pub fn json_response(status: StatusCode, value: &impl serde::Serialize) -> http::Response<Body> {
    bytes_response(status, serde_json::to_vec(value).unwrap_or_default())
}

/// A response whose body is already JSON bytes.
pub fn bytes_response(status: StatusCode, body: Vec<u8>) -> http::Response<Body> {
    let mut r = http::Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}
