//! `retryd-client`: runs calls to a dependency under retryd's retry loop.
//!
//! Admit before each attempt; the call; successes counted and reported in
//! batches; a failure mapped to a [`Failure`] and classified; waits drawn
//! from the decision's window; a read-back before a write is resent; the
//! call's deadline over everything (dropping the future cancels at once);
//! and a conservative fallback when retryd is unreachable or slow.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use retryd_client::{Call, Client, DependencyError, ReadBack};
//! let client = Client::builder("127.0.0.1:50051").catalog("vibecode").dependency("portal-1").connect().await;
//! let id: String = client
//!     .call(Call::write("crm.deal.add"), || async { Err::<String, _>(DependencyError::new("BITRIX_TIMEOUT")) })
//!     .await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rand::Rng;
use tokio::time::Instant;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

mod admit;
mod busy;
mod error;
use admit::fallback_decision;
use busy::Busy;
pub use busy::MAX_BUSY;
use error::rejection;
pub use error::{Decision, Error};
mod mappers;
mod mirror;
mod rpcs;
use rpcs::NotAnswered;
pub mod tower_retry;
mod words;
pub use mappers::{DependencyError, HttpStatusError, IntoFailure, from_envelope, from_grpc, from_http, pushback};
use mirror::Mirror;
pub use mirror::{DEFAULT_MAX_HOLDS, MAX_WATCHED, MirrorStats, NotWatched};
pub use words::{HoldKind, HoldScope, Strategy, Verdict};

/// The generated `retryd.v1` types and client, for calling the RPCs by hand.
pub mod pb {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("retryd.v1");
}

use pb::retry_decision_service_client::RetryDecisionServiceClient;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
/// Waits a duration (tests record waits instead of sleeping).
pub type Sleeper = Arc<dyn Fn(Duration) -> BoxFuture<'static, ()> + Send + Sync>;
/// Sees every [`Event`].
pub type Hook = Arc<dyn Fn(&Event) + Send + Sync>;

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Operation {
    /// retryd infers it from the method (the fallback treats it as a write).
    #[default]
    Unspecified,
    /// Does not change data.
    Read,
    /// Creates, changes, deletes or sends something.
    Write,
}

impl Operation {
    fn pb(self) -> i32 {
        match self {
            Operation::Unspecified => pb::OperationKind::Unspecified as i32,
            Operation::Read => pb::OperationKind::Read as i32,
            Operation::Write => pb::OperationKind::Write as i32,
        }
    }
}

/// What the client does when retryd is unreachable or slow: reads (and writes
/// whose idempotency key the dependency enforces) get capped exponential
/// backoff with full jitter, at most `max_attempts` in all; other writes are
/// never resent.
#[derive(Clone, Copy, Debug)]
pub struct Fallback {
    /// Attempts in all, the first included (default 3).
    pub max_attempts: u32,
    /// Top of the first wait (default 100 ms).
    pub base: Duration,
    /// Largest wait (default 2 s).
    pub cap: Duration,
}

impl Default for Fallback {
    fn default() -> Self {
        Fallback {
            max_attempts: 3,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(2),
        }
    }
}

/// What a mapper makes of an error: the fields of retryd's `Failure` the
/// caller knows; the rest come from the client and the call.
#[derive(Clone, Debug, Default)]
pub struct Failure {
    /// Catalog (empty: the client's).
    pub catalog: String,
    /// The dependency's error code; empty for a network error.
    pub code: String,
    /// Raw Retry-After (delta-seconds or HTTP-date).
    pub retry_after: String,
    /// An already parsed delay (RetryInfo, pushback).
    pub retry_after_ms: Option<u64>,
    /// X-Request-Id, for diagnostics.
    pub request_id: String,
    /// The dependency's own word on when its allowance resets.
    pub quota_resets_at: Option<SystemTime>,
    /// The dependency itself said "do not retry" (e.g. a negative,
    /// unparsable or conflicting `grpc-retry-pushback-ms`): sent as its retry
    /// contract, `Failure.upstream` retryable false.
    pub no_retry: bool,
}

