//! End-to-end shutdown: SIGTERM flips health to NOT_SERVING, in-flight calls
//! are drained, and the process exits 0. Also start-up refusals.

mod grpc_support;

use grpc_support::{HeldCall, PATIENCE, Server, watch_serving};
use retryd::grpc::pb;
use tokio_stream::StreamExt as _;
use tonic_health::pb::health_check_response::ServingStatus;

/// Holds a ClassifyBatch open until the returned sender delivers its
/// message, and waits until the server has counted it as started.
async fn hold_a_call(
    server: &Server,
    channel: tonic::transport::Channel,
) -> (tokio::sync::mpsc::Sender<pb::ClassifyBatchRequest>, HeldCall) {
    let held = grpc_support::hold_a_call(channel);
    grpc_support::batch_calls_started(server, 1.0).await;
    held
}

fn batch(n: usize) -> pb::ClassifyBatchRequest {
    let failure = pb::Failure {
        code: "BITRIX_TIMEOUT".into(),
        operation: pb::OperationKind::Write as i32,
        attempt: 1,
        ..Default::default()
    };
    pb::ClassifyBatchRequest {
        failures: vec![failure; n],
        locale: String::new(),
    }
}

/// SIGTERM: health turns NOT_SERVING (seen by a watcher), the watch ends so
/// it does not hold the drain open, and the process exits 0.
///
/// A call is held in flight on the same connection as the watch, so the
/// connection cannot be torn down while the test is still reading the
/// NOT_SERVING update.
#[tokio::test]
async fn sigterm_reports_not_serving_then_exits_zero() {
    let mut server = Server::start(&[]);
    let channel = server.channel().await;
    let (tx, call) = hold_a_call(&server, channel.clone()).await;
    let mut watch = watch_serving(channel).await;

    server.terminate();
    let next = tokio::time::timeout(PATIENCE, watch.message())
        .await
        .expect("status change after SIGTERM")
        .expect("watch message")
        .expect("a NOT_SERVING update");
    assert_eq!(next.status(), ServingStatus::NotServing);
    // The watch then ends, so it does not hold the drain open.
    let end = tokio::time::timeout(PATIENCE, watch.message())
        .await
        .expect("watch ends");
    assert!(matches!(end, Ok(None)), "{end:?}");

    tx.send(batch(1)).await.expect("send");
    drop(tx);
    let response = tokio::time::timeout(PATIENCE, call)
        .await
        .expect("call ends")
        .expect("task");
    assert!(response.is_ok(), "{response:?}");
    let status = server.wait_exit().await;
    assert_eq!(status.code(), Some(0), "log:\n{}", server.log());
    let log = server.log();
    assert!(log.contains("received SIGTERM") && log.contains("stopped"), "{log}");
}

/// A call in flight when SIGTERM arrives is completed, not cut off, and the
/// process still exits 0 afterwards.
#[tokio::test]
async fn sigterm_drains_a_call_in_flight() {
    let mut server = Server::start(&[]);
    let channel = server.channel().await;
    let (tx, call) = hold_a_call(&server, channel.clone()).await;

    // Watch health (same connection) to know when shutdown has begun.
    let mut watch = watch_serving(channel).await;
    server.terminate();
    let not_serving = tokio::time::timeout(PATIENCE, watch.next())
        .await
        .expect("NOT_SERVING after SIGTERM");
    assert_eq!(
        not_serving.expect("update").expect("status").status(),
        ServingStatus::NotServing
    );

    // Shutdown has begun; the call is still pending. Now let it finish.
    assert!(!call.is_finished(), "the held call must not have finished yet");
    tx.send(batch(1_500)).await.expect("send the batch");
    drop(tx);
    let response = tokio::time::timeout(PATIENCE, call)
        .await
        .expect("call completes during the drain")
        .expect("task")
        .expect("drained call answered OK")
        .into_inner();
    assert_eq!(response.results.len(), 1_500);
    assert_eq!(response.summary.expect("summary").state_verification_required, 1_500);

    let status = server.wait_exit().await;
    assert_eq!(status.code(), Some(0), "log:\n{}", server.log());
}

/// After the grace period, calls still in flight are abandoned and the
/// process exits 0 anyway.
#[tokio::test]
async fn grace_period_bounds_the_drain() {
    let mut server = Server::start(&["--shutdown-grace", "300ms"]);
    let (_tx, call) = hold_a_call(&server, server.channel().await).await;
    server.terminate();
    let status = server.wait_exit().await;
    assert_eq!(status.code(), Some(0), "log:\n{}", server.log());
    assert!(server.log().contains("grace period over"), "{}", server.log());
    let response = tokio::time::timeout(PATIENCE, call)
        .await
        .expect("call ends")
        .expect("task");
    assert!(
        response.is_err(),
        "the abandoned call cannot have succeeded: {response:?}"
    );
}

#[test]
fn unknown_default_catalog_exits_2_naming_the_catalogs() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_retryd"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
            "--default-catalog",
            "nope",
        ])
        .env_remove("RUST_LOG")
        .output()
        .expect("run retryd serve");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(r#""nope""#), "{stderr}");
    for catalog in ["vibecode", "asc", "frontspin"] {
        assert!(stderr.contains(catalog), "the catalogs that exist are named: {stderr}");
    }
}

#[test]
fn address_in_use_exits_1() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_retryd"))
        .args(["serve", "--listen", &addr, "--metrics-listen", "off"])
        .env_remove("RUST_LOG")
        .output()
        .expect("run retryd serve");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&addr));
}

#[test]
fn health_probe_with_no_server_exits_2() {
    let gone = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = gone.local_addr().expect("addr").to_string();
    drop(gone);
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_retryd"))
        .args(["health", "--addr", &addr, "--timeout", "2s"])
        .output()
        .expect("run retryd health")
        .status;
    assert_eq!(status.code(), Some(2));
}
