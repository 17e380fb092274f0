//! Local admission, event application, the cap and clock skew.
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
    let stub =
        RetryDecisionServiceClient::new(tonic::transport::Endpoint::from_static("http://127.0.0.1:1").connect_lazy());
    let m = Arc::new(Mirror::new(stub, None, max, Arc::new(crate::busy::Busy::new(None))));
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
