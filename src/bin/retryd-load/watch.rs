//! `--call watch`: many WatchHolds streams over every hold, from several
//! source addresses (the server counts watch streams per caller, and a
//! caller is a peer address), kept open for `-z`.
//!
//! Reading streams take every event and note when SYNCED arrives (the
//! snapshot is complete); a stream refused or ended early is opened again
//! after a short jittered pause, as a client mirror would, until `-z` ends.
//! With `--never-read` the connections advertise an HTTP/2 receive window of
//! 0: the server cannot send one byte of an event, whatever this process
//! does. Those streams are still polled, which reads nothing (no DATA frame
//! can arrive) but sees the server end them; a message that did arrive is
//! counted, and a count above 0 means the window was not 0.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use retryd::core::hold::{bucket_digests, digest};
use retryd::grpc::pb::{self, retry_decision_service_client::RetryDecisionServiceClient};
use serde::Serialize;
use tokio::net::TcpSocket;
use tonic::Status;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::args::Args;
use crate::runner::{RunError, code_name};

/// What the streams saw, summed.
#[derive(Debug, Default, Serialize)]
pub struct WatchReport {
    /// `reading` or `never-read`.
    pub mode: &'static str,
    /// Streams asked for.
    pub streams: u32,
    /// Source addresses used.
    pub sources: usize,
    /// HTTP/2 connections opened.
    pub connections: usize,
    /// Seconds to open every connection.
    pub connect_s: f64,
    /// Streams whose response headers arrived (the server took the stream).
    pub opened: u64,
    /// Streams that received SYNCED at least once.
    pub synced: u64,
    /// Seconds from the start until the last stream's first SYNCED.
    pub all_synced_s: Option<f64>,
    /// Median seconds from the start to a stream's first SYNCED.
    pub median_synced_s: Option<f64>,
    /// Holds in the snapshot before the first SYNCED (min, max over streams).
    pub snapshot_holds: Option<(u64, u64)>,
    /// Streams whose first SYNCED said the server resumed them.
    pub resumed: u64,
    /// Buckets those resumed snapshots sent, summed.
    pub resent_buckets: u64,
    /// Events received in all.
    pub messages: u64,
    /// Events received per second of the run.
    pub messages_per_s: f64,
    /// CPU seconds (user + system) this load generator used.
    pub client_cpu_s: f64,
    /// Opens refused, per status code.
    pub refused: BTreeMap<&'static str, u64>,
    /// Streams ended by the server before `-z`, per status code (`OK`: ended cleanly).
    pub ended: BTreeMap<&'static str, u64>,
    /// Seconds from the start until the server had ended every never-read stream.
    pub all_ended_s: Option<f64>,
    /// Distinct "CODE: message" of refusals and ends (at most 10).
    pub errors: BTreeMap<String, u64>,
}

#[derive(Debug, Default)]
struct Tally {
    report: WatchReport,
    synced_at: Vec<f64>,
    ended_at: Vec<f64>,
    /// Watched scope (dependency, empty: all) → the digests of its first
    /// complete snapshot (for `--save-digests`).
    digests: BTreeMap<String, Vec<u64>>,
}

impl Tally {
    fn status(&mut self, refused: bool, s: &Status) {
        let map = if refused {
            &mut self.report.refused
        } else {
            &mut self.report.ended
        };
        *map.entry(code_name(s.code())).or_default() += 1;
        let key = format!("{}: {}", code_name(s.code()), s.message());
        if self.report.errors.len() < 10 || self.report.errors.contains_key(&key) {
            *self.report.errors.entry(key).or_default() += 1;
        }
    }
}

/// A connection from `source` to the server at `uri`.
async fn connect(endpoint: &Endpoint, source: IpAddr) -> Result<Channel, RunError> {
    let connector = tower::service_fn(move |uri: Uri| async move {
        let host = uri.host().unwrap_or("127.0.0.1").trim_matches(['[', ']']);
        let port = uri.port_u16().unwrap_or(80);
        let dst = SocketAddr::new(
            host.parse::<IpAddr>()
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
            port,
        );
        let socket = if source.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.bind(SocketAddr::new(source, 0))?;
        socket.set_nodelay(true)?;
        Ok::<_, std::io::Error>(TokioIo::new(socket.connect(dst).await?))
    });
    endpoint
        .connect_with_connector(connector)
        .await
        .map_err(|e| RunError::Connect(format!("from {source}: {e:?}")))
}

