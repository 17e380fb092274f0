//! The HTTP door's fleet routes end to end (the real binary, reqwest):
//! the holds as server-sent events, outcomes and budgets, and explain,
//! which changes nothing.

mod grpc_support;

use std::time::Duration;

use grpc_support::{PATIENCE, Server, TempDir};
use serde_json::{Value, json};

const TOKEN: &str = "an-operator-token-of-32-characters";

fn server(dir: &TempDir) -> Server {
    let token_file = dir.join("operator.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("write token");
    Server::start(&["--operator-token-file", token_file.to_str().expect("utf-8")])
}

async fn send(req: reqwest::RequestBuilder) -> (u16, Value) {
    let r = req.timeout(PATIENCE).send().await.expect("request");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")),
    )
}

fn post(server: &Server, path: &str, body: &Value) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(format!("{}{path}", server.url()))
        .header("content-type", "application/json")
        .body(body.to_string())
}

fn stop(tenant: &str) -> Value {
    json!({"failure": {"catalog": "frontspin", "code": "RATE_LIMITED", "operation": "write", "attempt": 1,
                       "tenant": tenant, "dependency": "fs-sse"}})
}

/// A server-sent event stream, read event by event.
struct Events {
    resp: reqwest::Response,
    buf: String,
}

impl Events {
    async fn open(server: &Server, query: &str, token: Option<&str>) -> Events {
        let mut req = reqwest::Client::new().get(format!("{}/v1/holds:watch?{query}", server.url()));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = req.send().await.expect("watch");
        assert_eq!(resp.status().as_u16(), 200);
        assert_eq!(
            resp.headers().get("content-type").and_then(|v| v.to_str().ok()),
            Some("text/event-stream")
        );
        Events {
            resp,
            buf: String::new(),
        }
    }

    /// The next event (name, data), heartbeats skipped.
    async fn next(&mut self) -> (String, Value) {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                if block.starts_with(':') {
                    continue;
                }
                let field = |name: &str| {
                    block
                        .lines()
                        .find_map(|l| l.strip_prefix(name))
                        .unwrap_or_else(|| panic!("no {name} in {block:?}"))
                        .to_owned()
                };
                let data = serde_json::from_str(&field("data: ")).expect("data is JSON");
                return (field("event: "), data);
            }
            let chunk = tokio::time::timeout(PATIENCE, self.resp.chunk())
                .await
                .expect("an event in time")
                .expect("read")
                .expect("the stream is open");
            self.buf.push_str(std::str::from_utf8(&chunk).expect("utf-8"));
        }
    }
}

#[tokio::test]
async fn the_holds_stream_as_server_sent_events_with_snapshot_synced_and_changes() {
    let dir = TempDir::new("http-sse");
    let server = server(&dir);
    let (s, placed) = send(post(&server, "/v1/classify", &stop("acme"))).await;
    assert_eq!(s, 200, "{placed}");
    let id = placed["decision"]["hold"]["id"].as_str().expect("a hold").to_owned();

    // An operator: the snapshot in clear, then synced.
    let mut op = Events::open(&server, "dependency=fs-sse", Some(TOKEN)).await;
    let (kind, ev) = op.next().await;
    assert_eq!(
        (kind.as_str(), ev["hold"]["id"].as_str(), ev["hold"]["tenant"].as_str()),
        ("placed", Some(id.as_str()), Some("acme"))
    );
    assert!(ev["server_time"].is_string(), "{ev}");
    assert_eq!(op.next().await.0, "synced");
    // Anyone else: the tenant hashed; a filter naming other dependencies sees nothing.
    let mut anon = Events::open(&server, "dependencies=other,fs-sse", None).await;
    let (_, ev) = anon.next().await;
    assert!(
        ev["hold"]["tenant"].as_str().is_some_and(|t| t.starts_with("h:")),
        "{ev}"
    );
    assert_eq!(anon.next().await.0, "synced");
    let mut none = Events::open(&server, "dependency=elsewhere", None).await;
    assert_eq!(none.next().await.0, "synced");

    // A change: a new stop, then its release, reach the open streams.
    let (s, _) = send(post(&server, "/v1/classify", &stop("globex"))).await;
    assert_eq!(s, 200);
    let (kind, ev) = op.next().await;
    assert_eq!(
        (kind.as_str(), ev["hold"]["tenant"].as_str()),
        ("placed", Some("globex"))
    );
    let (s, _) = send(
        reqwest::Client::new()
            .delete(format!("{}/v1/holds/{id}", server.url()))
            .header("authorization", format!("Bearer {TOKEN}")),
    )
    .await;
    assert_eq!(s, 200);
    let (kind, ev) = op.next().await;
    assert_eq!(
        (kind.as_str(), ev["hold"]["id"].as_str()),
        ("lifted", Some(id.as_str()))
    );

    // Bad filters are a 400 naming the parameter, before any stream.
    let many = (0..300).map(|i| format!("d{i}")).collect::<Vec<_>>().join(",");
    let (s, bad) =
        send(reqwest::Client::new().get(format!("{}/v1/holds:watch?dependencies={many}", server.url()))).await;
    assert_eq!(s, 400, "{bad}");
    assert!(
        bad["message"].as_str().is_some_and(|m| m.contains("dependencies")),
        "{bad}"
    );
    let (s, bad) = send(reqwest::Client::new().get(format!("{}/v1/holds:watch?when=now", server.url()))).await;
    assert_eq!(s, 400, "{bad}");
    drop((op, anon, none));
}

