//! Silent connections and file descriptors (issue 24, item 1), against the
//! real binary started under `prlimit --nofile=…` (the limit set on the
//! server only): with 1 100 connections that never send a byte open, a new
//! client's Classify and `retryd health` succeed, and every silent
//! connection is closed within the handshake timeout + 1 s.

mod grpc_support;

use grpc_support::h2raw;

use std::io::Read as _;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use grpc_support::{Server, failure, sample};
use retryd::grpc::pb;

const SILENT: usize = 1100;
const HANDSHAKE: Duration = Duration::from_secs(3);

/// A connection from 127.0.0.2: another caller than the well-behaved
/// client (127.0.0.1), as an attacker on another pod would be.
fn connect_from_other_address(to: std::net::SocketAddr) -> Option<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).ok()?;
    let from: std::net::SocketAddr = "127.0.0.2:0".parse().expect("address");
    s.bind(&from.into()).ok()?;
    s.connect_timeout(&to.into(), Duration::from_secs(5)).ok()?;
    Some(s.into())
}

/// Whether the server closed `s` (EOF or reset; `WouldBlock`: still open).
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 16];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

async fn silent_connections_do_not_take_the_server_down(nofile: &str, extra: &[&str]) {
    grpc_support::raise_own_nofile();
    let timeout = format!("{}s", HANDSHAKE.as_secs());
    let mut args = vec!["--handshake-timeout", timeout.as_str()];
    args.extend_from_slice(extra);
    let limit = format!("--nofile={nofile}");
    let server = Server::start_under(&["prlimit", limit.as_str(), "--"], &args, &[]);
    let hard = nofile.split(':').nth(1).expect("soft:hard");
    server
        .until_logged(&[&format!("soft_was=1024 soft={hard} hard={hard}")])
        .await;

    let silent: Vec<(TcpStream, Instant)> = (0..SILENT)
        .filter_map(|_| {
            let s = connect_from_other_address(server.addr)?;
            s.set_nonblocking(true).expect("nonblocking");
            Some((s, Instant::now()))
        })
        .collect();
    let n = silent.len();
    assert!(n >= 1000, "only {n} silent connections opened");
    // A watcher notes when each silent connection is closed, measured from
    // its own connect.
    let watcher = std::thread::spawn(move || {
        let mut open = silent;
        let mut slowest = Duration::ZERO;
        let give_up = Instant::now() + Duration::from_secs(30);
        while !open.is_empty() && Instant::now() < give_up {
            open.retain_mut(|(s, at)| {
                if closed(s) {
                    slowest = slowest.max(at.elapsed());
                    false
                } else {
                    true
                }
            });
            std::thread::sleep(Duration::from_millis(20));
        }
        (open.len(), slowest)
    });
    // With them open: a new client is served, and so is the health check.
    let mut c = tokio::time::timeout(Duration::from_secs(5), server.client())
        .await
        .expect("a new client connects");
    let d = tokio::time::timeout(
        Duration::from_secs(5),
        c.classify(pb::ClassifyRequest {
            failure: Some(Box::new(failure(
                "vibecode",
                "BITRIX_TIMEOUT",
                pb::OperationKind::Write,
            ))),
            locale: String::new(),
        }),
    )
    .await
    .expect("Classify within 5 s")
    .expect("Classify answered");
    assert!(d.into_inner().decision.is_some());
    let health = std::process::Command::new(env!("CARGO_BIN_EXE_retryd"))
        .args(["health", "--addr", &server.url(), "--timeout", "5s"])
        .output()
        .expect("run retryd health");
    assert_eq!(
        health.status.code(),
        Some(0),
        "retryd health: {}",
        String::from_utf8_lossy(&health.stderr)
    );

    // Every silent connection closed within the handshake timeout + 1 s
    // (+ the watcher's 20 ms round).
    let (still_open, slowest) = watcher.join().expect("watcher");
    assert_eq!(still_open, 0, "silent connections never closed");
    assert!(
        slowest <= HANDSHAKE + Duration::from_millis(1020),
        "a silent connection lived {slowest:?}"
    );
    eprintln!("{nofile} {extra:?}: {n} silent connections, the longest-lived closed after {slowest:?}");
    let scrape = server.scrape();
    let closed_by = |reason: &str| {
        sample(
            &scrape,
            &format!("retryd_connections_closed_total{{reason=\"{reason}\"}}"),
        )
        .unwrap_or(0.0)
    };
    let total: f64 = ["handshake_timeout", "per_caller", "shed", "no_descriptor"]
        .iter()
        .map(|r| closed_by(r))
        .sum();
    assert!(total >= n as f64, "closures counted: {total} of {n}\n{scrape}");
    eprintln!(
        "{nofile} {extra:?}: closed by reason: handshake_timeout {} per_caller {} shed {} no_descriptor {}",
        closed_by("handshake_timeout"),
        closed_by("per_caller"),
        closed_by("shed"),
        closed_by("no_descriptor")
    );
    // Every closure is logged, the tail of the burst too (by the periodic
    // report, within 11 s), in lines at most every 10 s.
    let logged_total = |log: &str| -> f64 {
        log.lines()
            .filter(|l| l.contains("connections closed"))
            .flat_map(|l| l.split(' '))
            .filter_map(|t| {
                let (k, v) = t.split_once('=')?;
                ["handshake_timeout", "per_caller", "shed", "no_descriptor", "idle"]
                    .contains(&k)
                    .then(|| v.parse::<f64>().ok())?
            })
            .sum()
    };
    grpc_support::eventually(Duration::from_secs(15), "every closure logged", || async {
        (logged_total(&server.log()) >= total).then_some(())
    })
    .await;
    let lines = server
        .log()
        .lines()
        .filter(|l| l.contains("connections closed"))
        .count();
    assert!(lines <= 3, "{lines} closure lines within about 15 s: not rate-limited");
    // Still serving.
    c.classify(pb::ClassifyRequest {
        failure: Some(Box::new(failure(
            "vibecode",
            "BITRIX_TIMEOUT",
            pb::OperationKind::Write,
        ))),
        locale: String::new(),
    })
    .await
    .expect("Classify after");
}