/// What a read-back found.
#[derive(Debug)]
pub enum ReadBack<T> {
    /// The effect is there: the call returns this without resending.
    Present(T),
    /// The effect is verifiably absent: resend.
    Absent,
    /// Cannot tell: stop.
    Inconclusive,
}

type ReadBackFn<'a, T> = Box<dyn FnMut() -> BoxFuture<'a, ReadBack<T>> + Send + 'a>;

/// One call's options.
pub struct Call<'a, T> {
    operation: Operation,
    method: String,
    idempotency_key: String,
    idempotency_key_enforced: bool,
    read_back: Option<ReadBackFn<'a, T>>,
    deadline: Option<Instant>,
}

impl<'a, T> Call<'a, T> {
    /// A read of `method` (e.g. `crm.deal.get`).
    pub fn read(method: impl Into<String>) -> Self {
        Self::new(Operation::Read, method)
    }
    /// A write of `method` (e.g. `crm.deal.add`).
    pub fn write(method: impl Into<String>) -> Self {
        Self::new(Operation::Write, method)
    }
    /// A call of `method` whose operation retryd infers.
    pub fn new(operation: Operation, method: impl Into<String>) -> Self {
        Call {
            operation,
            method: method.into(),
            idempotency_key: String::new(),
            idempotency_key_enforced: false,
            read_back: None,
            deadline: None,
        }
    }
    /// The idempotency key the call is sent with; `enforced`: the dependency deduplicates by it.
    pub fn idempotency_key(mut self, key: impl Into<String>, enforced: bool) -> Self {
        self.idempotency_key = key.into();
        self.idempotency_key_enforced = enforced;
        self
    }
    /// How to look the write's effect up by a business key.
    pub fn read_back<F, Fut>(mut self, mut f: F) -> Self
    where
        F: FnMut() -> Fut + Send + 'a,
        Fut: Future<Output = ReadBack<T>> + Send + 'a,
    {
        self.read_back = Some(Box::new(move || Box::pin(f())));
        self
    }
    /// No attempt after this instant.
    pub fn deadline(mut self, at: Instant) -> Self {
        self.deadline = Some(at);
        self
    }
    /// No attempt after `d` from now.
    pub fn timeout(self, d: Duration) -> Self {
        self.deadline(Instant::now() + d)
    }
}

/// One step of the loop, for logs and traces.
#[derive(Clone, Debug)]
pub struct Event {
    /// `admit_refused`, `decision`, `wait`, `read_back`, `fallback`,
    /// `success`; the mirror's `mirror_stale` (its stream is down) and
    /// `mirror_synced` (a snapshot arrived); `retryd_busy` once per busy
    /// period (retryd shed a call with advice to wait: see [`MAX_BUSY`]).
    pub kind: &'static str,
    /// The attempt (1-based).
    pub attempt: u32,
    /// With `decision`.
    pub decision: Option<Decision>,
    /// With `wait` and `admit_refused`.
    pub wait: Duration,
    /// Free text (the RPC error of a fallback, the read-back's finding).
    pub detail: String,
    /// An `admit_refused` (or its `wait`) decided from the holds mirror, no RPC.
    pub local: bool,
}

impl Event {
    fn new(kind: &'static str, attempt: u32) -> Self {
        Event {
            kind,
            attempt,
            decision: None,
            wait: Duration::ZERO,
            detail: String::new(),
            local: false,
        }
    }
}

/// Builds a [`Client`].
pub struct ClientBuilder {
    address: String,
    catalog: String,
    dependency: String,
    tenant: String,
    locale: String,
    timeout: Duration,
    connect_timeout: Duration,
    tls: Option<ClientTlsConfig>,
    sleeper: Sleeper,
    fallback: Fallback,
    hook: Option<Hook>,
    report_interval: Duration,
    mirror: bool,
    max_holds: usize,
}

