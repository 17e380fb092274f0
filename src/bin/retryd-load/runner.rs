//! The closed loop: `concurrency` workers spread round robin over
//! `connections` HTTP/2 channels, each sending pre-encoded requests one after
//! another and recording every call's latency and status.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut as _, Bytes};
use hdrhistogram::Histogram;
use http::uri::PathAndQuery;
use prost::Message;
use retryd::grpc::pb;
use tonic::client::Grpc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::args::{Args, Call, Stop};
use crate::workload::{self, Rng};

/// Latencies are recorded in nanoseconds, from 1 µs to 10 minutes, 3 significant digits.
const HIST_LOW_NS: u64 = 1_000;
const HIST_HIGH_NS: u64 = 600_000_000_000;
/// Workers share this many histograms (a lock each, rarely contended).
const MAX_SHARDS: usize = 32;
/// At most this many distinct error messages are kept for the report.
const MAX_ERROR_KINDS: usize = 20;

/// Why a run could not be made.
#[derive(Debug)]
pub enum RunError {
    /// The address is not a valid URI.
    BadAddr(String),
    /// A connection could not be established.
    Connect(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::BadAddr(e) => write!(f, "bad --addr: {e}"),
            RunError::Connect(e) => write!(f, "cannot connect: {e}"),
        }
    }
}

/// What one measured phase recorded.
#[derive(Debug)]
pub struct Outcome {
    /// Latency of every call (ns), failed ones included.
    pub latency: Histogram<u64>,
    /// Calls per status code name (`OK`, `UNAVAILABLE`, ...).
    pub codes: BTreeMap<&'static str, u64>,
    /// Failed calls per "CODE: message".
    pub errors: BTreeMap<String, u64>,
    /// Decisions made in OK calls (batch: items decided without error).
    pub decisions: u64,
    /// Batch items answered with an error inside an OK call.
    pub item_errors: u64,
    /// Wall time from the first call to the last response.
    pub elapsed: Duration,
}

/// One shard of the recorded results.
struct Shard {
    latency: Histogram<u64>,
    codes: BTreeMap<&'static str, u64>,
    errors: BTreeMap<String, u64>,
    decisions: u64,
    item_errors: u64,
}

impl Shard {
    fn new() -> Self {
        Shard {
            latency: Histogram::new_with_bounds(HIST_LOW_NS, HIST_HIGH_NS, 3).expect("valid histogram bounds"),
            codes: BTreeMap::new(),
            errors: BTreeMap::new(),
            decisions: 0,
            item_errors: 0,
        }
    }

    fn record(&mut self, elapsed: Duration, result: &Result<Decided, Status>) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.latency.saturating_record(ns.max(HIST_LOW_NS));
        match result {
            Ok(d) => {
                *self.codes.entry("OK").or_default() += 1;
                self.decisions += d.decisions;
                self.item_errors += d.item_errors;
            }
            Err(status) => {
                *self.codes.entry(code_name(status.code())).or_default() += 1;
                let key = format!("{}: {}", code_name(status.code()), status.message());
                if self.errors.len() < MAX_ERROR_KINDS || self.errors.contains_key(&key) {
                    *self.errors.entry(key).or_default() += 1;
                }
            }
        }
    }

    fn merge_into(self, out: &mut Outcome) {
        out.latency.add(&self.latency).expect("same histogram bounds");
        for (k, v) in self.codes {
            *out.codes.entry(k).or_default() += v;
        }
        for (k, v) in self.errors {
            *out.errors.entry(k).or_default() += v;
        }
        out.decisions += self.decisions;
        out.item_errors += self.item_errors;
    }
}

/// What an OK response carried.
#[derive(Debug, Clone, Copy, Default)]
struct Decided {
    decisions: u64,
    item_errors: u64,
}

/// A ClassifyBatchResponse read only for its summary: `results` (field 1)
/// is skipped on the wire, so the client does not spend the CPU the server
/// needs on decoding 1 000 decisions.
#[derive(Clone, PartialEq, prost::Message)]
struct BatchSummaryOnly {
    #[prost(message, optional, tag = "2")]
    summary: Option<pb::BatchSummary>,
}

/// Requests encoded once; the codec copies them into the frame as they are.
#[derive(Debug)]
struct RawCodec<D>(PhantomData<D>);

impl<D> Default for RawCodec<D> {
    fn default() -> Self {
        RawCodec(PhantomData)
    }
}

/// Writes pre-encoded message bytes.
#[derive(Debug, Default)]
struct RawEncoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

/// Decodes the response with prost.
struct ProstDecode<D>(PhantomData<D>);

impl<D: Message + Default> Decoder for ProstDecode<D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        D::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(format!("decoding the response: {e}")))
    }
}

