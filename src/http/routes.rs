//! The routes: each reads its request, calls the function its gRPC method
//! calls, and writes the answer as JSON.

use std::sync::Arc;

use http::{Method, StatusCode};
use serde::Serialize;
use serde_json::json;

use super::error::ApiError;
use super::input;
use super::{bytes_response, json_response};
use crate::cli::classify::{Format, render};
use crate::core::UnixMillis;
use crate::grpc::RetryDecisionApi;
use crate::grpc::convert::{hold_to_proto, millis_from_timestamp};
use crate::grpc::holds;
use crate::grpc::json::{DecisionJson, HoldJson};
use crate::grpc::pb;
use crate::grpc::service::BLOCKING_BATCH;

/// The routes, as `(method, path template, label)`: the OpenAPI document is
/// checked against this list, and the metrics' `route` label is one of its
/// templates (or `unknown`).
pub const ROUTES: &[(Method, &str)] = &[
    (Method::POST, "/v1/classify"),
    (Method::POST, "/v1/classify:batch"),
    (Method::POST, "/v1/admit"),
    (Method::GET, "/v1/holds"),
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

    fn caller(&self, api: &RetryDecisionApi) -> String {
        if api.fleet().is_ok() {
            holds::caller_of_parts(self.extensions)
        } else {
            "local".to_owned()
        }
    }
}

/// `POST /v1/classify[?format=json|asc]`.
pub fn classify(api: &RetryDecisionApi, call: &Call<'_>) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&["format"])?;
    let asc = match call.param("format") {
        None | Some("json") => false,
        Some("asc") => true,
        Some(other) => return Err(ApiError::invalid("format", format!("{other:?}: use json or asc"))),
    };
    let req: pb::ClassifyRequest = input::parse::<input::ClassifyJson>(&call.body)?.into();
    let now = UnixMillis::now();
    let caller = call.caller(api);
    let body = api
        .decide_one(&req, now, &caller, |d, hold| {
            if asc {
                // Byte for byte what `retryd classify --format asc` prints.
                let mut s = render(d, Format::Asc);
                s.push('\n');
                return s.into_bytes();
            }
            let hold = hold.map(|h| hold_to_proto(h, h.key.tenant()));
            #[derive(Serialize)]
            struct Answer<'d, 'a> {
                decision: DecisionJson<'d, 'a>,
            }
            serde_json::to_vec(&Answer {
                decision: DecisionJson::new(d, hold.as_ref()),
            })
            .unwrap_or_default()
        })
        .map_err(|v| ApiError::from_violation(&v))?;
    Ok(bytes_response(StatusCode::OK, body))
}

/// `POST /v1/classify:batch`.
pub async fn classify_batch(
    api: &RetryDecisionApi,
    call: &Call<'_>,
) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&[])?;
    let req: pb::ClassifyBatchRequest = input::parse::<input::BatchJson>(&call.body)?.into();
    let now = UnixMillis::now();
    let caller = call.caller(api);
    let body = if req.failures.len() <= BLOCKING_BATCH {
        batch_body(api, &req, now, &caller)
    } else {
        // As ClassifyBatch: a big batch does not hold up an async worker.
        let api = api.clone();
        tokio::task::spawn_blocking(move || batch_body(&api, &req, now, &caller))
            .await
            .map_err(|_| ApiError::new(tonic::Code::Internal, "internal error"))?
    }?;
    Ok(bytes_response(StatusCode::OK, body))
}

