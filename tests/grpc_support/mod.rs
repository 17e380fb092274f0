//! Shared helpers for the `grpc_*` end-to-end tests: start the real binary
//! on free ports, read its addresses from its log, talk to it.
#![allow(dead_code)]

pub mod h2raw;
pub mod proc;
pub mod tls;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use retryd::grpc::pb::retry_decision_service_client::RetryDecisionServiceClient;
use tonic::transport::{Channel, Endpoint};

/// A ClassifyBatch call in flight, as `hold_a_call` returns it.
pub type HeldCall =
    tokio::task::JoinHandle<Result<tonic::Response<retryd::grpc::pb::ClassifyBatchResponse>, tonic::Status>>;

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
    /// The thread that copies stderr into `log`; joined once the process exits.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Starts `retryd serve` on free ports with `extra` flags.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_with_env(extra, &[])
    }

    /// Starts `retryd serve` on free ports with `extra` flags and `env`
    /// variables set. Unless `extra` names `--shutdown-delay`, the server
    /// drains at once on SIGTERM (`--shutdown-delay 0`), as the tests
    /// written before the delay existed expect.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::start_under(&[], extra, env)
    }

    /// [`Server::start_with_env`] run through `wrapper` (e.g. `prlimit
    /// --nofile=1024:1024`), so a limit is set on the server only.
    pub fn start_under(wrapper: &[&str], extra: &[&str], env: &[(&str, &str)]) -> Server {
        let delay: &[&str] = if extra.contains(&"--shutdown-delay") {
            &[]
        } else {
            &["--shutdown-delay", "0"]
        };
        let mut command = match wrapper.split_first() {
            None => Command::new(binary()),
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(binary());
                c
            }
        };
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .args(delay)
            // GRPC_TEST_LOG=debug (or any filter) shows more of the server in failure output.
            .args([
                "--log-level",
                &std::env::var("GRPC_TEST_LOG").unwrap_or_else(|_| "info".to_owned()),
            ])
            .args(extra)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn retryd serve");
        let stderr = child.stderr.take().expect("stderr piped");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<String>();
        let reader = {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    log.lock().expect("log lock").push(line.clone());
                    let _ = tx.send(line);
                }
            })
        };
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
            reader: Some(reader),
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
        self.signal("TERM");
    }

    /// Sends SIGHUP with `kill -HUP` (reload the policy).
    pub fn hangup(&self) {
        self.signal("HUP");
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed: {status}");
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the process to exit. Async, so the test's own connections
    /// keep being served (a graceful HTTP/2 shutdown needs the client to
    /// answer the server's PING after GOAWAY).
    pub async fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // The process is gone, so its stderr ends: read the last lines
                // before anyone looks at the log.
                if let Some(reader) = self.reader.take() {
                    let _ = reader.join();
                }
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

    /// Waits until every needle is in the log; the log is read from the
    /// child's stderr by another thread, so it lags what the server did.
    pub async fn until_logged(&self, needles: &[&str]) -> String {
        let what = format!("log lines containing {needles:?}");
        eventually(PATIENCE, &what, || async {
            let log = self.log();
            needles.iter().all(|n| log.contains(n)).then_some(log)
        })
        .await
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

/// The `retryd` binary under test: this build's, or `RETRYD_TEST_BIN` (to
/// measure an older build with the same test, e.g. before and after a fix).
pub fn binary() -> std::path::PathBuf {
    std::env::var_os("RETRYD_TEST_BIN").map_or_else(|| env!("CARGO_BIN_EXE_retryd").into(), Into::into)
}

/// Runs `retryd serve` with `extra` flags, expecting it to exit before it
/// serves; returns the exit status and stderr.
pub fn serve_expecting_exit(extra: &[&str]) -> (ExitStatus, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_retryd"))
        .args(["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "off"])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run retryd serve");
    (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
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

/// Polls `check` every 50 ms until it returns `Some`, for at most `within`;
/// panics naming `what` otherwise.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// `retryd-test-<name>-<pid>-<n>`, empty.
    pub fn new(name: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("retryd-test-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    /// A path inside.
    pub fn join(&self, p: &str) -> std::path::PathBuf {
        self.0.join(p)
    }

    /// The directory as a `&str` flag value.
    pub fn as_str(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a [`Load`] saw.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Successful calls per `policy_version` answered.
    pub versions: std::collections::BTreeMap<String, u64>,
    /// Failed calls (status messages).
    pub failures: Vec<String>,
}

impl LoadReport {
    /// Successful calls in all.
    pub fn calls(&self) -> u64 {
        self.versions.values().sum()
    }

    /// Panics unless no call failed and every answer came from one of `allowed`.
    pub fn assert_clean(&self, allowed: &[&str]) {
        eprintln!("load: calls per policy version {:?}", self.versions);
        assert!(
            self.failures.is_empty(),
            "{} of {} calls failed, e.g. {:?}",
            self.failures.len(),
            self.calls() + self.failures.len() as u64,
            &self.failures[..self.failures.len().min(5)]
        );
        for v in self.versions.keys() {
            assert!(
                allowed.contains(&v.as_str()),
                "a call was decided by policy {v}, not one of {allowed:?}: {:?}",
                self.versions
            );
        }
        assert!(self.calls() > 0, "the load made no calls");
    }
}

fn record(
    report: &Mutex<LoadReport>,
    answer: Result<tonic::Response<retryd::grpc::pb::ClassifyResponse>, tonic::Status>,
) {
    let mut r = report.lock().expect("report lock");
    match answer {
        Ok(resp) => {
            let version = resp.into_inner().decision.map(|d| d.policy_version).unwrap_or_default();
            *r.versions.entry(version).or_default() += 1;
        }
        Err(status) => r.failures.push(format!("{:?}: {}", status.code(), status.message())),
    }
}

/// Client tasks calling Classify with one request in a loop, throughout a
/// test, recording every answer's policy_version and every failure.
pub struct Load {
    stop: Arc<std::sync::atomic::AtomicBool>,
    report: Arc<Mutex<LoadReport>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// `clients` tasks (each with its own connection) sending `request`.
    pub async fn start(server: &Server, clients: usize, request: retryd::grpc::pb::ClassifyRequest) -> Load {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let report = Arc::new(Mutex::new(LoadReport::default()));
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let mut client = server.client().await;
            let (stop, report, request) = (Arc::clone(&stop), Arc::clone(&report), request.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let answer = client.classify(request.clone()).await;
                    record(&report, answer);
                    // Leave the two cores some room for the server's reload.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }));
        }
        Load { stop, report, tasks }
    }

    /// Successful calls so far.
    pub fn calls(&self) -> u64 {
        self.report.lock().expect("report lock").calls()
    }

    /// Waits (bounded) until `n` more calls have succeeded, so a reload
    /// happens with calls going on both before and after it.
    pub async fn more_calls(&self, n: u64) {
        let target = self.calls() + n;
        let deadline = Instant::now() + PATIENCE;
        while self.calls() < target {
            assert!(Instant::now() < deadline, "the load did not make {n} more calls");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the tasks and returns what they saw.
    pub async fn stop(self) -> LoadReport {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.tasks {
            t.await.expect("load task");
        }
        std::mem::take(&mut *self.report.lock().expect("report lock"))
    }
}

/// Starts a ClassifyBatch whose request body the client holds open: the call
/// is accepted and waits for its message (holding no call slot, for at most
/// `--first-message-timeout`) until the returned sender delivers it.
pub fn hold_a_call(
    channel: Channel,
) -> (
    tokio::sync::mpsc::Sender<retryd::grpc::pb::ClassifyBatchRequest>,
    HeldCall,
) {
    let (tx, rx) = tokio::sync::mpsc::channel::<retryd::grpc::pb::ClassifyBatchRequest>(1);
    let mut grpc = tonic::client::Grpc::new(channel);
    let call = tokio::spawn(async move {
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let path = http::uri::PathAndQuery::from_static("/retryd.v1.RetryDecisionService/ClassifyBatch");
        let codec = retryd::grpc::wire::codec::Codec::<
            retryd::grpc::pb::ClassifyBatchRequest,
            retryd::grpc::pb::ClassifyBatchResponse,
        >::default();
        grpc.client_streaming(
            tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx)),
            path,
            codec,
        )
        .await
    });
    (tx, call)
}

/// Waits until the server has started `n` ClassifyBatch calls.
pub async fn batch_calls_started(server: &Server, n: f64) {
    let started = r#"grpc_server_started_total{grpc_type="unary",grpc_service="retryd.v1.RetryDecisionService",grpc_method="ClassifyBatch"}"#;
    eventually(PATIENCE, "the held calls reached the server", || {
        let seen = sample(&server.scrape(), started);
        async move { (seen == Some(n)).then_some(()) }
    })
    .await;
}

/// A first-attempt failure of `code` in `catalog` for operation `op`.
pub fn failure(catalog: &str, code: &str, op: retryd::grpc::pb::OperationKind) -> retryd::grpc::pb::Failure {
    retryd::grpc::pb::Failure {
        catalog: catalog.into(),
        code: code.into(),
        operation: op as i32,
        attempt: 1,
        ..Default::default()
    }
}

/// Opens a `grpc.health.v1.Health/Watch` of the server as a whole on
/// `channel` and checks that its first status is SERVING.
pub async fn watch_serving(channel: Channel) -> tonic::Streaming<tonic_health::pb::HealthCheckResponse> {
    use tonic_health::pb::health_check_response::ServingStatus;
    let mut watch = tonic_health::pb::health_client::HealthClient::new(channel)
        .watch(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await
        .expect("Watch")
        .into_inner();
    let first = watch.message().await.expect("watch message").expect("initial status");
    assert_eq!(first.status(), ServingStatus::Serving);
    watch
}

/// One `grpc.reflection.v1.ServerReflection/ServerReflectionInfo` round trip.
pub async fn reflect(
    channel: Channel,
    request: tonic_reflection::pb::v1::server_reflection_request::MessageRequest,
) -> tonic_reflection::pb::v1::ServerReflectionResponse {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .expect("reflection")
        .into_inner()
        .message()
        .await
        .expect("reflection response")
        .expect("one response")
}

/// Raises this test process's soft descriptor limit to its hard one, for
/// tests that hold a thousand sockets or more (the server's own limit is
/// its own).
pub fn raise_own_nofile() {
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
