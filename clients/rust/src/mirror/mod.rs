//! The holds mirror: one `WatchHolds` stream per client keeps a local copy
//! of the fleet holds that can cover the client's calls, so a call whose
//! scope has no hold goes ahead with no RPC; a known hold refuses locally;
//! probe points and scopes not yet synced ask `Admit`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rand::Rng;
use tokio::sync::{Notify, mpsc, watch};
use tonic::transport::Channel;

use crate::busy::Busy;
use crate::pb::retry_decision_service_client::RetryDecisionServiceClient;
use crate::{Event, Hook, pb};

mod holds;
mod resume;
use holds::{HoldSet, State, time_of};

/// How many dependencies (and, apart, tenants) one stream watches; calls
/// for others always use `Admit`.
pub const MAX_WATCHED: usize = 256;
/// The mirror's default bound ([`crate::ClientBuilder::max_holds`]).
pub const DEFAULT_MAX_HOLDS: usize = 10_000;
/// Lifted hold ids remembered, so a PLACED that raced the snapshot is ignored.
const MAX_TOMBSTONES: usize = 4096;
/// A hold with a probe point stays covering past its `until` this long
/// unless an event says otherwise: retryd keeps a stop in force through its
/// probe window (not sent), and calls there must ask `Admit`.
const PROBE_GRACE: Duration = Duration::from_secs(60);
const BACKOFF_BASE: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_secs(5);

/// The mirror's state and what it saved ([`crate::Client::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MirrorStats {
    /// The stream's snapshot covers every watched dependency and tenant.
    pub synced: bool,
    /// The stream is down: known holds still refuse, unknown scopes use `Admit`.
    pub stale: bool,
    /// Holds in the mirror.
    pub holds: usize,
    /// `Admit` RPCs sent.
    pub admit_rpcs: u64,
    /// Attempts admitted from the mirror, no RPC.
    pub local_admissions: u64,
    /// Attempts refused from the mirror, no RPC.
    pub local_refusals: u64,
    /// `ReportOutcomes` RPCs sent.
    pub report_rpcs: u64,
    /// First attempts those reports carried.
    pub reported_requests: u64,
    /// retryd's answers shedding an RPC with retry advice.
    pub shed_answers: u64,
    /// `Classify` and `Admit` RPCs not sent while that advice ran.
    pub busy_skips: u64,
    /// Snapshots retryd resumed from the mirror's bucket digests.
    pub resumed_syncs: u64,
    /// The buckets those snapshots sent again.
    pub resent_buckets: u64,
}

/// Why [`crate::Client::watch`] could not cover what it was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotWatched {
    /// The mirror is off (`mirror(false)`).
    MirrorOff,
    /// Past [`MAX_WATCHED`] dependencies or tenants: those calls use `Admit`.
    Limit,
}

impl std::fmt::Display for NotWatched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotWatched::MirrorOff => write!(f, "retryd: not watched: the mirror is off"),
            NotWatched::Limit => write!(
                f,
                "retryd: not watched: at most {MAX_WATCHED} dependencies and {MAX_WATCHED} tenants per client"
            ),
        }
    }
}

impl std::error::Error for NotWatched {}

/// What local admission says about one attempt.
pub(crate) enum Admission {
    /// Go ahead, no RPC.
    Local,
    /// Refused by this hold until `retry_at` (local clock), no RPC.
    Refuse { hold: Box<pb::Hold>, retry_at: SystemTime },
    /// Ask `Admit` (not synced, stale with no known hold, or a probe point).
    Ask,
}

enum Msg {
    Synced(u64),
    Ended(u64, String),
}

pub(crate) struct Mirror {
    max: usize,
    state: RwLock<State>,
    offset_ns: AtomicI64,
    kick: Notify,
    changed: watch::Sender<u64>,
    hook: Option<Hook>,
    stub: RetryDecisionServiceClient<Channel>,
    busy: Arc<Busy>,
    resumed: AtomicU64,
    resent: AtomicU64,
}

