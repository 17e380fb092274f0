//! Issue 24, item 6: the default caps fit together. The real binary with
//! its default configuration (only the ports set) has its main caps filled
//! at once, every name at its longest (256 bytes): `--max-holds` (100 000),
//! `--max-budget-scopes` (20 000, one more shows the cap), `--max-connections`
//! (4 096, one more is refused), `--max-watch-streams` (1 024) over every
//! hold from clients that never read (window 0), and the buffered-bytes
//! budget (64 MiB) with never-read ClassifyBatch answers. Its peak RSS must
//! stay below the memory limit of the Helm chart, read from
//! `deploy/helm/retryd/values.yaml` so the two cannot drift apart. (The
//! decision-log and shadow queues are off by default; their worst case is
//! in docs/limits-and-hostile-surroundings.md.)

mod grpc_support;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use grpc_support::{Server, failure, h2raw, proc, sample};
use retryd::grpc::pb;

/// `--max-holds`' default.
const MAX_HOLDS: usize = 100_000;
/// Holds one caller may place at once (`--hold-placements-per-sec` 50, burst twice that).
const HOLDS_PER_CALLER: usize = 100;
/// Budget scopes one caller may add at once (100 a second, burst twice that).
const SCOPES_PER_CALLER: usize = 200;
/// `--max-budget-scopes`' default.
const MAX_BUDGET_SCOPES: usize = 20_000;
/// `--max-watch-streams`' default.
const MAX_WATCH_STREAMS: usize = 1_024;
/// `--max-connections`' default.
const MAX_CONNECTIONS: usize = 4_096;
/// Never-read ClassifyBatch answers tried (8 connections × 40).
const HOG_CONNECTIONS: usize = 8;
/// `--max-watch-streams-per-caller`' default.
const WATCH_PER_CALLER: usize = 64;

const WATCH: &str = "/retryd.v1.RetryDecisionService/WatchHolds";
const CLASSIFY_BATCH: &str = "/retryd.v1.RetryDecisionService/ClassifyBatch";

/// The chart's `resources.limits.memory`, in MiB.
fn chart_limit_mib() -> u64 {
    let values = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/helm/retryd/values.yaml"))
        .expect("the chart's values");
    let limits = values.split("\n  limits:").nth(1).expect("resources.limits");
    let memory = limits
        .lines()
        .find_map(|l| l.trim().strip_prefix("memory:"))
        .expect("limits.memory");
    let memory = memory.trim();
    match (memory.strip_suffix("Mi"), memory.strip_suffix("Gi")) {
        (Some(mi), _) => mi.parse().expect("MiB"),
        (_, Some(gi)) => gi.parse::<u64>().expect("GiB") * 1024,
        _ => panic!("limits.memory {memory:?}: expected Mi or Gi"),
    }
}

/// A caller of its own: an address of 127.0.0.0/8 other than 127.0.0.1.
fn caller(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        10 + (i / 62_500) as u8,
        (i / 250 % 250) as u8,
        (i % 250 + 1) as u8,
    ))
}

/// `prefix` and `i`, padded to 256 bytes (the longest name accepted).
fn long(prefix: &str, i: usize) -> String {
    let s = format!("{prefix}{i}-");
    let pad = 256 - s.len();
    s + &"x".repeat(pad)
}

/// `prefix` and `n` padded to 256 bytes: caller `i`'s `n`th name.
fn named(mut f: pb::Failure, n: usize) -> pb::Failure {
    f.tenant = long("t", n);
    f.dependency = long("d", n);
    f.method = long("m", n);
    f.request_id = long("r", n);
    f
}

/// Caller `i`'s batch: quota stops for 100 new tenants, each a hold, every
/// name 256 bytes long.
fn fill_batch(i: usize) -> pb::ClassifyBatchRequest {
    pb::ClassifyBatchRequest {
        failures: (0..HOLDS_PER_CALLER)
            .map(|j| {
                named(
                    failure("frontspin", "RATE_LIMITED", pb::OperationKind::Read),
                    i * 1000 + j,
                )
            })
            .collect(),
        locale: String::new(),
    }
}

/// Caller `i`'s report: first attempts on 100 new dependencies and tenants
/// of `frontspin`, whose budgets count per dependency and per tenant: 200
/// new budget scopes, names 256 bytes long.
fn fill_report(i: usize) -> pb::ReportOutcomesRequest {
    pb::ReportOutcomesRequest {
        counts: (0..SCOPES_PER_CALLER / 2)
            .map(|j| pb::OutcomeCount {
                catalog: "frontspin".into(),
                dependency: long("d", i * 1000 + 500 + j),
                tenant: long("t", i * 1000 + 500 + j),
                method: long("m", i * 1000 + 500 + j),
                requests: 10,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// The server's peak RSS, sampled every 50 ms until `stop`.
fn sample_peak(pid: u32, stop: Arc<AtomicBool>, peak: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                return;
            };
            let rss = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0);
            peak.fetch_max(rss, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(50));
        }
    })
}

