//! Every file `retryd serve` reads at start is read like a policy file
//! (issue 24, item 4): symlinks followed to a regular file (Kubernetes'
//! `..data` links work); a FIFO, a device, a dangling link or an oversized
//! secret is a configuration error naming the path — exit status 2 at
//! once, never a start-up blocked forever.

mod grpc_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use grpc_support::{Server, TempDir};

const TOKEN: &str = "0123456789abcdef-operators";

/// Runs `retryd serve` with `args`, expecting it to exit within 20 s;
/// returns its exit code and stderr (a server still running after that is
/// killed and the test fails: it blocked).
fn serve_exits(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(grpc_support::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "off"])
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn retryd serve");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("stderr");
            return (status.code(), String::from_utf8_lossy(&out.stderr).into_owned());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("stderr");
            panic!(
                "retryd serve {args:?} was still running after 20 s (blocked on a file?):\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mkfifo(path: &std::path::Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

#[test]
fn fifos_devices_dangling_links_and_oversized_secrets_are_configuration_errors() {
    let dir = TempDir::new("hostile-files");
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    let dangling = dir.join("dangling");
    std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).expect("symlink");
    let big = dir.join("big");
    std::fs::write(&big, "k".repeat(5 * 1024)).expect("big file");
    let fifo_link = dir.join("fifo-link");
    std::os::unix::fs::symlink(&fifo, &fifo_link).expect("symlink to the fifo");
    let log = dir.join("decisions.log").display().to_string();
    let cert = dir.join("cert.pem");
    // Both labels, so the other flag's file passes the PEM check and the
    // file under test is the one refused.
    std::fs::write(
        &cert,
        "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n",
    )
    .expect("cert");
    let cert = cert.display().to_string();

    let bad: Vec<(String, &str)> = vec![
        (fifo.display().to_string(), "a FIFO"),
        (fifo_link.display().to_string(), "a FIFO"),
        ("/dev/zero".to_owned(), "a device"),
        (dangling.display().to_string(), "No such file"),
        (big.display().to_string(), "over the limit"),
        (dir.0.display().to_string(), "a directory"),
    ];
    for (path, why) in &bad {
        let cases: Vec<(&str, Vec<&str>)> = vec![
            ("--operator-token-file", vec!["--operator-token-file", path]),
            ("--tenant-hash-key-file", vec!["--tenant-hash-key-file", path]),
            (
                "--decision-log-key-file",
                vec!["--decision-log", &log, "--decision-log-key-file", path],
            ),
            ("--tls-key", vec!["--tls-cert", &cert, "--tls-key", path]),
            ("--tls-cert", vec!["--tls-cert", path, "--tls-key", &cert]),
            (
                "--tls-client-ca",
                vec!["--tls-cert", &cert, "--tls-key", &cert, "--tls-client-ca", path],
            ),
        ];
        for (flag, args) in cases {
            if *why == "over the limit" && flag.starts_with("--tls") {
                continue; // TLS files may be up to 1 MiB; 5 KiB is fine there
            }
            let started = Instant::now();
            let (code, err) = serve_exits(&args);
            assert_eq!(code, Some(2), "{flag} {path} ({why}): exit {code:?}\n{err}");
            assert!(
                err.contains(flag) && err.contains(path.as_str()),
                "{flag} {path}: the error names neither:\n{err}"
            );
            assert!(err.contains(why), "{flag} {path}: expected {why:?} in:\n{err}");
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{flag} {path}: slow to refuse"
            );
        }
    }
}

/// A Secret mounted by Kubernetes: `token -> ..data/token`, `..data ->
/// ..2026_12_01/`, and the file ends with a newline. It is followed, read
/// and its newline ignored.
#[tokio::test]
async fn secrets_mounted_through_symlinks_are_followed() {
    let dir = TempDir::new("hostile-files-k8s");
    let version = dir.join("..2026_12_01");
    std::fs::create_dir_all(&version).expect("version dir");
    std::fs::write(version.join("token"), format!("{TOKEN}\n")).expect("token");
    std::os::unix::fs::symlink("..2026_12_01", dir.join("..data")).expect("..data");
    std::os::unix::fs::symlink("..data/token", dir.join("token")).expect("token link");
    let token = dir.join("token").display().to_string();
    let s = Server::start(&["--operator-token-file", &token, "--tenant-hash-key-file", &token]);
    let mut c = s.client().await;
    let mut req = tonic::Request::new(retryd::grpc::pb::ReleaseHoldRequest { id: "nope".into() });
    req.metadata_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().expect("metadata"));
    let code = c.release_hold(req).await.expect_err("no such hold").code();
    assert_eq!(
        code,
        tonic::Code::NotFound,
        "the token read through the links is the operator's"
    );
}
