//! The door's service, in front of the routes: finds the route (404, 405),
//! answers CORS preflights, admits each request against the gRPC calls'
//! own [`Ledger`] (call slots and buffered bytes, server-wide and per
//! connection: 429 when full; the answer holds its ticket until it has been
//! taken by the connection, like a gRPC answer), refuses a body that is not
//! JSON (415), is over `--max-message-bytes` (413) or does not arrive within
//! `--first-message-timeout` (408), refuses a POST or DELETE from a foreign
//! page (403, see [`guard`](super::guard)), turns a panic into a 500, and
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
use std::time::{Duration, Instant};

use axum::body::Body;
use futures_util::FutureExt as _;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use tonic::Code;

use super::error::ApiError;
use super::guard::{check_json, check_origin};
use super::routes::Door;
use super::routes::{self, Call, methods_of, route_of};
use crate::doors::answer::{Answer, Stalls};
use crate::doors::ledger::{Ledger, Refusal, Ticket};
use crate::doors::overload::SHED_TOTAL;
use crate::doors::peers::{Operators, remote_addr};
use crate::doors::watch_bytes::StreamAccount;
use crate::service::Service;

/// Counter of HTTP requests, by route template and HTTP status.
pub const REQUESTS_TOTAL: &str = "http_server_requests_total";
/// Histogram of HTTP request durations in seconds, by route template.
pub const DURATION_SECONDS: &str = "http_server_request_duration_seconds";

/// Settings of the door.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpConfig {
    /// Largest request body in bytes (`--max-message-bytes`).
    pub max_message_bytes: usize,
    /// Time a request body has to arrive whole (`--first-message-timeout`).
    pub first_message_timeout: Duration,
    /// Origins allowed cross-origin (`--http-cors-origin`); empty: CORS off;
    /// `*`: any origin.
    pub cors_origins: Vec<String>,
}

/// The HTTP/JSON door as a tower service (cheap to clone).
#[derive(Clone)]
pub struct HttpDoor {
    inner: Arc<Inner>,
    /// The route templates served, when not all of them (see [`HttpDoor::only`]).
    only: Option<&'static [&'static str]>,
}

struct Inner {
    door: Door,
    health: Arc<tonic_health::server::HealthService>,
    config: HttpConfig,
    ledger: Arc<Ledger>,
    stalls: Stalls,
}