impl<D: Message + Default + Send + 'static> Codec for RawCodec<D> {
    type Encode = Bytes;
    type Decode = D;
    type Encoder = RawEncoder;
    type Decoder = ProstDecode<D>;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> ProstDecode<D> {
        ProstDecode(PhantomData)
    }
}

/// The pre-encoded requests of one run.
struct Pool {
    call: Call,
    path: PathAndQuery,
    bodies: Vec<Bytes>,
}

impl Pool {
    fn build(args: &Args) -> Self {
        let mut rng = Rng::new(args.seed);
        let (path, bodies): (&'static str, Vec<Bytes>) = match args.call {
            Call::Classify => (
                "/retryd.v1.RetryDecisionService/Classify",
                (0..u64::from(args.pool))
                    .map(|n| Bytes::from(workload::classify_request(&mut rng, n).encode_to_vec()))
                    .collect(),
            ),
            Call::Batch => {
                // A few distinct batches are enough: each already mixes 1 000 failures.
                let batches = u64::from(args.pool.clamp(1, 8));
                let size = args.batch_size;
                (
                    "/retryd.v1.RetryDecisionService/ClassifyBatch",
                    (0..batches)
                        .map(|b| {
                            let req = workload::batch_request(&mut rng, size, b * u64::from(size));
                            Bytes::from(req.encode_to_vec())
                        })
                        .collect(),
                )
            }
            Call::Admit => (
                "/retryd.v1.RetryDecisionService/Admit",
                (0..u64::from(args.pool))
                    .map(|_| Bytes::from(workload::admit_request(&mut rng).encode_to_vec()))
                    .collect(),
            ),
            Call::ListHolds => (
                "/retryd.v1.RetryDecisionService/ListHolds",
                vec![Bytes::from(
                    pb::ListHoldsRequest {
                        page_size: 1,
                        dependency: args.list_dependency.clone(),
                        ..Default::default()
                    }
                    .encode_to_vec(),
                )],
            ),
            Call::PlaceHolds => {
                let resets_at = std::time::SystemTime::now() + Duration::from_secs(3600);
                (
                    "/retryd.v1.RetryDecisionService/Classify",
                    (0..u64::from(args.tenants))
                        .map(|n| {
                            Bytes::from(workload::quota_stop_request(n, args.dependencies, resets_at).encode_to_vec())
                        })
                        .collect(),
                )
            }
            // Streams, not a closed loop of unary calls: see watch.rs.
            Call::Watch => ("/retryd.v1.RetryDecisionService/WatchHolds", Vec::new()),
            Call::Health => (
                "/grpc.health.v1.Health/Check",
                vec![Bytes::from(
                    tonic_health::pb::HealthCheckRequest { service: String::new() }.encode_to_vec(),
                )],
            ),
        };
        Pool {
            call: args.call,
            path: PathAndQuery::from_static(path),
            bodies,
        }
    }
}

/// Opens `args.connections` channels; fails if any cannot connect.
pub async fn connect(args: &Args) -> Result<Vec<Channel>, RunError> {
    let endpoint = Endpoint::from_shared(args.addr.clone())
        .map_err(|e| RunError::BadAddr(e.to_string()))?
        .connect_timeout(args.connect_timeout)
        .tcp_nodelay(true);
    let mut channels = Vec::new();
    for _ in 0..args.connections {
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| RunError::Connect(format!("{}: {}", args.addr, source_chain(&e))))?;
        channels.push(channel);
    }
    Ok(channels)
}

/// The error and its causes on one line.
fn source_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Runs the warm-up (unrecorded), then the measurement.
pub async fn run(args: &Args, channels: &[Channel]) -> Outcome {
    let pool = Arc::new(Pool::build(args));
    let issued = Arc::new(AtomicU64::new(0));
    if let Some(warmup) = args.warmup {
        phase(args, channels, &pool, &issued, warmup.as_stop(), false).await;
    }
    phase(args, channels, &pool, &issued, args.stop(), true).await
}

