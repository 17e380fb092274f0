//! WatchHolds: the holds in force, sent page by page from the mirror (never
//! copied whole per stream), then `synced`, then every change — bounded per
//! stream (a few events queued), per caller and server-wide, and ended when
//! its client takes nothing for the stall timeout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Service;
use super::error::{Error, ErrorKind};
pub use super::watch_out::{Charge, Plain, STALLED_TOTAL, WatchEvent, WatchEvents, WatchWire};
use super::watch_out::{Out, channel};
use crate::fleet::Fleet;

/// Gauge of WatchHolds streams open.
pub const WATCH_STREAMS: &str = "retryd_watch_streams";
/// Counter of WatchHolds refused at a stream limit, labelled `limit` (`caller`, `server`).
pub const WATCH_REFUSED_TOTAL: &str = "retryd_watch_streams_refused_total";
pub use super::watch_filter::{MAX_WATCH_DEPENDENCIES, MAX_WATCH_TENANTS, WatchFilter};
pub use super::watch_snapshot::WATCH_RESUMED_TOTAL;
use super::watch_snapshot::{ResumeCache, snapshot};

/// How watches are bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchLimits {
    /// Streams one caller may hold open (`--max-watch-streams-per-caller`).
    pub per_caller: usize,
    /// Streams open in all (`--max-watch-streams`).
    pub total: usize,
    /// A stream whose client takes nothing for this long is ended (`--stall-timeout`).
    pub stall_timeout: Duration,
}

impl Default for WatchLimits {
    fn default() -> Self {
        WatchLimits {
            per_caller: 64,
            total: 10_000,
            stall_timeout: Duration::from_secs(30),
        }
    }
}

/// The streams open, per caller (entries exist only while a stream does,
/// so the table is bounded by [`WatchLimits::total`]).
#[derive(Debug, Default)]
pub struct Watchers {
    open: Mutex<(usize, HashMap<String, usize>)>,
    /// Resume digests by filter, while the mirror is unchanged.
    resumes: ResumeCache,
}

/// One open stream's place; gives it back when dropped.
#[derive(Debug)]
struct Seat {
    watchers: Arc<Watchers>,
    caller: String,
}

impl Watchers {
    fn enter(self: &Arc<Self>, caller: &str, limits: WatchLimits) -> Result<Seat, Error> {
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mine = open.1.get(caller).copied().unwrap_or(0);
        let refused = if open.0 >= limits.total {
            Some((
                "server",
                format!("{} watch streams are open (--max-watch-streams)", open.0),
            ))
        } else if mine >= limits.per_caller {
            Some((
                "caller",
                format!(
                    "this caller has {mine} watch streams open (--max-watch-streams-per-caller); watch several dependencies on one stream"
                ),
            ))
        } else {
            None
        };
        if let Some((limit, why)) = refused {
            metrics::counter!(WATCH_REFUSED_TOTAL, "limit" => limit).increment(1);
            return Err(Error::new(ErrorKind::ResourceExhausted, why));
        }
        open.0 += 1;
        *open.1.entry(caller.to_owned()).or_default() += 1;
        metrics::gauge!(WATCH_STREAMS).set(open.0 as f64);
        Ok(Seat {
            watchers: Arc::clone(self),
            caller: caller.to_owned(),
        })
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner).0
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut open = self
            .watchers
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        open.0 = open.0.saturating_sub(1);
        if let Some(n) = open.1.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.caller);
            }
        }
        metrics::gauge!(WATCH_STREAMS).set(open.0 as f64);
    }
}

impl Service {
    /// WatchHolds: the holds in force, then `synced`, then every change,
    /// until the server drains (UNAVAILABLE), the watcher goes away, falls
    /// too far behind or stalls (RESOURCE_EXHAUSTED).
    pub fn watch_holds<W: WatchWire>(
        &self,
        filter: WatchFilter,
        operator: bool,
        caller: &str,
        wire: Arc<W>,
    ) -> Result<WatchEvents<W>, Error> {
        let fleet = Arc::clone(self.fleet()?);
        filter.check()?;
        let limits = self.config.watch;
        let seat = self.watchers.enter(caller, limits)?;
        let mut draining = self.draining.clone();
        let (out, events) = channel(wire, Box::new(seat), limits.stall_timeout);
        let watchers = Arc::clone(&self.watchers);
        tokio::spawn(async move {
            // A replica just started under a shared store first reads the
            // fleet's holds in: its snapshot and `synced` wait for that.
            let mut loaded = fleet.mirror().loaded();
            tokio::select! {
                ready = async { loaded.wait_for(|l| *l).await.is_ok() } => if !ready { return },
                () = out.closed() => return,
                drained = async { draining.wait_for(|d| *d).await.is_ok() } => {
                    // Gone without a drain signal: end quietly, as `follow` does.
                    if drained {
                        out.fail(shutting_down());
                    }
                    return;
                }
            }
            // Subscribe before the snapshot: a change in between is seen twice, never missed.
            let events = fleet.mirror().subscribe();
            if snapshot(&fleet, &filter, operator, &watchers.resumes, &out).await {
                follow(&fleet, &filter, operator, &out, events, draining).await;
            }
        });
        Ok(events)
    }
}

