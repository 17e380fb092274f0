//! The gRPC port's accept loop (see [`super::conns`] for the rules) and
//! the process's descriptor limit.

use std::future::Future as _;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

use super::conn_io::Guarded;
use super::conns::Registry;

/// The accepted connections of `listener`, guarded, as a stream for
/// tonic's `serve_with_incoming`. Accepting never stalls on a full
/// descriptor table: the spare descriptor is given up to accept and close.
pub fn incoming(
    listener: TcpListener,
    registry: Arc<Registry>,
    keepalive: Duration,
) -> impl futures_util::Stream<Item = io::Result<Guarded>> {
    let mut spare = open_spare();
    let mut backoff: Option<Pin<Box<tokio::time::Sleep>>> = None;
    futures_util::stream::poll_fn(move |cx| {
        loop {
            if let Some(sleep) = backoff.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                backoff = None;
            }
            match listener.poll_accept(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok((stream, peer))) => {
                    if let Some(g) = guard(stream, peer, &registry, keepalive) {
                        return Poll::Ready(Some(Ok(g)));
                    }
                }
                Poll::Ready(Err(e)) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    // Out of descriptors: give up the spare, take the waiting
                    // connection off the queue and close it, take the spare back.
                    // Without it the listener would stay readable and accept
                    // would fail in a loop while the client waits.
                    if spare.take().is_some() {
                        if let Poll::Ready(Ok((stream, _))) = listener.poll_accept(cx) {
                            drop(stream);
                            registry.closed(3);
                        }
                        spare = open_spare();
                    } else {
                        spare = open_spare();
                        backoff = Some(Box::pin(tokio::time::sleep(Duration::from_millis(50))));
                    }
                }
                Poll::Ready(Err(e)) => {
                    // ECONNABORTED and the like: the next connection is fine.
                    tracing::debug!(error = %e, "accept failed");
                }
            }
        }
    })
}

fn open_spare() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

fn guard(stream: TcpStream, peer: SocketAddr, registry: &Arc<Registry>, keepalive: Duration) -> Option<Guarded> {
    let admitted = registry.admit(peer)?;
    let _ = stream.set_nodelay(true);
    let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(keepalive));
    Some(Guarded::new(stream, registry, admitted))
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns `(soft
/// before, soft now, hard)`: a server started under `ulimit -n 1024` may
/// use every descriptor its hard limit allows.
pub fn raise_nofile() -> (Option<u64>, Option<u64>, Option<u64>) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let before = getrlimit(Resource::Nofile);
    if before.current != before.maximum {
        let raised = rustix::process::Rlimit {
            current: before.maximum,
            maximum: before.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(error = %e, "cannot raise the soft file-descriptor limit");
        }
    }
    let after = getrlimit(Resource::Nofile);
    (before.current, after.current, after.maximum)
}

/// Descriptors open now (`/proc/self/fd`), or 64 when that cannot be read.
pub fn descriptors_in_use() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count() as u64)
}
