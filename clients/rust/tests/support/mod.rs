//! A real `retryd serve` on a free loopback port for the integration tests
//! (RETRYD_BIN, else the retryd the same `cargo test` built beside the test).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The failure that places a tenant quota stop until `resets_at`
/// (frontspin `RATE_LIMITED` with the dependency's own reset time).
#[allow(dead_code)] // not every test binary places one
pub fn quota_stop(tenant: &str, dep: &str, resets_at: std::time::SystemTime) -> retryd_client::pb::ClassifyRequest {
    use retryd_client::pb;
    pb::ClassifyRequest {
        failure: Some(pb::Failure {
            catalog: "frontspin".into(),
            code: "RATE_LIMITED".into(),
            operation: pb::OperationKind::Write as i32,
            attempt: 1,
            tenant: tenant.into(),
            dependency: dep.into(),
            quota_resets_at: Some(resets_at.into()),
            ..Default::default()
        }),
        locale: String::new(),
    }
}

/// A running retryd; killed when dropped.
pub struct Retryd {
    pub addr: String,
    _child: tokio::process::Child,
    dir: PathBuf,
}

impl Drop for Retryd {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The binary, or None (the test is skipped with a message) unless
/// RETRYD_CONFORMANCE_REQUIRED=1 (CI sets it).
pub fn binary() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // target/<profile>/deps/<test>-… → target/<profile>/retryd, built by the same `cargo test`.
    let beside = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.join("retryd")));
    let bin = std::env::var_os("RETRYD_BIN")
        .map(PathBuf::from)
        .or(beside)
        .unwrap_or_else(|| root.join("target/debug/retryd"));
    if bin.exists() {
        return Some(bin);
    }
    assert!(
        std::env::var_os("RETRYD_CONFORMANCE_REQUIRED").is_none(),
        "no retryd binary at {}",
        bin.display()
    );
    eprintln!("skipped: no retryd at {}; set RETRYD_BIN", bin.display());
    None
}

/// Starts retryd with an operator token file holding `token`, and the
/// catalogs of `policy` (RETRYD_POLICY) on top of the embedded ones.
#[allow(dead_code)] // not every test binary starts one plainly
pub async fn start(bin: &Path, name: &str, token: &str, policy: Option<&Path>) -> Retryd {
    start_with(bin, name, token, policy, &[]).await
}

/// [`start`] with more `serve` flags (e.g. `--max-buffered-bytes 1`: a
/// retryd that sheds every call with advice).
pub async fn start_with(bin: &Path, name: &str, token: &str, policy: Option<&Path>, flags: &[&str]) -> Retryd {
    let dir = std::env::temp_dir().join(format!("retryd-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tok = dir.join("operator.token");
    std::fs::write(&tok, format!("{token}\n")).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut cmd = tokio::process::Command::new(bin);
    if let Some(p) = policy {
        cmd.env("RETRYD_POLICY", p);
    }
    let child = cmd
        .args([
            "serve",
            "--listen",
            &addr,
            "--metrics-listen",
            "off",
            "--log-level",
            "warn",
        ])
        .arg("--operator-token-file")
        .arg(&tok)
        .args(flags)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(&addr).await.is_ok() {
            return Retryd {
                addr,
                _child: child,
                dir,
            };
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("retryd did not listen on {addr}");
}