/// `{"results": [{"index": i, "decision": {...}} | {"index": i, "error": google.rpc.Status}], "summary": {...}}`
fn batch_body(
    api: &RetryDecisionApi,
    req: &pb::ClassifyBatchRequest,
    now: UnixMillis,
    caller: &str,
) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::with_capacity(64 + req.failures.len() * 900);
    out.extend_from_slice(b"{\"results\":[");
    let summary = api
        .decide_batch(req, now, caller, |i, item| {
            if i > 0 {
                out.push(b',');
            }
            let _ = match item {
                Ok((d, hold)) => {
                    let hold = hold.map(|h| hold_to_proto(h, h.key.tenant()));
                    serde_json::to_writer(
                        &mut out,
                        &json!({"index": i, "decision": DecisionJson::new(d, hold.as_ref())}),
                    )
                }
                Err(v) => serde_json::to_writer(
                    &mut out,
                    &json!({"index": i, "error": ApiError::from_violation(v).body()}),
                ),
            };
        })
        .map_err(|v| ApiError::from_violation(&v))?;
    out.extend_from_slice(b"],\"summary\":");
    let _ = serde_json::to_writer(
        &mut out,
        &json!({
            "retry_with_limit": summary.retry_with_limit,
            "state_verification_required": summary.state_verification_required,
            "fix_before_retry": summary.fix_before_retry,
            "do_not_retry": summary.do_not_retry,
            "already_applied": summary.already_applied,
            "errors": summary.errors,
        }),
    );
    out.push(b'}');
    Ok(out)
}

/// `POST /v1/admit`.
pub async fn admit(api: &RetryDecisionApi, call: &Call<'_>) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&[])?;
    let req: pb::AdmitRequest = input::parse::<input::AdmitJson>(&call.body)?.into();
    let fleet = api.fleet().map_err(|s| ApiError::from_status(&s))?;
    let policy = api.policy();
    let r = holds::admit(fleet, &policy, &req)
        .await
        .map_err(|s| ApiError::from_status(&s))?;
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "admitted": r.admitted,
            "hold": r.hold.as_ref().map(HoldJson::from),
            "retry_at": r.retry_at.as_ref().map(millis_from_timestamp),
            "probe_token": r.probe_token,
        }),
    ))
}

/// `GET /v1/holds?catalog=&dependency=&tenant=&page_size=&page_token=`:
/// tenants in clear for operators, hashed for everyone else.
pub fn list_holds(api: &RetryDecisionApi, call: &Call<'_>) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&["catalog", "dependency", "tenant", "page_size", "page_token"])?;
    let fleet = api.fleet().map_err(|s| ApiError::from_status(&s))?;
    let page_size = match call.param("page_size") {
        None | Some("") => 0,
        Some(n) => n
            .parse::<i32>()
            .map_err(|_| ApiError::invalid("page_size", format!("{n:?} is not an integer")))?,
    };
    let text = |k: &str| call.param(k).unwrap_or_default().to_owned();
    let req = pb::ListHoldsRequest {
        catalog: text("catalog"),
        dependency: text("dependency"),
        tenant: text("tenant"),
        page_size,
        page_token: text("page_token"),
    };
    let operator = api.operators().allows_parts(call.headers, call.extensions);
    let r = holds::list_holds(fleet, &req, operator).map_err(|s| ApiError::from_status(&s))?;
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "holds": r.holds.iter().map(HoldJson::from).collect::<Vec<_>>(),
            "next_page_token": r.next_page_token,
        }),
    ))
}

/// `DELETE /v1/holds/{id}`: operators only.
pub fn release_hold(
    api: &RetryDecisionApi,
    call: &Call<'_>,
    id: &str,
) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&[])?;
    let fleet = api.fleet().map_err(|s| ApiError::from_status(&s))?;
    if !api.operators().allows_parts(call.headers, call.extensions) {
        return Err(ApiError::from_status(&holds::release_denied()));
    }
    let r = holds::release_hold(fleet, &pb::ReleaseHoldRequest { id: id.to_owned() })
        .map_err(|s| ApiError::from_status(&s))?;
    Ok(json_response(
        StatusCode::OK,
        &json!({ "hold": r.hold.as_ref().map(HoldJson::from) }),
    ))
}

/// `GET /v1/catalogs[?locale=ru]`.
pub fn list_catalogs(api: &RetryDecisionApi, call: &Call<'_>) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&["locale"])?;
    let req = pb::ListCatalogsRequest {
        locale: call.param("locale").unwrap_or_default().to_owned(),
    };
    let r = api.list_catalogs_now(&req).map_err(|s| ApiError::from_status(&s))?;
    Ok(json_response(StatusCode::OK, &super::catalogs::list_json(&r)))
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
