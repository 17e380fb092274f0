//! retryd serves each accepted connection itself, with hyper-util's auto
//! builder (HTTP/2, and HTTP/1.1 for the HTTP/JSON door) configured as
//! tonic's Server configured it, so that it holds what tonic keeps to
//! itself:
//!
//! - each connection's `graceful_shutdown`: a connection with no open
//!   stream for `--idle-connection-timeout` is sent GOAWAY, then closed once
//!   the client has seen it (or after [`GOAWAY_GRACE`]); the drain at
//!   shutdown sends GOAWAY to every connection, as tonic did;
//! - each HTTP/2 stream's task ([`super::stream_task`]): a stalled
//!   WatchHolds stream is reset (RST_STREAM) when its end cannot be sent.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;

use super::conn_io::Guarded;
use super::conn_streams::ConnService;
use super::conns::{Entry, Registry};
use super::stream_task::StreamExec;

/// Time a connection sent GOAWAY for idleness has to close by itself (the
/// client answers the GOAWAY's PING at once; a request that raced the
/// GOAWAY is answered) before it is closed.
pub const GOAWAY_GRACE: Duration = Duration::from_secs(5);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The request stack every connection is served with (what the assembly
/// builds: the layers over tonic's routes).
pub trait Stack<RB>:
    tower::Service<
        http::Request<tonic::body::Body>,
        Response = http::Response<RB>,
        Future: Send + 'static,
        Error: Into<BoxError> + Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S, RB> Stack<RB> for S where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<RB>,
            Future: Send + 'static,
            Error: Into<BoxError> + Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// The body of an answer, as hyper sends it.
pub trait AnswerBody: http_body::Body<Data = bytes::Bytes, Error: Into<BoxError>> + Send + 'static {}

impl<B> AnswerBody for B where B: http_body::Body<Data = bytes::Bytes, Error: Into<BoxError>> + Send + 'static {}

/// The HTTP settings of every connection: tonic's Server's, with retryd's
/// values (`max_streams` streams per connection, PING keepalive).
pub fn builder(max_streams: u32, http1: bool, keepalive: (Duration, Duration)) -> auto::Builder<StreamExec> {
    let mut b = auto::Builder::new(StreamExec);
    if !http1 {
        b = b.http2_only();
    }
    b.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(max_streams)
        .keep_alive_interval(keepalive.0)
        .keep_alive_timeout(keepalive.1)
        // As tonic set them: no limit of retryd's own on locally reset
        // streams, hyper's default for the rest (window sizes, frame size,
        // header list size, pending accept resets).
        .max_local_error_reset_streams(None);
    // hyper enforces its HTTP/1 header read timeout (30 s) only with a timer.
    b.http1().timer(TokioTimer::new());
    b
}

/// The TLS acceptor of every connection, when TLS is on.
#[derive(Clone)]
pub struct Tls(pub tokio_rustls::TlsAcceptor);

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

/// What every connection is served with.
pub struct Serving<S> {
    /// The HTTP settings ([`builder`]).
    pub builder: auto::Builder<StreamExec>,
    /// The request stack shared by all connections.
    pub stack: S,
    /// TLS, if on.
    pub tls: Option<Tls>,
    /// The live connections.
    pub registry: Arc<Registry>,
}

/// Serves the connections of `incoming` until `signal` completes; then stops
/// accepting (the listener is closed), sends GOAWAY to every connection and
/// waits until all have closed.
pub async fn serve<S, RB>(
    incoming: impl futures_util::Stream<Item = io::Result<Guarded>>,
    serving: Serving<S>,
    signal: impl Future<Output = ()>,
) where
    S: Stack<RB>,
    RB: AnswerBody,
{
    let serving = Arc::new(serving);
    let (drain_tx, drain_rx) = watch::channel(false);
    {
        // Dropped as soon as accepting stops: the listener closes at once.
        let incoming = std::pin::pin!(incoming);
        let mut incoming = incoming.fuse();
        let mut signal = std::pin::pin!(signal);
        loop {
            tokio::select! {
                () = &mut signal => break,
                next = incoming.next() => match next {
                    Some(Ok(io)) => {
                        tokio::spawn(connection(io, Arc::clone(&serving), drain_rx.clone()));
                    }
                    Some(Err(e)) => tracing::debug!(error = %e, "accept failed"),
                    None => break,
                },
            }
        }
    }
    drain_tx.send_replace(true);
    drop(drain_rx);
    // Each connection holds a receiver until it has closed.
    drain_tx.closed().await;
}

/// Serves one connection (after its TLS handshake, if TLS is on).
async fn connection<S, RB>(io: Guarded, serving: Arc<Serving<S>>, drain: watch::Receiver<bool>)
where
    S: Stack<RB>,
    RB: AnswerBody,
{
    let entry = io.entry();
    match &serving.tls {
        None => over(&serving, &entry, io, drain).await,
        Some(acceptor) => {
            // Guarded's handshake deadline covers the TLS handshake too.
            match tokio::time::timeout(super::tls::HANDSHAKE_TIMEOUT, acceptor.0.accept(io)).await {
                Ok(Ok(tls)) => over(&serving, &entry, tls, drain).await,
                Ok(Err(e)) => tracing::debug!("tls accept error: {e}"),
                Err(_) => tracing::debug!("tls accept error: timed out"),
            }
        }
    }
}

/// Serves one connection over `io` (plaintext or TLS), its service told
/// what `io` knows of its peer.
async fn over<S, IO, RB>(serving: &Serving<S>, entry: &Arc<Entry>, io: IO, drain: watch::Receiver<bool>)
where
    S: Stack<RB>,
    RB: AnswerBody,
    IO: tonic::transport::server::Connected + tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let info = io.connect_info();
    run(
        serving,
        entry,
        TokioIo::new(io),
        conn_service(serving, entry, info),
        drain,
    )
    .await;
}

