//! How holds are laid out in Redis, and the two atomic writes (pure: no I/O).
//!
//! One hold of one kind on one scope is one hash,
//! `<ns>:{<tag>}:hold:<kind>`, with fields `id`, `s` (since, ms), `u`
//! (until, ms) and `j` (the hold as JSON). `<tag>` is 32 hex digits of the
//! SHA-256 of the scope's storage key: keys are bounded whatever the
//! tenant or dependency strings, and every key of one scope (its holds of
//! each kind, its circuits' probe slots) hashes to one Redis Cluster slot.
//! The key expires by itself at the hold's end (`PEXPIREAT`).
//!
//! Every change is announced on one channel, `<ns>:events`, as
//! `<event>\n<origin>\n<id>\n<since>\n<hold JSON>`: the stored id and since
//! travel outside the JSON, so the script never rewrites JSON.

use sha2::{Digest, Sha256};

use crate::core::hold::{Hold, HoldKind};
use crate::core::time::UnixMillis;

/// Largest hold JSON written or read (a longer one is refused).
pub const MAX_VALUE_BYTES: usize = 8 * 1024;

/// Longest namespace (key prefix).
pub const MAX_NAMESPACE_BYTES: usize = 32;

/// Hex digits of the scope hash in a key.
const TAG_HEX: usize = 32;

fn hex_prefix(bytes: &[u8], digits: usize) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(digits);
    for b in digest.iter().take(digits.div_ceil(2)) {
        out.push_str(&format!("{b:02x}"));
    }
    out.truncate(digits);
    out
}

/// Whether `ns` can prefix keys: short, and no `{`, `}`, `*`, `?`, `[`, `]`,
/// `:` or whitespace (it must not open a hash tag nor act as a SCAN pattern).
pub fn valid_namespace(ns: &str) -> bool {
    !ns.is_empty()
        && ns.len() <= MAX_NAMESPACE_BYTES
        && ns
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// The hash tag of a hold's scope.
pub fn scope_tag(hold: &Hold) -> String {
    hex_prefix(hold.key.storage_key().as_bytes(), TAG_HEX)
}

/// The key of `hold` (its scope and kind).
pub fn hold_key(ns: &str, hold: &Hold) -> String {
    format!("{ns}:{{{}}}:hold:{}", scope_tag(hold), hold.kind.as_str())
}

/// The tombstone of the last hold lifted on `hold`'s scope and kind: its
/// id, until that hold's end, so a replica that missed the lift cannot
/// write it back (see [`PUT_SCRIPT`]).
pub fn lifted_key(ns: &str, hold: &Hold) -> String {
    format!("{ns}:{{{}}}:lifted:{}", scope_tag(hold), hold.kind.as_str())
}

/// The SCAN pattern matching every hold key of the namespace.
pub fn hold_pattern(ns: &str) -> String {
    format!("{ns}:{{*}}:hold:*")
}

/// The key of `hold`'s latest probe slot (same Redis Cluster slot as the
/// hold): `<slot>:<nonce>`, then `:u` once its token was reported.
pub fn probe_key(ns: &str, hold: &Hold) -> String {
    format!(
        "{ns}:{{{}}}:probe:{}",
        scope_tag(hold),
        hex_prefix(hold.id.as_bytes(), 16)
    )
}

/// Take a probe slot. `KEYS[1]` the probe key; ARGV: slot, nonce, ms to
/// keep it. Taken (1) only when no slot as late is already taken — or when
/// this very slot and nonce hold it: a take whose answer came too late is
/// asked again with its nonce, and learns it won.
pub const TAKE_PROBE_SCRIPT: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] .. ':' .. ARGV[2] then return 1 end
if cur then
  local s = tonumber(string.match(cur, '^(%d+):'))
  if s and s >= tonumber(ARGV[1]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[2], 'PX', ARGV[3])
return 1
";

/// Redeem a probe token: compare, then mark it reported. `KEYS[1]` the
/// probe key; ARGV: slot, nonce. Returns `accepted`, `forged`, `reused` or
/// `superseded` (the words of `fleet::Redeemed`).
pub const REDEEM_PROBE_SCRIPT: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then return 'forged' end
local s, n, used = string.match(cur, '^(%d+):(%x+)(.*)$')
if not s then return 'forged' end
if tonumber(s) > tonumber(ARGV[1]) then return 'superseded' end
if s ~= ARGV[1] or n ~= ARGV[2] then return 'forged' end
if used == ':u' then return 'reused' end
redis.call('SET', KEYS[1], cur .. ':u', 'KEEPTTL')
return 'accepted'
";

