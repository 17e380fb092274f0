//! Retry-budget counts in Redis: one flush = one pipelined round trip on
//! the store's command connection (the supervisor's; no second style of
//! connection).
//!
//! Layout: one hash per scope, `<ns>:{<tag>}:budget` (`<tag>`: 32 hex
//! digits of the SHA-256 of the scope's storage key — no tenant in clear,
//! one Cluster slot per scope), with fields `r:<bucket>` (first attempts)
//! and `x:<bucket>` (retries); it expires two windows after its last write.
//! Buckets that left the window are deleted by whichever replica flushes
//! (`HDEL` of the two buckets just behind the window). Replicas are counted
//! by a sorted set of heartbeats, `<ns>:budget-replicas` (member: the
//! replica's origin id, score: ms), trimmed to the last [`ALIVE_MS`].
//!
//! Per flush: `ZADD`, `ZREMRANGEBYSCORE`, `PEXPIRE`, `ZCARD`, then per scope the
//! `HINCRBY`s of its nonzero deltas, one `HDEL`, one `PEXPIRE`, an `EVAL`
//! of [`LEASE_SCRIPT`] when the scope asks for a lease (near exhaustion
//! only), and one `HGETALL` (scopes with no delta: `HGETALL` alone).
//!
//! A flush made only of lease asks (a replica whose lease ran low) waits
//! at most [`RedisOptions::lease_timeout`](super::options::RedisOptions)
//! (200 ms by default) for its answer; past it the lease is not granted and
//! the scope's retries stay deferred until an answer comes (a grant whose
//! answer is lost was counted as retries in Redis: the fleet approves less,
//! never more).

use std::collections::HashMap;

use ::redis::Value;

use super::Shared;
use crate::core::budget::{BUCKETS, Counts};
use crate::core::time::UnixMillis;
use crate::fleet::store::{FlushReply, ScopeFlush};

/// A replica whose last heartbeat is older than this is not counted.
pub const ALIVE_MS: i64 = 5_000;

/// The key of one scope's counts.
pub fn budget_key(ns: &str, tag: &str) -> String {
    format!("{ns}:{{{tag}}}:budget")
}

/// The heartbeat set.
pub fn replicas_key(ns: &str) -> String {
    format!("{ns}:budget-replicas")
}

/// Grants a lease of a scope's room atomically. KEYS[1]: the scope's hash;
/// ARGV: bucket, buckets per window, retry percent, reserve, allowance (-1:
/// traffic budget), want, give back, give-back bucket, expiry (ms).
/// Hands back the unused retries first (never below 0), then grants
/// `min(want, allowed − retries)` over the window and counts the grant as
/// retries of the current bucket. Returns the grant.
pub const LEASE_SCRIPT: &str = r"
local k = KEYS[1]
local b, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local back = tonumber(ARGV[7])
if back > 0 then
  local f = 'x:' .. ARGV[8]
  local have = tonumber(redis.call('HGET', k, f) or '0')
  if have > 0 then
    redis.call('HSET', k, f, math.max(0, have - back))
  end