impl ClientBuilder {
    /// Catalog failures are judged by (default: the server's).
    pub fn catalog(mut self, s: impl Into<String>) -> Self {
        self.catalog = s.into();
        self
    }
    /// The dependency instance (a portal, a host): the key of fleet holds.
    pub fn dependency(mut self, s: impl Into<String>) -> Self {
        self.dependency = s.into();
        self
    }
    /// The caller's tenant.
    pub fn tenant(mut self, s: impl Into<String>) -> Self {
        self.tenant = s.into();
        self
    }
    /// Language of reasons (`en`, `ru`).
    pub fn locale(mut self, s: impl Into<String>) -> Self {
        self.locale = s.into();
        self
    }
    /// Bound on each RPC once connected (default 50 ms).
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }
    /// Bound on connecting (default 1 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }
    /// TLS or mTLS (see [`tls_from_env`]).
    pub fn tls(mut self, tls: ClientTlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }
    /// Replaces `tokio::time::sleep`.
    pub fn sleeper(mut self, s: Sleeper) -> Self {
        self.sleeper = s;
        self
    }
    /// Replaces the default [`Fallback`].
    pub fn fallback(mut self, f: Fallback) -> Self {
        self.fallback = f;
        self
    }
    /// Called with every [`Event`].
    pub fn hook(mut self, h: Hook) -> Self {
        self.hook = Some(h);
        self
    }
    /// How often outcome counts are sent (default 1 s).
    pub fn report_interval(mut self, d: Duration) -> Self {
        self.report_interval = d;
        self
    }
    /// The local holds mirror on (the default) or off. Off, every attempt
    /// asks `Admit` (an RPC per call).
    pub fn mirror(mut self, on: bool) -> Self {
        self.mirror = on;
        self
    }
    /// Bounds the mirror (default [`DEFAULT_MAX_HOLDS`]). Beyond it the hold
    /// ending soonest is dropped and its dependency uses `Admit` until the
    /// next snapshot.
    pub fn max_holds(mut self, n: usize) -> Self {
        self.max_holds = n.max(1);
        self
    }

    /// Connects eagerly within the connect timeout; an unreachable retryd is
    /// not an error (calls use the fallback until it answers). Must run in a
    /// tokio runtime (a task sends the batched outcome counts).
    pub async fn connect(self) -> Client {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let uri = if self.address.contains("://") {
            self.address.clone()
        } else {
            format!("{scheme}://{}", self.address)
        };
        let channel = match Endpoint::from_shared(uri) {
            Ok(mut ep) => {
                ep = ep.connect_timeout(self.connect_timeout).tcp_nodelay(true);
                if let Some(tls) = self.tls.clone() {
                    ep = match ep.clone().tls_config(tls) {
                        Ok(e) => e,
                        Err(_) => ep,
                    };
                }
                match tokio::time::timeout(self.connect_timeout, ep.connect()).await {
                    Ok(Ok(ch)) => ch,
                    _ => ep.connect_lazy(),
                }
            }
            // An address that is no URI: every RPC fails, the fallback decides.
            Err(_) => Endpoint::from_static("http://0.0.0.0:1").connect_lazy(),
        };
        let stub = RetryDecisionServiceClient::new(channel);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let busy = Arc::new(Busy::new(self.hook.clone()));
        let mirror = self.mirror.then(|| {
            let m = Mirror::start(stub.clone(), self.hook.clone(), self.max_holds, stopped, busy.clone());
            // The client's own dependency and tenant are declared at once: the
            // snapshot usually arrives before the first call.
            m.want(
                std::slice::from_ref(&self.dependency),
                std::slice::from_ref(&self.tenant),
            );
            m
        });
        let inner = Arc::new(Inner {
            stub,
            mirror,
            stop,
            busy,
            counters: Counters::default(),
            catalog: self.catalog,
            dependency: self.dependency,
            tenant: self.tenant,
            locale: self.locale,
            timeout: self.timeout,
            sleeper: self.sleeper,
            fallback: self.fallback,
            hook: self.hook,
            fallbacks: AtomicU64::new(0),
            counts: Mutex::new(HashMap::new()),
        });
        let weak = Arc::downgrade(&inner);
        let every = self.report_interval;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(inner) = weak.upgrade() else { return };
                inner.flush(inner.timeout).await;
            }
        });
        Client { inner }
    }
}

