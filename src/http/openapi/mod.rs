//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of the HTTP routes,
//! generated when first asked for, not kept by hand:
//!
//! - the paths from [`OPERATIONS`], which a test holds to exactly the
//!   routes the door serves ([`ROUTES`](super::routes::ROUTES)), each with
//!   every 4xx the door can answer it with;
//! - the bodies' schemas from `retryd.proto`'s descriptor ([`schema`]);
//! - the few shapes that are not proto messages (the seed's ASC contract,
//!   `google.rpc.Status`, the probes' answer) from [`extra`].
//!
//! Tests validate real answers of every route against it, and `.ci/run`
//! lints it with Redocly's CLI (`scripts/openapi-lint.sh`).

pub mod extra;
pub mod schema;

use std::collections::BTreeMap;
use std::sync::LazyLock;

use axum::body::Body;
use http::StatusCode;
use serde_json::{Value, json};

use schema::{Direction, Proto};

/// How the door answers errors a route can meet, by HTTP status.
const ERRORS: &[(u16, &str, &str)] = &[
    (
        400,
        "BadRequest",
        "INVALID_ARGUMENT (a google.rpc.BadRequest names the field), or FAILED_PRECONDITION (the server runs without fleet memory)",
    ),
    (403, "Forbidden", "PERMISSION_DENIED: the route is for operators"),
    (404, "NotFound", "NOT_FOUND: no such hold in force"),
    (
        408,
        "RequestTimeout",
        "DEADLINE_EXCEEDED: the body did not arrive within --first-message-timeout",
    ),
    (
        413,
        "TooLarge",
        "RESOURCE_EXHAUSTED: the body is over --max-message-bytes",
    ),
    (
        415,
        "UnsupportedMediaType",
        "INVALID_ARGUMENT: the body is not application/json",
    ),
    (
        429,
        "Overloaded",
        "RESOURCE_EXHAUSTED: shed under load; retry after the Retry-After header (google.rpc.RetryInfo in details)",
    ),
];

/// Errors every POST with a JSON body can meet.
const BODY_ERRORS: &[u16] = &[400, 408, 413, 415, 429];

