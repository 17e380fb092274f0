//! The HTTP/JSON door end to end: the real binary, a real HTTP client
//! (reqwest, HTTP/1.1 and h2c) over a real socket, every route, bad input,
//! the operator rule, shedding, CORS, metrics and a request during shutdown.

mod grpc_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use grpc_support::{PATIENCE, Server, TempDir, sample};
use serde_json::{Value, json};

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(PATIENCE).build().expect("client")
}

/// POSTs `body` as JSON; returns the status and the parsed body.
async fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    let r = client()
        .post(format!("{}{path}", server.url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("POST");
    let status = r.status().as_u16();
    (status, r.json_value().await)
}

async fn get(server: &Server, path: &str) -> (u16, Value) {
    let r = client()
        .get(format!("{}{path}", server.url()))
        .send()
        .await
        .expect("GET");
    let status = r.status().as_u16();
    (status, r.json_value().await)
}

trait JsonBody {
    async fn json_value(self) -> Value;
}

impl JsonBody for reqwest::Response {
    async fn json_value(self) -> Value {
        assert_eq!(
            self.headers().get("content-type").and_then(|v| v.to_str().ok()),
            Some("application/json"),
            "every answer is JSON"
        );
        let text = self.text().await.expect("body");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }
}

/// The field a google.rpc.Status body's BadRequest names.
fn violation_field(status: &Value) -> &str {
    assert_eq!(
        status["details"][0]["@type"], "type.googleapis.com/google.rpc.BadRequest",
        "{status}"
    );
    status["details"][0]["fieldViolations"][0]["field"]
        .as_str()
        .expect("field")
}

#[tokio::test]
async fn classify_answers_the_decision_and_asc_form() {
    let server = Server::start(&[]);
    let (status, body) = post(
        &server,
        "/v1/classify",
        &json!({"failure": {"code": "BITRIX_TIMEOUT", "operation": "write", "attempt": 1}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let d = &body["decision"];
    assert_eq!(d["verdict"], "state_verification_required");
    assert_eq!(d["retry"]["side_effect_state"], "possible");
    assert_eq!(d["hold"], Value::Null);
    assert_eq!(body.as_object().expect("object").len(), 1, "only the decision: {body}");

    // Proto names work as the seeds' words do.
    let (status, body) = post(
        &server,
        "/v1/classify",
        &json!({"failure": {"code": "BITRIX_TIMEOUT", "operation": "OPERATION_KIND_WRITE", "attempt": 1,
                            "read_back": "absent"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["decision"]["operation"], "write");

    let r = client()
        .post(format!("{}/v1/classify?format=asc", server.url()))
        .header("content-type", "application/json")
        .body(r#"{"failure": {"catalog": "asc", "code": "TIMEOUT", "operation": "read", "attempt": 2}}"#)
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 200);
    let asc: Value = serde_json::from_str(&r.text().await.expect("body")).expect("json");
    let keys: Vec<&str> = asc["retry"]
        .as_object()
        .expect("retry")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "retryable",
            "safe",
            "after_ms",
            "strategy",
            "attempt",
            "max_attempts",
            "deadline",
            "idempotency_key",
            "side_effect_state",
            "reconciliation_action"
        ]
    );
}

#[tokio::test]
async fn batch_keeps_order_and_per_item_errors() {
    let server = Server::start(&[]);
    let (status, body) = post(
        &server,
        "/v1/classify:batch",
        &json!({"failures": [
            {"code": "BITRIX_TIMEOUT", "operation": "write", "attempt": 1},
            {"catalog": "nope", "code": "X", "attempt": 1},
            {"code": "QUEUE_OVERFLOW", "operation": "read", "attempt": 1},
        ], "locale": "ru"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let results = body["results"].as_array().expect("results");
    assert_eq!(results.len(), 3);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["index"], i);
    }
    assert_eq!(results[0]["decision"]["code"], "BITRIX_TIMEOUT");
    assert_eq!(results[1]["error"]["code"], 3);
    assert_eq!(violation_field(&results[1]["error"]), "failures[1].catalog");
    assert_eq!(results[2]["decision"]["verdict"], "retry_with_limit");
    assert_eq!(body["summary"]["errors"], 1);
    assert_eq!(
        body["summary"]["retry_with_limit"].as_u64().expect("n")
            + body["summary"]["state_verification_required"].as_u64().expect("n"),
        2
    );

    // Over --max-batch: the whole call fails, naming the field.
    let server = Server::start(&["--max-batch", "2"]);
    let (status, body) = post(&server, "/v1/classify:batch", &json!({"failures": [{}, {}, {}]})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(violation_field(&body), "failures");
}

#[tokio::test]
async fn bad_input_is_a_400_naming_the_field_and_place() {
    let server = Server::start(&["--max-message-bytes", "2048"]);
    let cases: &[(&str, &str, &str)] = &[
        // malformed JSON: where it broke
        (r#"{"failure": {"code": "X""#, "failure", "line 1 column"),
        ("not json", "body", "line 1 column"),
        // wrong types
        (r#"{"failure": {"code": 5}}"#, "failure.code", "invalid type"),
        (
            r#"{"failure": {"attempt": "two"}}"#,
            "failure.attempt",
            "not an unsigned integer",
        ),
        (r#"{"failure": {"attempt": -1}}"#, "failure.attempt", "negative"),
        (
            r#"{"failure": {"deadline": "tomorrow"}}"#,
            "failure.deadline",
            "RFC 3339",
        ),
        // unknown enum words and fields
        (
            r#"{"failure": {"operation": "wrte"}}"#,
            "failure.operation",
            "unknown value \"wrte\"",
        ),
        (r#"{"failure": {"read_back": "gone"}}"#, "failure.read_back", "absent"),
        (r#"{"failure": {"cod": "X"}}"#, "failure.cod", "unknown field `cod`"),
        // the service's own checks
        (
            r#"{"failure": {"catalog": "nope"}}"#,
            "failure.catalog",
            "unknown catalog",
        ),
        (r#"{}"#, "failure", "is required"),
    ];
    for (body, field, needle) in cases {
        let r = client()
            .post(format!("{}/v1/classify", server.url()))
            .header("content-type", "application/json; charset=utf-8")
            .body(*body)
            .send()
            .await
            .expect("POST");
        assert_eq!(r.status(), 400, "{body}");
        let status = r.json_value().await;
        assert_eq!(status["code"], 3, "{status}");
        assert_eq!(violation_field(&status), *field, "{body}: {status}");
        assert!(
            status["message"].as_str().expect("message").contains(needle),
            "{body}: {status}"
        );
    }

    // Over --max-message-bytes: 413, with and without a content-length.
    let big = json!({"failure": {"code": "x".repeat(4000)}}).to_string();
    let r = client()
        .post(format!("{}/v1/classify", server.url()))
        .header("content-type", "application/json")
        .body(big.clone())
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 413);
    let status = r.json_value().await;
    assert_eq!(status["code"], 8, "RESOURCE_EXHAUSTED: {status}");
    assert!(
        status["message"]
            .as_str()
            .expect("message")
            .contains("--max-message-bytes")
    );
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = big.into_bytes().chunks(500).map(|c| Ok(c.to_vec())).collect();
    let r = client()
        .post(format!("{}/v1/classify", server.url()))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)))
        .send()
        .await
        .expect("POST chunked");
    assert_eq!(r.status(), 413);

    // Not JSON: 415.
    for ct in [Some("application/x-www-form-urlencoded"), Some("text/plain"), None] {
        let mut req = client()
            .post(format!("{}/v1/classify", server.url()))
            .body(r#"{"failure": {}}"#);
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        let r = req.send().await.expect("POST");
        assert_eq!(r.status(), 415, "{ct:?}");
        assert_eq!(r.json_value().await["code"], 3);
    }

    // Routes and methods.
    let (status, body) = get(&server, "/v1/nothing").await;
    assert_eq!((status, body["code"].as_i64()), (404, Some(5)));
    let r = client()
        .get(format!("{}/v1/classify", server.url()))
        .send()
        .await
        .expect("GET");
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers().get("allow").and_then(|v| v.to_str().ok()), Some("POST"));
    let (status, body) = post(&server, "/v1/classify?format=xml", &json!({"failure": {}})).await;
    assert_eq!((status, violation_field(&body)), (400, "format"));
    let (status, body) = post(&server, "/v1/classify?color=red", &json!({"failure": {}})).await;
    assert_eq!((status, violation_field(&body)), (400, "color"));

    // gRPC is still served on the same port.
    let mut grpc = server.client().await;
    let d = grpc
        .classify(retryd::grpc::pb::ClassifyRequest {
            failure: Some(Box::new(grpc_support::failure(
                "vibecode",
                "BITRIX_TIMEOUT",
                retryd::grpc::pb::OperationKind::Write,
            ))),
            locale: String::new(),
        })
        .await
        .expect("gRPC Classify")
        .into_inner();
    assert_eq!(d.decision.expect("decision").code, "BITRIX_TIMEOUT");
}

#[tokio::test]
async fn catalogs_health_openapi_and_h2c() {
    let server = Server::start(&[]);
    let (status, body) = get(&server, "/v1/catalogs").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = body["catalogs"]
        .as_array()
        .expect("catalogs")
        .iter()
        .map(|c| c["name"].as_str().expect("name"))
        .collect();
    for n in ["vibecode", "asc", "frontspin", "grpc", "http"] {
        assert!(names.contains(&n), "{names:?}");
    }
    assert_eq!(body["default_catalog"], "vibecode");
    let (status, body) = get(
        &server,
        "/v1/catalogs?locale=xx-way-too-long-a-locale-for-anyone-at-all",
    )
    .await;
    assert_eq!((status, violation_field(&body)), (400, "locale"));

    for probe in ["/healthz", "/readyz"] {
        assert_eq!(get(&server, probe).await, (200, json!({"status": "SERVING"})));
    }
    let (status, doc) = get(&server, "/v1/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");

    // HTTP/2 without TLS (prior knowledge) on the same port, as HTTP/1.1.
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(PATIENCE)
        .build()
        .expect("h2c client");
    let r = h2
        .post(format!("{}/v1/classify", server.url()))
        .header("content-type", "application/json")
        .body(r#"{"failure": {"code": "QUEUE_OVERFLOW", "operation": "read", "attempt": 1}}"#)
        .send()
        .await
        .expect("h2c POST");
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.status(), 200);
    assert_eq!(r.json_value().await["decision"]["verdict"], "retry_with_limit");

    // Every request is counted by route and status, with bounded labels.
    let scrape = server.scrape();
    assert!(
        sample(
            &scrape,
            r#"http_server_requests_total{route="/v1/catalogs",code="200"}"#
        )
        .is_some_and(|n| n >= 1.0),
        "{scrape}"
    );
    assert!(sample(&scrape, r#"http_server_requests_total{route="unknown""#).is_none());
    let _ = get(&server, "/v1/evil/\u{1F600}").await;
    let scrape = server.scrape();
    assert!(
        sample(&scrape, r#"http_server_requests_total{route="unknown",code="404"}"#).is_some(),
        "{scrape}"
    );
    assert!(
        !scrape.contains(r#"grpc_method="unknown""#),
        "HTTP requests are not counted as gRPC calls: {scrape}"
    );
}

#[tokio::test]
async fn admit_holds_and_the_operator_rule() {
    let dir = TempDir::new("http-operator");
    let token_file = dir.join("operator.token");
    std::fs::write(&token_file, "an-operator-token-of-32-characters\n").expect("write token");
    let server = Server::start(&["--operator-token-file", token_file.to_str().expect("utf-8")]);
    let token = "Bearer an-operator-token-of-32-characters";

    let (status, body) = post(
        &server,
        "/v1/classify",
        &json!({"failure": {"catalog": "frontspin", "code": "RATE_LIMITED", "operation": "write", "attempt": 1,
                            "tenant": "acme", "dependency": "frontspin-eu"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let hold = &body["decision"]["hold"];
    assert_eq!(hold["kind"], "quota_stop", "{body}");
    assert_eq!(hold["scope"], "tenant");
    assert_eq!(hold["tenant"], "acme", "the caller sees its own tenant");

    let (status, body) = post(
        &server,
        "/v1/admit",
        &json!({"catalog": "frontspin", "dependency": "frontspin-eu", "tenant": "acme", "operation": "write"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["admitted"], false);
    assert_eq!(body["hold"]["kind"], "quota_stop");
    assert!(body["retry_at"].is_string(), "{body}");
    let (_, body) = post(
        &server,
        "/v1/admit",
        &json!({"catalog": "frontspin", "dependency": "frontspin-eu", "tenant": "globex"}),
    )
    .await;
    assert_eq!(body["admitted"], true, "{body}");
    let (status, body) = post(&server, "/v1/admit", &json!({"catalog": "nope"})).await;
    assert_eq!((status, violation_field(&body)), (400, "catalog"));

    // Non-operators see tenants hashed; operators in clear.
    let (status, body) = get(&server, "/v1/holds?catalog=frontspin").await;
    assert_eq!(status, 200, "{body}");
    let listed = &body["holds"][0];
    assert_ne!(listed["tenant"], "acme", "{body}");
    assert!(listed["tenant"].as_str().expect("tenant").starts_with("h:"), "{body}");
    let id = listed["id"].as_str().expect("id").to_owned();
    let r = client()
        .get(format!("{}/v1/holds?catalog=frontspin", server.url()))
        .header("authorization", token)
        .send()
        .await
        .expect("GET");
    assert_eq!(r.json_value().await["holds"][0]["tenant"], "acme");
    let (status, body) = get(&server, "/v1/holds?page_size=-1").await;
    assert_eq!((status, violation_field(&body)), (400, "page_size"));

    // Release: operators only (403 PERMISSION_DENIED), then 200, then 404.
    let url = format!("{}/v1/holds/{id}", server.url());
    let r = client().delete(&url).send().await.expect("DELETE");
    assert_eq!(r.status(), 403);
    assert_eq!(r.json_value().await["code"], 7);
    let r = client()
        .delete(&url)
        .header("authorization", "Bearer wrong-token-wrong-token-wrong-token")
        .send()
        .await
        .expect("DELETE");
    assert_eq!(r.status(), 403);
    let r = client()
        .delete(&url)
        .header("authorization", token)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(r.status(), 200);
    assert_eq!(r.json_value().await["hold"]["id"], id.as_str());
    let r = client()
        .delete(&url)
        .header("authorization", token)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(r.status(), 404);
    let (_, body) = post(
        &server,
        "/v1/admit",
        &json!({"catalog": "frontspin", "dependency": "frontspin-eu", "tenant": "acme"}),
    )
    .await;
    assert_eq!(body["admitted"], true, "released: {body}");
}

#[tokio::test]
async fn cors_is_off_by_default_and_on_for_named_origins() {
    let origin = "https://dash.example.com";
    let off = Server::start(&[]);
    let r = client()
        .get(format!("{}/v1/catalogs", off.url()))
        .header("origin", origin)
        .send()
        .await
        .expect("GET");
    assert!(r.headers().get("access-control-allow-origin").is_none());
    let r = client()
        .request(reqwest::Method::OPTIONS, format!("{}/v1/classify", off.url()))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .send()
        .await
        .expect("OPTIONS");
    assert_eq!(r.status(), 405, "no preflight without --http-cors-origin");

    let on = Server::start(&["--http-cors-origin", origin]);
    let r = client()
        .request(reqwest::Method::OPTIONS, format!("{}/v1/classify", on.url()))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .expect("OPTIONS");
    assert_eq!(r.status(), 204);
    let h = r.headers();
    assert_eq!(h.get("access-control-allow-origin").expect("ACAO"), origin);
    assert_eq!(h.get("access-control-allow-methods").expect("methods"), "POST");
    assert!(
        h.get("access-control-allow-headers")
            .expect("headers")
            .to_str()
            .expect("text")
            .contains("content-type")
    );
    let r = client()
        .post(format!("{}/v1/classify", on.url()))
        .header("origin", origin)
        .header("content-type", "application/json")
        .body(r#"{"failure": {}}"#)
        .send()
        .await
        .expect("POST");
    assert_eq!(r.headers().get("access-control-allow-origin").expect("ACAO"), origin);
    let r = client()
        .get(format!("{}/v1/catalogs", on.url()))
        .header("origin", "https://evil.example.com")
        .send()
        .await
        .expect("GET");
    assert!(r.headers().get("access-control-allow-origin").is_none());
}

/// A request the admission ledger has no room for (here: buffered bytes,
/// the same ledger gRPC calls are admitted by) is shed with 429; probes never.
#[tokio::test]
async fn overload_is_shed_with_429_and_probes_never() {
    let server = Server::start(&[
        "--max-buffered-bytes",
        "1024",
        "--max-buffered-bytes-per-connection",
        "1024",
    ]);
    let big = json!({"failure": {"code": "QUEUE_OVERFLOW", "method": "m".repeat(2000)}});
    let shed = client()
        .post(format!("{}/v1/classify", server.url()))
        .header("content-type", "application/json")
        .body(big.to_string())
        .send()
        .await
        .expect("POST");
    // Retry advice: Retry-After in whole seconds (rounded up), RetryInfo in the body.
    let retry_after = shed
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    assert_eq!(retry_after.as_deref(), Some("1"), "{:?}", shed.headers());
    let (status, body) = (shed.status().as_u16(), shed.json_value().await);
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["code"], 8);
    let info = &body["details"][0];
    assert_eq!(info["@type"], "type.googleapis.com/google.rpc.RetryInfo", "{body}");
    let delay: f64 = info["retryDelay"]
        .as_str()
        .and_then(|d| d.trim_end_matches('s').parse().ok())
        .expect("a delay");
    assert!(
        (0.04..=0.75).contains(&delay),
        "per-connection shed: 100 ms or server-wide 500 ms, ±50 %: {body}"
    );
    assert!(
        body["message"]
            .as_str()
            .expect("message")
            .contains("--max-buffered-bytes"),
        "{body}"
    );
    let (status, body) = post(&server, "/v1/classify", &json!({"failure": {"attempt": 1}})).await;
    assert_eq!(status, 200, "a small request fits: {body}");
    assert_eq!(get(&server, "/readyz").await.0, 200, "probes are not shed");
    let scrape = server.scrape();
    assert!(
        sample(&scrape, "retryd_calls_shed_total").is_some_and(|n| n >= 1.0),
        "{scrape}"
    );
}

/// Sends an HTTP/1.1 request whose body is held back, returns the stream.
fn start_held_request(server: &Server, body: &str) -> TcpStream {
    let mut s = TcpStream::connect(server.addr).expect("connect");
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    write!(
        s,
        "POST /v1/classify HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        server.addr,
        body.len()
    )
    .expect("write head");
    s.write_all(&body.as_bytes()[..10]).expect("write part of the body");
    s.flush().expect("flush");
    s
}

/// A request in flight when SIGTERM arrives is answered; the server then
/// refuses new connections, exits 0, and health went NOT_SERVING.
#[tokio::test]
async fn a_request_during_shutdown_is_answered() {
    let mut server = Server::start(&["--shutdown-grace", "20s"]);
    let body = r#"{"failure": {"code": "QUEUE_OVERFLOW", "operation": "read", "attempt": 1}}"#;
    let mut held = start_held_request(&server, body);
    // The server has the request's head and waits in the door for its body.
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.terminate();
    server.until_logged(&["shutting down"]).await;
    // The listener is closed at once: a new connection is refused.
    grpc_support::eventually(PATIENCE, "new connections refused", || async {
        TcpStream::connect(server.addr).is_err().then_some(())
    })
    .await;
    held.write_all(&body.as_bytes()[10..]).expect("write the rest");
    let mut response = String::new();
    held.read_to_string(&mut response).expect("read response");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.to_ascii_lowercase().contains("connection: close"),
        "{response}"
    );
    assert!(response.contains(r#""verdict":"retry_with_limit""#), "{response}");
    let status = server.wait_exit().await;
    assert!(status.success(), "{status}; log:\n{}", server.log());
}

#[tokio::test]
async fn http_off_leaves_grpc_only() {
    let server = Server::start(&["--http", "false"]);
    let r = reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(PATIENCE)
        .build()
        .expect("client")
        .get(format!("{}/readyz", server.url()))
        .send()
        .await
        .expect("GET");
    // gRPC's answer for a path it does not serve: UNIMPLEMENTED.
    assert_eq!(
        r.headers().get("grpc-status").and_then(|v| v.to_str().ok()),
        Some("12"),
        "no HTTP door: answered by gRPC"
    );
}
