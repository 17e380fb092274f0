use super::*;

const NOW: UnixMillis = UnixMillis(1_000_000);

fn plan<'a>(scope: HoldScope, dependency: &'a str, subject: &'a str, until_ms: u64) -> HoldPlan<'a> {
    HoldPlan {
        scope,
        kind: HoldKind::Pause,
        catalog: "vibecode",
        dependency,
        subject,
        until: NOW.plus_ms(until_ms),
        probe_every_ms: 0,
        probe_window_ms: 0,
        code: "QUEUE_OVERFLOW",
        rule: "vibecode/QUEUE_OVERFLOW/read",
        reason: "why",
    }
}

fn ids() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("id{n}")
    }
}

#[test]
fn a_hold_only_extends_and_events_follow_what_happened() {
    let m = Mirror::new(10);
    let mut events = m.subscribe();
    let mut id = ids();
    let first = m.place(&plan(HoldScope::Dependency, "p", "", 60_000), NOW, &mut id);
    assert!(matches!(first, Placed::New(ref h) if h.id == "id1"));
    // Shorter, and barely longer (< 10 %): kept as it is, no event.
    assert!(matches!(
        m.place(&plan(HoldScope::Dependency, "p", "", 30_000), NOW, &mut id),
        Placed::Kept(_)
    ));
    assert!(matches!(
        m.place(&plan(HoldScope::Dependency, "p", "", 61_000), NOW, &mut id),
        Placed::Kept(_)
    ));
    let ext = m.place(&plan(HoldScope::Dependency, "p", "", 120_000), NOW, &mut id);
    assert!(matches!(ext, Placed::Extended(ref h) if h.id == "id1" && h.until == NOW.plus_ms(120_000)));
    let kinds: Vec<_> = std::iter::from_fn(|| events.try_recv().ok()).map(|e| e.kind).collect();
    assert_eq!(kinds, [HoldEventKind::Placed, HoldEventKind::Extended]);
    // A call covered by tenant, dependency and method holds sees all three.
    m.place(&plan(HoldScope::Tenant, "p", "acme", 1_000), NOW, &mut id);
    m.place(&plan(HoldScope::Method, "p", "crm.deal.add", 1_000), NOW, &mut id);
    assert_eq!(m.covering("vibecode", "p", "acme", "crm.deal.add", NOW).len(), 3);
    assert_eq!(m.covering("vibecode", "p", "globex", "crm.deal.list", NOW).len(), 1);
    assert!(m.covering("vibecode", "other", "acme", "crm.deal.add", NOW).is_empty());
    // Expired holds leave memory at the sweep, announced as lifted.
    assert_eq!(m.sweep(NOW.plus_ms(5_000)), 2);
    assert_eq!(m.len(), 1);
}

#[test]
fn at_the_cap_tenant_holds_go_first_and_never_make_room_by_dropping_a_dependency_hold() {
    let m = Mirror::new(3);
    let mut id = ids();
    m.place(&plan(HoldScope::Dependency, "p1", "", 60_000), NOW, &mut id);
    m.place(&plan(HoldScope::Tenant, "p1", "old", 60_000), NOW, &mut id);
    m.place(&plan(HoldScope::Tenant, "p1", "new", 60_000), NOW.plus_ms(1), &mut id);
    // A dependency hold evicts the oldest-placed tenant hold.
    assert!(matches!(
        m.place(&plan(HoldScope::Dependency, "p2", "", 60_000), NOW, &mut id),
        Placed::New(_)
    ));
    assert!(
        m.covering("vibecode", "p1", "old", "", NOW)
            .iter()
            .all(|h| h.key.scope != HoldScope::Tenant)
    );
    assert_eq!(m.evicted(), 1);
    // A tenant hold evicts the remaining tenant hold...
    assert!(matches!(
        m.place(&plan(HoldScope::Tenant, "p1", "third", 60_000), NOW, &mut id),
        Placed::New(_)
    ));
    assert_eq!(m.evicted(), 2);
    m.place(&plan(HoldScope::Dependency, "p3", "", 60_000), NOW, &mut id);
    // ...but with only dependency holds left, a tenant hold is refused.
    assert_eq!(
        m.place(&plan(HoldScope::Tenant, "p1", "fourth", 60_000), NOW, &mut id),
        Placed::Full
    );
    assert_eq!(
        m.snapshot(NOW)
            .iter()
            .filter(|h| h.key.scope == HoldScope::Dependency)
            .count(),
        3
    );
}

#[test]
fn remote_holds_merge_later_wins_and_resync_returns_what_the_store_lacks() {
    let m = Mirror::new(10);
    let mut id = ids();
    let Placed::New(local) = m.place(&plan(HoldScope::Dependency, "p", "", 60_000), NOW, &mut id) else {
        panic!("placed")
    };
    let mut remote = Hold::clone(&local);
    remote.id = "remote".into();
    remote.until = NOW.plus_ms(30_000);
    m.apply_remote(remote.clone(), NOW);
    assert_eq!(
        m.get("id1", NOW).map(|h| h.until),
        Some(NOW.plus_ms(60_000)),
        "an earlier end never wins"
    );
    remote.until = NOW.plus_ms(90_000);
    m.apply_remote(remote.clone(), NOW);
    assert_eq!(
        m.get("remote", NOW).map(|h| h.until),
        Some(NOW.plus_ms(90_000)),
        "the stored id is adopted"
    );
    assert!(m.get("id1", NOW).is_none());

    let Placed::New(only_local) = m.place(&plan(HoldScope::Tenant, "p", "acme", 60_000), NOW, &mut id) else {
        panic!("placed")
    };
    let missing = m.resync(vec![remote], NOW);
    assert_eq!(
        missing,
        vec![Hold::clone(&only_local)],
        "the hold placed while the store was away is written through"
    );
}