/// The fleet's tenant hash key (set once, by the first replica to connect).
pub fn tenant_key(ns: &str) -> String {
    format!("{ns}:tenant-hash-key")
}

/// The channel every replica publishes and subscribes to.
pub fn channel(ns: &str) -> String {
    format!("{ns}:events")
}

/// The kinds a key may end with (anything else found by a SCAN is skipped).
pub fn kind_of_key(key: &str) -> Option<HoldKind> {
    let (_, word) = key.rsplit_once(":hold:")?;
    HoldKind::ALL.into_iter().find(|k| k.as_str() == word)
}

/// Place or extend, extend-only. `KEYS[1]` the hold key, `KEYS[2]` its
/// tombstone; ARGV: id, since, until, hold JSON, channel, origin, and the
/// instant the key expires (the end of the hold's probe phase). A hold
/// already lifted (its id is the tombstone) is refused (status 3); a hold
/// in force with an end at least as late is kept (status 0); a later end
/// extends it, keeping its id and since (status 2); otherwise the hold is
/// placed (status 1). Returns `{status, id, since, until, json}` of what is
/// stored after the call (status 3: of the refused hold).
pub const PUT_SCRIPT: &str = r"
if redis.call('GET', KEYS[2]) == ARGV[1] then
  return {3, ARGV[1], ARGV[2], ARGV[3], ARGV[4]}
end
local cur = redis.call('HMGET', KEYS[1], 'id', 's', 'u', 'j')
local new_until = tonumber(ARGV[3])
if cur[1] and cur[3] and cur[4] then
  local since = cur[2] or '0'
  if tonumber(cur[3]) >= new_until then
    return {0, cur[1], since, cur[3], cur[4]}
  end
  redis.call('HSET', KEYS[1], 'u', ARGV[3], 'j', ARGV[4])
  redis.call('PEXPIREAT', KEYS[1], ARGV[7])
  redis.call('PUBLISH', ARGV[5], 'extended\n' .. ARGV[6] .. '\n' .. cur[1] .. '\n' .. since .. '\n' .. ARGV[4])
  return {2, cur[1], since, ARGV[3], ARGV[4]}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'id', ARGV[1], 's', ARGV[2], 'u', ARGV[3], 'j', ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ARGV[7])
redis.call('PUBLISH', ARGV[5], 'placed\n' .. ARGV[6] .. '\n' .. ARGV[1] .. '\n' .. ARGV[2] .. '\n' .. ARGV[4])
return {1, ARGV[1], ARGV[2], ARGV[3], ARGV[4]}
";

/// Lift. `KEYS[1]` the hold key, `KEYS[2]` its tombstone; ARGV: id, until,
/// channel, origin, hold JSON. Leaves a tombstone naming the id until the
/// hold's end.
/// Deletes the stored hold when it is this one (same id) or ends no later
/// (the same scope and kind, placed concurrently under another id); a
/// later hold stored since is left alone. Always announces the lift, so
/// replicas that still hold the id drop it. Returns 1 when a key was deleted.
pub const LIFT_SCRIPT: &str = r"
local cur = redis.call('HMGET', KEYS[1], 'id', 'u')
local deleted = 0
if cur[1] and (cur[1] == ARGV[1] or (cur[2] and tonumber(cur[2]) <= tonumber(ARGV[2]))) then
  redis.call('DEL', KEYS[1])
  deleted = 1
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('PEXPIREAT', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[3], 'lifted\n' .. ARGV[4] .. '\n' .. ARGV[1] .. '\n0\n' .. ARGV[5])
return deleted
";

/// What another replica announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Placed.
    Placed,
    /// Extended.
    Extended,
    /// Lifted (released, or closed by a probe).
    Lifted,
}

/// One announcement, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The announcing replica.
    pub origin: String,
    /// The hold, with the stored id and since.
    pub hold: Hold,
}

/// The hold JSON of `hold`, refused when longer than [`MAX_VALUE_BYTES`].
pub fn encode_hold(hold: &Hold) -> Option<String> {
    serde_json::to_string(hold).ok().filter(|j| j.len() <= MAX_VALUE_BYTES)
}

