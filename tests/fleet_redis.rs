//! The Redis store against a real `redis-server` (no mock): two `Fleet`s in
//! one process sharing one Redis are two replicas.

mod redis_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_support::{RedisCluster, RedisServer};
use retryd::core::hold::{Hold, HoldKind, HoldPlan, HoldScope};
use retryd::core::time::UnixMillis;
use retryd::fleet::redis::{RedisOptions, RedisStore};
use retryd::fleet::{Fleet, FleetConfig, PlaceOutcome, PlacementLimits, SharedStore, Take};

/// Longest a test waits for something to reach the other replica.
// Generous: CI's two cores run many test binaries at once, and a loaded
// machine delays pub/sub and TLS handshakes by seconds.
const PATIENCE: Duration = Duration::from_secs(5);

fn options() -> RedisOptions {
    RedisOptions {
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(400),
        ping_every: Duration::from_millis(200),
        // A probe slot taken in Redis within 50 ms (the default) or else
        // locally is the designed degrade for a slow Redis; on a loaded CI
        // machine it made two replicas each take one. These tests are about
        // a healthy Redis: a slow one is tested on its own.
        probe_timeout: Duration::from_secs(1),
        ..RedisOptions::default()
    }
}

struct Replica {
    fleet: Arc<Fleet>,
    store: Arc<RedisStore>,
}

fn replica(url: &str) -> Replica {
    replica_with(url, options())
}

fn replica_with(url: &str, opts: RedisOptions) -> Replica {
    let store = RedisStore::connect_lazy(url, opts).expect("valid URL");
    let config = FleetConfig {
        limits: PlacementLimits {
            per_sec: 1e6,
            dependency_per_sec: 1e6,
        },
        ..FleetConfig::default()
    };
    let shared: Arc<dyn SharedStore> = store.clone();
    Replica {
        fleet: Fleet::new(config, shared),
        store,
    }
}

async fn eventually(patience: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + patience;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn connected(replicas: &[&Replica]) {
    assert!(
        eventually(Duration::from_secs(5), || replicas.iter().all(|r| r.store.connected())).await,
        "replicas did not connect to Redis"
    );
}

fn quota_stop<'a>(tenant: &'a str, until: UnixMillis) -> HoldPlan<'a> {
    HoldPlan {
        scope: HoldScope::Tenant,
        kind: HoldKind::QuotaStop,
        catalog: "frontspin",
        dependency: "portal-1",
        subject: tenant,
        until,
        probe_every_ms: 0,
        probe_window_ms: 0,
        code: "RATE_LIMITED",
        rule: "RATE_LIMITED",
        reason: "daily allowance exhausted",
    }
}

fn place(r: &Replica, plan: &HoldPlan<'_>) -> Hold {
    let now = UnixMillis::now();
    let outcome = r.fleet.place(plan, "test-caller", now);
    assert!(!matches!(outcome, PlaceOutcome::RateLimited), "rate limited");
    let key = plan.key();
    r.fleet
        .mirror()
        .covering(plan.catalog, plan.dependency, key.tenant(), key.method(), now)
        .into_iter()
        .find(|h| h.key == key && h.kind == plan.kind)
        .map(Arc::unwrap_or_clone)
        .unwrap_or_else(|| panic!("not placed: {outcome:?}"))
}

fn holds_for(r: &Replica, tenant: &str) -> Vec<Hold> {
    r.fleet
        .mirror()
        .covering("frontspin", "portal-1", tenant, "", UnixMillis::now())
        .into_iter()
        .map(Arc::unwrap_or_clone)
        .collect()
}

