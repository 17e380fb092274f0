//! What the library adds to a call against calling the function bare,
//! sequentially, per call (median and p99):
//! - bare: a no-op async function awaited directly;
//! - mirror: `Client::call` over it, the holds mirror synced and no hold in
//!   force (local admission, the success counted for the batched
//!   `ReportOutcomes`; no RPC — the `Admit` RPCs sent are printed);
//! - admit: the same with the mirror off: an `Admit` RPC per call.
//!
//! `cargo run --release -p retryd-client --example bench -- 127.0.0.1:50051 -n 20000`
//! (bench/clients.sh starts a retryd and runs it).
use std::hint::black_box;
use std::time::{Duration, Instant};

use retryd_client::{Call, Client, DependencyError};

async fn noop() -> Result<u32, DependencyError> {
    Ok(black_box(1))
}

fn pct(d: &[Duration], p: f64) -> Duration {
    let mut s = d.to_vec();
    s.sort();
    s[((s.len() - 1) as f64 * p) as usize]
}

async fn client(addr: &str, mirror: bool) -> Client {
    Client::builder(addr)
        .catalog("vibecode")
        .dependency("bench-portal")
        .tenant("bench")
        .timeout(Duration::from_secs(1))
        .mirror(mirror)
        .connect()
        .await
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // ADDR [-n N] (bench/clients.sh passes its -n on).
    let (mut addr, mut n) = ("127.0.0.1:50051".to_string(), 20_000usize);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-n" => n = args.next().and_then(|s| s.parse().ok()).expect("-n N"),
            _ => addr = a,
        }
    }

    let mut bare = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let t = Instant::now();
        black_box(noop().await.ok());
        if i >= n / 10 {
            bare.push(t.elapsed());
        }
    }

    let c = client(&addr, true).await;
    tokio::time::timeout(Duration::from_secs(5), c.watch(["bench-portal"], ["bench"]))
        .await
        .expect("mirror not synced in 5 s")
        .expect("mirror on");
    let before = c.stats();
    let mut lib = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let t = Instant::now();
        c.call(Call::read("crm.deal.get"), noop).await.expect("success");
        if i >= n / 10 {
            lib.push(t.elapsed());
        }
    }
    let after = c.stats();
    c.close().await;

    let off = client(&addr, false).await;
    let mut admit = Vec::with_capacity(n / 4);
    for i in 0..n / 4 + n / 40 {
        let t = Instant::now();
        off.call(Call::read("crm.deal.get"), noop).await.expect("success");
        if i >= n / 40 {
            admit.push(t.elapsed());
        }
    }
    off.close().await;

    println!("{n} sequential calls per case (admit: {}) against {addr}", n / 4);
    let b50 = pct(&bare, 0.5);
    for (name, d) in [
        ("bare function", &bare),
        ("Client::call, mirror synced", &lib),
        ("Client::call, mirror off", &admit),
    ] {
        println!(
            "{name:<28} p50 {:>10?}  p99 {:>10?}  added p50 {:>10?}",
            pct(d, 0.5),
            pct(d, 0.99),
            pct(d, 0.5).saturating_sub(b50)
        );
    }
    println!(
        "mirror case: {} Admit RPCs, {} local admissions (of {} calls with warm-up)",
        after.admit_rpcs - before.admit_rpcs,
        after.local_admissions - before.local_admissions,
        n + n / 10
    );
}