/// Soft 1024, hard 4096: the soft limit is raised, 1 100 fit, the
/// handshake deadline closes them. No per-caller limit (they all come from
/// 127.0.0.2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_under_nofile_1024_4096() {
    silent_connections_do_not_take_the_server_down("1024:4096", &["--max-connections-per-caller", "0"]).await;
}

/// Soft and hard 1024: the server cannot hold 1 100; the oldest silent ones
/// are shed and a spare descriptor keeps accept going.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_under_nofile_1024_1024() {
    silent_connections_do_not_take_the_server_down("1024:1024", &["--max-connections-per-caller", "0"]).await;
}

/// The default per-caller limit: one address (127.0.0.2) cannot hold more
/// than 512; the rest are closed at once, and another caller is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_from_one_caller_under_the_default_limits() {
    silent_connections_do_not_take_the_server_down("1024:1024", &[]).await;
}

const CLASSIFY: &str = "/retryd.v1.RetryDecisionService/Classify";
const WATCH: &str = "/retryd.v1.RetryDecisionService/WatchHolds";

fn classify_body() -> bytes::Bytes {
    h2raw::framed(&pb::ClassifyRequest {
        failure: Some(Box::new(failure(
            "vibecode",
            "BITRIX_TIMEOUT",
            pb::OperationKind::Write,
        ))),
        locale: String::new(),
    })
}

