//! The accepted TCP connection, as the HTTP/2 codec sees it.
//!
//! h2 copies a DATA frame into its write buffer, next to other frames, only
//! when its payload is under a threshold: 256 bytes when the socket says it
//! does vectored writes, 1 024 when it does not. A larger frame is written
//! after the buffer, which h2 first tops up to the threshold from the
//! payload. [`Coalescing`] takes the better of both:
//!
//! - It says it does not do vectored writes, so answers up to 1 KiB are
//!   batched with the frames around them. Said vectored, every answer of a
//!   few hundred bytes (a Classify decision is 250–550) cost a `writev` of
//!   its own, while grpc-go sends many answers per write (measured: 1.33
//!   `writev` per Classify before, see bench/RESULTS.md).
//! - Not vectored, h2 writes a large frame in two writes: its buffer (about
//!   1 KiB), then the rest of the payload. A 1 000-item ClassifyBatch
//!   answer (about 300 KB in 16 KiB frames) took about 45 `sendto` calls,
//!   and sending was 18 % of the server's CPU under the batch load (`perf`).
//!   So a write of up to [`HELD_MAX`] bytes is held back and sent with the
//!   next write in one `writev`, or at the flush h2 ends every round of
//!   writes with: a large frame is one system call, a small answer's round
//!   still one.
//!
//! What is held is at most [`HELD_MAX`] bytes a connection (its storage
//! reserved once, at the first write), and is sent before any later byte,
//! at every flush and before a shutdown: nothing written is reordered or
//! kept back past a flush.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Most bytes held back for the next write: h2's buffer before a large
/// DATA frame (topped up to 1 KiB) and the frames queued with it.
pub const HELD_MAX: usize = 2 * 1024;

pin_project_lite::pin_project! {
    /// A connection that asks h2 to coalesce small frames and sends a large
    /// frame's head with its payload (see the module docs).
    #[derive(Debug)]
    pub struct Coalescing<T = TcpStream> {
        #[pin]
        inner: T,
        // Written by h2, not yet sent: at most `HELD_MAX` bytes.
        held: Vec<u8>,
    }
}

impl<T> Coalescing<T> {
    /// Wraps an accepted connection.
    pub fn new(inner: T) -> Self {
        Coalescing {
            inner,
            held: Vec::new(),
        }
    }
}

impl Connected for Coalescing {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl<T: AsyncRead> AsyncRead for Coalescing<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_read(cx, buf)
    }
}

impl<T: AsyncWrite> AsyncWrite for Coalescing<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let mut this = self.project();
        if this.held.len() + buf.len() <= HELD_MAX {
            if this.held.capacity() == 0 {
                this.held.reserve_exact(HELD_MAX);
            }
            this.held.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        // What is held goes first, with as much of `buf` as the socket takes.
        while !this.held.is_empty() {
            let both = [IoSlice::new(this.held), IoSlice::new(buf)];
            let n = ready!(this.inner.as_mut().poll_write_vectored(cx, &both))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if n < this.held.len() {
                this.held.drain(..n);
                continue;
            }
            let of_buf = n - this.held.len();
            this.held.clear();
            if of_buf > 0 {
                return Poll::Ready(Ok(of_buf));
            }
        }
        this.inner.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut this = self.project();
        ready!(send_held(this.inner.as_mut(), this.held, cx))?;
        this.inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut this = self.project();
        ready!(send_held(this.inner.as_mut(), this.held, cx))?;
        this.inner.poll_shutdown(cx)
    }

    /// The point of the type's first half: h2 reads it once, when the
    /// connection starts. (Vectored calls still work: tokio's default sends
    /// the first slice through `poll_write`.)
    fn is_write_vectored(&self) -> bool {
        false
    }
}

/// Sends every byte held.
fn send_held<T: AsyncWrite>(mut inner: Pin<&mut T>, held: &mut Vec<u8>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
    while !held.is_empty() {
        let n = ready!(inner.as_mut().poll_write(cx, held))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        held.drain(..n);
    }
    Poll::Ready(Ok(()))
}

#[cfg(test)]
#[path = "socket_tests.rs"]
mod tests;
