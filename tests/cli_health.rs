//! `retryd health` keeps grpc_health_probe's exit codes, which probes are
//! configured by: 0 SERVING, 1 bad arguments (including flags clap refuses),
//! 2 connection failure, 3 RPC failure, 4 not SERVING. Other subcommands keep
//! 2 for usage errors.

use std::process::{Command, Output};

use tokio_stream::wrappers::TcpListenerStream;
use tonic_health::ServingStatus;

fn retryd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retryd"))
        .args(args)
        .output()
        .expect("run retryd")
}

#[test]
fn flags_clap_refuses_exit_1_for_health_and_2_for_the_others() {
    for args in [
        &["health", "--bogus"][..],
        &["health", "--addr"],
        &["health", "--tls", "maybe"],
        &["health", "extra"],
    ] {
        let out = retryd(args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stderr.is_empty());
    }
    for args in [
        &["classify", "--bogus"][..],
        &["serve", "--bogus"],
        &["policy", "check"],
        &["bogus"],
        &[],
    ] {
        let out = retryd(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = retryd(&["health", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--addr"));
}

#[test]
fn a_connection_failure_exits_2_and_says_each_cause_once() {
    let gone = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = gone.local_addr().expect("addr").to_string();
    drop(gone);
    let out = retryd(&["health", "--addr", &addr, "--timeout", "2s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("failed to connect to {addr}")), "{err}");
    assert!(!err.contains("tcp connect error: tcp connect error"), "{err}");
}

#[tokio::test]
async fn a_server_that_answers_not_serving_exits_4() {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter.set_service_status("", ServingStatus::NotServing).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let probe = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_retryd"))
                .arg("health")
                .args(args)
                .output()
                .expect("run retryd health")
        })
    };
    let out = probe(vec!["--addr".into(), addr.clone()]).await.expect("probe");
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("NOT_SERVING"));
    // an unknown service is an RPC failure
    let out = probe(vec!["--addr".into(), addr, "--service".into(), "nope".into()])
        .await
        .expect("probe");
    assert_eq!(out.status.code(), Some(3));
    server.abort();
}
