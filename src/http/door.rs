//! The door's service, in front of the routes: finds the route (404, 405),
//! answers CORS preflights, sheds load with the gRPC calls' own
//! `--max-concurrent-calls` slots, refuses a body that is not JSON (415) or
//! is over `--max-message-bytes` (413), turns a panic into a 500, and
//! counts every request in `http_server_requests_total{route,code}` and
//! `http_server_request_duration_seconds{route}` (route: one of the
//! templates of [`ROUTES`](super::routes::ROUTES) or `unknown`; code: the
//! HTTP status).

use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use futures_util::FutureExt as _;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use tokio::sync::Semaphore;
use tonic::Code;

use super::error::ApiError;
use super::routes::{self, Call, methods_of, route_of};
use crate::grpc::RetryDecisionApi;
use crate::server::overload::SHED_TOTAL;

/// Counter of HTTP requests, by route template and HTTP status.
pub const REQUESTS_TOTAL: &str = "http_server_requests_total";
/// Histogram of HTTP request durations in seconds, by route template.
pub const DURATION_SECONDS: &str = "http_server_request_duration_seconds";

/// Settings of the door.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpConfig {
    /// Largest request body in bytes (`--max-message-bytes`).
    pub max_message_bytes: usize,
    /// Origins allowed cross-origin (`--http-cors-origin`); empty: CORS off;
    /// `*`: any origin.
    pub cors_origins: Vec<String>,
}

/// The HTTP/JSON door as a tower service (cheap to clone).
#[derive(Clone)]
pub struct HttpDoor {
    inner: Arc<Inner>,
}

struct Inner {
    api: RetryDecisionApi,
    health: Arc<tonic_health::server::HealthService>,
    config: HttpConfig,
    permits: Option<Arc<Semaphore>>,
}

impl std::fmt::Debug for HttpDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpDoor")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl HttpDoor {
    /// A door onto `api`, reporting `health`'s status at `/healthz` and
    /// `/readyz`, taking a slot of `permits` (the gRPC calls' semaphore of
    /// `--max-concurrent-calls`; `None`: no limit) per request.
    pub fn new(
        api: RetryDecisionApi,
        health: tonic_health::server::HealthReporter,
        config: HttpConfig,
        permits: Option<Arc<Semaphore>>,
    ) -> Self {
        metrics::describe_counter!(REQUESTS_TOTAL, "HTTP/JSON requests answered, by route and HTTP status.");
        metrics::describe_histogram!(
            DURATION_SECONDS,
            metrics::Unit::Seconds,
            "Time to answer an HTTP/JSON request."
        );
        HttpDoor {
            inner: Arc::new(Inner {
                api,
                health: Arc::new(tonic_health::server::HealthService::from_health_reporter(health)),
                config,
                permits,
            }),
        }
    }
}

impl tower::Service<Request<Body>> for HttpDoor {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let start = Instant::now();
            let route = route_of(req.uri().path());
            let origin = req.headers().get(header::ORIGIN).cloned();
            let mut response = match AssertUnwindSafe(inner.handle(route, req)).catch_unwind().await {
                Ok(r) => r,
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    tracing::error!(route = route.unwrap_or("unknown"), panic = %what, "HTTP handler panicked");
                    ApiError::new(Code::Internal, "internal error").into_response()
                }
            };
            if let Some(origin) = origin.filter(|o| inner.cors_allows(o)) {
                let h = response.headers_mut();
                h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
                h.append(header::VARY, HeaderValue::from_static("origin"));
            }
            let label = route.unwrap_or("unknown");
            metrics::counter!(REQUESTS_TOTAL, "route" => label, "code" => response.status().as_str().to_owned())
                .increment(1);
            metrics::histogram!(DURATION_SECONDS, "route" => label).record(start.elapsed().as_secs_f64());
            Ok(response)
        })
    }
}

impl Inner {
    fn cors_allows(&self, origin: &HeaderValue) -> bool {
        let origins = &self.config.cors_origins;
        !origins.is_empty() && origins.iter().any(|o| o == "*" || o.as_bytes() == origin.as_bytes())
    }

