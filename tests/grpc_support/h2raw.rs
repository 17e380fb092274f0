//! A raw HTTP/2 client (the `h2` crate) for hostile-client tests: it sends
//! exactly the frames a test asks for, and can refuse to read answers
//! (receive window 0) until told otherwise.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut as _, Bytes, BytesMut};
use h2::client::SendRequest;

/// One HTTP/2 connection.
pub struct Conn {
    /// Opens streams.
    pub send: SendRequest<Bytes>,
    window: tokio::sync::mpsc::UnboundedSender<u32>,
    task: tokio::task::JoinHandle<()>,
}

impl Conn {
    /// Connects to `addr` with `window` as the initial stream window (0:
    /// the server may send no DATA until [`Conn::open_window`]) and room for
    /// `max_streams` locally initiated streams.
    pub async fn connect(addr: SocketAddr, window: u32) -> Conn {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("tcp connect");
        Conn::over(tcp, window).await
    }

    /// As [`Conn::connect`], from the local address `from` (another
    /// caller, e.g. 127.1.0.7).
    pub async fn connect_from(addr: SocketAddr, from: std::net::IpAddr, window: u32) -> Conn {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind(SocketAddr::new(from, 0))
            .expect("bind the caller's address");
        let tcp = socket.connect(addr).await.expect("tcp connect");
        Conn::over(tcp, window).await
    }

    async fn over(tcp: tokio::net::TcpStream, window: u32) -> Conn {
        tcp.set_nodelay(true).expect("nodelay");
        let (send, mut conn) = h2::client::Builder::new()
            .initial_window_size(window)
            .initial_connection_window_size(if window == 0 { 65_535 } else { 16 << 20 })
            .max_concurrent_reset_streams(10_000)
            .handshake::<_, Bytes>(tcp)
            .await
            .expect("h2 handshake");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
        let task = tokio::spawn(async move {
            std::future::poll_fn(|cx| {
                while let std::task::Poll::Ready(Some(size)) = rx.poll_recv(cx) {
                    let _ = conn.set_initial_window_size(size);
                    conn.set_target_window_size(16 << 20);
                }
                std::future::Future::poll(std::pin::Pin::new(&mut conn), cx)
            })
            .await
            .ok();
        });
        let send = send.ready().await.expect("h2 ready");
        Conn { send, window: tx, task }
    }

    /// Lets the server send: raises the initial stream window.
    pub fn open_window(&self) {
        let _ = self.window.send(8 << 20);
    }

    /// Opens a gRPC stream to `path` and sends `body` (possibly empty),
    /// ending the stream if `end`. Returns the response future and the send
    /// half (keep it to keep the stream open).
    pub async fn start(
        &mut self,
        path: &str,
        body: Bytes,
        end: bool,
    ) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
        self.start_with(request(path), body, end).await
    }

    /// As [`Conn::start`], with the request head given.
    pub async fn start_with(
        &mut self,
        head: http::Request<()>,
        body: Bytes,
        end: bool,
    ) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
        std::future::poll_fn(|cx| self.send.poll_ready(cx))
            .await
            .expect("stream slot");
        self.send_now(head, body, end)
    }

    /// Opens a gRPC stream to `path` sending `body` and ending it, or says
    /// why the connection cannot (e.g. the server sent GOAWAY).
    pub async fn try_send(
        &mut self,
        path: &str,
        body: Bytes,
    ) -> Result<(h2::client::ResponseFuture, h2::SendStream<Bytes>), h2::Error> {
        std::future::poll_fn(|cx| self.send.poll_ready(cx)).await?;
        let (response, mut stream) = self.send.send_request(request(path), false)?;
        stream.send_data(body, true)?;
        Ok((response, stream))
    }

    /// Opens a stream if the server allows another one within `wait`.
    pub async fn try_start(
        &mut self,
        path: &str,
        body: Bytes,
        end: bool,
        wait: Duration,
    ) -> Option<(h2::client::ResponseFuture, h2::SendStream<Bytes>)> {
        match tokio::time::timeout(wait, std::future::poll_fn(|cx| self.send.poll_ready(cx))).await {
            Ok(Ok(())) => Some(self.send_now(request(path), body, end)),
            _ => None,
        }
    }

    fn send_now(
        &mut self,
        head: http::Request<()>,
        body: Bytes,
        end: bool,
    ) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
        let empty = body.is_empty();
        let (response, mut stream) = self.send.send_request(head, end && empty).expect("send_request");
        if !empty {
            // The server may have answered (and closed the stream) from the
            // headers alone, e.g. 415: the answer says so, not this error.
            let _ = stream.send_data(body, end);
        }
        (response, stream)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A gRPC request head for `path`.
pub fn request(path: &str) -> http::Request<()> {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request")
}

/// `msg` as one length-prefixed gRPC message.
pub fn framed(msg: &impl prost::Message) -> Bytes {
    let body = msg.encode_to_vec();
    let mut out = BytesMut::with_capacity(body.len() + 5);
    out.put_u8(0);
    out.put_u32(u32::try_from(body.len()).expect("small message"));
    out.put_slice(&body);
    out.freeze()
}

/// What came back on a stream: HTTP status, grpc-status (from the headers
/// of a trailers-only answer or the trailers), message bytes read.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub http: u16,
    /// grpc-status, if any.
    pub grpc: Option<i32>,
    /// grpc-message, if any.
    pub message: String,
    /// DATA bytes received.
    pub bytes: usize,
}

/// Reads a whole answer (within `within`), releasing flow control as it goes.
pub async fn read(response: h2::client::ResponseFuture, within: Duration) -> Answer {
    tokio::time::timeout(within, async {
        let response = response.await.expect("response headers");
        read_rest(response).await
    })
    .await
    .expect("an answer in time")
}

/// Reads the rest of an answer whose head has come.
pub async fn read_rest(response: http::Response<h2::RecvStream>) -> Answer {
    {
        let http = response.status().as_u16();
        let grpc_of = |h: &http::HeaderMap| -> (Option<i32>, String) {
            (
                h.get("grpc-status").and_then(|v| v.to_str().ok()?.parse().ok()),
                h.get("grpc-message")
                    .map(|v| percent_decode(v.as_bytes()))
                    .unwrap_or_default(),
            )
        };
        let (mut grpc, mut message) = grpc_of(response.headers());
        let mut body = response.into_body();
        let mut bytes = 0;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("body chunk");
            bytes += chunk.len();
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        if let Ok(Some(trailers)) = body.trailers().await {
            (grpc, message) = grpc_of(&trailers);
        }
        Answer {
            http,
            grpc,
            message,
            bytes,
        }
    }
}

/// grpc-message is percent-encoded.
fn percent_decode(v: &[u8]) -> String {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        let hex = v.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (v[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