#[test]
fn a_probe_slot_is_taken_once() {
    let m = Mirror::new(10);
    let mut id = ids();
    m.place(&plan(HoldScope::Dependency, "p", "", 60_000), NOW, &mut id);
    assert!(m.try_take_probe("id1", 1, "n1"));
    assert!(!m.try_take_probe("id1", 1, "n1"));
    assert!(m.probe_taken("id1", 1) && !m.probe_taken("id1", 2));
    assert!(m.try_take_probe("id1", 2, "n2"));
    assert!(!m.try_take_probe("unknown", 1, "n"));
}

#[test]
fn a_stop_enters_its_probe_phase_then_ends_and_the_sweep_says_so() {
    let m = Mirror::new(10);
    let mut events = m.subscribe();
    let mut stop = plan(HoldScope::Tenant, "p", "acme", 10_000);
    stop.kind = HoldKind::QuotaStop;
    stop.probe_window_ms = 5_000;
    let Placed::New(h) = m.place(&stop, NOW, ids()) else {
        panic!("placed")
    };
    assert_eq!(events.try_recv().unwrap().kind, HoldEventKind::Placed);
    assert_eq!(m.sweep(NOW.plus_ms(9_999)), 0);
    assert!(events.try_recv().is_err(), "nothing due yet");
    // At the end: still in force, probing, announced once.
    assert_eq!(m.sweep(NOW.plus_ms(10_000)), 0);
    assert_eq!(events.try_recv().unwrap().kind, HoldEventKind::Probing);
    assert_eq!(m.sweep(NOW.plus_ms(12_000)), 0);
    assert!(events.try_recv().is_err(), "the phase is announced once");
    assert!(m.get(&h.id, NOW.plus_ms(12_000)).is_some());
    assert_eq!(m.counts()[HoldKind::QuotaStop.index()][HoldScope::Tenant as usize], 1);
    // The window passes with no failure: lifted for everyone.
    assert_eq!(m.sweep(NOW.plus_ms(15_000)), 1);
    assert_eq!(events.try_recv().unwrap().kind, HoldEventKind::Lifted);
    assert_eq!(m.counts(), [[0; 3]; 4], "the gauges' counts follow");
}

#[test]
fn pages_follow_hold_ids_and_an_extension_keeps_its_place() {
    let m = Mirror::new(100);
    let mut n = 0;
    for t in 0..25 {
        let tenant = format!("t{t}");
        m.place(&plan(HoldScope::Tenant, "p", &tenant, 60_000), NOW, || {
            n += 1;
            format!("{n:04}")
        });
    }
    let first = m.page("", 10, NOW, |_| true);
    assert_eq!(first.first().map(|h| h.id.as_str()), Some("0001"));
    // Extending a hold of the first page does not move it into the next one.
    m.place(&plan(HoldScope::Tenant, "p", "t0", 600_000), NOW, || unreachable!());
    let second = m.page(&first[9].id, 10, NOW, |_| true);
    let third = m.page(&second[9].id, 10, NOW, |_| true);
    let all: Vec<String> = first
        .iter()
        .chain(&second)
        .chain(&third)
        .map(|h| h.id.clone())
        .collect();
    assert_eq!(all, (1..=25).map(|i| format!("{i:04}")).collect::<Vec<_>>());
    assert_eq!(m.page("", 100, NOW, |h| h.key.subject == "t7").len(), 1, "filtered");
}

#[test]
fn a_probe_token_is_accepted_once_for_its_own_slot() {
    let m = Mirror::new(10);
    let Placed::New(h) = m.place(&plan(HoldScope::Dependency, "p", "", 60_000), NOW, ids()) else {
        panic!("placed")
    };
    assert_eq!(m.redeem_probe(&h.id, 1, "n1"), Redeemed::Forged, "never issued");
    assert!(m.try_take_probe(&h.id, 1, "n1"));
    assert_eq!(m.redeem_probe(&h.id, 1, "n2"), Redeemed::Forged, "wrong nonce");
    assert_eq!(m.redeem_probe(&h.id, 2, "n1"), Redeemed::Forged, "a slot never issued");
    assert_eq!(m.redeem_probe(&h.id, 1, "n1"), Redeemed::Accepted);
    assert_eq!(m.redeem_probe(&h.id, 1, "n1"), Redeemed::Reused);
    assert!(m.try_take_probe(&h.id, 2, "n3"));
    assert_eq!(m.redeem_probe(&h.id, 1, "n1"), Redeemed::Superseded);
    // Another replica took slot 3: this one's slot-2 token is superseded.
    m.mark_probe_taken(&h.id, 3, None);
    assert_eq!(m.redeem_probe(&h.id, 2, "n3"), Redeemed::Superseded);
}

