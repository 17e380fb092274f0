//! Watch streams' unsent events are charged to `--max-buffered-bytes` (issue
//! 22, item 3), against the real binary: with a small budget, many
//! WatchHolds streams (gRPC and the HTTP door's event stream) whose clients
//! never read (HTTP/2 window 0) over large holds fill the watch streams'
//! half of the ledger and no more; the ledger never holds more than the
//! limit; Classify and a reading watch are still served; the stalled
//! streams are ended, counted, and give their bytes back.

mod grpc_support;

use std::time::{Duration, Instant};

use grpc_support::{Server, eventually, failure, h2raw, sample};
use retryd::grpc::pb;
use tokio_stream::StreamExt as _;

const WATCH: &str = "/retryd.v1.RetryDecisionService/WatchHolds";
const LIMIT: f64 = 256.0 * 1024.0;
const HOLDS: usize = 600;
const STALLED_GRPC: usize = 30;
const STALLED_SSE: usize = 8;

fn sse_request() -> http::Request<()> {
    http::Request::builder()
        .method("GET")
        .uri("http://localhost/v1/holds:watch")
        .body(())
        .expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_reading_watches_hold_at_most_their_half_of_the_buffered_bytes() {
    let server = Server::start(&[
        "--max-buffered-bytes",
        "256KiB",
        "--stall-timeout",
        "2s",
        "--hold-placements-per-sec",
        "100000",
    ]);
    let mut client = server.client().await;
    // Large holds: a 250-byte dependency on every event.
    let failures: Vec<pb::Failure> = (0..HOLDS)
        .map(|i| {
            let mut f = failure("frontspin", "RATE_LIMITED", pb::OperationKind::Read);
            f.tenant = format!("tenant-{i:04}");
            f.dependency = format!("dep-{}", "d".repeat(246));
            f
        })
        .collect();
    // In batches the small budget admits.
    for chunk in failures.chunks(40) {
        client
            .classify_batch(pb::ClassifyBatchRequest {
                failures: chunk.to_vec(),
                locale: String::new(),
            })
            .await
            .expect("holds placed");
    }

    // Never-reading streams, over 4 connections each kind.
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(h2raw::Conn::connect(server.addr, 0).await);
    }
    let mut stalled = Vec::new();
    for i in 0..STALLED_GRPC + STALLED_SSE {
        let conn = &mut conns[i % 4];
        let (response, send) = if i < STALLED_GRPC {
            conn.start(WATCH, h2raw::framed(&pb::WatchHoldsRequest::default()), true)
                .await
        } else {
            conn.start_with(sse_request(), bytes::Bytes::new(), true).await
        };
        let head = tokio::time::timeout(Duration::from_secs(10), response)
            .await
            .expect("watch headers")
            .expect("watch answered");
        assert_eq!(head.status(), 200);
        stalled.push((head, send));
    }
    let opened = Instant::now();
    let full = eventually(Duration::from_secs(5), "the streams' half filled", || {
        let scrape = server.scrape();
        async move {
            let queued = sample(&scrape, "retryd_watch_queued_bytes")?;
            (queued > LIMIT / 2.0 - 16.0 * 1024.0).then_some(scrape)
        }
    })
    .await;
    let queued = sample(&full, "retryd_watch_queued_bytes").expect("queued gauge");
    eprintln!("never-read streams queue {queued} bytes");
    assert!(queued <= LIMIT / 2.0, "{queued} bytes queued, over half of {LIMIT}");

    // Others are served meanwhile: a Classify at once, a reading watch as
    // the stalled streams end and give their bytes back.
    let asked = Instant::now();
    client
        .classify(pb::ClassifyRequest {
            failure: Some(Box::new(failure("frontspin", "TIMEOUT", pb::OperationKind::Read))),
            locale: String::new(),
        })
        .await
        .expect("Classify is served while the watches hold their bytes");
    let classify_took = asked.elapsed();
    assert!(
        classify_took < Duration::from_secs(1),
        "Classify took {classify_took:?}"
    );
    let mut reader = client
        .watch_holds(pb::WatchHoldsRequest::default())
        .await
        .expect("a reading watch")
        .into_inner();
    let mut placed = 0;
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(15), reader.next())
            .await
            .expect("the reading watch is served")
            .expect("open")
            .expect("an event, not an end");
        if ev.kind == pb::HoldEventKind::Synced as i32 {
            break;
        }
        placed += 1;
    }
    assert_eq!(placed, HOLDS, "every hold reaches the reading watch");
    eprintln!(
        "reading watch synced {:?} after the stalled streams opened",
        opened.elapsed()
    );

    // Every never-read stream ends (reset: its end cannot be sent at window 0).
    for (head, _send) in stalled {
        let mut body = head.into_body();
        let end = tokio::time::timeout(Duration::from_secs(10), body.data())
            .await
            .expect("a stalled stream ends");
        assert!(
            matches!(end, Some(Err(_)) | None),
            "expected the stream to end, got {end:?}"
        );
    }
    let after = eventually(Duration::from_secs(5), "the stalled streams gone", || {
        let scrape = server.scrape();
        async move { (sample(&scrape, "retryd_watch_streams") == Some(1.0)).then_some(scrape) }
    })
    .await;
    let stalled_total = sample(&after, "retryd_answers_stalled_total").unwrap_or_default();
    assert!(
        stalled_total >= (STALLED_GRPC + STALLED_SSE) as f64,
        "{stalled_total} counted as stalled"
    );
    let peak = sample(&after, "retryd_buffered_bytes_peak").expect("peak gauge");
    eprintln!("ledger peak {peak} bytes of {LIMIT}");
    assert!(peak <= LIMIT, "the ledger held {peak} bytes, over {LIMIT}");
    eventually(Duration::from_secs(5), "the queued bytes given back", || {
        let scrape = server.scrape();
        async move { (sample(&scrape, "retryd_watch_queued_bytes") == Some(0.0)).then_some(()) }
    })
    .await;
    drop(reader);
}
