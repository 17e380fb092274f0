use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::body::Body;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;

use super::super::door::{HttpConfig, HttpDoor};
use super::super::routes::ROUTES;
use super::*;
use crate::core::budget::BudgetScope;
use crate::core::hold::{HoldKind, HoldScope};
use crate::core::{Operation as Op, Policy, ReadBack, SideEffectState, Strategy, TargetReached, Verdict};
use crate::doors::answer::Stalls;
use crate::doors::ledger::{Ledger, Limits};
use crate::doors::peers::Operators;
use crate::fleet::{Fleet, FleetConfig, HoldEventKind};
use crate::service::{Service, ServiceConfig};

fn doc() -> Value {
    serde_json::from_str(&DOCUMENT).expect("the document is JSON")
}

#[test]
fn document_lists_exactly_the_routes() {
    let doc = doc();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented: Vec<(String, String)> = doc["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .expect("path item")
                .keys()
                .map(move |m| (m.to_uppercase(), path.clone()))
        })
        .collect();
    let mut served: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.as_str().to_owned(), (*p).to_owned()))
        .collect();
    documented.sort();
    served.sort();
    assert_eq!(documented, served);
}

#[test]
fn every_ref_points_at_something_defined() {
    let doc = doc();
    let text = DOCUMENT.as_str();
    let mut refs = 0;
    for r in text.split("\"$ref\": \"#/components/").skip(1) {
        let target = r.split('"').next().expect("ref");
        let mut node = &doc["components"];
        for part in target.split('/') {
            node = &node[part];
        }
        assert!(!node.is_null(), "dangling $ref {target}");
        refs += 1;
    }
    assert!(refs > 20, "{refs} refs");
    // Every proto field documented: its description came from the proto.
    let failure = &doc["components"]["schemas"]["FailureInput"]["properties"]["retry_after"];
    assert!(
        failure["description"]
            .as_str()
            .is_some_and(|d| d.contains("Retry-After")),
        "{failure}"
    );
}