/// How a watch ends when the server drains.
fn shutting_down() -> Error {
    Error::new(ErrorKind::Unavailable, "server is shutting down; watch again elsewhere")
}

/// Sends every change until the stream ends.
async fn follow<W: WatchWire>(
    fleet: &Fleet,
    filter: &WatchFilter,
    operator: bool,
    out: &Out<W>,
    mut events: tokio::sync::broadcast::Receiver<crate::fleet::HoldEvent>,
    mut draining: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        if *draining.borrow_and_update() {
            out.fail(shutting_down());
            return;
        }
        tokio::select! {
            // The watcher went away: give its place back now, not at the next event.
            () = out.closed() => return,
            changed = draining.changed() => {
                if changed.is_err() {
                    // The server is gone without a drain signal: end quietly.
                    return;
                }
            }
            received = events.recv() => match received {
                Ok(e) => {
                    if filter.matches(&e.hold) && !out.send(e.kind, Some(filter.show(fleet, e.hold, operator))).await {
                        return;
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    // Too slow a reader: say so and end, rather than silently skip events.
                    out.fail(Error::new(
                        ErrorKind::ResourceExhausted,
                        format!("watch fell {missed} events behind; watch again"),
                    ));
                    return;
                }
                Err(RecvError::Closed) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use arc_swap::ArcSwap;
    use tokio_stream::StreamExt as _;

    use super::*;
    use crate::core::Policy;
    use crate::core::UnixMillis;
    use crate::core::hold::{HoldKind, HoldPlan, HoldScope};
    use crate::fleet::{Fleet, FleetConfig, HoldEventKind};
    use crate::service::ServiceConfig;

    pub(super) fn service(holds: usize, stall: Duration) -> (Service, Arc<Fleet>, tokio::sync::watch::Sender<bool>) {
        let policy = Arc::new(ArcSwap::from_pointee(Policy::embedded().expect("policy")));
        let fleet = Fleet::in_memory(FleetConfig::default());
        let now = UnixMillis::now();
        for i in 0..holds {
            let tenant = format!("tenant-{i}");
            let plan = HoldPlan {
                scope: HoldScope::Tenant,
                kind: HoldKind::QuotaStop,
                catalog: "frontspin",
                dependency: "portal",
                subject: &tenant,
                until: now.plus_ms(600_000),
                probe_every_ms: 0,
                probe_window_ms: 30_000,
                code: "RATE_LIMITED",
                rule: "r",
                reason: "quota",
            };
            fleet.mirror().place(&plan, now, || format!("{i:016x}"));
        }
        let (tx, rx) = tokio::sync::watch::channel(false);
        let config = ServiceConfig {
            watch: WatchLimits {
                per_caller: 2,
                total: 3,
                stall_timeout: stall,
            },
            ..ServiceConfig::default()
        };
        let s = Service::new(policy, config).with_fleet(Arc::clone(&fleet), rx);
        (s, fleet, tx)
    }

    #[tokio::test]
    async fn a_replica_still_loading_its_stores_holds_sends_no_snapshot_until_loaded() {
        let (s, fleet, _drain) = service(5, Duration::from_secs(10));
        fleet.mirror().expect_load();
        let mut events = s
            .watch_holds(WatchFilter::default(), true, "c", Arc::new(Plain))
            .expect("watch");
        assert!(
            tokio::time::timeout(Duration::from_millis(200), events.next())
                .await
                .is_err(),
            "no snapshot and no synced while the store's holds are not read in"
        );
        fleet.mirror().mark_loaded();
        let mut placed = 0;
        loop {
            let ev = events.next().await.expect("open").expect("event");
            if ev.kind == HoldEventKind::Synced {
                break;
            }
            placed += 1;
        }
        assert_eq!(placed, 5);
    }

    #[tokio::test]
    async fn a_snapshot_is_every_hold_once_in_id_order_then_synced() {
        let (s, _fleet, _drain) = service(300, Duration::from_secs(10));
        let mut events = s
            .watch_holds(WatchFilter::default(), true, "c", Arc::new(Plain))
            .expect("watch");
        let mut ids = Vec::new();
        loop {
            let ev = events.next().await.expect("open").expect("event");
            if ev.kind == HoldEventKind::Synced {
                break;
            }
            assert_eq!(ev.kind, HoldEventKind::Placed);
            ids.push(ev.hold.expect("hold").hold.id);
        }
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!((ids.len(), ids), (300, sorted));
    }

    #[tokio::test]
    async fn streams_are_capped_per_caller_and_in_all_and_places_come_back() {
        let (s, _fleet, _drain) = service(0, Duration::from_secs(10));
        let a1 = s
            .watch_holds(WatchFilter::default(), false, "a", Arc::new(Plain))
            .expect("1st");
        let _a2 = s
            .watch_holds(WatchFilter::default(), false, "a", Arc::new(Plain))
            .expect("2nd");
        let err = s
            .watch_holds(WatchFilter::default(), false, "a", Arc::new(Plain))
            .expect_err("3rd of one caller");
        assert_eq!(err.kind, ErrorKind::ResourceExhausted);
        let _b1 = s
            .watch_holds(WatchFilter::default(), false, "b", Arc::new(Plain))
            .expect("another caller");
        let err = s
            .watch_holds(WatchFilter::default(), false, "c", Arc::new(Plain))
            .expect_err("server-wide cap");
        assert!(err.to_string().contains("--max-watch-streams"), "{err}");
        drop(a1);
        for _ in 0..100 {
            if s.watchers.open() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            s.watchers.open(),
            2,
            "a closed stream gives its place back without waiting for an event"
        );
        s.watch_holds(WatchFilter::default(), false, "a", Arc::new(Plain))
            .expect("a's place came back");
    }

    #[tokio::test]
    async fn a_stream_nobody_reads_is_ended_and_holds_only_a_few_events() {
        let (s, _fleet, _drain) = service(2_000, Duration::from_millis(200));
        let mut events = s
            .watch_holds(WatchFilter::default(), false, "slow", Arc::new(Plain))
            .expect("watch");
        // Never read for longer than the stall timeout: the producer stops at
        // a few queued events, never a copy of the 2 000 holds.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(
            s.watchers.open(),
            1,
            "a stalled stream keeps its caller's place while the door holds it"
        );
        let mut got = 0;
        let mut last = None;
        while let Some(ev) = events.next().await {
            match ev {
                Ok(_) => got += 1,
                Err(e) => last = Some(e),
            }
        }
        assert!(
            got <= super::super::watch_out::QUEUED_EVENTS,
            "{got} events were queued"
        );
        let e = last.expect("ended with an error");
        assert_eq!(e.kind, ErrorKind::ResourceExhausted);
        assert!(e.to_string().contains("--stall-timeout"), "{e}");
        drop(events);
        assert_eq!(s.watchers.open(), 0, "the place comes back with the stream");
    }

    /// Events of `SIZE` bytes charged to a shared budget of `room` bytes,
    /// as the doors' ledger would.
    #[derive(Debug)]
    struct Budget {
        room: usize,
        held: std::sync::Mutex<usize>,
        peak: std::sync::Mutex<usize>,
    }

    const SIZE: usize = 100;

    impl WatchWire for Budget {
        type Item = WatchEvent;

        fn encode(&self, event: WatchEvent) -> (WatchEvent, usize) {
            (event, SIZE)
        }

        fn charge(&self, n: usize) -> Charge {
            let mut held = self.held.lock().unwrap();
            if *held + n > self.room {
                return Charge::Full;
            }
            *held += n;
            let mut peak = self.peak.lock().unwrap();
            *peak = (*peak).max(*held);
            Charge::Charged
        }

        fn release(&self, n: usize) {
            *self.held.lock().unwrap() -= n;
        }
    }

    #[tokio::test]
    async fn queued_events_wait_for_bytes_and_a_stalled_stream_gives_them_back() {
        let (s, _fleet, _drain) = service(200, Duration::from_millis(300));
        let budget = Arc::new(Budget {
            room: 10 * SIZE,
            held: std::sync::Mutex::new(0),
            peak: std::sync::Mutex::new(0),
        });
        let stalled = s
            .watch_holds(WatchFilter::default(), false, "slow", Arc::clone(&budget))
            .expect("watch");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            *budget.held.lock().unwrap(),
            10 * SIZE,
            "the never-read stream holds the budget"
        );
        // A reader opened now waits for bytes (its client took all it was
        // given: it is not stalled) and is served once the stalled stream ends.
        let mut reader = s
            .watch_holds(WatchFilter::default(), false, "reader", Arc::clone(&budget))
            .expect("watch");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            tokio::time::timeout(Duration::from_millis(10), reader.next())
                .await
                .is_err(),
            "nothing for the reader while the stalled stream holds the bytes"
        );
        let mut placed = 0;
        loop {
            let ev = tokio::time::timeout(Duration::from_secs(5), reader.next())
                .await
                .expect("the reader is served")
                .expect("open")
                .expect("an event, not an end");
            if ev.kind == HoldEventKind::Synced {
                break;
            }
            placed += 1;
        }
        assert_eq!(placed, 200, "every hold, none dropped while waiting for bytes");
        // The stalled stream was ended: what it had queued was dropped (its
        // client must watch again) and its bytes given back at once.
        let mut stalled = stalled;
        let first = stalled
            .next()
            .await
            .expect("an end")
            .expect_err("no event: they were dropped");
        assert_eq!(first.kind, ErrorKind::ResourceExhausted);
        assert!(first.to_string().contains("--stall-timeout"), "{first}");
        assert!(stalled.next().await.is_none());
        drop(stalled);
        assert!(*budget.peak.lock().unwrap() <= 10 * SIZE);
        drop(reader);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(*budget.held.lock().unwrap(), 0, "every byte given back");
    }

    #[tokio::test]
    async fn a_mirrors_tenants_get_their_holds_in_clear_and_every_dependency_hold() {
        let (s, fleet, _drain) = service(3, Duration::from_secs(10));
        let now = UnixMillis::now();
        let plan = HoldPlan {
            scope: HoldScope::Dependency,
            kind: HoldKind::Quarantine,
            catalog: "frontspin",
            dependency: "portal",
            subject: "",
            until: now.plus_ms(600_000),
            probe_every_ms: 0,
            probe_window_ms: 30_000,
            code: "TIMEOUT_QUARANTINE",
            rule: "r",
            reason: "quarantine",
        };
        fleet.mirror().place(&plan, now, || "dep".to_owned());
        let filter = WatchFilter {
            tenants: vec!["tenant-1".to_owned(), "tenant-9".to_owned()],
            ..WatchFilter::default()
        };
        let mut events = s.watch_holds(filter, false, "c", Arc::new(Plain)).expect("watch");
        let mut seen = Vec::new();
        loop {
            let ev = events.next().await.expect("open").expect("event");
            if ev.kind == HoldEventKind::Synced {
                break;
            }
            let shown = ev.hold.expect("hold");
            seen.push((shown.hold.key.scope, shown.tenant.clone()));
        }
        seen.sort_by_key(|(_, t)| t.clone());
        assert_eq!(
            seen,
            [
                (HoldScope::Dependency, String::new()),
                (HoldScope::Tenant, "tenant-1".to_owned())
            ],
            "the named tenant's hold in clear, the dependency's hold, no other tenant's"
        );
        let both = WatchFilter {
            tenant: "tenant-1".to_owned(),
            tenants: vec!["tenant-2".to_owned()],
            ..WatchFilter::default()
        };
        let err = s.watch_holds(both, false, "c", Arc::new(Plain)).expect_err("both");
        assert!(err.to_string().contains("tenants"), "{err}");
        let many = WatchFilter {
            tenants: vec!["t".to_owned(); MAX_WATCH_TENANTS + 1],
            ..WatchFilter::default()
        };
        let err = s.watch_holds(many, false, "c", Arc::new(Plain)).expect_err("too many");
        assert!(err.to_string().contains("tenants"), "{err}");
    }

    #[tokio::test]
    async fn filters_name_the_field_and_bound_the_dependencies() {
        let (s, _fleet, _drain) = service(0, Duration::from_secs(1));
        let many = WatchFilter {
            dependencies: vec!["d".to_owned(); MAX_WATCH_DEPENDENCIES + 1],
            ..WatchFilter::default()
        };
        let err = s.watch_holds(many, false, "a", Arc::new(Plain)).expect_err("too many");
        assert!(err.to_string().contains("dependencies"), "{err}");
        let long = WatchFilter {
            dependencies: vec!["x".repeat(10_000)],
            ..WatchFilter::default()
        };
        let err = s.watch_holds(long, false, "a", Arc::new(Plain)).expect_err("too long");
        assert!(err.to_string().contains("dependencies[0]"), "{err}");
        assert_eq!(s.watchers.open(), 0, "a refused watch takes no place");
    }

    /// A reconnecting mirror's resume (`watch_snapshot`).
    mod resume;
}
