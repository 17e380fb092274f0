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

/// The test process itself holds 1 100 sockets: its own soft limit is
/// raised to its hard one (the server's is set by prlimit).
fn raise_own_nofile() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let l = getrlimit(Resource::Nofile);
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: l.maximum,
            maximum: l.maximum,
        },
    );
}

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
    raise_own_nofile();
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
            failure: Some(failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Write)),
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
        failure: Some(failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Write)),
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
        failure: Some(failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Write)),
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