/// The proto's enum values, without their prefix and in lowercase, are the
/// core's words: the one vocabulary and the wire name one thing alike.
#[test]
fn the_protos_enums_spell_the_core_words() {
    let proto = Proto::load().expect("the descriptor loads");
    fn of<T: Copy>(all: &[(T, &'static str)]) -> Vec<String> {
        all.iter().map(|(_, w)| (*w).to_owned()).collect()
    }
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(sorted(proto.words("Verdict")), sorted(of(Verdict::WORDS)));
    assert_eq!(sorted(proto.words("Strategy")), sorted(of(Strategy::WORDS)));
    assert_eq!(
        sorted(proto.words("SideEffectState")),
        sorted(of(SideEffectState::WORDS))
    );
    assert_eq!(sorted(proto.words("TargetReached")), sorted(of(TargetReached::WORDS)));
    assert_eq!(sorted(proto.words("HoldKind")), sorted(of(HoldKind::WORDS)));
    assert_eq!(sorted(proto.words("HoldEventKind")), sorted(of(HoldEventKind::WORDS)));
    // Not given is the proto's unspecified value, which has no word there.
    let given = |all: &[(Op, &'static str)]| of(all).into_iter().filter(|w| w != "unspecified").collect::<Vec<_>>();
    assert_eq!(sorted(proto.words("OperationKind")), sorted(given(Op::WORDS)));
    let done = of(ReadBack::WORDS)
        .into_iter()
        .filter(|w| w != "not_done")
        .collect::<Vec<_>>();
    assert_eq!(sorted(proto.words("ReadBack")), sorted(done));
    // The proto's one Scope is a decision's and a hold's (both have `tenant`).
    let mut scopes = sorted([of(crate::core::Scope::WORDS), of(HoldScope::WORDS)].concat());
    scopes.dedup();
    assert_eq!(sorted(proto.words("Scope")), scopes);
    assert_eq!(of(BudgetScope::WORDS), ["dependency", "tenant"]);
}

/// A validator of `name` (a component schema) against the document.
fn validator(doc: &Value, name: &str) -> jsonschema::Validator {
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"],
        "$ref": format!("#/components/schemas/{name}"),
    });
    jsonschema::draft202012::new(&root).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn assert_valid(doc: &Value, name: &str, value: &Value) {
    let v = validator(doc, name);
    let errors: Vec<String> = v
        .iter_errors(value)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{name}: {errors:#?}\n{value:#}");
}

fn door() -> HttpDoor {
    let policy = Arc::new(ArcSwap::from_pointee(Policy::embedded().expect("embedded policy")));
    let draining = tokio::sync::watch::channel(false).1;
    let service =
        Service::new(policy, ServiceConfig::default()).with_fleet(Fleet::in_memory(FleetConfig::default()), draining);
    let operators = Operators {
        token: Some("op-token".into()),
        ..Operators::default()
    };
    let (reporter, _health) = tonic_health::server::health_reporter();
    HttpDoor::new(
        service,
        Arc::new(operators),
        reporter,
        HttpConfig {
            max_message_bytes: 1 << 20,
            first_message_timeout: std::time::Duration::from_secs(5),
            cors_origins: Vec::new(),
        },
        Ledger::new(Limits::default()),
        Stalls::new(),
    )
}

async fn call(door: &HttpDoor, method: Method, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", "Bearer op-token");
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let req = req
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .expect("request");
    let resp = door.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (status, serde_json::from_slice(&bytes).expect("a JSON answer"))
}

/// Every route's real answers — decisions with holds in force and budgets
/// standing, batches with a bad item, Admit refused under a hold, hold
/// lists, a release, the catalogs, errors, the ASC form — are valid against
/// the document's schemas.
#[tokio::test]
async fn real_answers_match_the_document() {
    let doc = doc();
    let door = door();
    let op = |path: &str, method: &str| -> String {
        let item = &doc["paths"][path][method];
        let schema = &item["responses"]["200"]["content"]["application/json"]["schema"];
        let r = schema["$ref"].as_str().or_else(|| schema["oneOf"][0]["$ref"].as_str());
        r.expect("a $ref").rsplit('/').next().expect("name").to_owned()
    };
    let request_schema = |path: &str| -> String {
        let s = &doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"];
        s.as_str().expect("a $ref").rsplit('/').next().expect("name").to_owned()
    };

    // First attempts on a budgeted dependency, then failures: holds placed
    // (a pause, a tenant quota stop), a budget standing, a bad item.
    let (s, _) = call(
        &door,
        Method::POST,
        "/v1/admit",
        Some(json!({"catalog": "grpc", "dependency": "inv-1"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let failures = [
        json!({"catalog": "vibecode", "code": "QUEUE_OVERFLOW", "operation": "write", "dependency": "portal-1", "retry_after": "5", "attempt": 1}),
        json!({"catalog": "frontspin", "code": "RATE_LIMITED", "operation": "write", "tenant": "acme", "dependency": "fs-eu", "attempt": 1}),
        json!({"catalog": "grpc", "code": "UNAVAILABLE", "operation": "read", "dependency": "inv-1", "attempt": 1}),
        json!({"catalog": "vibecode", "code": "BITRIX_TIMEOUT", "operation": "OPERATION_KIND_WRITE", "readBack": 3, "idempotencyKey": "k", "deadline": "2030-01-01T00:00:00Z",
               "upstream": {"retryable": true, "safe": false, "afterMs": "100", "strategy": "retry_after", "sideEffectState": "possible", "reconciliationAction": "check"}}),
        json!({"catalog": "frontspin", "code": "TIMEOUT", "operation": "write", "attempt": 9}),
    ];
    let classify_in = request_schema("/v1/classify");
    for f in &failures {
        let body = json!({"failure": f, "locale": "ru"});
        assert_valid(&doc, &classify_in, &body);
        let (s, answer) = call(&door, Method::POST, "/v1/classify", Some(body.clone())).await;
        assert_eq!(s, StatusCode::OK, "{answer}");
        assert_valid(&doc, &op("/v1/classify", "post"), &answer);
        let (s, asc) = call(&door, Method::POST, "/v1/classify?format=asc", Some(body)).await;
        assert_eq!(s, StatusCode::OK);
        assert_valid(&doc, "AscResponse", &asc);
    }
    let (_, held) = call(
        &door,
        Method::POST,
        "/v1/classify",
        Some(json!({"failure": failures[0]})),
    )
    .await;
    assert!(!held["decision"]["hold"].is_null(), "a hold in force: {held}");
    let (_, budgeted) = call(
        &door,
        Method::POST,
        "/v1/classify",
        Some(json!({"failure": failures[2]})),
    )
    .await;
    assert!(
        !budgeted["decision"]["budget"].is_null(),
        "a budget standing: {budgeted}"
    );

    // Outcomes: first attempts reported for a scope, then its budget listed.
    let outcomes = json!({"counts": [{"catalog": "grpc", "dependency": "inv-2", "requests": "40"},
                                     {"catalog": "grpc", "dependency": "inv-2", "requests": 2}]});
    assert_valid(&doc, &request_schema("/v1/outcomes"), &outcomes);
    let (s, answer) = call(&door, Method::POST, "/v1/outcomes", Some(outcomes)).await;
    assert_eq!(s, StatusCode::OK, "{answer}");
    assert_eq!(answer["probe_accepted"], false, "{answer}");
    assert_valid(&doc, &op("/v1/outcomes", "post"), &answer);
    let (s, budgets) = call(&door, Method::GET, "/v1/budgets?dependency=inv-2", None).await;
    assert_eq!(s, StatusCode::OK, "{budgets}");
    assert_valid(&doc, &op("/v1/budgets", "get"), &budgets);
    assert_eq!(budgets["budgets"][0]["budget"]["requests"], 42, "{budgets}");
    let (s, bad) = call(&door, Method::GET, "/v1/budgets?limit=-1", None).await;
    assert_eq!(
        (s, bad["message"].as_str().is_some_and(|m| m.contains("limit"))),
        (StatusCode::BAD_REQUEST, true),
        "{bad}"
    );
    let (s, bad) = call(
        &door,
        Method::POST,
        "/v1/outcomes",
        Some(json!({"probe_token": "nonsense", "probe_succeeded": true})),
    )
    .await;
    assert_eq!(
        (s, bad["message"].as_str().is_some_and(|m| m.contains("probe_token"))),
        (StatusCode::BAD_REQUEST, true),
        "{bad}"
    );

    // Explain: a would-be stop for a tenant nobody stopped, read-only.
    let body = json!({"failure": {"catalog": "frontspin", "code": "RATE_LIMITED", "operation": "write", "tenant": "initech", "dependency": "fs-eu"}});
    let (s, explained) = call(&door, Method::POST, "/v1/classify:explain", Some(body)).await;
    assert_eq!(s, StatusCode::OK, "{explained}");
    assert_valid(&doc, &op("/v1/classify:explain", "post"), &explained);
    assert_eq!(explained["would_place"]["kind"], "quota_stop", "{explained}");
    assert_eq!(explained["would_place"]["tenant"], "initech", "{explained}");
    let (_, held) = call(&door, Method::GET, "/v1/holds?tenant=initech", None).await;
    assert_eq!(held["holds"], json!([]), "explain placed nothing: {held}");

    let mut items: Vec<Value> = failures.to_vec();
    items.push(json!({"catalog": "nope", "code": "X"}));
    let batch = json!({"failures": items});
    assert_valid(&doc, &request_schema("/v1/classify:batch"), &batch);
    let (s, answer) = call(&door, Method::POST, "/v1/classify:batch", Some(batch)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(answer["summary"]["errors"], 1);
    assert_valid(&doc, &op("/v1/classify:batch", "post"), &answer);

    let admit = json!({"catalog": "vibecode", "dependency": "portal-1", "method": "crm.deal.add", "attempt": "1"});
    assert_valid(&doc, &request_schema("/v1/admit"), &admit);
    let (s, answer) = call(&door, Method::POST, "/v1/admit", Some(admit)).await;
    assert_eq!((s, &answer["admitted"]), (StatusCode::OK, &json!(false)), "{answer}");
    assert_valid(&doc, &op("/v1/admit", "post"), &answer);

    let (s, holds) = call(&door, Method::GET, "/v1/holds?page_size=1", None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        !holds["next_page_token"].as_str().unwrap_or_default().is_empty(),
        "{holds}"
    );
    assert_valid(&doc, &op("/v1/holds", "get"), &holds);
    let id = holds["holds"][0]["id"].as_str().expect("an id").to_owned();
    let (s, released) = call(&door, Method::DELETE, &format!("/v1/holds/{id}"), None).await;
    assert_eq!(s, StatusCode::OK, "{released}");
    assert_valid(&doc, &op("/v1/holds/{id}", "delete"), &released);

    let (s, catalogs) = call(&door, Method::GET, "/v1/catalogs?locale=ru", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_valid(&doc, &op("/v1/catalogs", "get"), &catalogs);

    let (s, health) = call(&door, Method::GET, "/healthz", None).await;
    assert!(s == StatusCode::OK || s == StatusCode::SERVICE_UNAVAILABLE, "{s}");
    assert_valid(&doc, "Health", &health);

    // Errors: a bad field, an unknown hold.
    for (method, uri, body, code) in [
        (
            Method::POST,
            "/v1/classify",
            Some(json!({"failure": {"operation": "wrte"}})),
            StatusCode::BAD_REQUEST,
        ),
        (Method::DELETE, "/v1/holds/no-such-hold", None, StatusCode::NOT_FOUND),
        (Method::GET, "/v1/holds?page_size=x", None, StatusCode::BAD_REQUEST),
    ] {
        let (s, status) = call(&door, method, uri, body).await;
        assert_eq!(s, code, "{uri}: {status}");
        assert_valid(&doc, "Status", &status);
        let documented = &doc["paths"][uri
            .split('?')
            .next()
            .map(|p| {
                if p.starts_with("/v1/holds/") {
                    "/v1/holds/{id}"
                } else {
                    p
                }
            })
            .unwrap_or(uri)];
        assert!(
            documented
                .as_object()
                .expect("a path")
                .values()
                .any(|op| !op["responses"][s.as_str()].is_null()),
            "{uri}: {s} is documented"
        );
    }
}

/// What the schemas refuse, the door refuses: a request the document calls
/// invalid (an unknown field, a word of no enum) is a 400.
#[tokio::test]
async fn the_request_schemas_refuse_what_the_door_refuses() {
    let doc = doc();
    let door = door();
    for bad in [
        json!({"failure": {"cod": "X"}}),
        json!({"failure": {"operation": "wrte"}}),
        json!({"failure": {"attempt": -1}}),
    ] {
        assert!(!validator(&doc, "ClassifyRequest").is_valid(&bad), "{bad}");
        let (s, _) = call(&door, Method::POST, "/v1/classify", Some(bad.clone())).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}");
    }
}
