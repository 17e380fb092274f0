//! A broken `--state` is named at start instead of looking healthy: a URL
//! that does not parse and a database index out of range are configuration
//! errors (exit 2) with or without `--state-required`; an unreachable store
//! refuses the start (exit 1, the cause named) only with `--state-required`,
//! and without it the server starts and serves. A real redis-server.

mod grpc_support;
mod redis_support;

use grpc_support::{Server, serve_expecting_exit};
use redis_support::{RedisServer as Redis, free_port};

#[test]
fn a_database_index_out_of_range_is_a_configuration_error() {
    let redis = Redis::start();
    let url = format!("{}/99", redis.url());
    for extra in [&[][..], &["--state-required"][..]] {
        let mut args = vec!["--state", &url];
        args.extend_from_slice(extra);
        let (status, stderr) = serve_expecting_exit(&args);
        assert_eq!(status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(
            stderr.contains("--state: ") && stderr.contains("DB index is out of range"),
            "{stderr}"
        );
    }
}

#[test]
fn a_url_that_does_not_parse_is_a_configuration_error() {
    let (status, stderr) = serve_expecting_exit(&["--state", "redis://127.0.0.1:port/0"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--state"), "{stderr}");
}

#[test]
fn state_required_refuses_an_unreachable_store_and_names_it() {
    let port = free_port(false);
    let url = format!("redis://127.0.0.1:{port}/0");
    let (status, stderr) = serve_expecting_exit(&["--state", &url, "--state-required"]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--state-required: the state store is unreachable at start")
            && stderr.contains(&format!("127.0.0.1:{port}")),
        "{stderr}"
    );
    let (status, stderr) =
        serve_expecting_exit(&["--state", "redis://no-such-host.invalid:6379/0", "--state-required"]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no-such-host.invalid"), "{stderr}");
}

#[tokio::test]
async fn without_state_required_an_unreachable_store_starts_degraded_and_says_so() {
    let port = free_port(false);
    let url = format!("redis://127.0.0.1:{port}/0");
    let server = Server::start(&["--state", &url]);
    // It serves (decisions from its own memory) and the log says why the store is not used.
    let mut client = server.client().await;
    client
        .classify(retryd::grpc::pb::ClassifyRequest {
            failure: Some(Box::new(grpc_support::failure(
                "vibecode",
                "QUEUE_OVERFLOW",
                retryd::grpc::pb::OperationKind::Read,
            ))),
            ..Default::default()
        })
        .await
        .expect("Classify while the store is down");
    server
        .until_logged(&[
            "the state store is unreachable at start",
            "--state-required refuses to start instead",
        ])
        .await;
    let scrape = server.scrape();
    assert_eq!(
        grpc_support::sample(&scrape, "retryd_state_connected "),
        Some(0.0),
        "{scrape}"
    );
}

#[test]
fn state_required_starts_when_the_store_is_there() {
    let redis = Redis::start();
    let url = format!("{}/1", redis.url());
    let server = Server::start(&["--state", &url, "--state-required"]);
    drop(server);
}