type Client = pb::retry_decision_service_client::RetryDecisionServiceClient<tonic::transport::Channel>;

/// Runs `call(i, client)` for callers `0..callers`, each on a new
/// connection from its own address, 8 at a time; returns the connections.
async fn fill<F, Fut>(server: &Server, callers: usize, call: F) -> Vec<tonic::transport::Channel>
where
    F: Fn(usize, Client) -> Fut + Send + Sync + Copy + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (next, url) = (Arc::clone(&next), server.url());
        tasks.spawn(async move {
            let mut channels = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= callers {
                    return channels;
                }
                let channel = tonic::transport::Endpoint::from_shared(url.clone())
                    .expect("endpoint")
                    .local_address(Some(caller(i)))
                    .connect()
                    .await
                    .expect("connect");
                call(i, Client::new(channel.clone())).await;
                channels.push((i, channel));
            }
        });
    }
    let mut all: Vec<_> = tasks.join_all().await.into_iter().flatten().collect();
    all.sort_by_key(|c| c.0);
    all.into_iter().map(|c| c.1).collect()
}

/// Caller `i`'s budget scopes through `channels[i]`, 8 callers at a time.
async fn fill_scopes(channels: &[tonic::transport::Channel]) {
    let mut tasks = tokio::task::JoinSet::new();
    for (k, chunk) in channels.chunks(channels.len().div_ceil(8)).enumerate() {
        let chunk = chunk.to_vec();
        let base = k * channels.len().div_ceil(8);
        tasks.spawn(async move {
            for (j, channel) in chunk.into_iter().enumerate() {
                Client::new(channel)
                    .report_outcomes(fill_report(base + j))
                    .await
                    .expect("a fill report");
            }
        });
    }
    tasks.join_all().await;
}

