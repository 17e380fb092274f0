//! End-to-end shutdown: SIGTERM flips health to NOT_SERVING, calls are still
//! answered for `--shutdown-delay`, in-flight calls are drained, and the
//! process exits 0 (1 when the grace abandoned calls). Also start-up
//! refusals.

mod grpc_support;

use std::time::{Duration, Instant};

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

/// After the grace period, unary calls still in flight are abandoned,
/// counted, and make the exit status 1, so an orchestrator's logs show a
/// lossy stop.
#[tokio::test]
async fn a_call_held_past_the_grace_makes_the_exit_status_non_zero() {
    let mut server = Server::start(&["--shutdown-grace", "300ms"]);
    let (_tx, call) = hold_a_call(&server, server.channel().await).await;
    server.terminate();
    let status = server.wait_exit().await;
    let log = server.log();
    assert_eq!(status.code(), Some(1), "log:\n{log}");
    assert!(
        log.contains("grace period over") && log.contains("abandoned=1"),
        "{log}"
    );
    assert!(log.contains("shutdown abandoned 1 call(s)"), "{log}");
    let response = tokio::time::timeout(PATIENCE, call)
        .await
        .expect("call ends")
        .expect("task");
    assert!(
        response.is_err(),
        "the abandoned call cannot have succeeded: {response:?}"
    );
}

/// What one probe of the delay test saw.
#[derive(Debug)]
struct Probe {
    at: Instant,
    health: Result<ServingStatus, String>,
    call: Result<(), String>,
}

/// `--shutdown-delay`: after SIGTERM, a prober opening a new connection
/// every 20 ms (as a load balancer's health check does) sees NOT_SERVING,
/// never a refused connection, for the whole delay, and calls made on new
/// connections during the delay are answered OK; then the drain runs as
/// before and the process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_delay_reports_not_serving_while_still_answering() {
    let delay = Duration::from_secs(2);
    let mut server = Server::start(&["--shutdown-delay", "2s"]);
    let url = server.url();
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let prober = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        while !*stop_rx.borrow_and_update() {
            tick.tick().await;
            let at = Instant::now();
            let channel = match tonic::transport::Endpoint::from_shared(url.clone())
                .expect("endpoint")
                .connect_timeout(Duration::from_secs(1))
                .connect()
                .await
            {
                Ok(c) => c,
                Err(e) => {
                    seen.push(Probe {
                        at,
                        health: Err(format!("connect: {e}")),
                        call: Err("no connection".into()),
                    });
                    continue;
                }
            };
            let health = tonic_health::pb::health_client::HealthClient::new(channel.clone())
                .check(tonic_health::pb::HealthCheckRequest {
                    service: "retryd.v1.RetryDecisionService".into(),
                })
                .await
                .map(|r| r.into_inner().status())
                .map_err(|e| e.to_string());
            let call = pb::retry_decision_service_client::RetryDecisionServiceClient::new(channel)
                .classify(pb::ClassifyRequest {
                    failure: Some(Box::new(batch(1).failures.remove(0))),
                    locale: String::new(),
                })
                .await
                .map(|_| ())
                .map_err(|e| e.to_string());
            seen.push(Probe { at, health, call });
        }
        seen
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sigterm = Instant::now();
    server.terminate();
    // Probe through most of the delay (the signal lands within milliseconds).
    tokio::time::sleep(delay - Duration::from_millis(300)).await;
    stop_tx.send_replace(true);
    let seen = prober.await.expect("prober");
    let status = server.wait_exit().await;
    assert_eq!(status.code(), Some(0), "log:\n{}", server.log());

    // Probes begun before SIGTERM were answered (SERVING, or NOT_SERVING
    // when the signal landed while they were connecting).
    let before: Vec<&Probe> = seen.iter().filter(|p| p.at < sigterm).collect();
    assert!(!before.is_empty());
    assert!(before.iter().all(|p| p.health.is_ok() && p.call.is_ok()), "{before:#?}");
    assert_eq!(before[0].health, Ok(ServingStatus::Serving), "{before:#?}");
    // Every probe after the first NOT_SERVING (the signal's delivery takes
    // a moment) connected, saw NOT_SERVING, and had its call answered.
    let first = seen
        .iter()
        .position(|p| p.health == Ok(ServingStatus::NotServing))
        .expect("NOT_SERVING seen during the delay");
    assert!(
        seen[first].at.duration_since(sigterm) < Duration::from_millis(500),
        "NOT_SERVING {:?} after SIGTERM",
        seen[first].at.duration_since(sigterm)
    );
    let during = &seen[first..];
    assert!(during.len() >= 20, "{} probes during the delay", during.len());
    for p in during {
        assert_eq!(p.health, Ok(ServingStatus::NotServing), "{during:#?}");
        assert!(p.call.is_ok(), "a call during the delay failed: {p:?}");
    }
    let log = server.log();
    assert!(log.contains("shutdown delay over"), "{log}");
}

/// A second SIGTERM during the delay stops the server at once (exit 1).
#[tokio::test]
async fn a_second_sigterm_during_the_delay_stops_at_once() {
    let mut server = Server::start(&["--shutdown-delay", "60s"]);
    let _channel = server.channel().await;
    server.terminate();
    server.until_logged(&["still answering for the shutdown delay"]).await;
    let t = Instant::now();
    server.terminate();
    let status = server.wait_exit().await;
    assert_eq!(status.code(), Some(1), "log:\n{}", server.log());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
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