impl Mirror {
    pub(crate) fn start(
        stub: RetryDecisionServiceClient<Channel>,
        hook: Option<Hook>,
        max: usize,
        stop: watch::Receiver<bool>,
        busy: Arc<Busy>,
    ) -> Arc<Mirror> {
        let m = Arc::new(Mirror::new(stub, hook, max, busy));
        tokio::spawn(m.clone().run(stop));
        m
    }

    fn new(stub: RetryDecisionServiceClient<Channel>, hook: Option<Hook>, max: usize, busy: Arc<Busy>) -> Mirror {
        Mirror {
            max,
            state: RwLock::new(State::default()),
            offset_ns: AtomicI64::new(0),
            kick: Notify::new(),
            changed: watch::Sender::new(0),
            hook,
            stub,
            busy,
            resumed: AtomicU64::new(0),
            resent: AtomicU64::new(0),
        }
    }

    fn now(&self) -> SystemTime {
        shift(SystemTime::now(), self.offset_ns.load(Ordering::Relaxed))
    }

    fn event(&self, kind: &'static str, detail: String) {
        if let Some(h) = &self.hook {
            h(&Event {
                detail,
                ..Event::new(kind, 0)
            });
        }
    }

    /// Adds to the watched sets (up to [`MAX_WATCHED`] each); false if any was left out.
    pub(crate) fn want(&self, deps: &[String], tenants: &[String]) -> bool {
        let (mut all, mut added) = (true, false);
        if let Ok(mut guard) = self.state.write() {
            let s = &mut *guard;
            for (items, set) in [(deps, &mut s.want_deps), (tenants, &mut s.want_tenants)] {
                for x in items.iter().filter(|x| !x.is_empty()) {
                    if set.contains(x) {
                        continue;
                    }
                    if set.len() >= MAX_WATCHED {
                        all = false;
                        continue;
                    }
                    set.insert(x.clone());
                    added = true;
                }
            }
        }
        if added {
            self.kick.notify_one();
        }
        all
    }

