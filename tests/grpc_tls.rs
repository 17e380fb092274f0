//! TLS and mutual TLS against the real `retryd serve` binary, with
//! certificates generated at run time (tests/grpc_support/tls.rs).

mod grpc_support;

use std::process::Command;
use std::time::Duration;

use grpc_support::Server;
use grpc_support::tls::{Pki, chain};
use retryd::grpc::pb;
use retryd::grpc::pb::retry_decision_service_client::RetryDecisionServiceClient;
use tonic::transport::{Channel, Endpoint};

const LIMIT: Duration = Duration::from_secs(10);

fn request() -> pb::ClassifyRequest {
    pb::ClassifyRequest {
        failure: Some(Box::new(pb::Failure {
            code: "BITRIX_TIMEOUT".into(),
            operation: pb::OperationKind::Write as i32,
            attempt: 1,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// One Classify on `channel`; the error with its sources on failure.
async fn classify(channel: Channel) -> Result<pb::ClassifyResponse, String> {
    let mut client = RetryDecisionServiceClient::new(channel);
    match tokio::time::timeout(LIMIT, client.classify(request())).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), chain(&status))),
        Err(_) => Err("timed out".into()),
    }
}

/// Connects (with `identity`) and calls; any failure, at connect or at the call.
async fn connect_and_classify(
    pki: &Pki,
    server: &Server,
    identity: Option<&str>,
) -> Result<pb::ClassifyResponse, String> {
    let channel = pki.connect(server.addr, identity).await?;
    classify(channel).await
}

fn start(pki: &Pki, mutual: bool) -> Server {
    let flags = pki.serve_flags(mutual);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // tonic logs a refused handshake at debug.
    Server::start_with_env(&flags, &[("RUST_LOG", "info,retryd::server::serve=debug")])
}

fn health(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_retryd"))
        .arg("health")
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run retryd health");
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn tls_call_works_and_plaintext_is_refused() {
    let pki = Pki::new("tls");
    let server = start(&pki, false);
    assert!(server.log().contains("(TLS)"), "{}", server.log());

    let answer = connect_and_classify(&pki, &server, None).await.expect("a TLS call");
    assert!(answer.decision.is_some());

    // A plaintext client: the server reads its HTTP/2 preface as a broken
    // TLS ClientHello and closes the connection.
    let plaintext = async {
        let channel = Endpoint::from_shared(server.url())
            .expect("endpoint")
            .connect()
            .await
            .map_err(|e| chain(&e))?;
        classify(channel).await
    };
    let refused = plaintext.await.expect_err("a plaintext call to a TLS server must fail");
    eprintln!("plaintext client: {refused}");
    assert!(!refused.contains("timed out"), "refused, not hung: {refused}");

    // A client that does not trust the server's CA.
    let channel = Endpoint::from_shared(format!("https://{}", server.addr))
        .expect("endpoint")
        .tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(pki.read("other-ca.pem")))
                .domain_name("localhost"),
        )
        .expect("tls config")
        .connect()
        .await;
    let untrusted = match channel {
        Ok(c) => classify(c)
            .await
            .expect_err("an untrusted server certificate must fail"),
        Err(e) => chain(&e),
    };
    eprintln!("client not trusting the CA: {untrusted}");
    assert!(
        untrusted.contains("certificate") || untrusted.contains("UnknownIssuer"),
        "{untrusted}"
    );

    // The server keeps serving.
    connect_and_classify(&pki, &server, None).await.expect("still serving");
}

#[tokio::test]
async fn mutual_tls_refuses_clients_without_a_certificate_from_the_ca() {
    let pki = Pki::new("mtls");
    let server = start(&pki, true);
    assert!(
        server.log().contains("client certificates required"),
        "{}",
        server.log()
    );

    let answer = connect_and_classify(&pki, &server, Some("client"))
        .await
        .expect("a client with a certificate from the CA");
    assert!(answer.decision.is_some());

    // TLS 1.3: the client's side of the handshake completes before the
    // server has checked the client's certificate, so the client sees the
    // refusal as a closed connection at its first call; the server's log
    // (retryd::server::serve, debug) shows the handshake failing, and no call reaches the
    // service.
    let no_cert = connect_and_classify(&pki, &server, None)
        .await
        .expect_err("no client certificate must be refused");
    eprintln!("no client certificate: {no_cert}");
    let stranger = connect_and_classify(&pki, &server, Some("stranger"))
        .await
        .expect_err("a certificate from another CA must be refused");
    eprintln!("client certificate from another CA: {stranger}");
    // Each refusal is logged with its own cause. One client may be refused
    // more than once (the channel reconnects), so wait for both causes rather
    // than for a count of lines.
    let log = grpc_support::eventually(LIMIT, "both handshake failures logged with their causes", || {
        let log = server.log();
        async move {
            let refusals: Vec<&str> = log.lines().filter(|l| l.contains("tls accept error")).collect();
            let no_cert = refusals
                .iter()
                .any(|l| l.contains("peer sent no certificates") || l.contains("NoCertificatesPresented"));
            let unknown_ca = refusals
                .iter()
                .any(|l| l.contains("UnknownIssuer") || l.contains("unknown issuer"));
            (no_cert && unknown_ca).then(|| refusals.join("\n"))
        }
    })
    .await;
    eprintln!("server:\n{log}");
    let handled = grpc_support::sample(
        &server.scrape(),
        r#"grpc_server_started_total{grpc_type="unary",grpc_service="retryd.v1.RetryDecisionService",grpc_method="Classify"}"#,
    );
    assert_eq!(handled, Some(1.0), "only the good client's call reached the service");
}

