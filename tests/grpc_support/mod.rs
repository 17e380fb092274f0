//! Shared helpers for the `grpc_*` end-to-end tests: start the real binary
//! on free ports, read its addresses from its log, talk to it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use retryd::grpc::pb::retry_decision_service_client::RetryDecisionServiceClient;
use tonic::transport::{Channel, Endpoint};

/// How long the server gets to start and to stop before a test gives up.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A running `retryd serve`; killed on drop if still running.
pub struct Server {
    child: Child,
    /// gRPC address.
    pub addr: SocketAddr,
    /// Metrics address.
    pub metrics: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Starts `retryd serve` on free ports with `extra` flags.
    pub fn start(extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_retryd"))
            .args(["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            // GRPC_TEST_LOG=debug (or any filter) shows more of the server in failure output.
            .args([
                "--log-level",
                &std::env::var("GRPC_TEST_LOG").unwrap_or_else(|_| "info".to_owned()),
            ])
            .args(extra)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn retryd serve");
        let stderr = child.stderr.take().expect("stderr piped");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<String>();
        {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    log.lock().expect("log lock").push(line.clone());
                    let _ = tx.send(line);
                }
            });
        }
        let deadline = Instant::now() + PATIENCE;
        let (mut addr, mut metrics) = (None, None);
        while addr.is_none() || metrics.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).unwrap_or_else(|e| {
                let _ = child.kill();
                panic!(
                    "server did not report its addresses ({e}); log:\n{}",
                    log.lock().expect("lock").join("\n")
                )
            });
            if let Some(a) = after(&line, "listening on ") {
                addr = Some(a.parse::<SocketAddr>().expect("grpc address"));
            }
            if let Some(a) = after(&line, "metrics on http://") {
                metrics = Some(
                    a.trim_end_matches("/metrics")
                        .parse::<SocketAddr>()
                        .expect("metrics address"),
                );
            }
        }
        Server {
            child,
            addr: addr.expect("addr"),
            metrics: metrics.expect("metrics"),
            log,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A connected channel.
    pub async fn channel(&self) -> Channel {
        Endpoint::from_shared(self.url())
            .expect("endpoint")
            .connect()
            .await
            .expect("connect")
    }

    /// A connected RetryDecisionService client.
    pub async fn client(&self) -> RetryDecisionServiceClient<Channel> {
        RetryDecisionServiceClient::new(self.channel().await)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM with `kill -TERM`.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed: {status}");
    }

    /// Waits for the process to exit. Async, so the test's own connections
    /// keep being served (a graceful HTTP/2 shutdown needs the client to
    /// answer the server's PING after GOAWAY).
    pub async fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "server did not exit; log:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The stderr lines so far.
    pub fn log(&self) -> String {
        self.log.lock().expect("log lock").join("\n")
    }

    /// GET /metrics.
    pub fn scrape(&self) -> String {
        http_get(self.metrics, "/metrics")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    let start = line.find(marker)? + marker.len();
    let rest = &line[start..];
    let end = rest.find(|c: char| c.is_whitespace() || c == '"').unwrap_or(rest.len());
    Some(&rest[..end])
}

/// A plain HTTP/1.1 GET; returns the body (panics unless 200).
pub fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to metrics");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("write request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read response");
    let (head, body) = response.split_once("\r\n\r\n").expect("http response");
    assert!(head.starts_with("HTTP/1.1 200"), "GET {path}: {head}");
    body.to_owned()
}

/// The value of the first sample line that starts with `series` (name and labels).
pub fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
