//! The accepted TCP connection, as the HTTP/2 codec sees it.
//!
//! h2 copies a DATA frame into its write buffer, next to other frames, only
//! when its payload is under a threshold: 256 bytes when the socket says it
//! does vectored writes, 1 024 when it does not. Over the threshold the
//! frame is written on its own, so every answer of a few hundred bytes (a
//! Classify decision is 250–550) cost a `writev` of its own, while grpc-go
//! sends many answers per write. [`Coalescing`] says it does not do vectored
//! writes, so answers up to 1 KiB are batched with the frames around them
//! (measured: 1.33 `writev` per Classify before, see bench/RESULTS.md).
//! Larger answers are written as before, in two writes instead of one
//! `writev`, which is noise next to their size.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

pin_project_lite::pin_project! {
    /// A TCP connection that asks h2 to coalesce small frames (see the module docs).
    #[derive(Debug)]
    pub struct Coalescing {
        #[pin]
        inner: TcpStream,
    }
}

impl Coalescing {
    /// Wraps an accepted connection.
    pub fn new(inner: TcpStream) -> Self {
        Coalescing { inner }
    }
}

impl Connected for Coalescing {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for Coalescing {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_read(cx, buf)
    }
}

impl AsyncWrite for Coalescing {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write_vectored(cx, bufs)
    }

    /// The point of this type: h2 reads it once, when the connection starts.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn passes_bytes_and_the_peer_through() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(b"ping").await.unwrap();
            let mut back = [0u8; 4];
            c.read_exact(&mut back).await.unwrap();
            (c.local_addr().unwrap(), back)
        });
        let (accepted, _) = listener.accept().await.unwrap();
        let mut s = Coalescing::new(accepted);
        assert!(!s.is_write_vectored());
        let mut got = [0u8; 4];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        s.write_all(b"pong").await.unwrap();
        let (client_addr, back) = client.await.unwrap();
        assert_eq!(&back, b"pong");
        assert_eq!(s.connect_info().remote_addr(), Some(client_addr));
    }
}