#[tokio::test]
async fn health_probe_speaks_tls_and_mutual_tls() {
    let pki = Pki::new("health-tls");
    let server = start(&pki, true);
    let addr = server.addr.to_string();
    let (ca, cert, key) = (pki.path("ca.pem"), pki.path("client.pem"), pki.path("client-key.pem"));

    let (code, out) = health(&[
        "--addr",
        &addr,
        "--tls",
        "--tls-ca",
        &ca,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-server-name",
        "localhost",
    ]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("status: SERVING"), "{out}");

    // The address is 127.0.0.1, which the certificate also names.
    let (code, out) = health(&[
        "--addr",
        &format!("https://{addr}"),
        "--tls-ca",
        &ca,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    assert_eq!(code, Some(0), "{out}");

    // Without a client certificate the mTLS server refuses: not SERVING.
    let (code, out) = health(&[
        "--addr",
        &addr,
        "--tls",
        "--tls-ca",
        &ca,
        "--tls-server-name",
        "localhost",
    ]);
    assert!(
        matches!(code, Some(2 | 3)),
        "connection or RPC failure expected, got {code:?}: {out}"
    );
    // Plaintext against TLS fails too.
    let (code, out) = health(&["--addr", &addr]);
    assert!(matches!(code, Some(2 | 3)), "{code:?}: {out}");
    // Half an identity is a bad argument.
    let (code, out) = health(&["--addr", &addr, "--tls-ca", &ca, "--tls-cert", &cert]);
    assert_eq!(code, Some(1), "{out}");
    // Environment twins.
    let out = Command::new(env!("CARGO_BIN_EXE_retryd"))
        .args(["health", "--addr", &addr])
        .env("RETRYD_HEALTH_TLS", "true")
        .env("RETRYD_HEALTH_TLS_CA", &ca)
        .env("RETRYD_HEALTH_TLS_CERT", &cert)
        .env("RETRYD_HEALTH_TLS_KEY", &key)
        .env("RETRYD_HEALTH_TLS_SERVER_NAME", "localhost")
        .output()
        .expect("run retryd health");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[tokio::test]
async fn tls_flags_have_environment_twins_and_bad_files_exit_2() {
    let pki = Pki::new("tls-env");
    let (ca, cert, key) = (pki.path("ca.pem"), pki.path("server.pem"), pki.path("server-key.pem"));
    let server = Server::start_with_env(
        &[],
        &[
            ("RETRYD_TLS_CERT", &cert),
            ("RETRYD_TLS_KEY", &key),
            ("RETRYD_TLS_CLIENT_CA", &ca),
        ],
    );
    connect_and_classify(&pki, &server, Some("client"))
        .await
        .expect("mTLS from the environment");
    assert!(connect_and_classify(&pki, &server, None).await.is_err());

    let (status, log) = grpc_support::serve_expecting_exit(&["--tls-cert", &cert, "--tls-key", &ca]);
    assert_eq!(status.code(), Some(2), "a certificate as the key: {log}");
    assert!(log.contains("--tls-key"), "{log}");
    let (status, log) = grpc_support::serve_expecting_exit(&["--tls-cert", "/nonexistent.pem", "--tls-key", &key]);
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(log.contains("/nonexistent.pem"), "{log}");
    let (status, log) = grpc_support::serve_expecting_exit(&["--tls-cert", &ca, "--tls-key", &key]);
    assert_eq!(
        status.code(),
        Some(2),
        "a certificate that does not match the key: {log}"
    );
    let (status, log) = grpc_support::serve_expecting_exit(&["--tls-cert", &cert]);
    assert_eq!(status.code(), Some(2), "--tls-cert without --tls-key: {log}");
}
