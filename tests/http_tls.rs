//! The HTTP/JSON door under TLS and mutual TLS, with curl as the client:
//! the same certificates as gRPC, and an mTLS identity in
//! `--operator-identities` makes the caller an operator over HTTP as over
//! gRPC (tenants in clear, holds released).

mod grpc_support;

use std::process::Command;

use grpc_support::Server;
use grpc_support::tls::Pki;
use serde_json::Value;

/// Runs curl against the server with the test CA (and `identity`'s client
/// certificate); returns the HTTP status and the body.
fn curl(pki: &Pki, server: &Server, identity: Option<&str>, args: &[&str], path: &str) -> (u16, String) {
    let url = format!("https://localhost:{}{path}", server.addr.port());
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "20", "--cacert", &pki.path("ca.pem")])
        .args(["--resolve", &format!("localhost:{}:127.0.0.1", server.addr.port())])
        .args(["-w", "\n%{http_code}"]);
    if let Some(who) = identity {
        cmd.args(["--cert", &pki.path(&format!("{who}.pem"))])
            .args(["--key", &pki.path(&format!("{who}-key.pem"))]);
    }
    let out = cmd.args(args).arg(&url).output().expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[test]
fn mtls_identity_is_an_operator_over_http() {
    let pki = Pki::new("http-mtls");
    let mut flags = pki.serve_flags(true);
    flags.extend(["--operator-identities".to_owned(), "client.test".to_owned()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start(&flags);

    let body = r#"{"failure": {"catalog": "frontspin", "code": "RATE_LIMITED", "operation": "write", "attempt": 1, "tenant": "acme"}}"#;
    let post = ["-X", "POST", "-H", "content-type: application/json", "-d", body];
    let (status, answer) = curl(&pki, &server, Some("client"), &post, "/v1/classify");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(json(&answer)["decision"]["hold"]["kind"], "quota_stop", "{answer}");

    // Without a client certificate the handshake is refused, as for gRPC.
    let (status, _) = curl(&pki, &server, None, &[], "/readyz");
    assert_eq!(status, 0, "no client certificate, no answer");

    // The client certificate's identity is an operator: tenants in clear, release allowed.
    let (status, list) = curl(&pki, &server, Some("client"), &[], "/v1/holds");
    assert_eq!(status, 200, "{list}");
    let hold = &json(&list)["holds"][0];
    assert_eq!(hold["tenant"], "acme", "{list}");
    let id = hold["id"].as_str().expect("id").to_owned();
    let (status, released) = curl(
        &pki,
        &server,
        Some("client"),
        &["-X", "DELETE"],
        &format!("/v1/holds/{id}"),
    );
    assert_eq!(status, 200, "{released}");
    assert_eq!(json(&released)["hold"]["id"], id.as_str());
}

/// Under TLS the door speaks HTTP/2 (ALPN `h2`, what curl, browsers and
/// PHP's curl negotiate); a client offering only `http/1.1` is refused at
/// the handshake (tonic's TLS acceptor advertises `h2` alone).
#[test]
fn tls_serves_the_door_over_http2() {
    let pki = Pki::new("http-tls");
    let flags = pki.serve_flags(false);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start(&flags);
    let (status, body) = curl(&pki, &server, None, &[], "/readyz");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#"{"status":"SERVING"}"#), "{body}");
    let (status, _) = curl(&pki, &server, None, &["--http1.1"], "/readyz");
    assert_eq!(status, 0, "HTTP/1.1-only over TLS: no application protocol");
    // Non-operators over TLS see tenants hashed (nothing held yet: empty list).
    let (status, list) = curl(&pki, &server, None, &[], "/v1/holds");
    assert_eq!((status, json(&list)["holds"].as_array().map(Vec::len)), (200, Some(0)));
}
