use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::transport::server::Connected;

use super::{Coalescing, HELD_MAX};

#[tokio::test]
async fn passes_bytes_and_the_peer_through() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = tokio::spawn(async move {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"ping").await.unwrap();
        let mut back = vec![0u8; 4 + 100_000];
        c.read_exact(&mut back).await.unwrap();
        (c.local_addr().unwrap(), back)
    });
    let (accepted, _) = listener.accept().await.unwrap();
    let mut s = Coalescing::new(accepted);
    assert!(!s.is_write_vectored());
    let mut got = [0u8; 4];
    s.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");
    // A small write is held until the next write or the flush; a large one
    // goes out behind it.
    let large: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    s.write_all(b"pong").await.unwrap();
    s.write_all(&large).await.unwrap();
    s.flush().await.unwrap();
    let (client_addr, back) = client.await.unwrap();
    assert_eq!(&back[..4], b"pong");
    assert!(
        back[4..] == large[..],
        "the large write arrives whole, after the small one"
    );
    assert_eq!(s.connect_info().remote_addr(), Some(client_addr));
}

/// A socket that records each call that sent bytes (a system call), takes
/// at most `take` bytes a call and is not ready every `stall`-th call
/// (never when 0; 1 would never be ready).
#[derive(Default)]
struct Scripted {
    sent: Vec<u8>,
    calls: usize,
    polls: usize,
    take: usize,
    stall: usize,
    vectored: bool,
    flushes: usize,
}

impl Scripted {
    fn stalls(&mut self) -> bool {
        self.polls += 1;
        self.stall != 0 && self.polls.is_multiple_of(self.stall)
    }
}

impl AsyncWrite for Scripted {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.stalls() {
            return Poll::Pending;
        }
        let n = buf.len().min(self.take);
        self.sent.extend_from_slice(&buf[..n]);
        self.calls += 1;
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if !self.vectored {
            // tokio's default: the first slice that is not empty.
            let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &**b);
            return self.poll_write(cx, first);
        }
        if self.stalls() {
            return Poll::Pending;
        }
        let mut room = self.take;
        let mut n = 0;
        for b in bufs {
            let k = b.len().min(room);
            self.sent.extend_from_slice(&b[..k]);
            room -= k;
            n += k;
        }
        self.calls += 1;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.vectored
    }

    fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.flushes += 1;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Drives `poll` until it is ready, as a task woken at once would.
fn drive<R>(mut poll: impl FnMut(&mut Context<'_>) -> Poll<R>) -> R {
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(r) = poll(&mut cx) {
            return r;
        }
    }
}

/// Writes `buf` whole as `write_all` does, checking each write's answer.
fn write_all(s: &mut Coalescing<Scripted>, mut buf: &[u8]) {
    while !buf.is_empty() {
        let n = drive(|cx| Pin::new(&mut *s).poll_write(cx, buf)).unwrap();
        assert!(n > 0 && n <= buf.len(), "a write of {} bytes answered {n}", buf.len());
        assert!(s.held.len() <= HELD_MAX && s.held.capacity() <= HELD_MAX);
        buf = &buf[n..];
    }
}

fn flush(s: &mut Coalescing<Scripted>) {
    drive(|cx| Pin::new(&mut *s).poll_flush(cx)).unwrap();
    assert!(s.held.is_empty(), "a flush sends everything held");
}

#[test]
fn a_large_frame_is_sent_with_its_head_in_one_call() {
    // h2's pattern for a 16 KiB DATA frame: its buffer (head and the first
    // bytes of the payload, topped up to 1 KiB), the rest, then a flush.
    let inner = Scripted {
        take: usize::MAX,
        vectored: true,
        ..Scripted::default()
    };
    let mut s = Coalescing::new(inner);
    let frames: Vec<Vec<u8>> = (0..18u8).map(|i| vec![i; 16 * 1024 + 9]).collect();
    for f in &frames {
        write_all(&mut s, &f[..1024]);
        write_all(&mut s, &f[1024..]);
        flush(&mut s);
    }
    assert_eq!(s.inner.calls, 18, "one system call a frame, not two");
    assert_eq!(s.inner.sent, frames.concat());
    // A small answer's round: held, then sent by the flush in one call.
    write_all(&mut s, b"small answer");
    assert_eq!(s.inner.calls, 18, "held until the flush");
    flush(&mut s);
    assert_eq!(s.inner.calls, 19);
    assert!(s.inner.sent.ends_with(b"small answer"));
}

#[test]
fn a_shutdown_sends_what_is_held_first() {
    let inner = Scripted {
        take: 3,
        ..Scripted::default()
    };
    let mut s = Coalescing::new(inner);
    write_all(&mut s, b"goodbye frame");
    drive(|cx| Pin::new(&mut s).poll_shutdown(cx)).unwrap();
    assert_eq!(s.inner.sent, b"goodbye frame");
}

#[test]
fn a_socket_that_takes_nothing_is_an_error_not_a_loop() {
    let mut s = Coalescing::new(Scripted::default());
    write_all(&mut s, b"held");
    let e = drive(|cx| Pin::new(&mut s).poll_flush(cx)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WriteZero);
    let big = vec![7u8; HELD_MAX + 1];
    let e = drive(|cx| Pin::new(&mut s).poll_write(cx, &big)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WriteZero);
}

proptest! {
    /// Whatever the sizes of the writes, how much the socket takes a call
    /// and how often it is not ready: the bytes arrive whole and in order,
    /// no write is answered 0, at most HELD_MAX bytes are held, and a
    /// flush leaves nothing held.
    #[test]
    fn bytes_arrive_whole_and_in_order(
        writes in prop::collection::vec((0usize..6_000, any::<bool>()), 1..40),
        take in 1usize..20_000,
        stall in prop_oneof![Just(0usize), 2usize..5],
        vectored in any::<bool>(),
    ) {
        let inner = Scripted { take, stall, vectored, ..Scripted::default() };
        let mut s = Coalescing::new(inner);
        let mut expected = Vec::new();
        for (i, (len, then_flush)) in writes.iter().enumerate() {
            let buf: Vec<u8> = (0..*len).map(|j| (i * 31 + j) as u8).collect();
            write_all(&mut s, &buf);
            expected.extend_from_slice(&buf);
            if *then_flush {
                flush(&mut s);
                prop_assert_eq!(&s.inner.sent, &expected);
            }
        }
        flush(&mut s);
        prop_assert_eq!(&s.inner.sent, &expected);
        prop_assert!(s.inner.flushes >= 1);
    }
}
