//! An accepted connection under the rules of [`super::conns`]: the
//! handshake deadline (the preface or request line seen in the first
//! bytes) and shedding. (The idle timeout is the serving task's, which can
//! send GOAWAY: [`super::serve`].)

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::conns::{Entry, Registry};
use super::socket::Coalescing;

/// What the first bytes of a plaintext connection have shown so far.
#[derive(Debug, Default)]
struct Scan {
    /// Bytes seen, up to the preface's length.
    seen: usize,
    /// The first line so far (up to the preface's length).
    head: Vec<u8>,
}

/// The HTTP/2 client preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl Scan {
    /// Takes the next bytes read; true once the handshake is complete: the
    /// whole HTTP/2 preface, or an HTTP/1.1 request line.
    fn feed(&mut self, bytes: &[u8]) -> bool {
        for &b in bytes {
            self.seen += 1;
            if self.head.len() < PREFACE.len() {
                self.head.push(b);
            }
            if self.head.starts_with(b"PRI ") || PREFACE.starts_with(&self.head) {
                if self.head == PREFACE {
                    return true;
                }
            } else if b == b'\n' {
                return true;
            }
        }
        false
    }
}

/// An accepted connection under the handshake deadline and the shedding
/// rule; leaves the registry when dropped (closed).
pub struct Guarded {
    inner: Coalescing,
    registry: Arc<Registry>,
    id: u64,
    entry: Arc<Entry>,
    /// Until the handshake is complete.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    scan: Scan,
    wrote: bool,
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.registry.remove(self.id);
    }
}

impl Guarded {
    /// Guards `stream`, admitted as connection `id`: the handshake deadline
    /// starts now.
    pub(super) fn new(stream: TcpStream, registry: &Arc<Registry>, (id, entry): (u64, Arc<Entry>)) -> Guarded {
        let deadline = Box::pin(tokio::time::sleep(registry.limits.handshake_timeout));
        Guarded {
            inner: Coalescing::new(stream),
            registry: Arc::clone(registry),
            id,
            entry,
            deadline: Some(deadline),
            scan: Scan::default(),
            wrote: false,
        }
    }

    fn handshake_done(&mut self) {
        self.deadline = None;
        self.entry.handshaken.store(true, Ordering::Release);
    }
}

impl Guarded {
    /// The connection's entry in the registry.
    pub(super) fn entry(&self) -> Arc<Entry> {
        Arc::clone(&self.entry)
    }
}

impl Connected for Guarded {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for Guarded {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(deadline) = this.deadline.as_mut() {
            this.entry.waker.register(cx.waker());
            if this.entry.shed.load(Ordering::Acquire) {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "shed: descriptors are short and the handshake was not done",
                )));
            }
            if deadline.as_mut().poll(cx).is_ready() {
                this.deadline = None;
                this.registry.closed(0);
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no complete handshake within --handshake-timeout",
                )));
            }
        }
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if this.deadline.is_some() && result.is_ready() {
            let fresh = &buf.filled()[before..];
            let done = if this.registry.limits.tls {
                // The client speaks again after the server's first flight.
                this.wrote && !fresh.is_empty()
            } else {
                this.scan.feed(fresh)
            };
            if done {
                this.handshake_done();
            }
        }
        result
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.wrote = true;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.wrote = true;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handshake_is_a_whole_preface_or_a_request_line() {
        let mut s = Scan::default();
        assert!(!s.feed(&PREFACE[..10]));
        assert!(!s.feed(&PREFACE[10..20]), "the first line of the preface is not enough");
        assert!(s.feed(&PREFACE[20..]));
        let mut s = Scan::default();
        assert!(!s.feed(b"GET /healthz HTTP/1.1\r"));
        assert!(s.feed(b"\n"));
        let mut s = Scan::default();
        assert!(!s.feed(b""));
        assert!(!s.feed(b"\x16\x03\x01"));
    }
}