/// One phase: workers call until `stop`; `record` keeps the results.
async fn phase(
    args: &Args,
    channels: &[Channel],
    pool: &Arc<Pool>,
    issued: &Arc<AtomicU64>,
    stop: Stop,
    record: bool,
) -> Outcome {
    let workers = args.concurrency as usize;
    let shards: Vec<Arc<Mutex<Shard>>> = (0..workers.min(MAX_SHARDS))
        .map(|_| Arc::new(Mutex::new(Shard::new())))
        .collect();
    let start = Instant::now();
    let first = issued.load(Ordering::Relaxed);
    let limit = match stop {
        Stop::Count(n) => Limit::Count(first + n),
        Stop::Time(d) => Limit::Until(start + d),
    };
    let mut tasks = Vec::with_capacity(workers);
    for w in 0..workers {
        let grpc = Grpc::new(channels[w % channels.len()].clone());
        let shard = record.then(|| Arc::clone(&shards[w % shards.len()]));
        tasks.push(tokio::spawn(worker(
            grpc,
            Arc::clone(pool),
            Arc::clone(issued),
            limit,
            args.timeout,
            shard,
        )));
    }
    for task in tasks {
        task.await.expect("a load worker panicked");
    }
    let elapsed = start.elapsed();
    let mut out = Outcome {
        latency: Histogram::new_with_bounds(HIST_LOW_NS, HIST_HIGH_NS, 3).expect("valid histogram bounds"),
        codes: BTreeMap::new(),
        errors: BTreeMap::new(),
        decisions: 0,
        item_errors: 0,
        elapsed,
    };
    for shard in shards {
        let shard = Arc::try_unwrap(shard)
            .ok()
            .expect("workers are done")
            .into_inner()
            .expect("shard lock");
        shard.merge_into(&mut out);
    }
    out
}

/// When a phase's workers stop taking new calls.
#[derive(Debug, Clone, Copy)]
enum Limit {
    /// When the shared call counter reaches this.
    Count(u64),
    /// At this instant.
    Until(Instant),
}

async fn worker(
    mut grpc: Grpc<Channel>,
    pool: Arc<Pool>,
    issued: Arc<AtomicU64>,
    limit: Limit,
    timeout: Duration,
    shard: Option<Arc<Mutex<Shard>>>,
) {
    loop {
        let k = match limit {
            Limit::Count(n) => {
                let k = issued.fetch_add(1, Ordering::Relaxed);
                if k >= n {
                    // Leave the counter at the limit for the next phase.
                    issued.fetch_sub(1, Ordering::Relaxed);
                    return;
                }
                k
            }
            Limit::Until(t) => {
                if Instant::now() >= t {
                    return;
                }
                issued.fetch_add(1, Ordering::Relaxed)
            }
        };
        let body = pool.bodies[(k % pool.bodies.len() as u64) as usize].clone();
        let started = Instant::now();
        let result = call(&mut grpc, &pool, body, timeout).await;
        let elapsed = started.elapsed();
        if let Some(shard) = &shard {
            shard.lock().expect("shard lock").record(elapsed, &result);
        }
    }
}

/// One call with its deadline.
async fn call(grpc: &mut Grpc<Channel>, pool: &Pool, body: Bytes, timeout: Duration) -> Result<Decided, Status> {
    let fut = async {
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(format!("channel not ready: {e}")))?;
        let mut request = tonic::Request::new(body);
        request.set_timeout(timeout);
        let path = pool.path.clone();
        match pool.call {
            Call::Classify => {
                let r = grpc
                    .unary(request, path, RawCodec::<pb::ClassifyResponse>::default())
                    .await?;
                Ok(Decided {
                    decisions: u64::from(r.get_ref().decision.is_some()),
                    item_errors: 0,
                })
            }
            Call::Batch => {
                let r = grpc
                    .unary(request, path, RawCodec::<BatchSummaryOnly>::default())
                    .await?;
                let s = r.into_inner().summary.unwrap_or_default();
                let decided = u64::from(s.retry_with_limit)
                    + u64::from(s.state_verification_required)
                    + u64::from(s.fix_before_retry)
                    + u64::from(s.do_not_retry)
                    + u64::from(s.already_applied);
                Ok(Decided {
                    decisions: decided,
                    item_errors: u64::from(s.errors),
                })
            }
            Call::Admit => {
                grpc.unary(request, path, RawCodec::<pb::AdmitResponse>::default())
                    .await?;
                Ok(Decided::default())
            }
            Call::ListHolds => {
                grpc.unary(request, path, RawCodec::<pb::ListHoldsResponse>::default())
                    .await?;
                Ok(Decided::default())
            }
            Call::PlaceHolds => {
                let r = grpc
                    .unary(request, path, RawCodec::<pb::ClassifyResponse>::default())
                    .await?;
                let held = r.get_ref().decision.as_ref().is_some_and(|d| d.hold.is_some());
                Ok(Decided {
                    decisions: u64::from(held),
                    item_errors: 0,
                })
            }
            Call::Watch => Err(Status::unimplemented("watch streams are run by watch.rs")),
            Call::Health => {
                grpc.unary(
                    request,
                    path,
                    RawCodec::<tonic_health::pb::HealthCheckResponse>::default(),
                )
                .await?;
                Ok(Decided::default())
            }
        }
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => result,
        Err(_) => Err(Status::deadline_exceeded("client deadline")),
    }
}

/// The canonical name of a status code, as ghz prints it.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