    async fn handle(&self, route: Option<&'static str>, req: Request<Body>) -> Response<Body> {
        let Some(route) = route else {
            return ApiError::no_route(req.uri().path()).into_response();
        };
        let methods = methods_of(route);
        let allow = methods.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ");
        if req.method() == Method::OPTIONS {
            return self.preflight(&req, &allow);
        }
        if !methods.contains(&req.method()) {
            let mut r = ApiError::method_not_allowed(req.method(), &allow).into_response();
            if let Ok(v) = HeaderValue::from_str(&allow) {
                r.headers_mut().insert(header::ALLOW, v);
            }
            return r;
        }
        if route == "/healthz" || route == "/readyz" {
            // Probes are never shed: an overloaded server is busy, not unhealthy.
            return routes::health(&self.health).await;
        }
        let _permit = match &self.permits {
            None => None,
            Some(p) => match Arc::clone(p).try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    metrics::counter!(SHED_TOTAL).increment(1);
                    return ApiError::new(
                        Code::ResourceExhausted,
                        "server overloaded: too many calls in flight (--max-concurrent-calls); retry with backoff",
                    )
                    .into_response();
                }
            },
        };
        match self.dispatch(route, req).await {
            Ok(r) => r,
            Err(e) => e.into_response(),
        }
    }

    fn preflight(&self, req: &Request<Body>, allow: &str) -> Response<Body> {
        let allowed = req.headers().get(header::ORIGIN).is_some_and(|o| self.cors_allows(o));
        if !allowed {
            return ApiError::method_not_allowed(req.method(), allow).into_response();
        }
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NO_CONTENT;
        let h = r.headers_mut();
        if let Ok(v) = HeaderValue::from_str(allow) {
            h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, v);
        }
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("content-type, authorization"),
        );
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        r
    }

    async fn dispatch(&self, route: &'static str, req: Request<Body>) -> Result<Response<Body>, ApiError> {
        let (parts, body) = req.into_parts();
        let body = if parts.method == Method::POST {
            check_json(&parts.headers)?;
            self.read_body(&parts.headers, body).await?
        } else {
            bytes::Bytes::new()
        };
        let query = parts
            .uri
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        let call = Call {
            headers: &parts.headers,
            extensions: &parts.extensions,
            query,
            body,
        };
        let api = &self.api;
        match route {
            "/v1/classify" => routes::classify(api, &call),
            "/v1/classify:batch" => routes::classify_batch(api, &call).await,
            "/v1/admit" => routes::admit(api, &call).await,
            "/v1/holds" => routes::list_holds(api, &call),
            "/v1/holds/{id}" => {
                let raw = parts.uri.path().trim_start_matches("/v1/holds/");
                let id = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
                routes::release_hold(api, &call, &id)
            }
            "/v1/catalogs" => routes::list_catalogs(api, &call),
            "/v1/openapi.json" => Ok(super::openapi::response()),
            _ => Err(ApiError::no_route(parts.uri.path())),
        }
    }

    /// The whole body, at most `--max-message-bytes` (413 beyond).
    async fn read_body(&self, headers: &http::HeaderMap, body: Body) -> Result<bytes::Bytes, ApiError> {
        let limit = self.config.max_message_bytes;
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(n) = declared.filter(|n| *n > limit as u64) {
            return Err(ApiError::too_large(Some(n), limit));
        }
        match http_body_util::Limited::new(body, limit).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::too_large(None, limit)),
            Err(e) => Err(ApiError::new(
                Code::InvalidArgument,
                format!("body: could not be read: {e}"),
            )),
        }
    }
}

/// 415 unless the request says its body is `application/json`.
fn check_json(headers: &http::HeaderMap) -> Result<(), ApiError> {
    let given = headers.get(header::CONTENT_TYPE);
    let is_json = given
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
    if is_json {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type(given))
    }
}

#[cfg(test)]
mod tests {
    use arc_swap::ArcSwap;
    use tonic_health::ServingStatus;
    use tower::ServiceExt as _;

    use super::*;
    use crate::core::Policy;
    use crate::grpc::ServiceConfig;

    async fn door(status: ServingStatus) -> HttpDoor {
        let policy = Arc::new(ArcSwap::from_pointee(Policy::embedded().expect("embedded policy")));
        let api = RetryDecisionApi::new(policy, ServiceConfig::default());
        let (reporter, _health) = tonic_health::server::health_reporter();
        reporter.set_service_status("", status).await;
        HttpDoor::new(
            api,
            reporter,
            HttpConfig {
                max_message_bytes: 1024,
                cors_origins: Vec::new(),
            },
            None,
        )
    }

    async fn get(door: HttpDoor, path: &str) -> StatusCode {
        let req = Request::builder().uri(path).body(Body::empty()).expect("request");
        door.oneshot(req).await.expect("infallible").status()
    }

    #[tokio::test]
    async fn probes_follow_the_grpc_health_status() {
        for path in ["/healthz", "/readyz"] {
            assert_eq!(get(door(ServingStatus::Serving).await, path).await, StatusCode::OK);
            assert_eq!(
                get(door(ServingStatus::NotServing).await, path).await,
                StatusCode::SERVICE_UNAVAILABLE,
                "{path} during a shutdown"
            );
        }
    }
}