/// The service of one connection described by `info`.
fn conn_service<S: Clone, I>(
    serving: &Serving<S>,
    entry: &Arc<Entry>,
    info: I,
) -> TowerToHyperService<ConnService<S, I>> {
    TowerToHyperService::new(ConnService::new(
        serving.stack.clone(),
        info,
        Arc::clone(entry),
        Arc::clone(&serving.registry),
    ))
}

/// Drives one connection: GOAWAY at the drain, or when it has had no open
/// stream for the idle timeout (then closed after [`GOAWAY_GRACE`] at most).
async fn run<S, IO, H, RB>(serving: &Serving<S>, entry: &Entry, io: IO, svc: H, mut drain: watch::Receiver<bool>)
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    H: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<RB>> + Send + 'static,
    H::Future: Send + 'static,
    H::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    RB: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    RB::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    StreamExec: hyper_util::server::conn::auto::HttpServerConnExec<H::Future, RB>,
{
    let conn = serving.builder.serve_connection(io, svc);
    let mut conn = std::pin::pin!(conn);
    let registry = &serving.registry;
    let idle = registry.limits.idle_timeout;
    let far = Duration::from_secs(86_400 * 365);
    let mut idle_check = std::pin::pin!(tokio::time::sleep(if idle.is_zero() { far } else { idle }));
    let mut grace: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut goaway_sent = false;
    loop {
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            Ok(_) = drain.wait_for(|d| *d), if !goaway_sent => {
                goaway_sent = true;
                conn.as_mut().graceful_shutdown();
            }
            () = &mut idle_check, if !goaway_sent && !idle.is_zero() => {
                let next = match registry.idle_for(entry) {
                    Some(quiet) if quiet >= idle => {
                        registry.closed(4);
                        goaway_sent = true;
                        conn.as_mut().graceful_shutdown();
                        grace = Some(Box::pin(tokio::time::sleep(GOAWAY_GRACE)));
                        far
                    }
                    Some(quiet) => idle - quiet,
                    // A stream is open: look again a whole timeout later.
                    None => idle,
                };
                idle_check.as_mut().reset(tokio::time::Instant::now() + next);
            }
            () = async { if let Some(g) = grace.as_mut() { g.await } }, if grace.is_some() => return,
        }
    }
}