end
local want = tonumber(ARGV[6])
if want <= 0 then return 0 end
local fields = {}
for i = b - n + 1, b do
  fields[#fields + 1] = 'r:' .. i
  fields[#fields + 1] = 'x:' .. i
end
local got = redis.call('HMGET', k, unpack(fields))
local req, ret = 0, 0
for i = 1, #got, 2 do
  req = req + (tonumber(got[i]) or 0)
  ret = ret + (tonumber(got[i + 1]) or 0)
end
local base = tonumber(ARGV[5])
if base < 0 then base = req end
local allowed = math.floor(base * tonumber(ARGV[3]) / 100) + tonumber(ARGV[4])
local grant = math.min(want, allowed - ret)
if grant <= 0 then return 0 end
redis.call('HINCRBY', k, 'x:' .. b, grant)
redis.call('PEXPIRE', k, ARGV[9])
return grant
";

/// Sends `batch` and reads the totals back; `None` (counted, warned) when Redis cannot be reached.
///
/// One Redis: one pipeline for everything. A Cluster: a pipeline may not
/// span slots, so the heartbeat and each scope go as their own pipeline,
/// one after the other (still off every call's path).
pub(super) async fn flush(shared: &Shared, batch: &[ScopeFlush], now: UnixMillis) -> Option<FlushReply> {
    let conn = shared.conn.load_full()?;
    let mut conn = (*conn).clone();
    let ns = &shared.opts.namespace;
    // A flush of lease asks alone is a replica waiting for room: answer
    // quickly or not at all, and skip the heartbeat (the periodic flush
    // beats it; the replica count is only read).
    let leases_only = !batch.is_empty() && batch.iter().all(|s| s.lease.is_some());
    let mut pipes = vec![::redis::pipe()];
    if leases_only {
        pipes[0].cmd("ZCARD").arg(replicas_key(ns));
    } else {
        heartbeat(&mut pipes[0], ns, &shared.origin, now);
    }
    let cluster = matches!(conn, super::conn::Conn::Cluster(_));
    for s in batch {
        if cluster {
            pipes.push(::redis::pipe());
        }
        let last = pipes.len() - 1;
        scope_cmds(&mut pipes[last], ns, s);
    }
    let timeout = if leases_only {
        shared.opts.lease_timeout.min(shared.opts.command_timeout)
    } else {
        shared.opts.command_timeout
    };
    let mut values = Vec::with_capacity(batch.len() + 1);
    for pipe in &pipes {
        let sent = pipe.query_async::<Vec<Value>>(&mut conn);
        match tokio::time::timeout(timeout, sent).await {
            Ok(Ok(v)) => values.extend(v),
            Ok(Err(e)) => {
                shared.failed("flushing retry budgets", &e);
                return None;
            }
            Err(_) => {
                shared.error("flushing retry budgets", &"timed out");
                return None;
            }
        }
    }
    let mut values = values.into_iter();
    let replicas = values
        .next()
        .and_then(|v| ::redis::from_redis_value::<u64>(v).ok())
        .unwrap_or(1);
    let mut granted = Vec::with_capacity(batch.len());
    let totals = batch
        .iter()
        .map(|s| {
            let grant = match s.lease {
                Some(_) => values
                    .next()
                    .and_then(|v| ::redis::from_redis_value::<u64>(v).ok())
                    .unwrap_or(0),
                None => 0,
            };
            granted.push(grant);
            let map = values
                .next()
                .and_then(|v| ::redis::from_redis_value::<HashMap<String, u64>>(v).ok())
                .unwrap_or_default();
            parse_totals(&map, s.bucket)
        })
        .collect();
    Some(FlushReply {
        replicas,
        totals,
        granted,
    })
}

/// This replica's heartbeat, and the count of replicas alive (the one answer).
fn heartbeat(pipe: &mut ::redis::Pipeline, ns: &str, origin: &str, now: UnixMillis) {
    let replicas = replicas_key(ns);
    pipe.cmd("ZADD").arg(&replicas).arg(now.0).arg(origin).ignore();
    pipe.cmd("ZREMRANGEBYSCORE")
        .arg(&replicas)
        .arg("-inf")
        .arg(now.0 - ALIVE_MS)
        .ignore();
    pipe.cmd("PEXPIRE").arg(&replicas).arg(ALIVE_MS * 2).ignore();
    pipe.cmd("ZCARD").arg(&replicas);
}

/// One scope's increments, trimming and expiry, and its totals (the one answer).
fn scope_cmds(pipe: &mut ::redis::Pipeline, ns: &str, s: &ScopeFlush) {
    let key = budget_key(ns, &s.tag);
    if !s.deltas.is_empty() {
        for (b, c) in &s.deltas {
            if c.requests > 0 {
                pipe.cmd("HINCRBY")
                    .arg(&key)
                    .arg(format!("r:{b}"))
                    .arg(c.requests)
                    .ignore();
            }
            if c.retries > 0 {
                pipe.cmd("HINCRBY")
                    .arg(&key)
                    .arg(format!("x:{b}"))
                    .arg(c.retries)
                    .ignore();
            }
        }
        let gone = s.bucket - BUCKETS as i64;
        pipe.cmd("HDEL")
            .arg(&key)
            .arg(format!("r:{gone}"))
            .arg(format!("x:{gone}"))
            .arg(format!("r:{}", gone - 1))
            .arg(format!("x:{}", gone - 1))
            .ignore();
        pipe.cmd("PEXPIRE")
            .arg(&key)
            .arg(s.window_ms.saturating_mul(2))
            .ignore();
    }
    if let Some(l) = &s.lease {
        pipe.cmd("EVAL")
            .arg(LEASE_SCRIPT)
            .arg(1)
            .arg(&key)
            .arg(s.bucket)
            .arg(BUCKETS)
            .arg(l.retry_percent)
            .arg(l.floor)
            .arg(l.allowance.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX)))
            .arg(l.want)
            .arg(l.give_back)
            .arg(l.give_back_bucket)
            .arg(s.window_ms.saturating_mul(2));
    }
    pipe.cmd("HGETALL").arg(&key);
}

/// The counts of the window ending with `bucket` from a scope's hash.
pub fn parse_totals(map: &HashMap<String, u64>, bucket: i64) -> Vec<(i64, Counts)> {
    let first = bucket - (BUCKETS as i64 - 1);
    let mut out: Vec<(i64, Counts)> = Vec::new();
    for (field, n) in map {
        let Some((kind, b)) = field.split_once(':') else {
            continue;
        };
        let Ok(b) = b.parse::<i64>() else { continue };
        if !(first..=bucket).contains(&b) {
            continue;
        }
        let i = match out.iter().position(|(ob, _)| *ob == b) {
            Some(i) => i,
            None => {
                out.push((b, Counts::default()));
                out.len() - 1
            }
        };
        match kind {
            "r" => out[i].1.requests = *n,
            "x" => out[i].1.retries = *n,
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_keep_the_window_and_skip_junk() {
        let map: HashMap<String, u64> = [
            ("r:100".to_owned(), 5),
            ("x:100".to_owned(), 2),
            ("r:90".to_owned(), 50),
            ("x:95".to_owned(), 1),
            ("junk".to_owned(), 9),
        ]
        .into_iter()
        .collect();
        let mut t = parse_totals(&map, 100);
        t.sort_by_key(|(b, _)| *b);
        assert_eq!(
            t,
            [
                (
                    95,
                    Counts {
                        requests: 0,
                        retries: 1
                    }
                ),
                (
                    100,
                    Counts {
                        requests: 5,
                        retries: 2
                    }
                )
            ]
        );
        assert_eq!(budget_key("retryd", "ab"), "retryd:{ab}:budget");
    }
}
