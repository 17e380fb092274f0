//! The holds mirror: one `WatchHolds` stream per client keeps a local copy
//! of the fleet holds that can cover the client's calls, so a call whose
//! scope has no hold goes ahead with no RPC; a known hold refuses locally;
//! probe points and scopes not yet synced ask `Admit`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rand::Rng;
use tokio::sync::{Notify, mpsc, watch};
use tonic::transport::Channel;

use crate::pb::retry_decision_service_client::RetryDecisionServiceClient;
use crate::{Event, Hook, pb};

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

struct MHold {
    catalog: String,
    tenant: String,
    method: String,
    scope: i32,
    until: SystemTime,
    next_probe: Option<SystemTime>,
    probing: bool,
    raw: pb::Hold,
}

impl MHold {
    fn covers(&self, catalog: &str, tenant: &str, method: &str) -> bool {
        if !catalog.is_empty() && self.catalog != catalog {
            return false;
        }
        match pb::Scope::try_from(self.scope) {
            // A hashed tenant ("h:…", from a retryd that ignores `tenants`)
            // may be this one: it covers, and the call asks Admit.
            Ok(pb::Scope::Tenant) => self.tenant == tenant || (!tenant.is_empty() && self.tenant.starts_with("h:")),
            Ok(pb::Scope::Method) => self.method == method,
            // dependency scope, or one this library does not know: cover (conservative)
            _ => true,
        }
    }

    fn in_force(&self, now: SystemTime) -> bool {
        now < self.until || (self.next_probe.is_some() && now < self.until + PROBE_GRACE)
    }
}

fn time_of(t: &Option<prost_types::Timestamp>) -> Option<SystemTime> {
    (*t).and_then(|t| SystemTime::try_from(t).ok())
}

#[derive(Default)]
struct HoldSet {
    by_id: HashMap<String, String>, // id → dependency
    by_dep: HashMap<String, HashMap<String, MHold>>,
    dropped: HashSet<String>, // dependencies a drop at the cap left unsynced
}

impl HoldSet {
    fn remove(&mut self, id: &str) {
        if let Some(dep) = self.by_id.remove(id) {
            if let Some(m) = self.by_dep.get_mut(&dep) {
                m.remove(id);
                if m.is_empty() {
                    self.by_dep.remove(&dep);
                }
            }
        }
    }
    fn get(&self, id: &str) -> Option<&MHold> {
        self.by_dep.get(self.by_id.get(id)?)?.get(id)
    }
}

#[derive(Default)]
struct State {
    live: HoldSet,
    lifted: HashMap<String, SystemTime>,
    lifted_order: VecDeque<String>,
    want_deps: HashSet<String>,
    want_tenants: HashSet<String>,
    sync_deps: HashSet<String>,
    sync_tenants: HashSet<String>,
    live_gen: u64,
    next_gen: u64,
    stale: bool,
    ever_synced: bool,
}

impl State {
    fn covered<'a>(
        &self,
        deps: impl IntoIterator<Item = &'a String>,
        tenants: impl IntoIterator<Item = &'a String>,
    ) -> bool {
        deps.into_iter()
            .all(|d| d.is_empty() || (self.sync_deps.contains(d) && !self.live.dropped.contains(d)))
            && tenants
                .into_iter()
                .all(|t| t.is_empty() || self.sync_tenants.contains(t))
    }

    /// Applies one event to the live set (`snap`: a stream's snapshot), idempotently by id and until.
    fn apply(&mut self, snap: Option<&mut HoldSet>, kind: i32, h: pb::Hold, max: usize) {
        if h.id.is_empty() {
            return;
        }
        let until = time_of(&h.until).unwrap_or(SystemTime::UNIX_EPOCH);
        let set = match snap {
            Some(s) => s,
            None => &mut self.live,
        };
        match pb::HoldEventKind::try_from(kind) {
            Ok(pb::HoldEventKind::Lifted) => {
                set.remove(&h.id);
                if !self.lifted.contains_key(&h.id) {
                    self.lifted_order.push_back(h.id.clone());
                    if self.lifted_order.len() > MAX_TOMBSTONES {
                        if let Some(old) = self.lifted_order.pop_front() {
                            self.lifted.remove(&old);
                        }
                    }
                }
                let e = self.lifted.entry(h.id).or_insert(until);
                *e = (*e).max(until);
                return;
            }
            Ok(pb::HoldEventKind::Placed | pb::HoldEventKind::Extended | pb::HoldEventKind::Probing) => {}
            _ => return,
        }
        if self.lifted.get(&h.id).is_some_and(|l| until <= *l) {
            return; // a PLACED that raced the snapshot: already lifted
        }
        if set.get(&h.id).is_some_and(|old| until < old.until) {
            return;
        }
        set.remove(&h.id);
        let m = MHold {
            catalog: h.catalog.clone(),
            tenant: h.tenant.clone(),
            method: h.method.clone(),
            scope: h.scope,
            until,
            next_probe: time_of(&h.next_probe_at),
            probing: h.probing || kind == pb::HoldEventKind::Probing as i32,
            raw: h,
        };
        let (id, dep) = (m.raw.id.clone(), m.raw.dependency.clone());
        set.by_id.insert(id.clone(), dep.clone());
        set.by_dep.entry(dep).or_default().insert(id, m);
        if set.by_id.len() > max {
            // Full: drop the hold ending soonest; its dependency goes back to
            // Admit until the next SYNCED, so the drop never lets a call through.
            let soonest = set
                .by_dep
                .iter()
                .flat_map(|(d, m)| m.iter().map(move |(id, h)| (h.until, d.clone(), id.clone())))
                .min();
            if let Some((_, dep, id)) = soonest {
                set.dropped.insert(dep);
                set.remove(&id);
            }
        }
    }
}

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
}