/// `--idle-connection-timeout`: a connection with no open stream is closed
/// after it; one with a WatchHolds stream open is not, however long the
/// stream runs; once the stream ends, the idle time starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_streams_keep_them_open() {
    let server = Server::start(&["--idle-connection-timeout", "2s"]);

    // Idle after one call: closed.
    let mut idle = h2raw::Conn::connect(server.addr, 65_535).await;
    let (answer, _s) = idle.try_send(CLASSIFY, classify_body()).await.expect("a call");
    let answer = h2raw::read(answer, Duration::from_secs(5)).await;
    assert_eq!(answer.grpc, Some(0), "{}", answer.message);

    // A WatchHolds stream open for longer than the timeout.
    let mut watching = h2raw::Conn::connect(server.addr, 65_535).await;
    let (watch, watch_send) = watching
        .start(WATCH, h2raw::framed(&pb::WatchHoldsRequest::default()), true)
        .await;
    let watch_head = tokio::time::timeout(Duration::from_secs(5), watch)
        .await
        .expect("watch headers")
        .expect("watch answered");
    assert_eq!(watch_head.status(), 200);

    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(
        idle.try_send(CLASSIFY, classify_body()).await.is_err(),
        "the idle connection is still open after 3.5 s"
    );
    let (answer, _s) = watching
        .try_send(CLASSIFY, classify_body())
        .await
        .expect("the watching connection is open after 3.5 s");
    let answer = h2raw::read(answer, Duration::from_secs(5)).await;
    assert_eq!(answer.grpc, Some(0), "{}", answer.message);

    // The stream ends (the client resets it): idle from then on.
    drop(watch_head);
    drop(watch_send);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(
        watching.try_send(CLASSIFY, classify_body()).await.is_err(),
        "idle 3.5 s after its stream ended, still open"
    );
    let scrape = server.scrape();
    assert_eq!(
        sample(&scrape, "retryd_connections_closed_total{reason=\"idle\"}"),
        Some(2.0),
        "{scrape}"
    );
}

/// Reads HTTP/2 frames off `tcp` until the server closes it, answering its
/// SETTINGS and PINGs as a live client does; returns each frame's type and,
/// for GOAWAY, its error code.
async fn frames_until_closed(tcp: &mut tokio::net::TcpStream) -> Vec<(u8, Option<u32>)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut seen = Vec::new();
    loop {
        let mut head = [0u8; 9];
        if tcp.read_exact(&mut head).await.is_err() {
            return seen;
        }
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let mut payload = vec![0u8; len];
        if tcp.read_exact(&mut payload).await.is_err() {
            return seen;
        }
        let code = (kind == 7).then(|| u32::from_be_bytes(payload[4..8].try_into().unwrap()));
        seen.push((kind, code));
        let ack = match kind {
            4 if flags & 1 == 0 => Some([&[0, 0, 0, 4, 1, 0, 0, 0, 0][..], &[]].concat()),
            6 if flags & 1 == 0 => Some([&[0, 0, 8, 6, 1, 0, 0, 0, 0][..], &payload[..]].concat()),
            _ => None,
        };
        if let Some(ack) = ack {
            let _ = tcp.write_all(&ack).await;
        }
    }
}

/// `--idle-connection-timeout` ends a connection with GOAWAY (NO_ERROR),
/// as HTTP/2 asks, not by closing the socket under the client: a raw
/// HTTP/2 client that sends its preface and SETTINGS and then nothing
/// receives a GOAWAY frame, then the connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_sent_goaway_before_it_is_closed() {
    use tokio::io::AsyncWriteExt as _;
    let server = Server::start(&["--idle-connection-timeout", "2s"]);
    // Taken before the connection is made: the server's idle clock starts
    // when it accepts it (a clean-clone CI run read 1.999975 s when this was
    // taken after the preface).
    let started = Instant::now();
    let mut tcp = tokio::net::TcpStream::connect(server.addr).await.expect("connect");
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .expect("preface and SETTINGS");
    let frames = tokio::time::timeout(Duration::from_secs(15), frames_until_closed(&mut tcp))
        .await
        .expect("closed within 15 s");
    let took = started.elapsed();
    eprintln!("idle connection: frames {frames:?}, closed after {took:?}");
    let goaway = frames
        .iter()
        .position(|f| f.0 == 7)
        .expect("a GOAWAY frame before the close");
    assert_eq!(frames[goaway].1, Some(0), "GOAWAY with NO_ERROR: {frames:?}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(2 + 5 + 2),
        "closed after {took:?}: the idle timeout (2 s), within its GOAWAY grace"
    );
    let scrape = server.scrape();
    assert_eq!(
        sample(&scrape, "retryd_connections_closed_total{reason=\"idle\"}"),
        Some(1.0),
        "{scrape}"
    );
}

