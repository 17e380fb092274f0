//! The shapes of the document that are not proto messages: the seed's ASC
//! contract (`?format=asc`), `google.rpc.Status` as the door writes it, the
//! probes' answer, explain's answer, the holds' event stream, and this document
//! itself.

use serde_json::{Value, json};

use crate::core::{SideEffectState, Strategy};

fn words<T: Copy + 'static>(all: &[(T, &'static str)]) -> Vec<&'static str> {
    all.iter().map(|(_, w)| *w).collect()
}

/// Name and schema of each.
pub fn schemas() -> Vec<(&'static str, Value)> {
    vec![
        (
            "ExplainResponse",
            json!({
                "type": "object",
                "description": "What Classify would answer now (POST /v1/classify:explain), read-only.",
                "required": ["decision", "would_place"],
                "properties": {
                    "decision": { "$ref": "#/components/schemas/Decision", "description": "The decision, with the hold in force that floors it and the budget it is judged against, as a live call would get them" },
                    "would_place": { "oneOf": [{ "$ref": "#/components/schemas/Hold" }, { "type": "null" }],
                                     "description": "The hold the decision asks for (not placed; its id is empty), or null" },
                },
            }),
        ),
        (
            "HoldEventStream",
            json!({
                "type": "string",
                "description": "text/event-stream. Each event is `event: <kind>` then `data: ` and one JSON object {\"kind\": placed|extended|lifted|probing|synced, \"hold\": Hold or null (synced), \"server_time\": RFC 3339}; `event: error` carries a google.rpc.Status; lines starting with `:` are heartbeats.",
            }),
        ),
        (
            "AscResponse",
            json!({
                "type": "object",
                "description": "The ASC 0.1 retry contract alone, exactly the seed's ten fields (nulls where it has nulls): what `retryd classify --format asc` prints.",
                "required": ["retry"],
                "properties": { "retry": {
                    "type": "object",
                    "required": ["retryable", "safe", "after_ms", "strategy", "attempt", "max_attempts",
                                 "deadline", "idempotency_key", "side_effect_state", "reconciliation_action"],
                    "additionalProperties": false,
                    "properties": {
                        "retryable": { "type": "boolean", "description": "May a retry be made at all" },
                        "safe": { "type": "boolean", "description": "A retry cannot duplicate a side effect" },
                        "after_ms": { "type": "integer", "minimum": 0, "description": "Wait at least this long" },
                        "strategy": { "type": "string", "enum": words(Strategy::WORDS) },
                        "attempt": { "type": "integer", "minimum": 0 },
                        "max_attempts": { "type": "integer", "minimum": 0 },
                        "deadline": { "type": ["string", "null"], "format": "date-time" },
                        "idempotency_key": { "type": ["string", "null"], "description": "Resend with this key" },
                        "side_effect_state": { "type": "string", "enum": words(SideEffectState::WORDS) },
                        "reconciliation_action": { "type": ["string", "null"] },
                    },
                } },
            }),
        ),
        (
            "Status",
            json!({
                "type": "object",
                "description": "google.rpc.Status in proto3 JSON: the gRPC code number, a message naming the field, and for a bad field a google.rpc.BadRequest.",
                "required": ["code", "message"],
                "properties": {
                    "code": { "type": "integer", "description": "The gRPC status code (3 INVALID_ARGUMENT, 5 NOT_FOUND, 7 PERMISSION_DENIED, 8 RESOURCE_EXHAUSTED, ...)" },
                    "message": { "type": "string" },
                    "details": { "type": "array", "items": {
                        "type": "object",
                        "required": ["@type"],
                        "properties": {
                            "@type": { "type": "string", "const": "type.googleapis.com/google.rpc.BadRequest" },
                            "fieldViolations": { "type": "array", "items": {
                                "type": "object",
                                "properties": { "field": { "type": "string" }, "description": { "type": "string" } },
                            } },
                        },
                    } },
                },
            }),
        ),
        (
            "Health",
            json!({
                "type": "object",
                "required": ["status"],
                "properties": { "status": { "type": "string", "enum": ["SERVING", "NOT_SERVING", "SERVICE_UNKNOWN", "UNKNOWN"] } },
            }),
        ),
        (
            "OpenApi",
            json!({ "type": "object", "description": "An OpenAPI 3.1 document (this one)." }),
        ),
    ]
}