/// Opens the connections and streams, keeps them for `-z`, and sums what they saw.
pub async fn run(args: &Args) -> Result<WatchReport, RunError> {
    let hold = args.duration.unwrap_or(Duration::from_secs(10));
    let mut endpoint = Endpoint::from_shared(args.addr.clone())
        .map_err(|e| RunError::BadAddr(e.to_string()))?
        .connect_timeout(args.connect_timeout)
        .tcp_nodelay(true);
    if args.never_read {
        endpoint = endpoint.initial_stream_window_size(Some(0));
    }
    let per_conn = args.streams_per_connection as usize;
    let streams = args.streams as usize;
    let n_conn = streams.div_ceil(per_conn);
    let start = Instant::now();
    // Every connection at once (a reconnect storm), then every stream at once.
    let mut connecting = Vec::with_capacity(n_conn);
    for c in 0..n_conn {
        let (endpoint, source) = (endpoint.clone(), args.sources[c % args.sources.len()]);
        connecting.push(tokio::spawn(async move { connect(&endpoint, source).await }));
    }
    let mut channels = Vec::with_capacity(n_conn);
    for c in connecting {
        channels.push(c.await.map_err(|e| RunError::Connect(e.to_string()))??);
    }
    let connect_s = start.elapsed().as_secs_f64();
    let deadline = tokio::time::Instant::now() + hold;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let saved: BTreeMap<String, Vec<u64>> = match &args.resume_digests {
        Some(path) => serde_json::from_slice(
            &std::fs::read(path).map_err(|e| RunError::BadAddr(format!("{}: {e}", path.display())))?,
        )
        .map_err(|e| RunError::BadAddr(format!("{}: {e}", path.display())))?,
        None => BTreeMap::new(),
    };
    let mut tasks = Vec::with_capacity(streams);
    for s in 0..streams {
        let client = RetryDecisionServiceClient::new(channels[s / per_conn].clone());
        let tally = Arc::clone(&tally);
        let never_read = args.never_read;
        let mut request = request(s as u64, args.dependencies);
        if let Some(d) = saved.get(&request.dependency) {
            request.resume_digests.clone_from(d);
        }
        tasks.push(tokio::spawn(async move {
            if never_read {
                hold_unread(client, request, deadline, start, &tally).await;
            } else {
                read_until(client, request, deadline, start, s as u64, &tally).await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    drop(channels);
    let mut t = Arc::try_unwrap(tally)
        .map_err(|_| RunError::Connect("streams still running".into()))?
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    t.synced_at.sort_by(f64::total_cmp);
    t.ended_at.sort_by(f64::total_cmp);
    if let Some(path) = &args.save_digests {
        let text = serde_json::to_vec(&t.digests).map_err(|e| RunError::BadAddr(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| RunError::BadAddr(format!("{}: {e}", path.display())))?;
    }
    let r = &mut t.report;
    r.mode = if args.never_read { "never-read" } else { "reading" };
    r.streams = args.streams;
    r.sources = args.sources.len();
    r.connections = n_conn;
    r.connect_s = connect_s;
    r.synced = t.synced_at.len() as u64;
    r.messages_per_s = r.messages as f64 / start.elapsed().as_secs_f64().max(1e-9);
    r.client_cpu_s = own_cpu_s();
    r.all_synced_s = (r.synced == u64::from(args.streams))
        .then(|| t.synced_at.last().copied())
        .flatten();
    r.median_synced_s = t.synced_at.get(t.synced_at.len() / 2).copied();
    r.all_ended_s = (args.never_read && t.ended_at.len() as u64 == r.opened)
        .then(|| t.ended_at.last().copied())
        .flatten();
    Ok(t.report)
}

/// Stream `s`'s request: every hold (the largest snapshot a stream can ask
/// for) when `spread` is 0, else the holds of dependency `s % spread`.
fn request(s: u64, spread: u32) -> pb::WatchHoldsRequest {
    if spread == 0 {
        pb::WatchHoldsRequest::default()
    } else {
        pb::WatchHoldsRequest {
            dependency: crate::workload::holds_dependency(s, spread),
            ..Default::default()
        }
    }
}

/// CPU seconds this process has used (user + system), from /proc.
fn own_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // After the command's closing parenthesis come fields 3 (state) onwards:
    // utime (field 14) is the 12th of them, stime the 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    // The clock tick is 100 Hz on Linux (USER_HZ).
    (tick(11) + tick(12)) / 100.0
}

/// A hold's resume digest as a client mirror computes it from the event.
fn digest_of(h: &pb::Hold) -> u64 {
    let until = h
        .until
        .as_ref()
        .map_or(0, |t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000);
    digest(&h.id, retryd::core::UnixMillis(until))
}

/// A never-reading stream: opened, then left until `deadline` or until the
/// server ends it (with a receive window of 0 nothing can be read).
async fn hold_unread(
    mut client: RetryDecisionServiceClient<Channel>,
    request: pb::WatchHoldsRequest,
    deadline: tokio::time::Instant,
    start: Instant,
    tally: &Mutex<Tally>,
) {
    let lock = || tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let opened = tokio::time::timeout_at(deadline, client.watch_holds(request.clone())).await;
    let mut stream = match opened {
        Err(_) => return,
        Ok(Err(s)) => return lock().status(true, &s),
        Ok(Ok(r)) => r.into_inner(),
    };
    lock().report.opened += 1;
    loop {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Err(_) => return,
            Ok(Ok(Some(_))) => lock().report.messages += 1,
            Ok(end) => {
                let mut t = lock();
                t.ended_at.push(start.elapsed().as_secs_f64());
                match end {
                    Ok(_) => *t.report.ended.entry("OK").or_default() += 1,
                    Err(s) => t.status(false, &s),
                }
                return;
            }
        }
    }
}

/// A client mirror: reads every event until `deadline`; opens again after a
/// refusal or an early end.
async fn read_until(
    mut client: RetryDecisionServiceClient<Channel>,
    request: pb::WatchHoldsRequest,
    deadline: tokio::time::Instant,
    start: Instant,
    seed: u64,
    tally: &Mutex<Tally>,
) {
    let lock = || tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut synced = false;
    let mut jitter = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    loop {
        let mut before_sync = 0u64;
        let mut digests = Vec::new();
        match tokio::time::timeout_at(deadline, client.watch_holds(request.clone())).await {
            Err(_) => return,
            Ok(Err(s)) => lock().status(true, &s),
            Ok(Ok(r)) => {
                lock().report.opened += 1;
                let mut stream = r.into_inner();
                loop {
                    match tokio::time::timeout_at(deadline, stream.message()).await {
                        Err(_) => return,
                        Ok(Ok(Some(ev))) => {
                            let mut t = lock();
                            t.report.messages += 1;
                            if ev.kind == pb::HoldEventKind::Synced as i32 {
                                if !synced {
                                    synced = true;
                                    t.synced_at.push(start.elapsed().as_secs_f64());
                                    let (lo, hi) = t.report.snapshot_holds.unwrap_or((u64::MAX, 0));
                                    t.report.snapshot_holds = Some((lo.min(before_sync), hi.max(before_sync)));
                                    if ev.resumed {
                                        t.report.resumed += 1;
                                        t.report.resent_buckets += ev.resent_buckets.len() as u64;
                                    } else {
                                        t.digests
                                            .entry(request.dependency.clone())
                                            .or_insert_with(|| bucket_digests(digests.drain(..)));
                                    }
                                }
                            } else {
                                before_sync += 1;
                                if let (false, Some(h)) = (synced, &ev.hold) {
                                    digests.push(digest_of(h));
                                }
                            }
                        }
                        Ok(Ok(None)) => {
                            *lock().report.ended.entry("OK").or_default() += 1;
                            break;
                        }
                        Ok(Err(s)) => {
                            lock().status(false, &s);
                            break;
                        }
                    }
                }
            }
        }
        // Refused or ended early: again after 20–70 ms, jittered so refused
        // streams do not come back in step.
        jitter ^= jitter << 13;
        jitter ^= jitter >> 7;
        jitter ^= jitter << 17;
        let pause = Duration::from_millis(20 + jitter % 50);
        if tokio::time::Instant::now() + pause >= deadline {
            return;
        }
        tokio::time::sleep(pause).await;
    }
}
