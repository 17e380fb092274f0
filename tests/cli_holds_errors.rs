//! `retryd holds release` refused for want of operator rights says what to
//! do in the CLI's own flags (`--token-file`, not the server's
//! `--operator-token-file`), and tells apart the three cases: no token given,
//! a wrong token, a server with no operators. The real binary, both doors.

mod grpc_support;

use std::process::Command;

use grpc_support::{Server, TempDir};

/// `retryd holds release` against `server`; returns (exit code, stderr).
fn release(server: &Server, token_file: Option<&std::path::Path>) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_retryd"));
    cmd.args(["holds", "release", "--addr", &server.url(), "no-such-hold"])
        .env_remove("RETRYD_OPERATOR_TOKEN_FILE");
    if let Some(p) = token_file {
        cmd.arg("--token-file").arg(p);
    }
    let out = cmd.output().expect("run retryd holds");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn each_refusal_says_what_to_do_with_the_clis_flags() {
    let dir = TempDir::new("holds-errors");
    let token = dir.join("operator.token");
    std::fs::write(&token, "an-operator-token-of-32-characters\n").expect("write token");
    let wrong = dir.join("wrong.token");
    std::fs::write(&wrong, "not-the-operator-token-at-all\n").expect("write token");
    let server = Server::start(&["--operator-token-file", token.to_str().unwrap()]);

    // No token given.
    let (code, err) = release(&server, None);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("this needs an operator: pass the operator token with --token-file PATH"),
        "{err}"
    );

    // A wrong token.
    let (code, err) = release(&server, Some(&wrong));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "the token in --token-file {} is not the operator token",
            wrong.display()
        )),
        "{err}"
    );

    // The right token: past the operator rule (the hold does not exist).
    let (code, err) = release(&server, Some(&token));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("NotFound"), "{err}");

    // A server with no operators: even the right file cannot help.
    let bare = Server::start(&[]);
    let (code, err) = release(&bare, Some(&token));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("has no operators: start it with --operator-token-file PATH (then pass the same file here as --token-file PATH)"),
        "{err}"
    );
}

#[tokio::test]
async fn both_doors_name_the_case_they_saw() {
    let dir = TempDir::new("holds-errors-http");
    let token = dir.join("operator.token");
    std::fs::write(&token, "an-operator-token-of-32-characters").expect("write token");
    let server = Server::start(&["--operator-token-file", token.to_str().unwrap()]);
    let bare = Server::start(&[]);
    let delete = |server: &Server, bearer: Option<&str>| {
        use std::io::{Read, Write};
        let addr = server.url().trim_start_matches("http://").to_owned();
        let mut s = std::net::TcpStream::connect(&addr).expect("connect");
        s.set_read_timeout(Some(grpc_support::PATIENCE)).expect("timeout");
        let auth = bearer
            .map(|b| format!("authorization: Bearer {b}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "DELETE /v1/holds/h1 HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
        )
        .expect("write");
        let mut r = String::new();
        s.read_to_string(&mut r).expect("read");
        r
    };
    let no = delete(&server, None);
    assert!(no.starts_with("HTTP/1.1 403") && no.contains("no_credentials"), "{no}");
    let wrong = delete(&server, Some("wrong-token-wrong-token"));
    assert!(
        wrong.starts_with("HTTP/1.1 403") && wrong.contains("wrong_token"),
        "{wrong}"
    );
    let none = delete(&bare, Some("an-operator-token-of-32-characters"));
    assert!(
        none.starts_with("HTTP/1.1 403") && none.contains("no_operators_configured"),
        "{none}"
    );

    let mut client = server.client().await;
    let status = client
        .release_hold(retryd::grpc::pb::ReleaseHoldRequest { id: "h1".into() })
        .await
        .expect_err("not an operator");
    assert_eq!(status.code(), tonic::Code::PermissionDenied);
    assert!(status.message().contains("no_credentials"), "{}", status.message());
}
