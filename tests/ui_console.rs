//! The operator console's serving, without a browser (the real binary,
//! reqwest): its pages' strict headers, `--ui false`, `--ui-listen` (the
//! pages and the routes they use only, there and not on the gRPC port), and
//! the check that a state-changing request from a browser page comes from
//! this server's own origin or one `--http-cors-origin` names.
//! tests/ui_browser.rs drives the pages in headless Chromium.

mod grpc_support;

use std::net::SocketAddr;

use grpc_support::{PATIENCE, Server, TempDir, serve_expecting_exit};
use serde_json::json;

const TOKEN: &str = "an-operator-token-of-32-characters";

fn with_token(dir: &TempDir, extra: &[&str]) -> Server {
    let token_file = dir.join("operator.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("write token");
    let mut args = vec!["--operator-token-file", token_file.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// Status, headers and body of one request.
async fn send(req: reqwest::RequestBuilder) -> (u16, reqwest::header::HeaderMap, String) {
    let r = req.timeout(PATIENCE).send().await.expect("request");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.expect("body"))
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

async fn get(base: &str, path: &str) -> (u16, reqwest::header::HeaderMap, String) {
    send(client().get(format!("{base}{path}"))).await
}

#[tokio::test]
async fn the_pages_carry_strict_headers() {
    let server = Server::start(&[]);
    let base = server.url();
    let (status, h, body) = get(&base, "/ui/").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(h["content-type"], "text/html; charset=utf-8");
    let csp = h["content-security-policy"].to_str().expect("ascii");
    assert!(csp.starts_with("default-src 'self'"), "{csp}");
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["x-frame-options"], "DENY");
    assert!(body.contains(r#"<script type="module" src="console.js"></script>"#));
    for (path, media) in [
        ("/ui/console.js", "text/javascript; charset=utf-8"),
        ("/ui/holds.js", "text/javascript; charset=utf-8"),
        ("/ui/console.css", "text/css; charset=utf-8"),
    ] {
        let (status, h, _) = get(&base, path).await;
        assert_eq!(
            (status, h["content-type"].to_str().expect("ascii")),
            (200, media),
            "{path}"
        );
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert!(h.contains_key("content-security-policy"), "{path}");
    }
    let (status, h, _) = get(&base, "/ui").await;
    assert_eq!(
        (status, &h["location"]),
        (308, &"/ui/".parse::<reqwest::header::HeaderValue>().unwrap())
    );
    let (status, _, _) = get(&base, "/ui/nothing.js").await;
    assert_eq!(status, 404);
    let (status, h, _) = send(client().post(format!("{base}/ui/")).body("x")).await;
    assert_eq!(
        (status, &h["allow"]),
        (405, &"GET, HEAD".parse::<reqwest::header::HeaderValue>().unwrap())
    );
}

#[tokio::test]
async fn ui_false_turns_the_console_off_and_leaves_the_door() {
    let server = Server::start(&["--ui", "false"]);
    let (status, h, body) = get(&server.url(), "/ui/").await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("--ui false"), "{body}");
    assert_eq!(h["x-content-type-options"], "nosniff");
    let (status, _, _) = get(&server.url(), "/v1/holds").await;
    assert_eq!(status, 200, "the HTTP door stays");
    assert!(!server.log().contains("operator console"), "{}", server.log());
}

#[test]
fn ui_listen_with_ui_false_is_refused() {
    let (status, log) = serve_expecting_exit(&["--ui", "false", "--ui-listen", "127.0.0.1:0"]);
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(log.contains("--ui-listen") && log.contains("--ui false"), "{log}");
}

/// The console's own address, from the log.
async fn console_addr(server: &Server) -> SocketAddr {
    let log = server.until_logged(&["operator console on http://"]).await;
    let rest = log.split("operator console on http://").nth(1).expect("logged");
    rest.split("/ui/")
        .next()
        .expect("address")
        .parse()
        .expect("console address")
}

#[tokio::test]
async fn ui_listen_serves_the_pages_and_their_routes_only() {
    let dir = TempDir::new("ui-listen");
    let server = with_token(&dir, &["--ui-listen", "127.0.0.1:0"]);
    let console = format!("http://{}", console_addr(&server).await);
    let (status, h, _) = get(&console, "/ui/").await;
    assert_eq!(status, 200);
    assert_eq!(h["x-content-type-options"], "nosniff");
    let (status, _, body) = get(&server.url(), "/ui/").await;
    assert_eq!(status, 404, "not on the gRPC port as well: {body}");
    assert!(body.contains("--ui-listen"), "{body}");

    // The routes the page uses answer there...
    for path in ["/v1/holds", "/v1/budgets", "/v1/catalogs", "/healthz"] {
        let (status, _, body) = get(&console, path).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let explain = json!({"failure": {"catalog": "grpc", "code": "UNAVAILABLE", "operation": "read"}});
    let (status, _, body) = send(
        client()
            .post(format!("{console}/v1/classify:explain"))
            .header("content-type", "application/json")
            .body(explain.to_string()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = send(
        client()
            .delete(format!("{console}/v1/holds/no-such-hold"))
            .header("authorization", format!("Bearer {TOKEN}")),
    )
    .await;
    assert_eq!(status, 404, "an operator's release reaches the service: {body}");
    // ...and nothing else: no decision that places holds or spends budget.
    for path in ["/v1/classify", "/v1/admit", "/v1/outcomes"] {
        let (status, _, body) = send(
            client()
                .post(format!("{console}{path}"))
                .header("content-type", "application/json")
                .body("{}"),
        )
        .await;
        assert_eq!(status, 404, "{path} is not the console's: {body}");
    }
    // Nor a decision call made over gRPC's path: the console's listener
    // passes every call on to its own routes, which have none. (A decision
    // served here would be a 200 whose trailers HTTP/1.1 drops.)
    let classify = retryd::grpc::pb::ClassifyRequest {
        failure: Some(Box::new(retryd::grpc::pb::Failure {
            catalog: "grpc".into(),
            code: "UNAVAILABLE".into(),
            ..Default::default()
        })),
        locale: String::new(),
    };
    let message = prost::Message::encode_to_vec(&classify);
    let mut framed = vec![0];
    framed.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
    framed.extend_from_slice(&message);
    let (status, headers, body) = send(
        client()
            .post(format!("{console}/retryd.v1.RetryDecisionService/Classify"))
            .header("content-type", "application/grpc")
            .body(framed),
    )
    .await;
    assert_ne!(
        headers.get("grpc-status").map(|v| v.to_str().unwrap_or_default()),
        Some("0"),
        "status {status}, {headers:?}: {body}"
    );
    assert!(
        status == 404 || headers.contains_key("grpc-status"),
        "status {status}: {body}"
    );
    let (status, _, _) = send(
        client()
            .post(format!("{}/v1/classify", server.url()))
            .header("content-type", "application/json")
            .body(explain.to_string()),
    )
    .await;
    assert_eq!(status, 200, "the gRPC port's door serves every route");
}

#[tokio::test]
async fn ui_listen_works_with_the_door_off_on_the_grpc_port() {
    let server = Server::start(&["--http", "false", "--ui-listen", "127.0.0.1:0"]);
    let console = format!("http://{}", console_addr(&server).await);
    assert_eq!(get(&console, "/ui/").await.0, 200);
    assert_eq!(get(&console, "/v1/holds").await.0, 200);
}

async fn from_origin(base: &str, method: reqwest::Method, path: &str, origin: Option<&str>) -> (u16, String) {
    let mut req = client()
        .request(method.clone(), format!("{base}{path}"))
        .header("authorization", format!("Bearer {TOKEN}"));
    if method == reqwest::Method::POST {
        req = req
            .header("content-type", "application/json")
            .body(json!({"failure": {"code": "UNAVAILABLE", "catalog": "grpc"}}).to_string());
    }
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    let (status, _, body) = send(req).await;
    (status, body)
}

#[tokio::test]
async fn state_changing_requests_from_foreign_pages_are_refused() {
    use reqwest::Method;
    let dir = TempDir::new("ui-origin");
    let server = with_token(&dir, &["--http-cors-origin", "https://dash.example"]);
    let base = server.url();
    let own = format!("http://{}", server.addr);
    let explain = "/v1/classify:explain";
    let release = "/v1/holds/no-such-hold";

    let (status, body) = from_origin(&base, Method::POST, explain, Some("https://evil.example")).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("evil.example") && body.contains("--http-cors-origin"),
        "{body}"
    );
    let (status, body) = from_origin(&base, Method::DELETE, release, Some("https://evil.example")).await;
    assert_eq!(status, 403, "{body}");
    // Another port of the same host is another origin.
    let other_port = format!("http://127.0.0.1:{}", server.addr.port() ^ 1);
    assert_eq!(
        from_origin(&base, Method::DELETE, release, Some(&other_port)).await.0,
        403
    );
    assert_eq!(from_origin(&base, Method::POST, explain, Some("null")).await.0, 403);

    // The server's own pages, a named CORS origin, and non-browsers pass
    // (the release then fails only for want of the hold).
    assert_eq!(from_origin(&base, Method::POST, explain, Some(&own)).await.0, 200);
    assert_eq!(from_origin(&base, Method::DELETE, release, Some(&own)).await.0, 404);
    let dash = Some("https://dash.example");
    assert_eq!(from_origin(&base, Method::POST, explain, dash).await.0, 200);
    assert_eq!(from_origin(&base, Method::DELETE, release, dash).await.0, 404);
    assert_eq!(from_origin(&base, Method::POST, explain, None).await.0, 200);
    assert_eq!(from_origin(&base, Method::DELETE, release, None).await.0, 404);
    // Reads change nothing and are not checked.
    assert_eq!(
        from_origin(&base, Method::GET, "/v1/holds", Some("https://evil.example"))
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn cors_star_lets_pages_post_decisions_but_not_release_holds() {
    use reqwest::Method;
    let dir = TempDir::new("ui-origin-star");
    let server = with_token(&dir, &["--http-cors-origin", "*"]);
    let base = server.url();
    let evil = Some("https://evil.example");
    assert_eq!(
        from_origin(&base, Method::POST, "/v1/classify:explain", evil).await.0,
        200
    );
    let (status, body) = from_origin(&base, Method::DELETE, "/v1/holds/no-such-hold", evil).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("\\\"*\\\" does not let pages release holds"), "{body}");
}