impl Mirror {
    pub(crate) fn start(
        stub: RetryDecisionServiceClient<Channel>,
        hook: Option<Hook>,
        max: usize,
        stop: watch::Receiver<bool>,
    ) -> Arc<Mirror> {
        let m = Arc::new(Mirror {
            max,
            state: RwLock::new(State::default()),
            offset_ns: AtomicI64::new(0),
            kick: Notify::new(),
            changed: watch::Sender::new(0),
            hook,
            stub,
        });
        tokio::spawn(m.clone().run(stop));
        m
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
                pending = self.clone().maybe_open(live.as_ref().map(|l| (&l.1, &l.2)), &tx);
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
                        retry = Some(tokio::time::Instant::now() + backoff(failures));
                        if live.is_none() {
                            self.set_stale(why);
                        }
                    }
                    Msg::Ended(g, why) if gen(&live) == Some(g) => {
                        live = None;
                        self.set_stale(why);
                        failures += 1;
                        retry = Some(tokio::time::Instant::now() + backoff(failures));
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
            ..Default::default()
        };
        let mut stream = match self.stub.clone().watch_holds(req).await {
            Ok(s) => s.into_inner(),
            Err(e) => return format!("WatchHolds failed: {}", e.message()),
        };
        let mut snap = Some(HoldSet::default());
        loop {
            let ev = match stream.message().await {
                Ok(Some(ev)) => ev,
                Ok(None) => return "WatchHolds ended".into(),
                Err(e) => return format!("WatchHolds failed: {}", e.message()),
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
                    snap.take().map(|set| {
                        // The new snapshot is the truth: it replaces the mirror whole.
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
mod tests {
    use super::*;

    fn hold(id: &str, scope: pb::Scope, tenant: &str, until: SystemTime) -> pb::Hold {
        pb::Hold {
            id: id.into(),
            catalog: "frontspin".into(),
            dependency: "d".into(),
            tenant: tenant.into(),
            scope: scope as i32,
            until: Some(until.into()),
            ..Default::default()
        }
    }

    fn synced(max: usize) -> Arc<Mirror> {
        let stub = RetryDecisionServiceClient::new(
            tonic::transport::Endpoint::from_static("http://127.0.0.1:1").connect_lazy(),
        );
        let m = Arc::new(Mirror {
            max,
            state: RwLock::new(State::default()),
            offset_ns: AtomicI64::new(0),
            kick: Notify::new(),
            changed: watch::Sender::new(0),
            hook: None,
            stub,
        });
        m.want(&["d".into()], &["t".into()]);
        let mut s = m.state.write().unwrap();
        s.sync_deps.insert("d".into());
        s.sync_tenants.insert("t".into());
        s.ever_synced = true;
        drop(s);
        m
    }

    fn put(m: &Mirror, kind: pb::HoldEventKind, h: pb::Hold) {
        m.state.write().unwrap().apply(None, kind as i32, h, m.max);
    }

    fn what(a: Admission) -> &'static str {
        match a {
            Admission::Local => "local",
            Admission::Refuse { .. } => "refuse",
            Admission::Ask => "ask",
        }
    }

    #[tokio::test]
    async fn admits_locally_refuses_by_a_covering_hold_and_asks_at_probe_points() {
        let m = synced(10);
        let hour = SystemTime::now() + Duration::from_secs(3600);
        assert_eq!(what(m.decide("frontspin", "d", "t", "m")), "local");
        put(
            &m,
            pb::HoldEventKind::Placed,
            hold("other", pb::Scope::Tenant, "t2", hour),
        );
        assert_eq!(
            what(m.decide("frontspin", "d", "t", "m")),
            "local",
            "another tenant's hold"
        );
        put(
            &m,
            pb::HoldEventKind::Placed,
            hold("mine", pb::Scope::Tenant, "t", hour),
        );
        match m.decide("", "d", "t", "m") {
            Admission::Refuse { hold, retry_at } => {
                assert_eq!(hold.id, "mine");
                let off = retry_at.duration_since(hour).unwrap_or_else(|e| e.duration());
                assert!(off < Duration::from_millis(1), "retry_at off by {off:?}");
            }
            _ => panic!("own tenant's hold must refuse (a call naming no catalog matches any)"),
        }
        assert_eq!(
            what(m.decide("vibecode", "d", "t", "m")),
            "local",
            "another catalog's hold"
        );
        let mut probe = hold("mine", pb::Scope::Tenant, "t", hour);
        probe.next_probe_at = Some((SystemTime::now() - Duration::from_millis(1)).into());
        put(&m, pb::HoldEventKind::Extended, probe);
        assert_eq!(
            what(m.decide("frontspin", "d", "t", "m")),
            "ask",
            "a probe point asks Admit"
        );
        // Past until, a stop with a probe point still covers (its window is not sent).
        let m2 = synced(10);
        let mut stop = hold(
            "stop",
            pb::Scope::Dependency,
            "",
            SystemTime::now() - Duration::from_secs(1),
        );
        stop.next_probe_at = stop.until;
        put(&m2, pb::HoldEventKind::Placed, stop);
        assert_eq!(what(m2.decide("frontspin", "d", "t", "m")), "ask");
        assert_eq!(what(m.decide("frontspin", "d2", "t", "m")), "ask", "unwatched");
        assert!(
            m.state.read().unwrap().want_deps.contains("d2"),
            "an unwatched dependency widens the watch"
        );
    }

    #[tokio::test]
    async fn events_are_idempotent_and_the_cap_drops_the_soonest_then_asks_admit() {
        let m = synced(3);
        let at = |s: u64| SystemTime::now() + Duration::from_secs(s);
        put(
            &m,
            pb::HoldEventKind::Placed,
            hold("h", pb::Scope::Method, "", at(3600)),
        );
        put(&m, pb::HoldEventKind::Placed, hold("h", pb::Scope::Method, "", at(60)));
        let until = m.state.read().unwrap().live.get("h").unwrap().until;
        assert!(until > at(3000), "an older until replaced a later one");
        let end = at(3600);
        put(&m, pb::HoldEventKind::Lifted, hold("h", pb::Scope::Method, "", end));
        put(&m, pb::HoldEventKind::Placed, hold("h", pb::Scope::Method, "", end));
        assert_eq!(m.state.read().unwrap().live.by_id.len(), 0, "a PLACED raced its lift");
        for i in 0..5u64 {
            put(
                &m,
                pb::HoldEventKind::Placed,
                hold(&format!("x{i}"), pb::Scope::Method, "", at(600 - i * 60)),
            );
        }
        {
            let s = m.state.read().unwrap();
            assert_eq!(s.live.by_id.len(), 3);
            assert!(s.live.get("x0").is_some() && s.live.get("x4").is_none());
        }
        assert_eq!(
            what(m.decide("frontspin", "d", "t", "other")),
            "ask",
            "a drop never lets a call through"
        );
        for i in 0..MAX_TOMBSTONES + 10 {
            put(
                &m,
                pb::HoldEventKind::Lifted,
                hold(&format!("l{i}"), pb::Scope::Method, "", at(1)),
            );
        }
        let s = m.state.read().unwrap();
        assert_eq!((s.lifted.len(), s.lifted_order.len()), (MAX_TOMBSTONES, MAX_TOMBSTONES));
    }

    #[tokio::test]
    async fn clock_skew_is_corrected() {
        let m = synced(10);
        m.offset_ns.store(3_600_000_000_000, Ordering::Relaxed); // the server is an hour ahead
        let at = |s: u64| SystemTime::now() + Duration::from_secs(s);
        put(
            &m,
            pb::HoldEventKind::Placed,
            hold("a", pb::Scope::Dependency, "", at(1800)),
        );
        assert_eq!(
            what(m.decide("frontspin", "d", "t", "m")),
            "local",
            "ended by the server's clock"
        );
        put(
            &m,
            pb::HoldEventKind::Placed,
            hold("b", pb::Scope::Dependency, "", at(5400)),
        );
        match m.decide("frontspin", "d", "t", "m") {
            Admission::Refuse { retry_at, .. } => {
                let d = retry_at.duration_since(SystemTime::now()).unwrap();
                assert!(d > Duration::from_secs(1740) && d < Duration::from_secs(1860), "{d:?}");
            }
            _ => panic!("must refuse"),
        }
    }
}
