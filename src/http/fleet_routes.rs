//! The fleet routes an HTTP-only caller needs besides Admit and the holds:
//! reporting outcomes (the budgets' first attempts, a probe's result),
//! reading the budgets, and following the holds as server-sent events —
//! each the gRPC method's service operation.

use http::StatusCode;
use serde_json::json;

use super::error::ApiError;
use super::input;
use super::json_response;
use super::routes::{Call, Door};
use crate::doors::json::{BudgetJson, HoldJson};
use crate::doors::watch_bytes::{self, QueuedBytes, StreamAccount};
use crate::service::Caller;
use crate::service::watch::{Charge, WatchEvent, WatchFilter, WatchWire};

/// The route of the holds' event stream (it holds no call slot: see the door).
pub const WATCH_ROUTE: &str = "/v1/holds:watch";

/// A comment line sent when a watch has been quiet this long, so proxies
/// and browsers see a live stream (and a dead peer is found by the write).
const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(15);

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

/// `GET /v1/holds:watch?catalog=&dependency=&dependencies=a,b&tenant=&tenants=a,b` (gRPC
/// WatchHolds) as server-sent events: the holds in force (`placed`, or
/// `probing`), then `synced`, then every change; `event: error` with a
/// `google.rpc.Status` when the stream ends abnormally. The same filters,
/// limits and stall timeout as the gRPC stream; an `Authorization` header
/// makes an operator (a page uses `fetch` streaming: `EventSource` cannot
/// send one).
pub fn watch_holds(door: &Door, call: &Call<'_>) -> Result<http::Response<axum::body::Body>, ApiError> {
    use futures_util::StreamExt as _;
    call.only_params(&["catalog", "dependency", "dependencies", "tenant", "tenants"])?;
    let text = |k: &str| call.param(k).unwrap_or_default().to_owned();
    // Repeated or comma-separated: `dependencies=a,b&dependency=c`.
    let list = |names: &[&str]| -> Vec<String> {
        call.query
            .iter()
            .filter(|(k, _)| names.contains(&k.as_str()))
            .flat_map(|(_, v)| v.split(','))
            .filter(|d| !d.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let filter = WatchFilter {
        catalog: text("catalog"),
        dependencies: list(&["dependency", "dependencies"]),
        tenant: text("tenant"),
        tenants: list(&["tenants"]),
        // A resume (256 digests) is gRPC's: too long for a query string.
        resume: Vec::new(),
    };
    let operator = door.operators.allows_parts(call.headers, call.extensions);
    let caller = door.operators.caller_of(call.headers, call.extensions);
    let wire = SseWire {
        bytes: call.extensions.get::<StreamAccount>().map(StreamAccount::open),
    };
    let events = door
        .service
        .watch_holds(filter, operator, &caller, std::sync::Arc::new(wire))
        .map_err(|e| ApiError::from_error(&e))?;
    // The server resets the stream when it stalls (its end may never be taken).
    let alarm = events.stall_alarm();
    let events = events.map(|e| match e {
        Ok(event) => event,
        Err(err) => {
            let status = ApiError::from_error(&err).body();
            bytes::Bytes::from(format!("event: error\ndata: {status}\n\n"))
        }
    });
    // Heartbeats only between events, ending with them.
    let beats = tokio_stream::wrappers::IntervalStream::new(tokio::time::interval_at(
        tokio::time::Instant::now() + HEARTBEAT,
        HEARTBEAT,
    ))
    .map(|_| bytes::Bytes::from_static(b": heartbeat\n\n"));
    let body = futures_util::stream::select(
        events.map(Some).chain(futures_util::stream::once(async { None })),
        beats.map(Some),
    )
    .take_while(|piece| std::future::ready(piece.is_some()))
    .filter_map(std::future::ready)
    .map(Ok::<_, std::convert::Infallible>);
    http::Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "text/event-stream")
        .header(http::header::CACHE_CONTROL, "no-cache")
        .extension(alarm)
        .body(axum::body::Body::from_stream(body))
        .map_err(|_| ApiError::new(tonic::Code::Internal, "internal error"))
}

/// The event-stream form of a watch's events, charged at their length while
/// queued (when the door put the ledger in the call's extensions).
#[derive(Debug)]
struct SseWire {
    bytes: Option<QueuedBytes>,
}

impl WatchWire for SseWire {
    type Item = bytes::Bytes;

    fn encode(&self, event: WatchEvent) -> (bytes::Bytes, usize) {
        let text = sse_event(&event);
        let n = text.len();
        (text, n)
    }

    fn charge(&self, n: usize) -> Charge {
        watch_bytes::charge(self.bytes.as_ref(), n)
    }

    fn release(&self, n: usize) {
        watch_bytes::release(self.bytes.as_ref(), n);
    }
}

/// One event: its kind as the event name, and the event as JSON data.
fn sse_event(ev: &WatchEvent) -> bytes::Bytes {
    let data = json!({
        "kind": ev.kind.as_str(),
        "hold": ev.hold.as_ref().map(HoldJson::from),
        "server_time": ev.server_time,
    });
    bytes::Bytes::from(format!("event: {}\ndata: {data}\n\n", ev.kind.as_str()))
}
