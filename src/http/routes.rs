//! The routes: each reads its request into domain types, calls the
//! service operation its gRPC method calls, and writes the answer as JSON.

use std::sync::Arc;

use http::{Method, StatusCode};
use serde::Serialize;
use serde_json::json;

use super::error::ApiError;
use super::input;
use super::{bytes_response, json_response};
use crate::core::{UnixMillis, Verdict};
use crate::doors::json::{DecisionJson, HoldJson};
use crate::doors::peers::Operators;
use crate::doors::render::{Format, render};
use crate::service::classify::BLOCKING_BATCH;
use crate::service::holds::{AdmitAsk, HoldFilter};
use crate::service::{Caller, Service};

/// What the routes serve from: the service, and who counts as an operator.
#[derive(Debug, Clone)]
pub struct Door {
    /// retryd's operations.
    pub service: Service,
    /// Who may release holds and see tenants in clear.
    pub operators: Arc<Operators>,
}

impl Door {
    /// Who places a hold for this call: its connection's caller when the
    /// server has fleet memory (worked out only if a hold is placed).
    fn caller<'a>(&self, name: &'a (dyn Fn() -> String + Sync)) -> Caller<'a> {
        if self.service.has_fleet() {
            Caller::Lazy(name)
        } else {
            Caller::Named("local")
        }
    }
}

/// The routes, as `(method, path template, label)`: the OpenAPI document is
/// checked against this list, and the metrics' `route` label is one of its
/// templates (or `unknown`).
pub const ROUTES: &[(Method, &str)] = &[
    (Method::POST, "/v1/classify"),
    (Method::POST, "/v1/classify:batch"),
    (Method::POST, "/v1/classify:explain"),
    (Method::POST, "/v1/admit"),
    (Method::POST, "/v1/outcomes"),
    (Method::GET, "/v1/budgets"),
    (Method::GET, "/v1/holds"),
    (Method::GET, "/v1/holds:watch"),
    (Method::DELETE, "/v1/holds/{id}"),
    (Method::GET, "/v1/catalogs"),
    (Method::GET, "/v1/openapi.json"),
    (Method::GET, "/healthz"),
    (Method::GET, "/readyz"),
];

/// Which route a path is: its template, or `None`.
pub fn route_of(path: &str) -> Option<&'static str> {
    if let Some(id) = path.strip_prefix("/v1/holds/") {
        return (!id.is_empty() && !id.contains('/')).then_some("/v1/holds/{id}");
    }
    ROUTES.iter().map(|(_, p)| *p).find(|p| *p == path)
}

/// The methods a route template answers (for 405 and CORS).
pub fn methods_of(route: &str) -> Vec<&'static Method> {
    ROUTES.iter().filter(|(_, p)| *p == route).map(|(m, _)| m).collect()
}

/// What a handler needs of the request, its body already read.
#[derive(Debug)]
pub struct Call<'r> {
    /// The request's headers.
    pub headers: &'r http::HeaderMap,
    /// Connection info (peer address, TLS certificates) tonic put there.
    pub extensions: &'r http::Extensions,
    /// The decoded query string pairs.
    pub query: Vec<(String, String)>,
    /// The request body.
    pub body: bytes::Bytes,
}

impl Call<'_> {
    /// The query parameter `name`, if given.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Refuses query parameters other than `allowed`, naming the first.
    pub fn only_params(&self, allowed: &[&str]) -> Result<(), ApiError> {
        match self.query.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
            Some((k, _)) => Err(ApiError::invalid(
                k.clone(),
                format!("is not a parameter of this route; parameters: {}", allowed.join(", ")),
            )),
            None => Ok(()),
        }
    }
}

