//! A misspelt code says what was meant, through every door, and unknown
//! codes are counted: `unknown_code: did you mean …?` over gRPC (one call
//! and a batch) and HTTP/JSON, never for a number, and
//! `retryd_unknown_codes_total{catalog}` per catalog.

mod grpc_support;

use grpc_support::{PATIENCE, Server, failure, sample};
use retryd::grpc::pb::{self, batch_result::Outcome};

/// A plain HTTP/1.1 POST of a JSON body; returns the status line and body.
fn http_post(server: &Server, path: &str, body: &str) -> (String, serde_json::Value) {
    use std::io::{Read, Write};
    let addr = server.url().trim_start_matches("http://").to_owned();
    let mut stream = std::net::TcpStream::connect(&addr).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let (head, body) = response.split_once("\r\n\r\n").expect("http response");
    let status = head.lines().next().unwrap_or_default().to_owned();
    // A chunked body: the JSON is the one line that parses.
    let json = body
        .lines()
        .filter(|l| l.starts_with('{'))
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON in {body:?}"));
    (status, json)
}

#[tokio::test]
async fn every_door_names_the_code_meant_and_unknown_codes_are_counted() {
    let server = Server::start(&[]);
    let mut client = server.client().await;

    // gRPC, one call.
    let d = client
        .classify(pb::ClassifyRequest {
            failure: Some(Box::new(failure("vibecode", "BITRIX_TIMOUT", pb::OperationKind::Write))),
            ..Default::default()
        })
        .await
        .expect("Classify")
        .into_inner()
        .decision
        .expect("decision");
    assert_eq!(d.rule, "vibecode/unknown/write");
    assert!(
        d.warnings
            .iter()
            .any(|w| w.starts_with("unknown_code: did you mean BITRIX_TIMEOUT?")),
        "{:?}",
        d.warnings
    );

    // gRPC, a batch: a guess, a number (no guess), a far code (no guess), a known code, no code.
    let batch = client
        .classify_batch(pb::ClassifyBatchRequest {
            failures: vec![
                failure("frontspin", "RATE_LIMTED", pb::OperationKind::Write),
                failure("http", "509", pb::OperationKind::Read),
                failure("vibecode", "NOTHING_LIKE_ANY_CODE", pb::OperationKind::Read),
                failure("vibecode", "QUEUE_OVERFLOW", pb::OperationKind::Read),
                failure("vibecode", "", pb::OperationKind::Read),
            ],
            ..Default::default()
        })
        .await
        .expect("ClassifyBatch")
        .into_inner();
    let warnings = |i: usize| match &batch.results[i].outcome {
        Some(Outcome::Decision(d)) => d.warnings.clone(),
        other => panic!("item {i}: {other:?}"),
    };
    assert!(
        warnings(0)[0].starts_with("unknown_code: did you mean RATE_LIMITED?"),
        "{:?}",
        warnings(0)
    );
    for i in 1..5 {
        assert!(
            !warnings(i).iter().any(|w| w.contains("did you mean")),
            "item {i}: {:?}",
            warnings(i)
        );
    }

    // HTTP/JSON.
    let (status, body) = http_post(
        &server,
        "/v1/classify",
        r#"{"failure": {"catalog": "grpc", "code": "UNAVAILABEL", "operation": "read", "attempt": 1}}"#,
    );
    assert!(status.contains(" 200 "), "{status}: {body}");
    let w = body["decision"]["warnings"][0].as_str().unwrap_or_default();
    assert!(w.starts_with("unknown_code: did you mean UNAVAILABLE?"), "{body}");

    // Counted per catalog: vibecode 2 (BITRIX_TIMOUT, NOTHING_LIKE_ANY_CODE),
    // frontspin 1, http 1 (509 is unknown to it), grpc 1; a failure without
    // a code and a known code are not unknown codes.
    let scrape = server.scrape();
    for (catalog, n) in [("vibecode", 2.0), ("frontspin", 1.0), ("http", 1.0), ("grpc", 1.0)] {
        assert_eq!(
            sample(&scrape, &format!("retryd_unknown_codes_total{{catalog=\"{catalog}\"}}")),
            Some(n),
            "{catalog}:\n{}",
            scrape
                .lines()
                .filter(|l| l.contains("unknown_codes"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert!(scrape.contains("# HELP retryd_unknown_codes_total "), "HELP text");
}