#[tokio::test]
async fn outcomes_feed_the_budget_and_explain_changes_nothing() {
    let dir = TempDir::new("http-fleet");
    let server = server(&dir);
    let counts = json!({"counts": [{"catalog": "frontspin", "dependency": "fs-b", "requests": 500}]});
    let (s, answer) = send(post(&server, "/v1/outcomes", &counts)).await;
    assert_eq!((s, &answer["probe_accepted"]), (200, &json!(false)), "{answer}");
    let budgets =
        |server: &Server| send(reqwest::Client::new().get(format!("{}/v1/budgets?dependency=fs-b", server.url())));
    // Counts reach the table within its refresh.
    let mut listed = Value::Null;
    for _ in 0..50 {
        let (s, b) = budgets(&server).await;
        assert_eq!(s, 200, "{b}");
        listed = b;
        if listed["budgets"][0]["budget"]["requests"] == 500 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(listed["budgets"][0]["budget"]["requests"], 500, "{listed}");
    assert_eq!(listed["budgets"][0]["budget"]["retries"], 0, "{listed}");

    // Explain a retry and a quota stop: answered, nothing placed or withdrawn.
    let retry = json!({"failure": {"catalog": "frontspin", "code": "FRONTSPIN_SERVER_ERROR", "operation": "read",
                                   "attempt": 2, "dependency": "fs-b", "tenant": "acme"}});
    let (s, e) = send(post(&server, "/v1/classify:explain", &retry)).await;
    assert_eq!((s, &e["decision"]["verdict"]), (200, &json!("retry_with_limit")), "{e}");
    assert!(!e["decision"]["budget"].is_null(), "{e}");
    let (s, e) = send(post(&server, "/v1/classify:explain", &stop("initech"))).await;
    assert_eq!((s, &e["would_place"]["kind"]), (200, &json!("quota_stop")), "{e}");
    let (_, holds) = send(reqwest::Client::new().get(format!("{}/v1/holds?dependency=fs-sse", server.url()))).await;
    assert_eq!(holds["holds"], json!([]), "{holds}");
    let (_, after) = budgets(&server).await;
    assert_eq!(
        after["budgets"][0]["budget"]["retries"], 0,
        "explain withdrew nothing: {after}"
    );
    // The same retry classified live is withdrawn (so the check above could fail).
    let (s, _) = send(post(&server, "/v1/classify", &retry)).await;
    assert_eq!(s, 200);
    let (_, live) = budgets(&server).await;
    assert_eq!(live["budgets"][0]["budget"]["retries"], 1, "{live}");
}

#[tokio::test]
async fn event_streams_are_capped_per_caller_with_retry_advice() {
    let server = Server::start(&["--max-watch-streams-per-caller", "2"]);
    let first = Events::open(&server, "", None).await;
    let second = Events::open(&server, "", None).await;
    let refused = reqwest::Client::new()
        .get(format!("{}/v1/holds:watch", server.url()))
        .timeout(PATIENCE)
        .send()
        .await
        .expect("GET");
    assert_eq!(refused.status().as_u16(), 429);
    assert!(refused.headers().contains_key("retry-after"), "{:?}", refused.headers());
    let body: Value = serde_json::from_str(&refused.text().await.expect("body")).expect("JSON");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("--max-watch-streams-per-caller")),
        "{body}"
    );
    // A stream that ends gives its place back.
    drop(first);
    let mut again = None;
    for _ in 0..50 {
        let r = reqwest::Client::new()
            .get(format!("{}/v1/holds:watch", server.url()))
            .send()
            .await
            .expect("GET");
        if r.status().as_u16() == 200 {
            again = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(again.is_some(), "the closed stream's place came back");
    drop(second);
}