#[test]
fn a_dependency_page_walks_only_its_index_in_id_order_and_the_index_empties_with_its_holds() {
    let m = Mirror::new(100);
    let mut id = ids();
    // 30 tenant holds over three dependencies, interleaved.
    for i in 0..30 {
        let tenant = format!("t{i}");
        m.place(
            &plan(HoldScope::Tenant, ["a", "b", "c"][i % 3], &tenant, 60_000),
            NOW,
            &mut id,
        );
    }
    let mut seen = Vec::new();
    let mut after = String::new();
    loop {
        let page = m.page_of("b", &after, 4, NOW, |_| true);
        let last = page.len() < 4;
        assert!(page.iter().all(|h| h.key.dependency == "b"));
        if let Some(h) = page.last() {
            after.clone_from(&h.id);
        }
        seen.extend(page.into_iter().map(|h| h.id));
        if last {
            break;
        }
    }
    assert_eq!(seen.len(), 10);
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    // The same as the whole walk filtered by dependency.
    let all: Vec<String> = m
        .page("", 100, NOW, |h| h.key.dependency == "b")
        .into_iter()
        .map(|h| h.id)
        .collect();
    assert_eq!(seen, all);
    assert!(m.page_of("nobody", "", 10, NOW, |_| true).is_empty());
    // Once its holds are gone, a dependency leaves the index.
    assert_eq!(m.sweep(NOW.plus_ms(61_000)), 30);
    assert!(m.read().by_dep.is_empty());
    assert!(m.read().due.is_empty());
}

/// Holds are found by a hash of their scope's parts; a hash names a bucket,
/// not a scope. With every scope hashing alike (one bucket for all), each
/// lookup, placement, extension and lift still touches only its own scope:
/// the holds' keys are compared, parts apart ("p" + "1acme" is not "p1" +
/// "acme", a tenant is not a method of the same name).
#[test]
fn scopes_whose_hashes_meet_are_told_apart() {
    let m = Mirror::new(100);
    m.state.write().expect("lock").collide = true;
    let mut id = ids();
    let tenant = m.place(&plan(HoldScope::Tenant, "p1", "acme", 60_000), NOW, &mut id);
    let Placed::New(tenant) = tenant else {
        panic!("placed: {tenant:?}")
    };
    m.place(&plan(HoldScope::Tenant, "p", "1acme", 30_000), NOW, &mut id);
    m.place(&plan(HoldScope::Method, "p1", "acme", 20_000), NOW, &mut id);
    m.place(&plan(HoldScope::Dependency, "p2", "", 10_000), NOW, &mut id);
    assert_eq!(m.len(), 4);
    let seen = |dependency, tenant, method| -> Vec<String> {
        let mut ids: Vec<String> = m
            .covering("vibecode", dependency, tenant, method, NOW)
            .iter()
            .map(|h| h.id.clone())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(seen("p1", "acme", ""), ["id1"]);
    assert_eq!(seen("p", "1acme", ""), ["id2"]);
    assert_eq!(seen("p1", "globex", "acme"), ["id3"]);
    assert_eq!(seen("p1", "acme", "acme"), ["id1", "id3"]);
    assert_eq!(seen("p2", "acme", "acme"), ["id4"]);
    assert!(seen("p3", "acme", "acme").is_empty());
    assert!(
        m.covering("other", "p1", "acme", "acme", NOW).is_empty(),
        "another catalog"
    );
    // Extending one scope's hold leaves the others as they were.
    let ext = m.place(&plan(HoldScope::Tenant, "p1", "acme", 120_000), NOW, &mut id);
    assert!(matches!(ext, Placed::Extended(ref h) if h.id == tenant.id));
    assert_eq!(m.get("id2", NOW).expect("id2").until, NOW.plus_ms(30_000));
    assert_eq!(m.len(), 4);
    // Another kind on the same scope is a second hold, not a replacement.
    let quota = HoldPlan {
        kind: HoldKind::QuotaStop,
        ..plan(HoldScope::Tenant, "p1", "acme", 5_000)
    };
    assert!(matches!(m.place(&quota, NOW, &mut id), Placed::New(_)));
    assert_eq!(m.len(), 5);
    // Lifting one leaves its bucket-mates in force.
    assert!(m.lift("id1").is_some());
    assert_eq!(seen("p1", "acme", "acme"), ["id3", "id5"]);
    assert_eq!(seen("p", "1acme", ""), ["id2"]);
    let all: Vec<String> = m.snapshot(NOW).into_iter().map(|h| h.id).collect();
    assert_eq!(all, ["id5", "id4", "id3", "id2"], "ending soonest first");
    assert_eq!(m.page("", 10, NOW, |_| true).len(), 4);
    assert_eq!(m.sweep(NOW.plus_ms(25_000)), 3);
    assert_eq!(seen("p", "1acme", ""), ["id2"]);
    assert_eq!(m.len(), 1);
}
