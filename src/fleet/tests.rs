use super::*;

const NOW: UnixMillis = UnixMillis(1_000_000);

fn plan(scope: HoldScope, dependency: &str) -> HoldPlan<'_> {
    HoldPlan {
        scope,
        kind: HoldKind::Pause,
        catalog: "vibecode",
        dependency,
        subject: if scope == HoldScope::Tenant { "acme" } else { "" },
        until: NOW.plus_ms(60_000),
        probe_every_ms: 0,
        probe_window_ms: 0,
        code: "QUEUE_OVERFLOW",
        rule: "vibecode/QUEUE_OVERFLOW/read",
        reason: "why",
    }
}

fn fleet(per_sec: f64, dependency_per_sec: f64) -> Arc<Fleet> {
    Fleet::in_memory(FleetConfig {
        max_holds: 100,
        limits: PlacementLimits {
            per_sec,
            dependency_per_sec,
        },
        tenant_hash_key: b"key".to_vec(),
        ..FleetConfig::default()
    })
}

#[test]
fn a_caller_over_its_rate_places_nothing_but_confirming_a_hold_costs_nothing() {
    let f = fleet(100.0, 1.0);
    // A burst of two dependency-wide holds, then refused.
    assert!(matches!(
        f.place(&plan(HoldScope::Dependency, "p1"), "10.0.0.1", NOW),
        PlaceOutcome::Held(_)
    ));
    assert!(matches!(
        f.place(&plan(HoldScope::Dependency, "p2"), "10.0.0.1", NOW),
        PlaceOutcome::Held(_)
    ));
    assert_eq!(
        f.place(&plan(HoldScope::Dependency, "p3"), "10.0.0.1", NOW),
        PlaceOutcome::RateLimited
    );
    assert!(f.in_force("vibecode", "p3", "", "", NOW).is_none(), "nothing placed");
    // The same failure again only confirms a hold in force: no token spent.
    assert!(matches!(
        f.place(&plan(HoldScope::Dependency, "p1"), "10.0.0.1", NOW),
        PlaceOutcome::Held(_)
    ));
    // Another caller, and tenant holds, are unaffected.
    assert!(matches!(
        f.place(&plan(HoldScope::Dependency, "p3"), "10.0.0.2", NOW),
        PlaceOutcome::Held(_)
    ));
    assert!(matches!(
        f.place(&plan(HoldScope::Tenant, "p4"), "10.0.0.1", NOW),
        PlaceOutcome::Held(_)
    ));
}

#[test]
fn tenants_are_hashed_with_the_fleets_key() {
    let (a, b) = (fleet(1.0, 1.0), fleet(1.0, 1.0));
    assert_eq!(
        a.hash_tenant("acme"),
        b.hash_tenant("acme"),
        "same key, same hash on every replica"
    );
    assert_ne!(a.hash_tenant("acme"), a.hash_tenant("globex"));
    assert!(a.hash_tenant("acme").starts_with("h:") && a.hash_tenant("acme").len() == 18);
    assert_eq!(a.hash_tenant(""), "");
    let other_key = Fleet::in_memory(FleetConfig {
        tenant_hash_key: b"another".to_vec(),
        ..FleetConfig::default()
    });
    assert_ne!(other_key.hash_tenant("acme"), a.hash_tenant("acme"));
}

#[test]
fn under_an_open_circuit_a_retry_waits_for_the_next_probe_slot_not_the_cap() {
    let circuit = Hold {
        id: "c".into(),
        key: plan(HoldScope::Dependency, "p").key(),
        kind: HoldKind::CircuitOpen,
        since: NOW,
        until: NOW.plus_ms(90_000_000),
        probe_every_ms: 30_000,
        probe_window_ms: 0,
        rank: Default::default(),
        code: "ERROR_LOOP_DETECTED".into(),
        rule: "r".into(),
        reason: "why".into(),
    };
    assert_eq!(Fleet::retry_floor(&circuit, NOW.plus_ms(1)), NOW.plus_ms(30_000));
    assert_eq!(Fleet::retry_floor(&circuit, NOW.plus_ms(45_000)), NOW.plus_ms(60_000));
    let pause = Hold {
        kind: HoldKind::Pause,
        until: NOW.plus_ms(5_000),
        ..circuit
    };
    assert_eq!(Fleet::retry_floor(&pause, NOW), NOW.plus_ms(5_000));
}

#[test]
fn at_the_cap_an_operators_hold_outranks_identified_and_anonymous_ones() {
    let f = Fleet::in_memory(FleetConfig {
        max_holds: 3,
        limits: PlacementLimits {
            per_sec: 1000.0,
            dependency_per_sec: 1000.0,
        },
        tenant_hash_key: b"key".to_vec(),
        ..FleetConfig::default()
    });
    assert!(matches!(
        f.place(&plan(HoldScope::Dependency, "by-operator"), "op:10.0.0.1", NOW),
        PlaceOutcome::Held(ref p) if matches!(**p, Placed::New(_))
    ));
    // Identified and anonymous callers fill the cap, then keep placing:
    // they evict one another, never the operator's hold.
    for i in 0..20 {
        let dependency = format!("dep-{i}");
        let caller = if i % 2 == 0 {
            format!("cert:svc-{i}")
        } else {
            format!("10.0.1.{i}")
        };
        f.place(&plan(HoldScope::Dependency, &dependency), &caller, NOW);
    }
    assert!(f.mirror().evicted() > 0);
    assert_eq!(f.mirror().covering("vibecode", "by-operator", "", "", NOW).len(), 1);
}