/// A stored hold from its hash fields: the JSON, with the stored id and since.
pub fn decode_hold(id: &str, since: &str, json: &[u8]) -> Option<Hold> {
    if json.len() > MAX_VALUE_BYTES || id.is_empty() || id.len() > 128 {
        return None;
    }
    let mut hold: Hold = serde_json::from_slice(json).ok()?;
    hold.id = id.to_owned();
    if let Ok(s) = since.parse::<i64>() {
        if s > 0 {
            hold.since = UnixMillis(s);
        }
    }
    Some(hold)
}

/// Parses an announcement (`None` for anything malformed or oversized).
pub fn parse_event(payload: &[u8]) -> Option<Event> {
    if payload.len() > MAX_VALUE_BYTES + 512 {
        return None;
    }
    let text = std::str::from_utf8(payload).ok()?;
    let mut parts = text.splitn(5, '\n');
    let kind = match parts.next()? {
        "placed" => EventKind::Placed,
        "extended" => EventKind::Extended,
        "lifted" => EventKind::Lifted,
        _ => return None,
    };
    let origin = parts.next()?.to_owned();
    let id = parts.next()?;
    let since = parts.next()?;
    let hold = decode_hold(id, since, parts.next()?.as_bytes())?;
    Some(Event { kind, origin, hold })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::hold::{HoldKey, HoldScope};

    fn hold(tenant: &str) -> Hold {
        Hold {
            id: "00000000000000ab".into(),
            key: HoldKey {
                scope: HoldScope::Tenant,
                catalog: "frontspin".into(),
                dependency: "portal-1".into(),
                subject: tenant.into(),
            },
            kind: HoldKind::QuotaStop,
            since: UnixMillis(1_700_000_000_000),
            until: UnixMillis(1_700_000_060_000),
            probe_every_ms: 0,
            probe_window_ms: 0,
            rank: Default::default(),
            code: "RATE_LIMITED".into(),
            rule: "r".into(),
            reason: "quota\nexhausted".into(),
        }
    }

    #[test]
    fn keys_are_bounded_and_share_one_hash_tag_per_scope() {
        let long = hold(&"x".repeat(10_000));
        let key = hold_key("retryd", &long);
        assert!(key.len() < 80, "{key}");
        assert!(key.ends_with(":hold:quota_stop"));
        let tag = &key[key.find('{').unwrap()..=key.find('}').unwrap()];
        assert!(probe_key("retryd", &long).contains(tag));
        assert!(lifted_key("retryd", &long).contains(tag));
        assert_eq!(
            kind_of_key(&lifted_key("retryd", &long)),
            None,
            "a tombstone is no hold"
        );
        assert_ne!(hold_key("retryd", &hold("a")), hold_key("retryd", &hold("b")));
        assert_eq!(kind_of_key(&key), Some(HoldKind::QuotaStop));
        assert_eq!(kind_of_key("retryd:{x}:hold:nope"), None);
    }

    #[test]
    fn events_round_trip_with_the_stored_id_and_since() {
        let h = hold("acme");
        let json = encode_hold(&h).unwrap();
        assert!(!json.contains('\n'), "JSON escapes newlines: one line per event");
        let payload = format!("extended\nreplica-a\nstoredid\n1700000000001\n{json}");
        let e = parse_event(payload.as_bytes()).unwrap();
        assert_eq!(e.kind, EventKind::Extended);
        assert_eq!(e.origin, "replica-a");
        assert_eq!(e.hold.id, "storedid");
        assert_eq!(e.hold.since, UnixMillis(1_700_000_000_001));
        assert_eq!(e.hold.until, h.until);
        assert!(parse_event(b"placed\nx\nid\n0\n{not json").is_none());
        assert!(parse_event(b"bogus\nx\nid\n0\n{}").is_none());
    }

    #[test]
    fn oversized_values_are_refused() {
        let mut h = hold("acme");
        h.reason = "r".repeat(MAX_VALUE_BYTES);
        assert!(encode_hold(&h).is_none());
    }

    #[test]
    fn namespaces_cannot_open_a_hash_tag_or_a_pattern() {
        assert!(valid_namespace("retryd"));
        assert!(valid_namespace("retryd-test_1.a"));
        for bad in ["", "a{b", "a}b", "a*", "a:b", "a b", &"x".repeat(33)] {
            assert!(!valid_namespace(bad), "{bad}");
        }
    }
}
