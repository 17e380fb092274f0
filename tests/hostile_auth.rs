//! Operator auth by the RFCs (issue 24, item 5), end to end over both doors
//! of the real binary: `Authorization: Bearer <token>` with the scheme in
//! any case, one or more spaces, surrounding whitespace ignored, the same
//! answer over gRPC metadata and HTTP/1.1; the token file's trailing
//! newline ignored.

mod grpc_support;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use grpc_support::{Server, TempDir};
use retryd::grpc::pb;
use tonic::Code;

const TOKEN: &str = "0123456789abcdef-operators";

/// ReleaseHold of a hold that does not exist: NotFound for an operator,
/// PermissionDenied for anyone else.
async fn grpc_is_operator(s: &Server, authorization: &str) -> bool {
    let mut c = s.client().await;
    let mut req = tonic::Request::new(pb::ReleaseHoldRequest { id: "nope".into() });
    req.metadata_mut()
        .insert("authorization", authorization.parse().expect("a valid metadata value"));
    let code = c.release_hold(req).await.expect_err("no such hold").code();
    assert!(matches!(code, Code::NotFound | Code::PermissionDenied), "{code:?}");
    code == Code::NotFound
}

/// DELETE /v1/holds/nope over HTTP/1.1: 404 for an operator, 403 otherwise.
fn http_is_operator(addr: SocketAddr, authorization: &str) -> bool {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(
        stream,
        "DELETE /v1/holds/nope HTTP/1.1\r\nHost: x\r\nAuthorization: {authorization}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let status = answer.split(' ').nth(1).unwrap_or_default().to_owned();
    assert!(status == "404" || status == "403", "{answer}");
    status == "404"
}

#[tokio::test]
async fn bearer_is_read_by_the_rfcs_the_same_over_grpc_and_http() {
    let dir = TempDir::new("auth-rfc");
    // The file as `echo "$TOKEN" > file` writes it.
    std::fs::write(dir.join("token"), format!("{TOKEN}\n")).expect("token file");
    let token_file = dir.join("token").display().to_string();
    let s = Server::start(&["--operator-token-file", &token_file]);
    let accepted = [
        format!("Bearer {TOKEN}"),
        format!("bearer {TOKEN}"),
        format!("BEARER {TOKEN}"),
        format!("Bearer    {TOKEN}"),
        format!("Bearer {TOKEN}  "),
        format!("Bearer {TOKEN}\t"),
    ];
    let refused = [
        format!("Bearer{TOKEN}"),
        format!("Bearer\t{TOKEN}"),
        format!("Basic {TOKEN}"),
        format!("Bearer {TOKEN}x"),
        format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]),
        format!("Bearer {TOKEN}\n"),
        "Bearer ".to_owned(),
    ];
    for a in &accepted {
        assert!(grpc_is_operator(&s, a).await, "gRPC refused {a:?}");
        assert!(http_is_operator(s.addr, a), "HTTP refused {a:?}");
    }
    for a in &refused {
        // A header value with a newline cannot be sent at all (neither door
        // accepts it); the rest are sent and refused.
        if a.contains('\n') {
            assert!(a.parse::<tonic::metadata::MetadataValue<_>>().is_err());
            continue;
        }
        assert!(!grpc_is_operator(&s, a).await, "gRPC accepted {a:?}");
        assert!(!http_is_operator(s.addr, a), "HTTP accepted {a:?}");
    }
}