fn pttl(redis: &RedisServer, key: &str) -> i64 {
    redis.cli(&["PTTL", key]).parse().expect("PTTL is a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_placed_on_a_refuses_on_b_and_a_release_on_b_lifts_it_on_a() {
    let redis = RedisServer::start();
    let (a, b) = (replica(&redis.url()), replica(&redis.url()));
    connected(&[&a, &b]).await;

    let held = place(&a, &quota_stop("acme", UnixMillis::now().plus_ms(60_000)));
    assert!(
        eventually(PATIENCE, || !holds_for(&b, "acme").is_empty()).await,
        "B never saw A's hold"
    );

    let now = UnixMillis::now();
    let on_b = b.fleet.admit("frontspin", "portal-1", "acme", "", now).await;
    assert!(!on_b.admitted, "B admits a call A's hold refuses");
    let shown = on_b.hold.expect("B reports the hold");
    assert_eq!(
        (shown.kind, shown.id.as_str(), shown.until),
        (HoldKind::QuotaStop, held.id.as_str(), held.until)
    );
    assert!(
        b.fleet.admit("frontspin", "portal-1", "globex", "", now).await.admitted,
        "another tenant is admitted"
    );

    let key = a.store.key_of(&held);
    assert_eq!(redis.cli(&["HGET", &key, "id"]), held.id);
    assert!(b.fleet.release(&held.id, UnixMillis::now()).is_some());
    assert!(
        eventually(PATIENCE, || holds_for(&a, "acme").is_empty()).await,
        "A still holds what B released"
    );
    assert!(
        a.fleet
            .admit("frontspin", "portal-1", "acme", "", UnixMillis::now())
            .await
            .admitted
    );
    assert!(
        eventually(PATIENCE, || redis.cli(&["EXISTS", &key]) == "0").await,
        "the released key is still stored"
    );

    // A stale write of the released hold (a replica that missed the lift
    // writing its copy through) is refused by the tombstone.
    a.store.put(&held);
    let marker = place(&a, &quota_stop("marker", UnixMillis::now().plus_ms(60_000)));
    assert!(eventually(PATIENCE, || redis.cli(&["EXISTS", &a.store.key_of(&marker)]) == "1").await);
    assert_eq!(redis.cli(&["EXISTS", &key]), "0", "a released hold came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_extend_only_and_keep_the_stored_id() {
    let redis = RedisServer::start();
    let (a, b) = (replica(&redis.url()), replica(&redis.url()));
    connected(&[&a, &b]).await;

    let now = UnixMillis::now();
    let held = place(&a, &quota_stop("acme", now.plus_ms(60_000)));
    let key = a.store.key_of(&held);
    assert!(eventually(PATIENCE, || redis.cli(&["EXISTS", &key]) == "1").await);
    let ttl = pttl(&redis, &key);
    assert!((55_000..=60_000).contains(&ttl), "PTTL {ttl} is not the hold's end");

    // B writes a shorter hold of the same scope and kind under another id: ignored.
    let mut shorter = held.clone();
    shorter.id = "00000000000000bb".into();
    shorter.until = now.plus_ms(10_000);
    b.store.put(&shorter);
    // A marker write after it: once the marker is stored, the shorter write was handled.
    let marker = place(&b, &quota_stop("marker-1", now.plus_ms(60_000)));
    assert!(eventually(PATIENCE, || redis.cli(&["EXISTS", &b.store.key_of(&marker)]) == "1").await);
    let ttl = pttl(&redis, &key);
    assert!(ttl > 50_000, "a shorter hold shortened the stored one (PTTL {ttl})");
    assert_eq!(redis.cli(&["HGET", &key, "id"]), held.id);
    assert_eq!(holds_for(&a, "acme")[0].until, held.until, "A's hold was shortened");

    // A longer one extends it, under the stored id, and A's mirror follows.
    let mut longer = shorter.clone();
    longer.until = now.plus_ms(120_000);
    b.store.put(&longer);
    assert!(
        eventually(PATIENCE, || pttl(&redis, &key) > 100_000).await,
        "a longer hold did not extend"
    );
    assert_eq!(redis.cli(&["HGET", &key, "id"]), held.id, "the stored id changed");
    assert!(
        eventually(PATIENCE, || holds_for(&a, "acme")
            .first()
            .map(|h| (h.id.clone(), h.until))
            == Some((held.id.clone(), longer.until)))
        .await,
        "A did not see the extension: {:?}",
        holds_for(&a, "acme")
    );
    // B adopts the stored id too (its own write came back with it).
    assert!(
        eventually(PATIENCE, || holds_for(&b, "acme").first().map(|h| h.id.clone())
            == Some(held.id.clone()))
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_expire_by_themselves() {
    let redis = RedisServer::start();
    let a = replica(&redis.url());
    connected(&[&a]).await;
    let held = place(&a, &quota_stop("acme", UnixMillis::now().plus_ms(400)));
    let key = a.store.key_of(&held);
    assert!(
        eventually(PATIENCE, || redis.cli(&["EXISTS", &key]) == "1").await,
        "never stored"
    );
    assert!(
        eventually(PATIENCE, || redis.cli(&["EXISTS", &key]) == "0").await,
        "did not expire"
    );
}

fn circuit(now: UnixMillis, every_ms: u64) -> HoldPlan<'static> {
    HoldPlan {
        scope: HoldScope::Dependency,
        kind: HoldKind::CircuitOpen,
        catalog: "vibecode",
        dependency: "api-1",
        subject: "",
        until: now.plus_ms(60_000),
        probe_every_ms: every_ms,
        probe_window_ms: 0,
        code: "ERROR_LOOP_DETECTED",
        rule: "ERROR_LOOP_DETECTED",
        reason: "error loop",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_probe_per_slot_across_replicas() {
    let redis = RedisServer::start();
    let (a, b) = (replica(&redis.url()), replica(&redis.url()));
    connected(&[&a, &b]).await;
    let held = place(&a, &circuit(UnixMillis::now(), 1_500));
    assert!(eventually(PATIENCE, || b.fleet.mirror().get(&held.id, UnixMillis::now()).is_some()).await);

    // The stores alone: 40 concurrent takes of one slot, half on each
    // replica (slot 0, below any slot Admit offers: slots only move forward).
    let mut takes = tokio::task::JoinSet::new();
    for i in 0..40 {
        let store = if i % 2 == 0 { a.store.clone() } else { b.store.clone() };
        let h = held.clone();
        // Each its own nonce, as Admit draws: the same nonce is the same take, asked again.
        takes.spawn(async move { store.take_probe_slot(&h, 0, &format!("{i:032x}")).await });
    }
    let won = takes.join_all().await.into_iter().filter(|w| *w == Take::Taken).count();
    assert_eq!(won, 1, "slot 0 taken {won} times");

    // Through Admit, once slot 1 falls due.
    tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_millis(1_600)).await;
    let mut admits = tokio::task::JoinSet::new();
    for i in 0..40 {
        let fleet = if i % 2 == 0 { a.fleet.clone() } else { b.fleet.clone() };
        admits.spawn(async move { fleet.admit("vibecode", "api-1", "t", "", UnixMillis::now()).await });
    }
    let outcomes = admits.join_all().await;
    let probes = outcomes.iter().filter(|o| o.probe_token.is_some()).count();
    assert_eq!(probes, 1, "{probes} probes in one slot");
    assert_eq!(
        outcomes.iter().filter(|o| o.admitted).count(),
        1,
        "only the probe is admitted"
    );
    assert_eq!(a.store.errors() + b.store.errors(), 0, "no Redis error expected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_then_back_resyncs_and_writes_through() {
    let mut redis = RedisServer::start();
    let (a, b) = (replica(&redis.url()), replica(&redis.url()));
    connected(&[&a, &b]).await;
    let before = place(&a, &quota_stop("before", UnixMillis::now().plus_ms(60_000)));
    assert!(eventually(PATIENCE, || !holds_for(&b, "before").is_empty()).await);

    redis.kill();
    assert!(
        eventually(Duration::from_secs(3), || !a.store.connected() && !b.store.connected()).await,
        "connected() stays true with Redis killed"
    );
    // Decisions go on from the mirrors; nothing fails or waits.
    let started = Instant::now();
    let during = place(&a, &quota_stop("during", UnixMillis::now().plus_ms(60_000)));
    let refused = a
        .fleet
        .admit("frontspin", "portal-1", "during", "", UnixMillis::now())
        .await;
    assert!(!refused.admitted, "A forgot its own hold with Redis down");
    assert!(
        !b.fleet
            .admit("frontspin", "portal-1", "before", "", UnixMillis::now())
            .await
            .admitted
    );
    let c = place(&b, &circuit(UnixMillis::now(), 50));
    tokio::time::sleep(Duration::from_millis(60)).await;
    let probe = b.fleet.admit("vibecode", "api-1", "t", "", UnixMillis::now()).await;
    assert!(
        probe.probe_token.is_some(),
        "no probe from the replica alone: {probe:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "calls waited on a dead Redis: {:?}",
        started.elapsed()
    );
    assert!(a.store.errors() > 0 && b.store.errors() > 0, "errors not counted");

    redis.restart();
    connected(&[&a, &b]).await;
    // Redis came back empty: each replica wrote its holds through.
    assert!(
        eventually(Duration::from_secs(5), || !holds_for(&b, "during").is_empty()).await,
        "the hold A placed while Redis was down never reached B"
    );
    assert!(eventually(PATIENCE, || a.fleet.mirror().get(&c.id, UnixMillis::now()).is_some()).await);
    assert!(eventually(PATIENCE, || redis.cli(&["EXISTS", &a.store.key_of(&before)]) == "1").await);
    assert_eq!(redis.cli(&["HGET", &a.store.key_of(&during), "id"]), during.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lift_made_while_redis_is_down_is_replayed_on_reconnect() {
    let mut redis = RedisServer::start();
    let (a, b) = (replica(&redis.url()), replica(&redis.url()));
    connected(&[&a, &b]).await;
    let held = place(&a, &quota_stop("acme", UnixMillis::now().plus_ms(60_000)));
    assert!(eventually(PATIENCE, || !holds_for(&b, "acme").is_empty()).await);
    assert_eq!(redis.cli(&["SAVE"]), "OK");
    redis.kill();
    assert!(
        eventually(Duration::from_secs(3), || !b.store.connected()).await,
        "B did not notice"
    );
    b.fleet.release(&held.id, UnixMillis::now()).expect("released");
    // Redis comes back with the hold still stored: B's lift must win over
    // both the stored hold and A's write-through of its copy.
    redis.restart_keeping_data();
    connected(&[&a, &b]).await;
    assert!(
        eventually(Duration::from_secs(3), || holds_for(&a, "acme").is_empty()
            && holds_for(&b, "acme").is_empty())
        .await,
        "the release was lost or undone by the resync: A {:?}, B {:?}",
        holds_for(&a, "acme"),
        holds_for(&b, "acme")
    );
    assert!(eventually(PATIENCE, || redis.cli(&["EXISTS", &a.store.key_of(&held)]) == "0").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_made_while_redis_is_down_is_written_through() {
    let mut redis = RedisServer::start();
    let (a, b) = (replica(&redis.url()), replica(&redis.url()));
    connected(&[&a, &b]).await;
    let now = UnixMillis::now();
    let held = place(&a, &quota_stop("acme", now.plus_ms(60_000)));
    assert!(eventually(PATIENCE, || !holds_for(&b, "acme").is_empty()).await);
    assert_eq!(redis.cli(&["SAVE"]), "OK");
    redis.kill();
    assert!(
        eventually(Duration::from_secs(3), || !a.store.connected()).await,
        "A did not notice"
    );
    let extended = place(&a, &quota_stop("acme", now.plus_ms(120_000)));
    assert_eq!(
        (extended.id.as_str(), extended.until),
        (held.id.as_str(), now.plus_ms(120_000))
    );
    redis.restart_keeping_data();
    connected(&[&a, &b]).await;
    assert!(
        eventually(Duration::from_secs(3), || holds_for(&b, "acme")
            .first()
            .map(|h| h.until)
            == Some(extended.until))
        .await,
        "B never saw the extension A made while Redis was down: {:?}",
        holds_for(&b, "acme")
    );
    assert!(pttl(&redis, &a.store.key_of(&held)) > 100_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_node_cluster_shares_holds_between_replicas() {
    let cluster = RedisCluster::start();
    // A finds the cluster from one node; B is given every seed.
    let (a, b) = (replica(&cluster.url()), replica(&cluster.seeds()));
    connected(&[&a, &b]).await;

    let tenants: Vec<String> = (0..12).map(|i| format!("tenant-{i}")).collect();
    let until = UnixMillis::now().plus_ms(60_000);
    let held: Vec<Hold> = tenants.iter().map(|t| place(&a, &quota_stop(t, until))).collect();
    assert!(
        eventually(PATIENCE, || tenants.iter().all(|t| !holds_for(&b, t).is_empty())).await,
        "B did not see every hold through the cluster"
    );
    assert!(
        !b.fleet
            .admit("frontspin", "portal-1", "tenant-3", "", UnixMillis::now())
            .await
            .admitted
    );
    let per_node: Vec<usize> = cluster
        .nodes
        .iter()
        .map(|n| n.cli(&["DBSIZE"]).parse().unwrap_or(0))
        .collect();
    // Twelve holds and the fleet's tenant hash key.
    assert_eq!(per_node.iter().sum::<usize>(), 13, "keys per node: {per_node:?}");
    assert!(
        per_node.iter().filter(|n| **n > 0).count() >= 2,
        "all keys on one node: {per_node:?}"
    );

    // Staleness through the cluster (printed, not asserted).
    let mut events = b.fleet.mirror().subscribe();
    let mut samples = Vec::new();
    for i in 0..100 {
        let tenant = format!("timed-{i}");
        let started = Instant::now();
        let held = place(&a, &quota_stop(&tenant, UnixMillis::now().plus_ms(60_000)));
        let seen = async {
            while let Ok(e) = events.recv().await {
                if e.hold.id == held.id {
                    return;
                }
            }
        };
        tokio::time::timeout(PATIENCE, seen)
            .await
            .expect("B saw the hold within PATIENCE");
        samples.push(started.elapsed());
    }
    samples.sort();
    eprintln!(
        "staleness A→B through a 3-node cluster over {} holds: median {:?}, p99 {:?}",
        samples.len(),
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100]
    );

    // A replica started now resyncs from every master.
    let c = replica(&cluster.url());
    connected(&[&c]).await;
    assert!(
        eventually(PATIENCE, || tenants.iter().all(|t| !holds_for(&c, t).is_empty())).await,
        "C's resync missed holds"
    );

    // Release on B lifts on A; one probe per slot across the cluster too.
    b.fleet.release(&held[5].id, UnixMillis::now()).expect("released");
    assert!(eventually(PATIENCE, || holds_for(&a, "tenant-5").is_empty()).await);
    let circuit_hold = place(&a, &circuit(UnixMillis::now(), 1_000));
    let mut takes = tokio::task::JoinSet::new();
    for i in 0..20 {
        let store = if i % 2 == 0 { a.store.clone() } else { b.store.clone() };
        let h = circuit_hold.clone();
        takes.spawn(async move { store.take_probe_slot(&h, 3, &format!("{i:032x}")).await });
    }
    assert_eq!(
        takes.join_all().await.into_iter().filter(|w| *w == Take::Taken).count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staleness_from_a_to_b_is_measured() {
    let redis = RedisServer::start();
    let (a, b) = (replica(&redis.url()), replica(&redis.url()));
    connected(&[&a, &b]).await;
    let mut events = b.fleet.mirror().subscribe();
    let mut samples = Vec::new();
    for i in 0..300 {
        let tenant = format!("tenant-{i}");
        let started = Instant::now();
        let held = place(&a, &quota_stop(&tenant, UnixMillis::now().plus_ms(60_000)));
        loop {
            let event = tokio::time::timeout(PATIENCE, events.recv())
                .await
                .expect("B saw the hold within PATIENCE")
                .expect("event stream open");
            if event.hold.id == held.id {
                break;
            }
        }
        samples.push(started.elapsed());
        assert!(
            !b.fleet
                .admit("frontspin", "portal-1", &tenant, "", UnixMillis::now())
                .await
                .admitted
        );
    }
    samples.sort();
    let pct = |p: usize| samples[(samples.len() * p / 100).min(samples.len() - 1)];
    eprintln!(
        "staleness A→B over {} holds on loopback: median {:?}, p99 {:?}, max {:?}",
        samples.len(),
        pct(50),
        pct(99),
        samples[samples.len() - 1]
    );
}

#[test]
fn bad_addresses_are_refused_at_startup() {
    for bad in ["", "nonsense", "http://127.0.0.1:6379", "redis://127.0.0.1:notaport"] {
        assert!(
            RedisStore::connect_lazy(bad, RedisOptions::default()).is_err(),
            "{bad:?} accepted"
        );
    }
    let bad_ns = RedisOptions {
        namespace: "a{b}".into(),
        ..RedisOptions::default()
    };
    assert!(RedisStore::connect_lazy("redis://127.0.0.1:1", bad_ns).is_err());
    assert!(
        RedisStore::connect_lazy("rediss://127.0.0.1:1/2", RedisOptions::default()).is_ok(),
        "TLS URL refused"
    );
    let seeds = RedisStore::connect_lazy("redis://127.0.0.1:7000,redis://127.0.0.1:7001", RedisOptions::default())
        .expect("cluster seeds");
    assert_eq!(seeds.describe(), "redis://127.0.0.1:7000/0,redis://127.0.0.1:7001/0");
    let secret =
        RedisStore::connect_lazy("redis://user:hunter2@127.0.0.1:6379/3", RedisOptions::default()).expect("ok");
    assert!(!secret.describe().contains("hunter2"), "{}", secret.describe());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_drops_writes_and_counts_them() {
    // Never started: nothing drains the queue.
    let store = RedisStore::connect_lazy(
        "redis://127.0.0.1:1",
        RedisOptions {
            queue_capacity: 2,
            ..RedisOptions::default()
        },
    )
    .expect("valid");
    let plan = quota_stop("acme", UnixMillis::now().plus_ms(1_000));
    let hold = plan.to_hold("00000000000000aa".into(), UnixMillis::now());
    for _ in 0..5 {
        store.put(&hold);
    }
    assert_eq!(
        store.dropped_writes(),
        0,
        "one hold's newer states replace its queued one"
    );
    for i in 0..5 {
        let mut other = hold.clone();
        other.id = format!("{i:016x}");
        store.put(&other);
    }
    assert_eq!(store.dropped_writes(), 4, "two holds per lane: the first and one more");
    let mut huge = hold.clone();
    huge.reason = "x".repeat(9 * 1024);
    store.put(&huge);
    assert_eq!(store.dropped_writes(), 5, "an oversized hold is refused");
    assert!(!store.connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_waits_when_redis_was_never_up() {
    let port = redis_support::free_port(false);
    let a = replica(&format!("redis://127.0.0.1:{port}"));
    let started = Instant::now();
    let held = place(&a, &quota_stop("acme", UnixMillis::now().plus_ms(60_000)));
    assert!(
        !a.fleet
            .admit("frontspin", "portal-1", "acme", "", UnixMillis::now())
            .await
            .admitted
    );
    assert!(started.elapsed() < Duration::from_millis(200));
    assert!(!a.store.connected());
    // Redis comes up later: the hold is written through.
    let redis = RedisServer::start_on(port, false);
    connected(&[&a]).await;
    assert!(eventually(PATIENCE, || redis.cli(&["EXISTS", &a.store.key_of(&held)]) == "1").await);
}

/// A CA and a server certificate for 127.0.0.1 (PEM), made now.
fn tls_files(dir: &std::path::Path) -> (Vec<u8>, std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "retryd redis test CA");
    let ca_key = KeyPair::generate().expect("CA key");
    let ca_pem = ca.self_signed(&ca_key).expect("self-signed CA").pem();
    let issuer = Issuer::new(ca, ca_key);
    let server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).expect("params");
    let server_key = KeyPair::generate().expect("server key");
    let server_pem = server.signed_by(&server_key, &issuer).expect("signed").pem();
    std::fs::create_dir_all(dir).expect("dir");
    let (ca_file, cert_file, key_file) = (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server-key.pem"));
    std::fs::write(&ca_file, &ca_pem).expect("write");
    std::fs::write(&cert_file, server_pem).expect("write");
    std::fs::write(&key_file, server_key.serialize_pem()).expect("write");
    (ca_pem.into_bytes(), ca_file, cert_file, key_file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_a_private_ca_shares_holds() {
    /// Removed on drop, even when an assertion fails.
    struct Dir(std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let dir = Dir(std::env::temp_dir().join(format!("retryd-redis-tls-{}", std::process::id())));
    let (ca_pem, ca, cert, key) = tls_files(&dir.0);
    let tls_port = redis_support::free_port(false);
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_owned();
    let _redis = RedisServer::start_with(
        redis_support::free_port(false),
        false,
        vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            path(&cert),
            "--tls-key-file".into(),
            path(&key),
            "--tls-ca-cert-file".into(),
            path(&ca),
            "--tls-auth-clients".into(),
            "no".into(),
        ],
    );
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let tls_replica = |ca: Option<Vec<u8>>| {
        let store = RedisStore::connect_lazy(
            &url,
            RedisOptions {
                tls: Some(retryd::fleet::redis::RedisTls {
                    ca_pem: ca,
                    client_cert_pem: None,
                }),
                ..options()
            },
        )
        .expect("valid URL");
        let shared: Arc<dyn SharedStore> = store.clone();
        Replica {
            fleet: Fleet::new(FleetConfig::default(), shared),
            store,
        }
    };
    let (a, b) = (tls_replica(Some(ca_pem.clone())), tls_replica(Some(ca_pem)));
    // Without the CA, Redis's certificate is not trusted: never connected.
    let stranger = tls_replica(None);
    connected(&[&a, &b]).await;
    place(&a, &quota_stop("acme", UnixMillis::now().plus_ms(60_000)));
    assert!(
        eventually(PATIENCE, || !holds_for(&b, "acme").is_empty()).await,
        "B never saw A's hold over TLS"
    );
    assert!(
        !stranger.store.connected() && stranger.store.errors() > 0,
        "connected to an untrusted certificate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_holds_are_shared_and_survive_a_failover() {
    // Redis 7 waits 5 s for more replicas before a diskless full sync: not here.
    let no_delay = || vec!["--repl-diskless-sync-delay".to_owned(), "0".to_owned()];
    let mut master = RedisServer::start_with(redis_support::free_port(false), false, no_delay());
    let replica_port = redis_support::free_port(false);
    let standby = RedisServer::start_with(
        replica_port,
        false,
        [
            no_delay(),
            vec!["--replicaof".into(), "127.0.0.1".into(), master.port.to_string()],
        ]
        .concat(),
    );
    assert!(
        eventually(Duration::from_secs(5), || standby
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up"))
        .await,
        "the replica never linked to its master"
    );
    let sentinel = RedisServer::start_sentinel(master.port);
    let url = format!("redis+sentinel://127.0.0.1:{}/mymaster", sentinel.port);
    let (a, b) = (replica(&url), replica(&url));
    connected(&[&a, &b]).await;
    assert_eq!(
        a.store.describe(),
        format!("redis+sentinel://127.0.0.1:{}/mymaster/0", sentinel.port)
    );

    let before = place(&a, &quota_stop("before", UnixMillis::now().plus_ms(60_000)));
    assert!(
        eventually(PATIENCE, || !holds_for(&b, "before").is_empty()).await,
        "B never saw A's hold"
    );
    let key = a.store.key_of(&before);
    assert!(
        eventually(PATIENCE, || standby.cli(&["EXISTS", &key]) == "1").await,
        "not replicated"
    );

    // The master dies; the sentinel promotes the replica; both replicas follow.
    master.kill();
    assert!(
        eventually(Duration::from_secs(10), || standby.cli(&["ROLE"]).starts_with("master")).await,
        "the sentinel did not promote the replica"
    );
    connected(&[&a, &b]).await;
    assert!(
        eventually(Duration::from_secs(5), || a.store.connected() && b.store.connected()).await,
        "the replicas did not follow the failover"
    );
    let after = place(&b, &quota_stop("after", UnixMillis::now().plus_ms(60_000)));
    assert!(
        eventually(Duration::from_secs(5), || !holds_for(&a, "after").is_empty()).await,
        "A did not see B's hold after the failover"
    );
    assert!(eventually(PATIENCE, || standby.cli(&["EXISTS", &a.store.key_of(&after)]) == "1").await);
    assert!(!holds_for(&b, "before").is_empty(), "a hold was lost in the failover");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_replica_closes_its_connections() {
    let redis = RedisServer::start();
    let clients = || redis.cli(&["INFO", "clients"]);
    let count = || -> usize {
        clients()
            .lines()
            .find_map(|l| l.trim().strip_prefix("connected_clients:")?.parse().ok())
            .unwrap_or(usize::MAX)
    };
    let a = replica(&redis.url());
    connected(&[&a]).await;
    assert!(
        count() >= 3,
        "command and subscription connections expected: {}",
        clients()
    );
    drop(a);
    assert!(
        eventually(PATIENCE, || count() == 1).await,
        "connections left open after the replica was dropped: {}",
        clients()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anti_entropy_repairs_dropped_writes_and_missed_announcements_both_ways() {
    let redis = RedisServer::start();
    let fast = RedisOptions {
        queue_capacity: 1,
        anti_entropy_every: Duration::from_millis(300),
        ..options()
    };
    let (a, b) = (
        replica_with(&redis.url(), fast.clone()),
        replica_with(&redis.url(), fast),
    );
    connected(&[&a, &b]).await;
    // A's write queue holds one tenant hold: a burst of 50 drops most writes.
    let tenants: Vec<String> = (0..50).map(|i| format!("burst-{i}")).collect();
    let held: Vec<Hold> = tenants
        .iter()
        .map(|t| place(&a, &quota_stop(t, UnixMillis::now().plus_ms(60_000))))
        .collect();
    assert!(a.store.dropped_writes() > 0, "the burst overflowed the queue");
    // The next pass writes what Redis lacks; B reads it from the store.
    assert!(
        eventually(Duration::from_secs(5), || tenants
            .iter()
            .all(|t| !holds_for(&b, t).is_empty()))
        .await,
        "B never saw every hold A placed"
    );
    // Lifted on A: the tombstone keeps the pass from writing it back.
    a.fleet.release(&held[0].id, UnixMillis::now()).expect("released");
    assert!(eventually(PATIENCE, || holds_for(&b, "burst-0").is_empty()).await);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(holds_for(&b, "burst-0").is_empty(), "a lifted hold came back");
    assert!(holds_for(&a, "burst-0").is_empty(), "a lifted hold came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_hold_flood_does_not_delay_real_quarantines_between_replicas() {
    let redis = RedisServer::start();
    // Default rates: 50 holds/s per caller (burst 100), 5 dependency holds/s.
    let limited = |url: &str| {
        let store = RedisStore::connect_lazy(url, options()).expect("valid URL");
        let shared: Arc<dyn SharedStore> = store.clone();
        Replica {
            fleet: Fleet::new(FleetConfig::default(), shared),
            store,
        }
    };
    let (a, b) = (limited(&redis.url()), limited(&redis.url()));
    connected(&[&a, &b]).await;
    // 400 callers × 100 tenant holds each, all at once, on A.
    let flood = {
        let fleet = Arc::clone(&a.fleet);
        tokio::task::spawn_blocking(move || {
            let until = UnixMillis::now().plus_ms(600_000);
            for round in 0..100 {
                for caller in 0..400 {
                    let tenant = format!("flood-{caller}-{round}");
                    fleet.place(
                        &quota_stop(&tenant, until),
                        &format!("127.0.{}.{}", caller / 250, caller % 250),
                        UnixMillis::now(),
                    );
                }
            }
        })
    };
    // Meanwhile a real quarantine every 100 ms, each refused on B within 2 s.
    let mut late = Vec::new();
    for i in 0..20 {
        let dependency = format!("portal-q{i}");
        let plan = HoldPlan {
            scope: HoldScope::Dependency,
            kind: HoldKind::Quarantine,
            catalog: "vibecode",
            dependency: &dependency,
            subject: "",
            until: UnixMillis::now().plus_ms(600_000),
            probe_every_ms: 0,
            probe_window_ms: 30_000,
            code: "TIMEOUT_QUARANTINE",
            rule: "vibecode/TIMEOUT_QUARANTINE/read",
            reason: "quarantine",
        };
        let placed_at = Instant::now();
        // Each by its own worker, within the default dependency-hold rate.
        assert!(!matches!(
            a.fleet.place(&plan, &format!("real-worker-{i}"), UnixMillis::now()),
            PlaceOutcome::RateLimited
        ));
        let seen = eventually(Duration::from_secs(2), || {
            !b.fleet
                .mirror()
                .covering("vibecode", &dependency, "t", "", UnixMillis::now())
                .is_empty()
        })
        .await;
        if !seen {
            late.push(i);
        }
        tokio::time::sleep(Duration::from_millis(100).saturating_sub(placed_at.elapsed())).await;
    }
    flood.await.expect("flood");
    assert!(late.is_empty(), "quarantines not refused on B within 2 s: {late:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_is_a_tombstone_every_replica_obeys() {
    let redis = RedisServer::start();
    let small = |url: &str| {
        let store = RedisStore::connect_lazy(url, options()).expect("valid URL");
        let shared: Arc<dyn SharedStore> = store.clone();
        let config = FleetConfig {
            max_holds: 5,
            limits: PlacementLimits {
                per_sec: 1e6,
                dependency_per_sec: 1e6,
            },
            ..FleetConfig::default()
        };
        Replica {
            fleet: Fleet::new(config, shared),
            store,
        }
    };
    let (a, b) = (small(&redis.url()), replica(&redis.url()));
    connected(&[&a, &b]).await;
    let until = UnixMillis::now().plus_ms(60_000);
    let tenants: Vec<String> = (0..5).map(|i| format!("crowd-{i}")).collect();
    for t in &tenants {
        a.fleet.place(&quota_stop(t, until), "10.0.0.1", UnixMillis::now());
    }
    assert!(eventually(PATIENCE, || tenants.iter().all(|t| !holds_for(&b, t).is_empty())).await);
    // One more, from another caller: the crowd's placer loses one hold, on both replicas.
    a.fleet
        .place(&quota_stop("newcomer", until), "10.0.0.2", UnixMillis::now());
    assert_eq!(a.fleet.mirror().evicted(), 1);
    assert!(!holds_for(&a, "newcomer").is_empty());
    let gone = |r: &Replica| tenants.iter().filter(|t| holds_for(r, t).is_empty()).count();
    assert_eq!(gone(&a), 1);
    assert!(eventually(PATIENCE, || gone(&b) == 1).await, "B kept the evicted hold");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_without_a_key_file_share_one_tenant_hash_key_through_the_store() {
    let redis = RedisServer::start();
    let (a, b) = (replica(&redis.url()), replica(&redis.url()));
    connected(&[&a, &b]).await;
    let (ha, hb) = (a.fleet.hash_tenant("acme"), b.fleet.hash_tenant("acme"));
    assert_eq!(ha, hb, "the same tenant hashes alike on every replica");
    let alone = Fleet::in_memory(FleetConfig::default());
    assert_ne!(ha, alone.hash_tenant("acme"), "the key is the fleet's, not a constant");
    // A replica started later adopts the same key.
    let c = replica(&redis.url());
    connected(&[&c]).await;
    assert_eq!(c.fleet.hash_tenant("acme"), ha);
}