impl std::fmt::Debug for HttpDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpDoor")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl HttpDoor {
    /// A door onto `service` (`operators` may release holds and see
    /// tenants in clear), reporting `health`'s status at `/healthz` and
    /// `/readyz`, admitting requests against `ledger` (the gRPC calls' own),
    /// its answers watched by `stalls`.
    pub fn new(
        service: Service,
        operators: Arc<Operators>,
        health: tonic_health::server::HealthReporter,
        config: HttpConfig,
        ledger: Arc<Ledger>,
        stalls: Stalls,
    ) -> Self {
        metrics::describe_counter!(REQUESTS_TOTAL, "HTTP/JSON requests answered, by route and HTTP status.");
        metrics::describe_histogram!(
            DURATION_SECONDS,
            metrics::Unit::Seconds,
            "Time to answer an HTTP/JSON request."
        );
        HttpDoor {
            inner: Arc::new(Inner {
                door: Door { service, operators },
                health: Arc::new(tonic_health::server::HealthService::from_health_reporter(health)),
                config,
                ledger,
                stalls,
            }),
            only: None,
        }
    }

    /// The same door answering only `routes` (templates of
    /// [`ROUTES`](super::routes::ROUTES)); every other path is 404, as an
    /// unknown one. The console's own listener serves the routes it uses.
    pub fn only(&self, routes: &'static [&'static str]) -> HttpDoor {
        HttpDoor {
            inner: Arc::clone(&self.inner),
            only: Some(routes),
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
        let only = self.only;
        Box::pin(async move {
            let start = Instant::now();
            let route = route_of(req.uri().path()).filter(|r| only.is_none_or(|o| o.contains(r)));
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
        // A server span per request, continuing the caller's `traceparent`.
        let mut span = crate::doors::traces::start_http(req.method(), route, req.headers());
        let response = self.handle_route(route, req).await;
        if let Some(span) = span.as_mut() {
            span.answered(response.status().as_u16());
        }
        response
    }

    async fn handle_route(&self, route: &'static str, req: Request<Body>) -> Response<Body> {
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
        let mut ticket = self.ledger.ticket(remote_addr(req.extensions()));
        let response = match self.dispatch(route, req, &mut ticket).await {
            Ok(r) => r,
            Err(e) => return e.into_response(),
        };
        if route == super::fleet_routes::WATCH_ROUTE && response.status().is_success() {
            // An event stream lasts as long as its client wants: like a gRPC
            // stream it holds no call slot and no bytes of its own (its
            // queued events are charged by the stream).
            ticket.release_call();
            ticket.set_bytes(0);
            let (parts, body) = response.into_parts();
            let rest = tonic::body::Body::new(body);
            return Response::from_parts(
                parts,
                Body::new(Answer::new(
                    std::collections::VecDeque::new(),
                    Some(rest),
                    ticket,
                    &self.stalls,
                )),
            );
        }
        // The answer holds its ticket (slot and bytes) until the connection
        // has taken it, as a gRPC answer does.
        let (parts, body) = response.into_parts();
        let Ok(collected) = body.collect().await else {
            return ApiError::new(Code::Internal, "internal error").into_response();
        };
        let bytes = collected.to_bytes();
        ticket.set_bytes(bytes.len());
        let frames = std::collections::VecDeque::from([Ok(http_body::Frame::data(bytes))]);
        Response::from_parts(parts, Body::new(Answer::new(frames, None, ticket, &self.stalls)))
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

    async fn dispatch(
        &self,
        route: &'static str,
        req: Request<Body>,
        ticket: &mut Ticket,
    ) -> Result<Response<Body>, ApiError> {
        let (mut parts, body) = req.into_parts();
        check_origin(&parts.method, &parts.uri, &parts.headers, &self.config.cors_origins)?;
        let body = if parts.method == Method::POST {
            check_json(&parts.headers)?;
            let read = self.read_body(&parts.headers, body, ticket);
            match tokio::time::timeout(self.config.first_message_timeout, read).await {
                Ok(read) => read?,
                Err(_) => {
                    return Err(ApiError {
                        http: StatusCode::REQUEST_TIMEOUT,
                        ..ApiError::new(
                            Code::DeadlineExceeded,
                            format!(
                                "the request body did not arrive within {:?} (--first-message-timeout)",
                                self.config.first_message_timeout
                            ),
                        )
                    });
                }
            }
        } else {
            bytes::Bytes::new()
        };
        // A call slot once the request is whole, as for gRPC calls.
        ticket.take_call().map_err(shed)?;
        let query = parts
            .uri
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        if route == super::fleet_routes::WATCH_ROUTE {
            // Where the stream's queued events are charged, as for gRPC.
            let peer = remote_addr(&parts.extensions);
            parts
                .extensions
                .insert(StreamAccount::new(Arc::clone(&self.ledger), peer));
        }
        let call = Call {
            headers: &parts.headers,
            extensions: &parts.extensions,
            query,
            body,
        };
        let door = &self.door;
        match route {
            "/v1/classify" => routes::classify(door, &call),
            "/v1/classify:batch" => routes::classify_batch(door, &call).await,
            "/v1/classify:explain" => routes::explain(door, &call),
            "/v1/admit" => routes::admit(door, &call).await,
            "/v1/outcomes" => super::fleet_routes::report_outcomes(door, &call).await,
            "/v1/budgets" => super::fleet_routes::list_budgets(door, &call),
            super::fleet_routes::WATCH_ROUTE => super::fleet_routes::watch_holds(door, &call),
            "/v1/holds" => routes::list_holds(door, &call),
            "/v1/holds/{id}" => {
                let raw = parts.uri.path().trim_start_matches("/v1/holds/");
                let id = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
                routes::release_hold(door, &call, &id)
            }
            "/v1/catalogs" => routes::list_catalogs(door, &call),
            "/v1/openapi.json" => Ok(super::openapi::response()),
            _ => Err(ApiError::no_route(parts.uri.path())),
        }
    }

    /// The whole body, at most `--max-message-bytes` (413 beyond), its
    /// bytes charged to `ticket` as they arrive (429 when the server or the
    /// connection holds its limit of buffered bytes).
    async fn read_body(
        &self,
        headers: &http::HeaderMap,
        mut body: Body,
        ticket: &mut Ticket,
    ) -> Result<bytes::Bytes, ApiError> {
        let limit = self.config.max_message_bytes;
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(n) = declared.filter(|n| *n > limit as u64) {
            return Err(ApiError::too_large(Some(n), limit));
        }
        let mut buf = bytes::BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame =
                frame.map_err(|e| ApiError::new(Code::InvalidArgument, format!("body: could not be read: {e}")))?;
            let Ok(data) = frame.into_data() else { continue };
            if buf.len() + data.len() > limit {
                return Err(ApiError::too_large(None, limit));
            }
            ticket.charge(data.len()).map_err(shed)?;
            buf.extend_from_slice(&data);
        }
        Ok(buf.freeze())
    }
}

/// 429 for a request the ledger has no room for (counted as shed).
fn shed(refusal: Refusal) -> ApiError {
    metrics::counter!(SHED_TOTAL).increment(1);
    let delay = refusal.advice();
    let status = refusal.status(delay);
    ApiError::new(status.code(), status.message()).retry_after(delay)
}

#[cfg(test)]
mod tests {
    use arc_swap::ArcSwap;
    use tonic_health::ServingStatus;
    use tower::ServiceExt as _;

    use super::*;
    use crate::core::Policy;
    use crate::service::ServiceConfig;

    async fn door(status: ServingStatus) -> HttpDoor {
        let policy = Arc::new(ArcSwap::from_pointee(Policy::embedded().expect("embedded policy")));
        let service = Service::new(policy, ServiceConfig::default());
        let (reporter, _health) = tonic_health::server::health_reporter();
        reporter.set_service_status("", status).await;
        HttpDoor::new(
            service,
            Arc::default(),
            reporter,
            HttpConfig {
                max_message_bytes: 1024,
                first_message_timeout: Duration::from_secs(5),
                cors_origins: Vec::new(),
            },
            Ledger::new(crate::doors::ledger::Limits::default()),
            Stalls::new(),
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