/// TLS from the examples' environment: `RETRYD_TLS_CA` (turns TLS on),
/// `RETRYD_TLS_CLIENT_CERT` + `RETRYD_TLS_CLIENT_KEY` (mTLS), `RETRYD_TLS_SERVER_NAME`.
pub fn tls_from_env() -> std::io::Result<Option<ClientTlsConfig>> {
    use tonic::transport::{Certificate, Identity};
    let Ok(ca) = std::env::var("RETRYD_TLS_CA") else {
        return Ok(None);
    };
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(std::fs::read(ca)?));
    if let (Ok(c), Ok(k)) = (
        std::env::var("RETRYD_TLS_CLIENT_CERT"),
        std::env::var("RETRYD_TLS_CLIENT_KEY"),
    ) {
        tls = tls.identity(Identity::from_pem(std::fs::read(c)?, std::fs::read(k)?));
    }
    if let Ok(n) = std::env::var("RETRYD_TLS_SERVER_NAME") {
        tls = tls.domain_name(n);
    }
    Ok(Some(tls))
}

type ScopeKey = (String, String, String, String);

/// What the client sent and decided (kept with the mirror off too).
#[derive(Default)]
struct Counters {
    admit_rpcs: AtomicU64,
    local_admissions: AtomicU64,
    local_refusals: AtomicU64,
    report_rpcs: AtomicU64,
    reported_requests: AtomicU64,
}

struct Inner {
    stub: RetryDecisionServiceClient<Channel>,
    mirror: Option<Arc<Mirror>>,
    // Dropped with the client (or set by close): the mirror's stream ends.
    stop: tokio::sync::watch::Sender<bool>,
    busy: Arc<Busy>,
    counters: Counters,
    catalog: String,
    dependency: String,
    tenant: String,
    locale: String,
    timeout: Duration,
    sleeper: Sleeper,
    fallback: Fallback,
    hook: Option<Hook>,
    fallbacks: AtomicU64,
    counts: Mutex<HashMap<ScopeKey, [u64; 3]>>,
}

impl Inner {
    fn event(&self, e: Event) {
        if e.kind == "fallback" {
            self.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(h) = &self.hook {
            h(&e);
        }
    }

    fn rpc_timeout(&self, deadline: Option<Instant>) -> Duration {
        match deadline {
            Some(d) => self
                .timeout
                .min(d.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1)),
            None => self.timeout,
        }
    }
}

