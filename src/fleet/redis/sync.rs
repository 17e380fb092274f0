//! The store's two tasks: the writer, which drains the queue into Redis, and
//! the supervisor, which (re)connects, resyncs the mirror and applies other
//! replicas' announcements.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{PubSubSink, PubSubStream};
use tokio_stream::StreamExt;

use super::conn::{self, Conn};
use super::keys::{self, EventKind};
use super::scan;
use super::{Op, Shared};
use crate::core::hold::{Hold, HoldKind};
use crate::core::time::UnixMillis;

/// Longest a resync (SCAN and reads of every stored hold) may take.
const RESYNC_BUDGET: Duration = Duration::from_secs(30);

/// Writes in flight at once: the connection is multiplexed, so a flood is
/// written at the pace of Redis, not of one round trip per hold.
const WRITES_IN_FLIGHT: usize = 64;

/// Drains the write queue, one atomic script per write, many in flight; a
/// write that fails is queued again (unless a newer state replaced it).
pub(super) async fn write(shared: Arc<Shared>) {
    let mut stop = shared.stop.subscribe();
    loop {
        tokio::select! {
            () = shared.queue.ready() => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        loop {
            let ops = shared.queue.take(WRITES_IN_FLIGHT);
            metrics::gauge!(super::STATE_QUEUED_WRITES).set(shared.queue.len() as f64);
            if ops.is_empty() {
                break;
            }
            let Some(conn) = shared.conn.load_full() else {
                // Not connected: a placed hold stays in the mirror and is written
                // through by the resync on reconnect; a lift is kept and replayed.
                for op in ops {
                    if let Op::Lift(h) = op {
                        shared.keep_lift(h);
                    }
                }
                continue;
            };
            let writes = ops.into_iter().map(|op| {
                let mut conn = (*conn).clone();
                let shared = &shared;
                async move {
                    let ok = match &op {
                        Op::Put(h) => put(shared, &mut conn, h).await,
                        Op::Lift(h) => lift(shared, &mut conn, h).await,
                    };
                    (!ok).then_some(op)
                }
            });
            let failed: Vec<Op> = futures_util::future::join_all(writes)
                .await
                .into_iter()
                .flatten()
                .collect();
            if !failed.is_empty() {
                for op in failed {
                    shared.enqueue(op);
                }
                // Give the supervisor time to notice a lost connection.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The extend-only write of `hold`; adopts the stored hold into the mirror
/// when Redis kept another (an end at least as late, or another id).
async fn put(shared: &Shared, conn: &mut Conn, hold: &Hold) -> bool {
    let Some(json) = keys::encode_hold(hold) else {
        shared.dropped("hold larger than 8 KiB", hold);
        return true;
    };
    let mut call = shared.put_script.prepare_invoke();
    call.key(keys::hold_key(&shared.opts.namespace, hold))
        .key(keys::lifted_key(&shared.opts.namespace, hold))
        .arg(&hold.id)
        .arg(hold.since.0)
        .arg(hold.until.0)
        .arg(&json)
        .arg(&shared.channel)
        .arg(&shared.origin)
        .arg(hold.end().0);
    let run = call.invoke_async::<(i64, String, String, String, Vec<u8>)>(conn);
    match tokio::time::timeout(shared.opts.command_timeout, run).await {
        Ok(Ok((status, id, since, _until, stored))) => {
            if status == 3 {
                // Lifted elsewhere while this replica was not listening.
                if let Some(mirror) = shared.mirror.get() {
                    mirror.lift(&hold.id);
                }
            } else if status == 0 || id != hold.id {
                if let (Some(mirror), Some(h)) = (shared.mirror.get(), keys::decode_hold(&id, &since, &stored)) {
                    mirror.apply_remote(h, UnixMillis::now());
                }
            }
            true
        }
        Ok(Err(e)) => {
            shared.failed("writing a hold", &e);
            false
        }
        Err(_) => {
            shared.error("writing a hold", &"timed out");
            shared.reconnect.notify_waiters();
            false
        }
    }
}

/// Lifts `hold` in Redis and announces it; false when Redis did not answer.
async fn lift(shared: &Shared, conn: &mut Conn, hold: &Hold) -> bool {
    let json = keys::encode_hold(hold).unwrap_or_else(|| "{}".to_owned());
    let mut call = shared.lift_script.prepare_invoke();
    call.key(keys::hold_key(&shared.opts.namespace, hold))
        .key(keys::lifted_key(&shared.opts.namespace, hold))
        .arg(&hold.id)
        .arg(hold.end().0)
        .arg(&shared.channel)
        .arg(&shared.origin)
        .arg(&json);
    let run = call.invoke_async::<i64>(conn);
    match tokio::time::timeout(shared.opts.command_timeout, run).await {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => {
            shared.failed("lifting a hold", &e);
            false
        }
        Err(_) => {
            shared.error("lifting a hold", &"timed out");
            shared.reconnect.notify_waiters();
            false
        }
    }
}

/// Connects, resyncs and follows, again and again, with backoff between
/// tries, until the store is dropped.
pub(super) async fn supervise(shared: Arc<Shared>) {
    let mut stop = shared.stop.subscribe();
    let mut backoff = shared.opts.backoff_min;
    loop {
        tokio::select! {
            () = round(&shared, &mut backoff) => {}
            _ = stop.wait_for(|stopped| *stopped) => {
                shared.conn.store(None);
                shared.set_connected(false);
                return;
            }
        }
    }
}

/// One connection, followed until lost, then the wait before the next.
async fn round(shared: &Shared, backoff: &mut Duration) {
    match session(shared).await {
        Ok((sink, stream)) => {
            *backoff = shared.opts.backoff_min;
            follow(shared, stream).await;
            drop(sink);
        }
        Err(e) => shared.error("connecting", &e),
    }
    shared.conn.store(None);
    shared.set_connected(false);
    let jittered = backoff.mul_f64(rand::random_range(0.8..1.2));
    tokio::time::sleep(jittered).await;
    *backoff = backoff
        .saturating_mul(2)
        .min(shared.opts.backoff_max.max(shared.opts.backoff_min));
}

/// One connection: connect, subscribe, replay lifts, resync. The
/// subscription comes before the SCAN, so nothing announced meanwhile is
/// missed (announcements are applied after the SCAN, extend-only).
async fn session(shared: &Shared) -> Result<(PubSubSink, PubSubStream), String> {
    let t = shared.timeouts();
    let budget = t.connect.saturating_mul(3);
    let (mut conn, nodes) = tokio::time::timeout(budget, shared.target.connect(t))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let pubsub = tokio::time::timeout(budget, conn::subscribe(&nodes, &shared.channel))
        .await
        .map_err(|_| "subscribe timed out".to_owned())?
        .map_err(|e| format!("subscribe: {e}"))?;
    let (sink, stream) = pubsub.split();
    shared.conn.store(Some(Arc::new(conn.clone())));

    // The fleet's tenant hash key: the first replica to connect makes it.
    if shared.tenant_key.load().is_none() {
        let proposed = format!("{:032x}", rand::random::<u128>());
        let key = keys::tenant_key(&shared.opts.namespace);
        let mut set = ::redis::cmd("SET");
        set.arg(&key).arg(&proposed).arg("NX");
        let _: Option<String> = set
            .query_async(&mut conn)
            .await
            .map_err(|e| format!("tenant hash key: {e}"))?;
        let kept: String = ::redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(|e| format!("tenant hash key: {e}"))?;
        if kept.len() >= 16 {
            shared.tenant_key.store(Some(Arc::new(kept.into_bytes())));
        }
    }

    // Lifts made while Redis was away go first: a released hold must not
    // come back from the resync.
    let lifts: Vec<Hold> = {
        let mut pending = shared
            .pending_lifts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pending.drain(..).collect()
    };
    let mut lifts = lifts.into_iter();
    while let Some(h) = lifts.next() {
        if !lift(shared, &mut conn, &h).await {
            shared.keep_lift(h);
            lifts.for_each(|h| shared.keep_lift(h));
            return Err("replaying lifts failed".to_owned());
        }
    }

    let (found, written) = resync(shared, &mut conn).await?;
    shared.set_connected(true);
    tracing::info!(
        store = %shared.target.describe(),
        stored = found,
        written_through = written,
        "shared state store connected and resynced"
    );
    Ok((sink, stream))
}

/// Reads every stored hold into the mirror and queues the mirror's holds
/// that Redis lacks or has with an earlier end: on (re)connect, and as the
/// periodic anti-entropy pass (pub/sub delivers at most once, and a full
/// write queue drops writes). Holds Redis keeps a tombstone for are refused
/// by the write and lifted here. Returns (stored, queued).
async fn resync(shared: &Shared, conn: &mut Conn) -> Result<(usize, usize), String> {
    let stored = tokio::time::timeout(RESYNC_BUDGET, scan::scan_holds(conn, &shared.opts.namespace))
        .await
        .map_err(|_| "resync timed out".to_owned())?
        .map_err(|e| format!("resync: {e}"))?;
    let Some(mirror) = shared.mirror.get() else {
        return Err("not started".to_owned());
    };
    let found = stored.len();
    let stored_until: HashMap<(String, HoldKind), UnixMillis> = stored
        .iter()
        .map(|h| ((h.key.storage_key(), h.kind), h.until))
        .collect();
    let now = UnixMillis::now();
    let before = mirror.len();
    // Written through: the holds placed here that Redis lacks, and the ones
    // extended here that Redis has with an earlier end.
    let mut through = mirror.resync(stored, now);
    mirror.mark_loaded();
    through.extend(mirror.snapshot(now).into_iter().filter(|h| {
        stored_until
            .get(&(h.key.storage_key(), h.kind))
            .is_some_and(|until| *until < h.until)
    }));
    let read = mirror.len().saturating_sub(before);
    for evicted in mirror.drain_evicted() {
        shared.enqueue(Op::Lift(evicted));
    }
    let written = through.len();
    // Written here, not through the bounded queue: the repair must not be
    // dropped by the flood it repairs.
    for chunk in through.chunks(WRITES_IN_FLIGHT) {
        let writes = chunk.iter().map(|h| {
            let mut conn = conn.clone();
            async move { put(shared, &mut conn, h).await }
        });
        if !futures_util::future::join_all(writes).await.into_iter().all(|ok| ok) {
            return Err("writing through failed".to_owned());
        }
    }
    metrics::counter!(super::STATE_REPAIRED_TOTAL, "direction" => "written").increment(written as u64);
    metrics::counter!(super::STATE_REPAIRED_TOTAL, "direction" => "read").increment(read as u64);
    Ok((found, written))
}

/// Applies announcements until the connection is lost or a command failed;
/// runs the anti-entropy pass every [`super::RedisOptions::anti_entropy_every`].
async fn follow(shared: &Shared, mut stream: PubSubStream) {
    let reconnect = shared.reconnect.notified();
    tokio::pin!(reconnect);
    reconnect.as_mut().enable();
    let mut ping = tokio::time::interval(shared.opts.ping_every.max(Duration::from_millis(10)));
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    // Jittered, so replicas started together do not scan together.
    let every = shared.opts.anti_entropy_every.max(Duration::from_millis(100));
    let next_pass = || tokio::time::Instant::now() + every.mul_f64(rand::random_range(0.9..1.1));
    let pass = tokio::time::sleep_until(next_pass());
    tokio::pin!(pass);
    loop {
        tokio::select! {
            () = &mut pass => {
                let Some(conn) = shared.conn.load_full() else { return };
                let mut conn = (*conn).clone();
                let started = std::time::Instant::now();
                match resync(shared, &mut conn).await {
                    Ok((stored, written)) => {
                        metrics::counter!(super::STATE_ANTI_ENTROPY_TOTAL, "result" => "ok").increment(1);
                        tracing::debug!(stored, written, took = ?started.elapsed(), "anti-entropy pass");
                    }
                    Err(e) => {
                        metrics::counter!(super::STATE_ANTI_ENTROPY_TOTAL, "result" => "failed").increment(1);
                        shared.error("the anti-entropy pass", &e);
                    }
                }
                pass.as_mut().reset(next_pass());
            }
            msg = stream.next() => match msg {
                Some(msg) => apply(shared, msg.get_payload_bytes()),
                None => {
                    shared.error("following the fleet's announcements", &"connection lost");
                    return;
                }
            },
            () = &mut reconnect => return,
            _ = ping.tick() => {
                let Some(conn) = shared.conn.load_full() else { return };
                let mut conn = (*conn).clone();
                let cmd = ::redis::cmd("PING");
                let pong = cmd.query_async::<String>(&mut conn);
                match tokio::time::timeout(shared.opts.command_timeout, pong).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        shared.error("ping", &e);
                        return;
                    }
                    Err(_) => {
                        shared.error("ping", &"timed out");
                        return;
                    }
                }
            }
        }
    }
}

/// Applies one announcement of another replica to the mirror (this
/// replica's own are skipped: the writer already applied their outcome).
fn apply(shared: &Shared, payload: &[u8]) {
    let Some(event) = keys::parse_event(payload) else {
        return;
    };
    if event.origin == shared.origin {
        return;
    }
    let Some(mirror) = shared.mirror.get() else {
        return;
    };
    let now = UnixMillis::now();
    match event.kind {
        EventKind::Placed | EventKind::Extended => {
            mirror.apply_remote(event.hold, now);
            // Room made here for another replica's hold: tombstoned for all.
            for evicted in mirror.drain_evicted() {
                shared.enqueue(Op::Lift(evicted));
            }
        }
        EventKind::Lifted => {
            if mirror.lift(&event.hold.id).is_none() {
                // The same scope and kind held here under another id (placed
                // concurrently): lifted too unless it ends later.
                let k = &event.hold.key;
                for h in mirror.covering(&k.catalog, &k.dependency, k.tenant(), k.method(), now) {
                    if h.key == event.hold.key && h.kind == event.hold.kind && h.until <= event.hold.until {
                        mirror.lift(&h.id);
                    }
                }
            }
        }
    }
}