/// One operation of the document.
#[derive(Debug)]
pub struct Operation {
    /// `GET`, `POST` or `DELETE`.
    pub method: &'static str,
    /// The route template, as in [`ROUTES`](super::routes::ROUTES).
    pub path: &'static str,
    /// Its `operationId`.
    pub id: &'static str,
    /// Its tag.
    pub tag: &'static str,
    /// What it does, one line (the gRPC method it mirrors, if any).
    pub summary: &'static str,
    /// The proto message of the request body, if it takes one.
    pub request: Option<&'static str>,
    /// The answer's schema: a proto message, or one of [`extra`]'s.
    pub answer: &'static str,
    /// Query parameters: name, description, and the values it takes if it
    /// is an enumeration.
    pub query: &'static [(&'static str, &'static str, &'static [&'static str])],
    /// The 4xx statuses it can answer with.
    pub errors: &'static [u16],
    /// Only operators may call it.
    pub operators: bool,
}

/// Every operation, in the order the document lists them.
pub const OPERATIONS: &[Operation] = &[
    Operation {
        method: "POST",
        path: "/v1/classify",
        id: "classify",
        tag: "decisions",
        summary: "Decide one failure (gRPC Classify).",
        request: Some("ClassifyRequest"),
        answer: "ClassifyResponse",
        query: &[(
            "format",
            "json (the default): the whole decision; asc: the seed's {\"retry\": {...}} alone",
            &["json", "asc"],
        )],
        errors: BODY_ERRORS,
        operators: false,
    },
    Operation {
        method: "POST",
        path: "/v1/classify:batch",
        id: "classifyBatch",
        tag: "decisions",
        summary: "Decide many failures, each by its own code; one bad item fails only itself (gRPC ClassifyBatch).",
        request: Some("ClassifyBatchRequest"),
        answer: "ClassifyBatchResponse",
        query: &[],
        errors: BODY_ERRORS,
        operators: false,
    },
    Operation {
        method: "POST",
        path: "/v1/classify:explain",
        id: "explain",
        tag: "decisions",
        summary: "What Classify would answer now, read-only: the holds and budget in force are read, nothing is placed, withdrawn, counted or logged; with the hold the decision would place.",
        request: Some("ClassifyRequest"),
        answer: "ExplainResponse",
        query: &[],
        errors: BODY_ERRORS,
        operators: false,
    },
    Operation {
        method: "POST",
        path: "/v1/admit",
        id: "admit",
        tag: "fleet",
        summary: "May I call now? Refused while a fleet hold covers the call (gRPC Admit).",
        request: Some("AdmitRequest"),
        answer: "AdmitResponse",
        query: &[],
        errors: BODY_ERRORS,
        operators: false,
    },
    Operation {
        method: "POST",
        path: "/v1/outcomes",
        id: "reportOutcomes",
        tag: "fleet",
        summary: "Report first attempts per scope (the fleet retry budgets' deposits) and a probe's result with its token (gRPC ReportOutcomes).",
        request: Some("ReportOutcomesRequest"),
        answer: "ReportOutcomesResponse",
        query: &[],
        errors: BODY_ERRORS,
        operators: false,
    },
    Operation {
        method: "GET",
        path: "/v1/budgets",
        id: "listBudgets",
        tag: "fleet",
        summary: "The busiest fleet retry budget scopes, most used first (gRPC ListBudgets).",
        request: None,
        answer: "ListBudgetsResponse",
        query: &[
            ("catalog", "only scopes of this catalog", &[]),
            ("dependency", "only scopes of this dependency instance", &[]),
            (
                "limit",
                "at most this many scopes (default and maximum as gRPC ListBudgets)",
                &[],
            ),
        ],
        errors: &[400, 429],
        operators: false,
    },
    Operation {
        method: "GET",
        path: "/v1/holds",
        id: "listHolds",
        tag: "fleet",
        summary: "The fleet holds in force; tenants in clear for operators, hashed for everyone else (gRPC ListHolds).",
        request: None,
        answer: "ListHoldsResponse",
        query: &[
            ("catalog", "only holds of this catalog", &[]),
            ("dependency", "only holds of this dependency instance", &[]),
            ("tenant", "only holds of this tenant (raw)", &[]),
            ("page_size", "holds per page (default 100, at most 1 000)", &[]),
            ("page_token", "next_page_token of the previous page", &[]),
        ],
        errors: &[400, 429],
        operators: false,
    },
    Operation {
        method: "GET",
        path: "/v1/holds:watch",
        id: "watchHolds",
        tag: "fleet",
        summary: "The holds in force, then `synced`, then every change, as server-sent events: `event: placed|extended|lifted|probing|synced` with the event as JSON data, `event: error` with a google.rpc.Status when the stream ends abnormally, `: heartbeat` comments when quiet (gRPC WatchHolds; same filters and limits). Tenants in clear for operators (an Authorization header: use fetch streaming, EventSource cannot send one).",
        request: None,
        answer: "HoldEventStream",
        query: &[
            ("catalog", "only holds of this catalog", &[]),
            ("dependency", "only holds of this dependency instance (repeatable)", &[]),
            (
                "dependencies",
                "only holds of these dependency instances, comma-separated (at most 256)",
                &[],
            ),
            ("tenant", "only holds of this tenant (raw)", &[]),
            (
                "tenants",
                "a client mirror's tenants, comma-separated (at most 256; not with tenant): tenant holds only of these, in clear, and dependency and method holds of any",
                &[],
            ),
        ],
        errors: &[400, 429],
        operators: false,
    },
    Operation {
        method: "DELETE",
        path: "/v1/holds/{id}",
        id: "releaseHold",
        tag: "fleet",
        summary: "Lift a hold now, for every replica (gRPC ReleaseHold; operators only).",
        request: None,
        answer: "ReleaseHoldResponse",
        query: &[],
        errors: &[400, 403, 404, 429],
        operators: true,
    },
    Operation {
        method: "GET",
        path: "/v1/catalogs",
        id: "listCatalogs",
        tag: "catalogs",
        summary: "The catalogs of the policy in force, every rule's verdict (gRPC ListCatalogs).",
        request: None,
        answer: "ListCatalogsResponse",
        query: &[("locale", "texts in this language (en, ru; others give English)", &[])],
        errors: &[400, 429],
        operators: false,
    },
    Operation {
        method: "GET",
        path: "/v1/openapi.json",
        id: "openapi",
        tag: "service",
        summary: "This document.",
        request: None,
        answer: "OpenApi",
        query: &[],
        errors: &[429],
        operators: false,
    },
    Operation {
        method: "GET",
        path: "/healthz",
        id: "healthz",
        tag: "service",
        summary: "Liveness: 200 while the server is SERVING, 503 from the moment a shutdown starts (never shed).",
        request: None,
        answer: "Health",
        query: &[],
        errors: &[],
        operators: false,
    },
    Operation {
        method: "GET",
        path: "/readyz",
        id: "readyz",
        tag: "service",
        summary: "Readiness: as /healthz.",
        request: None,
        answer: "Health",
        query: &[],
        errors: &[],
        operators: false,
    },
];

/// The document, generated once.
pub static DOCUMENT: LazyLock<String> = LazyLock::new(|| serde_json::to_string_pretty(&document()).unwrap_or_default());

/// The document as a response.
pub fn response() -> http::Response<Body> {
    super::bytes_response(StatusCode::OK, DOCUMENT.as_bytes().to_vec())
}

/// The document as JSON.
pub fn document() -> Value {
    let proto = Proto::load();
    let extra = extra::schemas();
    let extra_names: Vec<&str> = extra.iter().map(|(n, _)| *n).collect();
    let mut defs: BTreeMap<String, Value> = BTreeMap::new();
    let mut paths = serde_json::Map::new();
    for op in OPERATIONS {
        let item = paths
            .entry(op.path.to_owned())
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        let mut item = item;
        item.insert(
            op.method.to_lowercase(),
            operation(op, proto.as_ref(), &extra_names, &mut defs),
        );
        paths.insert(op.path.to_owned(), Value::Object(item));
    }
    for (name, schema) in extra {
        defs.insert(name.to_owned(), schema);
    }
    let responses: serde_json::Map<String, Value> = ERRORS
        .iter()
        .map(|(_, name, description)| {
            (
                (*name).to_owned(),
                json!({
                    "description": description,
                    "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Status" } } },
                }),
            )
        })
        .collect();
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "retryd HTTP/JSON",
            "version": "1",
            "summary": "May this failed call be retried, when, and would a retry create a duplicate?",
            "description": "The HTTP/JSON door of retryd's retry-decision service, on the gRPC port. \
    Bodies are application/json: the proto3 JSON form of retryd.proto's messages, with field names as the proto \
    writes them (snake_case; lowerCamelCase is accepted too) and enum values as the words decisions use \
    (retry_with_limit; requests also accept the proto names and numbers). Errors are google.rpc.Status, with the \
    HTTP status Google's HTTP/JSON transcoding gives the gRPC code. Generated from retryd.proto and the routes \
    the server serves.",
            "license": { "name": "Apache-2.0", "identifier": "Apache-2.0" },
        },
        "servers": [{ "url": "http://127.0.0.1:50051", "description": "retryd serve's default address" }],
        "security": [{}, { "operatorToken": [] }],
        "tags": [
            { "name": "decisions", "description": "Classify failures: may this be retried, when, and would it duplicate?" },
            { "name": "fleet", "description": "Fleet memory: holds every replica honours, and Admit before a call." },
            { "name": "catalogs", "description": "The policy in force, as data." },
            { "name": "service", "description": "Probes and this document." },
        ],
        "paths": paths,
        "components": {
            "schemas": defs,
            "responses": responses,
            "securitySchemes": {
                "operatorToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The operator token of --operator-token-file. Operators may also be named by \
    their client certificate (--operator-identities) or, with --operator-allow-loopback, be any loopback caller.",
                },
            },
        },
    })
}