fn holds_in_force(scrape: &str) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with("retryd_holds{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_caps_filled_at_once_stay_below_the_charts_memory_limit() {
    grpc_support::raise_own_nofile();
    let limit_kib = chart_limit_mib() * 1024;
    let server = Server::start(&[]);
    let pid = server.pid();
    let started = Instant::now();
    let idle_kib = proc::rss_kib(pid);
    let (stop, peak) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(idle_kib)));
    let sampler = sample_peak(pid, Arc::clone(&stop), Arc::clone(&peak));
    let mut report = vec![format!("idle: {} MiB", idle_kib / 1024)];

    // 1. Holds to the cap: a thousand callers, each on a connection of its
    //    own that stays open.
    let callers = MAX_HOLDS / HOLDS_PER_CALLER;
    let channels = fill(&server, callers, |i, mut client| async move {
        client.classify_batch(fill_batch(i)).await.expect("a fill batch");
    })
    .await;
    let scrape = grpc_support::eventually(Duration::from_secs(10), "every hold in force", || {
        let scrape = server.scrape();
        async move { (holds_in_force(&scrape) >= MAX_HOLDS as f64).then_some(scrape) }
    })
    .await;
    assert_eq!(sample(&scrape, "retryd_holds_evicted_total"), Some(0.0));
    report.push(format!(
        "+ {MAX_HOLDS} holds from {} connections: {} MiB (at {:?})",
        channels.len(),
        proc::rss_kib(pid) / 1024,
        started.elapsed()
    ));

    // 2. Budget scopes to their cap, then one more (one eviction shows
    //    the cap was reached).
    let reporters = MAX_BUDGET_SCOPES / SCOPES_PER_CALLER;
    fill_scopes(&channels[..reporters]).await;
    let mut last = pb::retry_decision_service_client::RetryDecisionServiceClient::new(channels[reporters].clone());
    let mut one = fill_report(reporters);
    one.counts.truncate(1);
    last.report_outcomes(one).await.expect("one more scope");
    let scrape = server.scrape();
    assert!(
        sample(&scrape, "retryd_budget_scopes_evicted_total").unwrap_or_default() > 0.0,
        "the budget scopes reached their cap: {}",
        scrape
            .lines()
            .filter(|l| l.contains("budget"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    report.push(format!(
        "+ {MAX_BUDGET_SCOPES} budget scopes: {} MiB (at {:?})",
        proc::rss_kib(pid) / 1024,
        started.elapsed()
    ));

    // 3. Idle connections up to the cap (less those of step 4), from
    //    callers of 500 connections each.
    let watchers = MAX_WATCH_STREAMS / WATCH_PER_CALLER;
    let open = sample(&server.scrape(), "retryd_connections_open").unwrap_or_default() as usize;
    let idle_wanted = MAX_CONNECTIONS - open - watchers - HOG_CONNECTIONS;
    let mut idle_conns = Vec::new();
    for n in 0..idle_wanted {
        let from = caller(callers + watchers + HOG_CONNECTIONS + n / 500);
        idle_conns.push(h2raw::Conn::connect_from(server.addr, from, 65_535).await);
    }
    report.push(format!(
        "+ {idle_wanted} idle connections: {} MiB (at {:?})",
        proc::rss_kib(pid) / 1024,
        started.elapsed()
    ));

    // 4. WatchHolds streams over every hold, from clients that never read,
    //    and never-read ClassifyBatch answers up to the buffered-bytes
    //    budget, at once (a stalled stream or answer is dropped after
    //    --stall-timeout, 10 s).
    let mut watch_conns = Vec::new();
    let mut watch_heads = Vec::new();
    for w in 0..watchers {
        let mut conn = h2raw::Conn::connect_from(server.addr, caller(callers + w), 0).await;
        for _ in 0..WATCH_PER_CALLER {
            let (head, send) = conn
                .start(WATCH, h2raw::framed(&pb::WatchHoldsRequest::default()), true)
                .await;
            watch_heads.push((head, send));
        }
        watch_conns.push(conn);
    }
    // Every watch is answered before the batch answers fill the bytes
    // budget: a call that arrives with the budget full is refused
    // (RESOURCE_EXHAUSTED), which is the budget working, not a watch lost.
    let mut watching = 0;
    for (head, _) in &mut watch_heads {
        if let Ok(Ok(h)) = tokio::time::timeout(Duration::from_secs(10), head).await {
            watching += usize::from(h.headers().get("grpc-status").is_none());
        }
    }
    let batch = h2raw::framed(&pb::ClassifyBatchRequest {
        failures: vec![pb::Failure::default(); retryd::service::classify::DEFAULT_MAX_BATCH],
        locale: "ru".into(),
    });
    let mut hogs = Vec::new();
    let mut hog_heads = Vec::new();
    for h in 0..HOG_CONNECTIONS {
        let mut conn = h2raw::Conn::connect_from(server.addr, caller(callers + watchers + h), 0).await;
        for _ in 0..40 {
            hog_heads.push(conn.start(CLASSIFY_BATCH, batch.clone(), true).await);
        }
        hogs.push(conn);
    }
    let (mut held, mut refused) = (0, 0);
    for (head, _) in &mut hog_heads {
        match tokio::time::timeout(Duration::from_secs(10), head).await {
            Ok(Ok(h)) if h.headers().get("grpc-status").is_none() => held += 1,
            _ => refused += 1,
        }
    }
    let scrape = server.scrape();
    report.push(format!(
        "+ {watching} watch streams, {held} never-read batch answers ({refused} refused): {} MiB; \
         retryd_watch_streams {:?}",
        proc::rss_kib(pid) / 1024,
        sample(&scrape, "retryd_watch_streams"),
    ));
    // One connection more than the cap is closed at once.
    let mut extra = tokio::net::TcpStream::connect(server.addr).await.expect("connect");
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut extra, &mut byte),
    )
    .await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "over --max-connections: closed at once, not {read:?}"
    );
    let scrape = server.scrape();
    assert_eq!(
        sample(&scrape, "retryd_connections_closed_total{reason=\"max_connections\"}"),
        Some(1.0)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let peak_kib = peak.load(Ordering::Relaxed);
    report.push(format!(
        "peak {} MiB against the chart's limit of {} MiB, in {:?}",
        peak_kib / 1024,
        limit_kib / 1024,
        started.elapsed()
    ));
    eprintln!("{}", report.join("\n"));
    assert!(
        refused > 0,
        "the buffered-bytes budget was reached: {}",
        report.join("; ")
    );
    assert_eq!(watching, watchers * WATCH_PER_CALLER, "{}", report.join("; "));
    assert!(
        peak_kib < limit_kib,
        "peak RSS {} MiB is not below the chart's limit: {}",
        peak_kib / 1024,
        report.join("; ")
    );
    drop((channels, idle_conns, watch_conns, hogs));
}
