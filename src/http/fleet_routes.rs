//! The fleet routes an HTTP-only caller needs besides Admit and the holds:
//! reporting outcomes (the budgets' first attempts, a probe's result) and
//! reading the budgets — each the gRPC method's service operation.

use http::StatusCode;
use serde_json::json;

use super::error::ApiError;
use super::input;
use super::json_response;
use super::routes::{Call, Door};
use crate::doors::json::{BudgetJson, HoldJson};
use crate::service::Caller;

/// `POST /v1/outcomes` (gRPC ReportOutcomes): first attempts per scope, and
/// a probe's result with its token.
pub async fn report_outcomes(door: &Door, call: &Call<'_>) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&[])?;
    let req = input::parse::<input::OutcomesJson>(&call.body)?;
    let caller_name = || door.operators.caller_of(call.headers, call.extensions);
    let probe = door
        .service
        .report_outcomes(
            Caller::Lazy(&caller_name),
            &req.counts(),
            req.probe_token(),
            req.probe_succeeded(),
        )
        .await
        .map_err(|e| ApiError::from_error(&e))?;
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "hold": probe.hold.as_ref().map(HoldJson::from),
            "probe_accepted": probe.accepted,
        }),
    ))
}

/// `GET /v1/budgets?catalog=&dependency=&limit=` (gRPC ListBudgets): the
/// busiest budget scopes, most used first.
pub fn list_budgets(door: &Door, call: &Call<'_>) -> Result<http::Response<axum::body::Body>, ApiError> {
    call.only_params(&["catalog", "dependency", "limit"])?;
    let limit = match call.param("limit") {
        None | Some("") => 0,
        Some(n) => n
            .parse::<i32>()
            .map_err(|_| ApiError::invalid("limit", format!("{n:?} is not an integer")))?,
    };
    let text = |k: &str| call.param(k).unwrap_or_default();
    let budgets = door
        .service
        .list_budgets(text("catalog"), text("dependency"), limit)
        .map_err(|e| ApiError::from_error(&e))?;
    let budgets: Vec<_> = budgets
        .iter()
        .map(|b| {
            json!({
                "catalog": b.catalog,
                "scope": b.judged.rule.scope.as_str(),
                "rule": b.judged.rule.describe(),
                "deferred": b.judged.standing.deferred,
                "next_room_at": b.judged.standing.room_at,
                "budget": BudgetJson::from(&b.judged),
            })
        })
        .collect();
    Ok(json_response(StatusCode::OK, &json!({ "budgets": budgets })))
}