    /// Waits until the synced snapshot covers `deps` and `tenants`.
    pub(crate) async fn wait(&self, deps: &[String], tenants: &[String]) {
        let mut rx = self.changed.subscribe();
        loop {
            if self.state.read().is_ok_and(|s| s.covered(deps, tenants)) {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Local admission for one attempt.
    pub(crate) fn decide(&self, catalog: &str, dep: &str, tenant: &str, method: &str) -> Admission {
        if dep.is_empty() {
            return Admission::Ask;
        }
        let Ok(s) = self.state.read() else {
            return Admission::Ask;
        };
        let watched = s.want_deps.contains(dep) && (tenant.is_empty() || s.want_tenants.contains(tenant));
        if !watched
            || !s.sync_deps.contains(dep)
            || s.live.dropped.contains(dep)
            || (!tenant.is_empty() && !s.sync_tenants.contains(tenant))
        {
            drop(s);
            if !watched {
                self.want(&[dep.to_string()], &[tenant.to_string()]);
            }
            return Admission::Ask;
        }
        let now = self.now();
        let best = s
            .live
            .by_dep
            .get(dep)
            .into_iter()
            .flat_map(|m| m.values())
            .filter(|h| h.covers(catalog, tenant, method) && h.in_force(now))
            .max_by_key(|h| h.until);
        let Some(best) = best else {
            return if s.stale { Admission::Ask } else { Admission::Local };
        };
        let probe_point = best.probing
            || best.next_probe.is_some_and(|p| p <= now)
            || (best.scope == pb::Scope::Tenant as i32 && best.tenant != tenant);
        if probe_point {
            return Admission::Ask; // retryd arbitrates the one probe
        }
        let at = best.next_probe.map_or(best.until, |p| p.min(best.until));
        Admission::Refuse {
            hold: Box::new(best.raw.clone()),
            retry_at: shift(at, -self.offset_ns.load(Ordering::Relaxed)),
        }
    }

    /// Puts a hold from an `Admit` or `Classify` answer into the mirror at
    /// once, so a retry right after a failure does not slip through before
    /// the watch event arrives.
    pub(crate) fn learn(&self, h: Option<&pb::Hold>) {
        if let (Some(h), Ok(mut s)) = (h, self.state.write()) {
            s.apply(None, pb::HoldEventKind::Placed as i32, h.clone(), self.max);
        }
    }

    /// Wakes the stream task so it sees the stop.
    pub(crate) fn close(&self) {
        self.kick.notify_one();
    }

    pub(crate) fn stats(&self, out: &mut MirrorStats) {
        if let Ok(s) = self.state.read() {
            out.stale = s.stale;
            out.holds = s.live.by_id.len();
            out.synced = s.ever_synced && !s.stale && s.covered(&s.want_deps, &s.want_tenants);
        }
        out.resumed_syncs = self.resumed.load(Ordering::Relaxed);
        out.resent_buckets = self.resent.load(Ordering::Relaxed);
    }

    fn set_stale(&self, why: String) {
        let was = self
            .state
            .write()
            .map(|mut s| std::mem::replace(&mut s.stale, true))
            .unwrap_or(true);
        self.changed.send_modify(|n| *n += 1);
        if !was {
            self.event("mirror_stale", why);
        }
    }

    /// Keeps one live stream, opens a wider one when the watched sets grow
    /// (the live one serves until the new one's SYNCED), and reconnects
    /// with jittered backoff (full jitter, base 100 ms, ×2, cap 5 s).
    async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let (tx, mut rx) = mpsc::channel::<Msg>(16);
        type Live = Option<(u64, HashSet<String>, HashSet<String>, tokio::task::JoinHandle<()>)>;
        let (mut live, mut pending): (Live, Live) = (None, None);
        let mut failures = 0u32;
        let mut retry: Option<tokio::time::Instant> = None;
        loop {
            if pending.is_none() && retry.is_none() {
                // No stream is opened while retryd advises waiting (it would be shed too).
                let busy = self.busy.remaining();
                if busy.is_zero() {
                    pending = self.clone().maybe_open(live.as_ref().map(|l| (&l.1, &l.2)), &tx);
                } else {
                    retry = Some(tokio::time::Instant::now() + busy);
                }
            }
            let gen = |x: &Live| x.as_ref().map(|l| l.0);
            tokio::select! {
                r = stop.changed() => if r.is_err() || *stop.borrow() { break },
                _ = self.kick.notified() => {}
                _ = tokio::time::sleep_until(retry.unwrap_or_else(tokio::time::Instant::now)), if retry.is_some() => retry = None,
                Some(msg) = rx.recv() => match msg {
                    Msg::Synced(g) if gen(&pending) == Some(g) => {
                        if let Some(l) = live.take() {
                            l.3.abort();
                        }
                        live = pending.take();
                        failures = 0;
                    }
                    Msg::Ended(g, why) if gen(&pending) == Some(g) => {
                        pending = None;
                        failures += 1;
                        retry = Some(tokio::time::Instant::now() + backoff(failures).max(self.busy.remaining()));
                        if live.is_none() {
                            self.set_stale(why);
                        }
                    }
                    Msg::Ended(g, why) if gen(&live) == Some(g) => {
                        live = None;
                        self.set_stale(why);
                        failures += 1;
                        retry = Some(tokio::time::Instant::now() + backoff(failures).max(self.busy.remaining()));
                    }
                    _ => {}
                },
            }
        }
        for l in [live, pending].into_iter().flatten() {
            l.3.abort();
        }
    }

    #[allow(clippy::type_complexity)]
    fn maybe_open(
        self: Arc<Self>,
        live: Option<(&HashSet<String>, &HashSet<String>)>,
        tx: &mpsc::Sender<Msg>,
    ) -> Option<(u64, HashSet<String>, HashSet<String>, tokio::task::JoinHandle<()>)> {
        let (gen, deps, tenants) = {
            let mut s = self.state.write().ok()?;
            if s.want_deps.is_empty() {
                return None;
            }
            if let Some((d, t)) = live {
                if s.want_deps.is_subset(d) && s.want_tenants.is_subset(t) {
                    return None;
                }
            }
            s.next_gen += 1;
            (s.next_gen, s.want_deps.clone(), s.want_tenants.clone())
        };
        let task = tokio::spawn(self.stream(gen, deps.clone(), tenants.clone(), tx.clone()));
        Some((gen, deps, tenants, task))
    }

    async fn stream(self: Arc<Self>, gen: u64, deps: HashSet<String>, tenants: HashSet<String>, tx: mpsc::Sender<Msg>) {
        let why = self.stream_inner(gen, &deps, &tenants, &tx).await;
        let _ = tx.send(Msg::Ended(gen, why)).await;
    }

    async fn stream_inner(
        &self,
        gen: u64,
        deps: &HashSet<String>,
        tenants: &HashSet<String>,
        tx: &mpsc::Sender<Msg>,
    ) -> String {
        let req = pb::WatchHoldsRequest {
            dependencies: deps.iter().cloned().collect(),
            tenants: tenants.iter().cloned().collect(),
            // resume from the holds the mirror has
            resume_digests: self
                .state
                .read()
                .map(|s| resume::bucket_digests(&s.live))
                .unwrap_or_default(),
            ..Default::default()
        };
        let resuming = !req.resume_digests.is_empty();
        let mut stream = match self.stub.clone().watch_holds(req).await {
            Ok(s) => s.into_inner(),
            Err(e) => {
                self.busy.note(&e);
                return format!("WatchHolds failed: {}", e.message());
            }
        };
        let mut snap = Some(HoldSet::default());
        loop {
            let ev = match stream.message().await {
                Ok(Some(ev)) => ev,
                Ok(None) => return "WatchHolds ended".into(),
                Err(e) => {
                    self.busy.note(&e);
                    return format!("WatchHolds failed: {}", e.message());
                }
            };
            if let Some(t) = time_of(&ev.server_time) {
                let off = match t.duration_since(SystemTime::now()) {
                    Ok(d) => d.as_nanos() as i64,
                    Err(e) => -(e.duration().as_nanos() as i64),
                };
                self.offset_ns.store(off, Ordering::Relaxed);
            }
            let synced = {
                let Ok(mut s) = self.state.write() else {
                    return "poisoned".into();
                };
                if ev.kind == pb::HoldEventKind::Synced as i32 {
                    snap.take().map(|mut set| {
                        // The new snapshot is the truth: it replaces the mirror
                        // whole, or, resumed, the buckets it resent.
                        if resuming && ev.resumed {
                            set = s.merge_resumed(set, &ev.resent_buckets, self.max);
                            self.resumed.fetch_add(1, Ordering::Relaxed);
                            self.resent.fetch_add(ev.resent_buckets.len() as u64, Ordering::Relaxed);
                        }
                        s.live = set;
                        s.live_gen = gen;
                        s.sync_deps = deps.clone();
                        s.sync_tenants = tenants.clone();
                        s.ever_synced = true;
                        (s.live.by_id.len(), std::mem::replace(&mut s.stale, false))
                    })
                } else {
                    if let Some(h) = ev.hold {
                        if snap.is_some() {
                            s.apply(snap.as_mut(), ev.kind, h, self.max);
                        } else if s.live_gen == gen {
                            s.apply(None, ev.kind, h, self.max);
                        }
                    }
                    None
                }
            };
            if let Some((n, was)) = synced {
                self.changed.send_modify(|n| *n += 1);
                let _ = tx.send(Msg::Synced(gen)).await;
                self.event("mirror_synced", format!("{n} holds; was stale: {was}"));
            }
        }
    }
}

fn shift(t: SystemTime, ns: i64) -> SystemTime {
    if ns >= 0 {
        t + Duration::from_nanos(ns as u64)
    } else {
        t - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn backoff(failures: u32) -> Duration {
    let top = BACKOFF_BASE
        .saturating_mul(1 << (failures.saturating_sub(1)).min(10))
        .min(BACKOFF_CAP);
    Duration::from_nanos(rand::rng().random_range(0..=top.as_nanos() as u64))
}

#[cfg(test)]
mod tests;