/// Runs calls under the loop. Cheap to clone; safe to share.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl Client {
    /// A builder for a client of retryd at `address` (`host:port` or a URI).
    pub fn builder(address: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            address: address.into(),
            catalog: String::new(),
            dependency: String::new(),
            tenant: String::new(),
            locale: String::new(),
            timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(1),
            tls: None,
            sleeper: Arc::new(|d| Box::pin(tokio::time::sleep(d))),
            fallback: Fallback::default(),
            hook: None,
            report_interval: Duration::from_secs(1),
            mirror: true,
            max_holds: DEFAULT_MAX_HOLDS,
        }
    }

    /// Times retryd was unreachable, slow or busy and the client decided alone.
    pub fn fallbacks(&self) -> u64 {
        self.inner.fallbacks.load(Ordering::Relaxed)
    }

    /// The generated client, for the RPCs by hand.
    pub fn stub(&self) -> RetryDecisionServiceClient<Channel> {
        self.inner.stub.clone()
    }

    /// Sends the outcome counts not yet reported and ends the mirror's
    /// stream (calls after it ask `Admit`).
    pub async fn close(&self) {
        let _ = self.inner.stop.send(true);
        if let Some(m) = &self.inner.mirror {
            m.close();
        }
        // Reports are not sent while retryd's advice to wait runs: wait for
        // it at closing, within the second the last flush has.
        let left = self.inner.busy.remaining();
        if !left.is_zero() && left < Duration::from_secs(1) {
            tokio::time::sleep(left).await;
        }
        self.inner.flush(Duration::from_secs(1)).await;
    }

    /// The mirror's state (zero with the mirror off) and the client's counters.
    pub fn stats(&self) -> MirrorStats {
        let k = &self.inner.counters;
        let mut s = MirrorStats {
            admit_rpcs: k.admit_rpcs.load(Ordering::Relaxed),
            local_admissions: k.local_admissions.load(Ordering::Relaxed),
            local_refusals: k.local_refusals.load(Ordering::Relaxed),
            report_rpcs: k.report_rpcs.load(Ordering::Relaxed),
            reported_requests: k.reported_requests.load(Ordering::Relaxed),
            shed_answers: self.inner.busy.answers.load(Ordering::Relaxed),
            busy_skips: self.inner.busy.skips.load(Ordering::Relaxed),
            ..Default::default()
        };
        if let Some(m) = &self.inner.mirror {
            m.stats(&mut s);
        }
        s
    }

    /// Declares dependencies and tenants the client will call (at startup)
    /// and waits until the mirror's snapshot covers them (`SYNCED`); wrap it
    /// in `tokio::time::timeout` to bound the wait (calls use `Admit` until
    /// the snapshot arrives). An error when the mirror is off or past
    /// [`MAX_WATCHED`] (those calls use `Admit`).
    pub async fn watch<D, T>(&self, deps: D, tenants: T) -> Result<(), NotWatched>
    where
        D: IntoIterator,
        D::Item: Into<String>,
        T: IntoIterator,
        T::Item: Into<String>,
    {
        let Some(m) = &self.inner.mirror else {
            return Err(NotWatched::MirrorOff);
        };
        let deps: Vec<String> = deps.into_iter().map(Into::into).collect();
        let tenants: Vec<String> = tenants.into_iter().map(Into::into).collect();
        if !m.want(&deps, &tenants) {
            return Err(NotWatched::Limit);
        }
        m.wait(&deps, &tenants).await;
        Ok(())
    }

    /// Runs `f` under the loop; errors are mapped with [`IntoFailure`].
    pub async fn call<T, E, F, Fut>(&self, call: Call<'_, T>, f: F) -> Result<T, Error<E>>
    where
        E: IntoFailure,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.call_with(call, |e: &E| e.to_failure(), f).await
    }

    /// Runs `f` under the loop with the caller's mapper (`None`: not a
    /// dependency failure, returned untouched as [`Error::Dependency`]).
    pub async fn call_with<T, E, M, F, Fut>(&self, mut call: Call<'_, T>, mapper: M, mut f: F) -> Result<T, Error<E>>
    where
        M: Fn(&E) -> Option<Failure>,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let inner = &*self.inner;
        let op = call.operation.pb();
        let deadline = call.deadline;
        let deadline_wall = deadline.map(|d| SystemTime::now() + d.saturating_duration_since(Instant::now()));
        let past = |wait: Duration| deadline.is_some_and(|d| Instant::now() + wait > d);
        let mut attempt: u32 = 1;
        loop {
            // 1. Admit (from the mirror when it knows the scope); 2. the call.
            let probe = inner.admit(&call.method, op, attempt, deadline).await?;
            let err = match f().await {
                Ok(v) => {
                    inner.succeeded(&call.method, probe, attempt).await;
                    return Ok(v);
                }
                Err(e) => e,
            };

            // 3. Map the failure.
            let Some(fl) = mapper(&err) else {
                inner.count(&call.method, 2);
                return Err(Error::Dependency(err));
            };
            let mut failure = inner.failure(fl, &call.method, op, attempt, probe, deadline_wall);
            failure.idempotency_key = call.idempotency_key.clone();
            failure.idempotency_key_enforced = call.idempotency_key_enforced;

            // 4. Classify and act; a read-back's answer goes in a second Classify.
            let mut read_back_value: Option<T> = None;
            let wait = loop {
                let req = pb::ClassifyRequest {
                    failure: Some(failure.clone()),
                    locale: inner.locale.clone(),
                };
                let resp = match inner.classify(req, deadline).await {
                    Ok(d) => d,
                    Err(NotAnswered::Status(s)) if rejection::<E>(&s, None).is_some() => {
                        return Err(rejection(&s, Some(err)).expect("checked above"));
                    }
                    Err(other) => {
                        if past(Duration::ZERO) {
                            return Err(Error::DeadlineExceeded { source: Some(err) });
                        }
                        // a busy period is said once (`retryd_busy`), not per call
                        let said = !matches!(other, NotAnswered::Busy(_));
                        let why = other.why();
                        let may =
                            failure.operation == pb::OperationKind::Read as i32 || failure.idempotency_key_enforced;
                        if !may || attempt >= inner.fallback.max_attempts {
                            if said {
                                inner.event(Event {
                                    detail: format!("Classify failed: {why}"),
                                    ..Event::new("fallback", attempt)
                                });
                            }
                            let decision = fallback_decision(&why, failure.operation == pb::OperationKind::Read as i32);
                            return Err(Error::Unavailable {
                                decision: Box::new(decision),
                                source: err,
                            });
                        }
                        let w = inner.fallback_wait(attempt);
                        if said {
                            inner.event(Event {
                                wait: w,
                                detail: format!("Classify failed: {why}"),
                                ..Event::new("fallback", attempt)
                            });
                        }
                        break w;
                    }
                };
                if let Some(m) = &inner.mirror {
                    m.learn(resp.hold.as_ref());
                }
                let d = Decision::from(resp);
                inner.event(Event {
                    decision: Some(d.clone()),
                    ..Event::new("decision", attempt)
                });
                match d.verdict {
                    Verdict::AlreadyApplied => {
                        if let Some(v) = read_back_value {
                            return Ok(v);
                        }
                        return Err(Error::Refused {
                            decision: Box::new(d),
                            source: err,
                        });
                    }
                    Verdict::StateVerificationRequired if failure.read_back == 0 && call.read_back.is_some() => {
                        let rb = call.read_back.as_mut().map(|f| f());
                        let found = match rb {
                            Some(fut) => fut.await,
                            None => ReadBack::Inconclusive,
                        };
                        failure.read_back = match found {
                            ReadBack::Present(v) => {
                                read_back_value = Some(v);
                                pb::ReadBack::EffectPresent as i32
                            }
                            ReadBack::Absent => pb::ReadBack::EffectAbsent as i32,
                            ReadBack::Inconclusive => pb::ReadBack::Inconclusive as i32,
                        };
                        inner.event(Event {
                            detail: format!("{}", failure.read_back),
                            ..Event::new("read_back", attempt)
                        });
                        continue;
                    }
                    Verdict::RetryWithLimit => {
                        let hi = d.max_after_ms.max(d.after_ms);
                        let ms = rand::rng().random_range(d.after_ms..=hi);
                        break Duration::from_millis(ms);
                    }
                    _ => {
                        return Err(Error::Refused {
                            decision: Box::new(d),
                            source: err,
                        });
                    }
                }
            };
            if past(wait) {
                return Err(Error::DeadlineExceeded { source: Some(err) });
            }
            inner.event(Event {
                wait,
                ..Event::new("wait", attempt)
            });
            (inner.sleeper)(wait).await;
            attempt += 1;
        }
    }
}