/// `POST /v1/classify[?format=json|asc]`.
pub fn classify(door: &Door, call: &Call<'_>) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&["format"])?;
    let asc = match call.param("format") {
        None | Some("json") => false,
        Some("asc") => true,
        Some(other) => return Err(ApiError::invalid("format", format!("{other:?}: use json or asc"))),
    };
    let req = input::parse::<input::ClassifyJson>(&call.body)?;
    let now = UnixMillis::now();
    let caller_name = || door.operators.caller_of(call.headers, call.extensions);
    let body = door
        .service
        .classify(
            req.locale(),
            req.failure(),
            now,
            door.caller(&caller_name),
            |d, hold| {
                if asc {
                    // Byte for byte what `retryd classify --format asc` prints.
                    let mut s = render(d, Format::Asc);
                    s.push('\n');
                    return s.into_bytes();
                }
                #[derive(Serialize)]
                struct Answer<'d, 'a> {
                    decision: DecisionJson<'d, 'a>,
                }
                serde_json::to_vec(&Answer {
                    decision: DecisionJson::new(d, hold),
                })
                .unwrap_or_default()
            },
        )
        .map_err(|v| ApiError::from_violation(&v))?;
    Ok(bytes_response(StatusCode::OK, body))
}

/// `POST /v1/classify:explain`: what Classify would answer now, read-only
/// (nothing placed, withdrawn, counted or logged), with the hold the
/// decision would place.
pub fn explain(door: &Door, call: &Call<'_>) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&[])?;
    let req = input::parse::<input::ClassifyJson>(&call.body)?;
    let body = door
        .service
        .explain(req.locale(), req.failure(), UnixMillis::now(), |e| {
            #[derive(Serialize)]
            struct Answer<'d, 'a> {
                decision: DecisionJson<'d, 'a>,
                would_place: Option<HoldJson<'d>>,
            }
            serde_json::to_vec(&Answer {
                decision: DecisionJson::new(&e.decided.decision, e.decided.hold.as_deref()),
                would_place: e.would_place.as_ref().map(|h| HoldJson::new(h, h.key.tenant())),
            })
            .unwrap_or_default()
        })
        .map_err(|v| ApiError::from_violation(&v))?;
    Ok(bytes_response(StatusCode::OK, body))
}

/// `POST /v1/classify:batch`.
pub async fn classify_batch(door: &Door, call: &Call<'_>) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&[])?;
    let req = input::parse::<input::BatchJson>(&call.body)?;
    let now = UnixMillis::now();
    let caller = if door.service.has_fleet() {
        door.operators.caller_of(call.headers, call.extensions)
    } else {
        "local".to_owned()
    };
    let body = if req.failures().len() <= BLOCKING_BATCH {
        batch_body(&door.service, &req, now, &caller)
    } else {
        // As ClassifyBatch: a big batch does not hold up an async worker.
        let service = door.service.clone();
        tokio::task::spawn_blocking(move || batch_body(&service, &req, now, &caller))
            .await
            .map_err(|_| ApiError::new(tonic::Code::Internal, "internal error"))?
    }?;
    Ok(bytes_response(StatusCode::OK, body))
}

/// `{"results": [{"index": i, "decision": {...}} | {"index": i, "error": google.rpc.Status}], "summary": {...}}`
fn batch_body(service: &Service, req: &input::BatchJson, now: UnixMillis, caller: &str) -> Result<Vec<u8>, ApiError> {
    let failures = req.failures();
    let mut out = Vec::with_capacity(64 + failures.len() * 900);
    out.extend_from_slice(b"{\"results\":[");
    let failure = |i: usize| failures[i].as_failure(req.locale());
    let summary = service
        .classify_batch(
            req.locale(),
            failures.len(),
            failure,
            now,
            Caller::Named(caller),
            |i, item| {
                if i > 0 {
                    out.push(b',');
                }
                let _ = match item {
                    Ok((d, hold)) => {
                        serde_json::to_writer(&mut out, &json!({"index": i, "decision": DecisionJson::new(d, hold)}))
                    }
                    Err(v) => serde_json::to_writer(
                        &mut out,
                        &json!({"index": i, "error": ApiError::from_violation(v).body()}),
                    ),
                };
            },
        )
        .map_err(|v| ApiError::from_violation(&v))?;
    out.extend_from_slice(b"],\"summary\":");
    let mut counts = serde_json::Map::new();
    for v in Verdict::ALL {
        counts.insert(v.as_str().to_owned(), json!(summary.count(v)));
    }
    counts.insert("errors".to_owned(), json!(summary.errors));
    let _ = serde_json::to_writer(&mut out, &counts);
    out.push(b'}');
    Ok(out)
}