/// `extra`: the schemas [`extra`] defines (referred to, not generated).
fn operation(op: &Operation, proto: Option<&Proto>, extra: &[&str], defs: &mut BTreeMap<String, Value>) -> Value {
    let schema_of = |name: &str, direction: Direction, defs: &mut BTreeMap<String, Value>| match proto {
        Some(p) if !extra.contains(&name) => p.message_schema(name, direction, defs),
        _ => json!({ "$ref": format!("#/components/schemas/{name}") }),
    };
    let mut parameters: Vec<Value> = op
        .query
        .iter()
        .map(|(name, description, values)| {
            let schema = if values.is_empty() {
                json!({ "type": "string" })
            } else {
                json!({ "type": "string", "enum": values })
            };
            json!({ "name": name, "in": "query", "required": false, "description": description, "schema": schema })
        })
        .collect();
    if op.path.contains("{id}") {
        parameters.push(json!({
            "name": "id", "in": "path", "required": true,
            "description": "The hold's id (percent-encoded)", "schema": { "type": "string" },
        }));
    }
    let mut answer = schema_of(op.answer, Direction::Answer, defs);
    if op.id == "classify" {
        answer = json!({ "oneOf": [answer, { "$ref": "#/components/schemas/AscResponse" }] });
    }
    // The holds' event stream is text/event-stream; each event's data is
    // the JSON its schema gives.
    let media = if op.answer == "HoldEventStream" {
        "text/event-stream"
    } else {
        "application/json"
    };
    let mut responses = serde_json::Map::new();
    responses.insert(
        "200".to_owned(),
        json!({ "description": op.summary, "content": { media: { "schema": answer } } }),
    );
    for code in op.errors {
        if let Some((_, name, _)) = ERRORS.iter().find(|(c, _, _)| c == code) {
            responses.insert(
                code.to_string(),
                json!({ "$ref": format!("#/components/responses/{name}") }),
            );
        }
    }
    if op.path == "/healthz" || op.path == "/readyz" {
        responses.insert(
            "503".to_owned(),
            json!({ "description": "Not serving (shutting down)", "content": { "application/json": {
                "schema": { "$ref": "#/components/schemas/Health" } } } }),
        );
    }
    let mut out = json!({
        "operationId": op.id,
        "tags": [op.tag],
        "summary": op.summary,
        "responses": responses,
    });
    if !parameters.is_empty() {
        out["parameters"] = json!(parameters);
    }
    if let Some(request) = op.request {
        out["requestBody"] = json!({
            "required": true,
            "content": { "application/json": { "schema": schema_of(request, Direction::Request, defs) } },
        });
    }
    if op.operators {
        out["security"] = json!([{ "operatorToken": [] }]);
    }
    out
}

#[cfg(test)]
mod tests;