/// A WatchHolds stream whose client never opens its window (initial
/// window 0) stalls at its first message: retryd cannot send the
/// RESOURCE_EXHAUSTED end in the body, so it resets the stream
/// (RST_STREAM) within the stall timeout + the reset grace; the stream's
/// watch seat is freed (`retryd_watch_streams` back to 0) and the
/// connection itself keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_stream_stalled_at_window_zero_is_reset_and_its_seat_freed() {
    let server = Server::start(&["--stall-timeout", "1s", "--hold-placements-per-sec", "100000"]);
    // Enough holds that the snapshot outgrows what the stream queues.
    let mut client = server.client().await;
    let failures: Vec<pb::Failure> = (0..600)
        .map(|i| {
            let mut f = failure("frontspin", "RATE_LIMITED", pb::OperationKind::Read);
            f.tenant = format!("tenant-{i:04}-{}", "t".repeat(200));
            f.dependency = "fs-cli".into();
            f
        })
        .collect();
    client
        .classify_batch(pb::ClassifyBatchRequest {
            failures,
            locale: String::new(),
        })
        .await
        .expect("holds placed");
    assert_eq!(
        sample(&server.scrape(), "retryd_holds_placed_total{kind=\"quota_stop\"}"),
        Some(600.0)
    );

    let mut conn = h2raw::Conn::connect(server.addr, 0).await;
    let (watch, _send) = conn
        .start(WATCH, h2raw::framed(&pb::WatchHoldsRequest::default()), true)
        .await;
    let head = tokio::time::timeout(Duration::from_secs(5), watch)
        .await
        .expect("watch headers")
        .expect("watch answered");
    assert_eq!(head.status(), 200);
    assert_eq!(sample(&server.scrape(), "retryd_watch_streams"), Some(1.0));

    let started = Instant::now();
    let mut body = head.into_body();
    let end = tokio::time::timeout(Duration::from_secs(10), body.data())
        .await
        .expect("the stream ended within 10 s");
    let took = started.elapsed();
    eprintln!("zero-window watch: ended with {end:?} after {took:?}");
    let reason = match end {
        Some(Err(e)) => e.reason(),
        other => panic!("expected a reset, got {other:?}"),
    };
    assert_eq!(reason, Some(h2::Reason::CANCEL));
    assert!(
        took < Duration::from_secs(1 + 1 + 3),
        "reset after {took:?}: the stall timeout (1 s) + the reset grace (1 s)"
    );
    let seats = grpc_support::eventually(Duration::from_secs(5), "the watch seat freed", || {
        let scrape = server.scrape();
        async move { (sample(&scrape, "retryd_watch_streams") == Some(0.0)).then_some(scrape) }
    })
    .await;
    assert!(
        sample(&seats, "retryd_answers_stalled_total").unwrap_or_default() >= 1.0,
        "{seats}"
    );
    // Only the stream was reset: the connection still answers.
    let (answer, _s) = conn.try_send(CLASSIFY, classify_body()).await.expect("a call");
    conn.open_window();
    let answer = h2raw::read(answer, Duration::from_secs(5)).await;
    assert_eq!(answer.grpc, Some(0), "{}", answer.message);
}