/// `POST /v1/admit`.
pub async fn admit(door: &Door, call: &Call<'_>) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&[])?;
    let req = input::parse::<input::AdmitJson>(&call.body)?;
    let caller_name = || door.operators.caller_of(call.headers, call.extensions);
    let ask = AdmitAsk {
        caller: Some(door.caller(&caller_name)),
        ..req.ask()
    };
    let (out, hold) = door.service.admit(ask).await.map_err(|e| ApiError::from_error(&e))?;
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "admitted": out.admitted,
            "hold": hold.as_ref().map(HoldJson::from),
            "retry_at": out.retry_at,
            "probe_token": out.probe_token.unwrap_or_default(),
        }),
    ))
}

/// `GET /v1/holds?catalog=&dependency=&tenant=&page_size=&page_token=`:
/// tenants in clear for operators, hashed for everyone else.
pub fn list_holds(door: &Door, call: &Call<'_>) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&["catalog", "dependency", "tenant", "page_size", "page_token"])?;
    door.service.fleet().map_err(|e| ApiError::from_error(&e))?;
    let page_size = match call.param("page_size") {
        None | Some("") => 0,
        Some(n) => n
            .parse::<i32>()
            .map_err(|_| ApiError::invalid("page_size", format!("{n:?} is not an integer")))?,
    };
    let text = |k: &str| call.param(k).unwrap_or_default();
    let filter = HoldFilter {
        catalog: text("catalog"),
        dependency: text("dependency"),
        tenant: text("tenant"),
    };
    let operator = door.operators.allows_parts(call.headers, call.extensions);
    let page = door
        .service
        .list_holds(filter, page_size, text("page_token"), operator)
        .map_err(|e| ApiError::from_error(&e))?;
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "holds": page.holds.iter().map(HoldJson::from).collect::<Vec<_>>(),
            "next_page_token": page.next_page_token,
        }),
    ))
}

/// `DELETE /v1/holds/{id}`: operators only.
pub fn release_hold(door: &Door, call: &Call<'_>, id: &str) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&[])?;
    let operator = door.operators.allows_parts(call.headers, call.extensions);
    let released = door
        .service
        .release_hold(id, operator)
        .map_err(|e| ApiError::from_error(&door.operators.explain(call.headers, e)))?;
    Ok(json_response(
        StatusCode::OK,
        &json!({ "hold": HoldJson::from(&released) }),
    ))
}

/// `GET /v1/catalogs[?locale=ru]`.
pub fn list_catalogs(door: &Door, call: &Call<'_>) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&["locale"])?;
    let list = door
        .service
        .list_catalogs(call.param("locale").unwrap_or_default())
        .map_err(|v| ApiError::from_violation(&v))?;
    Ok(json_response(StatusCode::OK, &super::catalogs::list_json(&list)))
}

/// `GET /healthz` and `GET /readyz`: the gRPC health status of the whole
/// server (`""`), 200 while SERVING, 503 otherwise (from the moment a
/// shutdown starts).
pub async fn health(health: &Arc<tonic_health::server::HealthService>) -> http::Response<axum::body::Body> {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_server::Health as _;
    let req = tonic::Request::new(tonic_health::pb::HealthCheckRequest { service: String::new() });
    let status = match health.check(req).await {
        Ok(r) => r.into_inner().status(),
        // Cleared at the end of a shutdown: not serving.
        Err(_) => ServingStatus::NotServing,
    };
    let (code, word) = match status {
        ServingStatus::Serving => (StatusCode::OK, "SERVING"),
        ServingStatus::NotServing => (StatusCode::SERVICE_UNAVAILABLE, "NOT_SERVING"),
        ServingStatus::ServiceUnknown => (StatusCode::SERVICE_UNAVAILABLE, "SERVICE_UNKNOWN"),
        ServingStatus::Unknown => (StatusCode::SERVICE_UNAVAILABLE, "UNKNOWN"),
    };
    json_response(code, &json!({ "status": word }))
}
