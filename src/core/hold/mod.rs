//! Fleet holds, decided: which failure places which hold, how a hold extends,
//! when it ends, and whether a call may go ahead ("Admit"). Pure functions of
//! (decision, holds in force, now); where holds are *stored* is `crate::fleet`.
//!
//! A hold says "do not call this scope until T". It only ever extends (a
//! later, longer hold wins), except by an explicit release, and an extension
//! is worth writing and announcing only when it moves the end by more than
//! max(1 s, 10 % of the hold's length) — steady 429s must not turn every
//! failure into a write and an event.

use serde::{Deserialize, Serialize};

use super::time::UnixMillis;

/// What a hold covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HoldScope {
    /// One tenant of one dependency (catalog + dependency + tenant).
    Tenant,
    /// Every tenant of one dependency instance (catalog + dependency).
    Dependency,
    /// One method of one dependency instance (catalog + dependency + method).
    Method,
}

crate::words!(HoldScope { Tenant => "tenant", Dependency => "dependency", Method => "method" });

/// Why calls are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HoldKind {
    /// A Retry-After that applies to everyone.
    Pause,
    /// An allowance is exhausted until it resets.
    QuotaStop,
    /// No call at all before the end: early calls interfere with recovery.
    Quarantine,
    /// Refused, except one probe per probe interval; closed by a probe's success.
    CircuitOpen,
}

impl HoldKind {
    /// Every kind, in proto order.
    pub const ALL: [HoldKind; 4] = [
        HoldKind::Pause,
        HoldKind::QuotaStop,
        HoldKind::Quarantine,
        HoldKind::CircuitOpen,
    ];

    /// Position in [`HoldKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

crate::words!(HoldKind {
    Pause => "pause",
    QuotaStop => "quota_stop",
    Quarantine => "quarantine",
    CircuitOpen => "circuit_open",
});

/// The scope a hold is keyed by: catalog, dependency and, for tenant and
/// method scopes, the tenant or the method.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HoldKey {
    /// Tenant, dependency or method.
    pub scope: HoldScope,
    /// The catalog whose rule placed it.
    pub catalog: String,
    /// The dependency instance (a portal, a host, an account).
    pub dependency: String,
    /// The tenant (tenant scope), the method (method scope), or empty.
    pub subject: String,
}

impl HoldKey {
    /// A stable text form, unambiguous for any strings (each part is
    /// length-prefixed): the map key in memory and the Redis hash tag.
    pub fn storage_key(&self) -> String {
        storage_key(self.scope, &self.catalog, &self.dependency, &self.subject)
    }

    /// The tenant, for a tenant hold.
    pub fn tenant(&self) -> &str {
        if self.scope == HoldScope::Tenant {
            &self.subject
        } else {
            ""
        }
    }

    /// The method, for a method hold.
    pub fn method(&self) -> &str {
        if self.scope == HoldScope::Method {
            &self.subject
        } else {
            ""
        }
    }
}

/// [`HoldKey::storage_key`] from borrowed parts (no `HoldKey` needed to look one up).
pub fn storage_key(scope: HoldScope, catalog: &str, dependency: &str, subject: &str) -> String {
    let mut s = String::with_capacity(16 + catalog.len() + dependency.len() + subject.len());
    storage_key_into(&mut s, scope, catalog, dependency, subject);
    s
}

/// [`storage_key`] written over `buf` (cleared first), so a lookup on the
/// decision path can reuse one buffer instead of allocating a key. Room is
/// reserved once and a length under 100 written as two `char`s: through a
/// division loop, this was a tenth of a ClassifyBatch item (callgrind).
pub fn storage_key_into(buf: &mut String, scope: HoldScope, catalog: &str, dependency: &str, subject: &str) {
    buf.clear();
    buf.reserve(1 + 3 * 22 + catalog.len() + dependency.len() + subject.len());
    buf.push(match scope {
        HoldScope::Tenant => 't',
        HoldScope::Dependency => 'd',
        HoldScope::Method => 'm',
    });
    for part in [catalog, dependency, subject] {
        buf.push(':');
        push_len(buf, part.len());
        buf.push(':');
        buf.push_str(part);
    }
}

/// Appends `n` in decimal: most names are under 100 bytes, two pushes.
fn push_len(buf: &mut String, n: usize) {
    let digit = |d: usize| char::from(b'0' + (d % 10) as u8);
    match n {
        0..10 => buf.push(digit(n)),
        10..100 => {
            buf.push(digit(n / 10));
            buf.push(digit(n));
        }
        _ => buf.push_str(itoa::Buffer::new().format(n)),
    }
}

/// How much a caller is trusted when its holds compete for room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Standing {
    /// Known only by its address.
    #[default]
    Anonymous,
    /// Known by a client certificate (mTLS).
    Identified,
    /// An operator.
    Operator,
}

crate::words!(Standing {
    Anonymous => "anonymous",
    Identified => "identified",
    Operator => "operator",
});

/// What ranks a hold when holds compete for room at the cap: how many
/// distinct callers placed or extended it, and its placer's standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Rank {
    /// Distinct callers that placed or extended it (saturating).
    #[serde(default)]
    pub corroboration: u8,
    /// The placing caller's standing.
    #[serde(default)]
    pub standing: Standing,
    /// Hashes of the first distinct callers (the first is the placer's):
    /// what tells a new caller from one already counted. Not stored.
    #[serde(skip)]
    pub seen: [u32; 4],
}

impl Rank {
    /// The rank of a hold placed by the caller whose hash is `caller`.
    pub fn placed_by(caller: u32, standing: Standing) -> Self {
        Rank {
            corroboration: 1,
            standing,
            seen: [caller, 0, 0, 0],
        }
    }

    /// Counts `caller` as corroborating; true when it is a new one.
    pub fn corroborate(&mut self, caller: u32) -> bool {
        if self.seen.contains(&caller) {
            return false;
        }
        if let Some(free) = self.seen.iter_mut().find(|c| **c == 0) {
            *free = caller;
        }
        self.corroboration = self.corroboration.saturating_add(1);
        true
    }

    /// The placer's hash (0: unknown, e.g. adopted from another replica).
    pub fn placer(&self) -> u32 {
        self.seen[0]
    }
}

/// A hold in force (or just lifted), as stored and as reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// Opaque id, stable while the hold lives (extensions keep it).
    pub id: String,
    /// What it covers.
    pub key: HoldKey,
    /// Why.
    pub kind: HoldKind,
    /// When it was placed.
    #[serde(with = "as_millis")]
    pub since: UnixMillis,
    /// When it ends (an open circuit may close earlier, by a probe).
    #[serde(with = "as_millis")]
    pub until: UnixMillis,
    /// Open circuits: one probe call per this many milliseconds.
    pub probe_every_ms: u64,
    /// Quota stops and quarantines: how long the probe phase after `until`
    /// lasts (0: none, the hold ends for everyone at `until`). In the phase
    /// the hold stays in force and admits exactly one call fleet-wide.
    #[serde(default)]
    pub probe_window_ms: u64,
    /// Its rank at the hold cap.
    #[serde(default)]
    pub rank: Rank,
    /// The code of the failure that placed (or last extended) it.
    pub code: String,
    /// The catalog rule that placed it.
    pub rule: String,
    /// Why, in English.
    pub reason: String,
}

impl Hold {
    /// When it stops being in force: `until`, plus its probe phase if any.
    pub fn end(&self) -> UnixMillis {
        self.until.plus_ms(self.probe_window_ms)
    }

    /// In force at `now` (its probe phase included).
    pub fn active(&self, now: UnixMillis) -> bool {
        now < self.end()
    }

    /// In its probe phase at `now`: past `until`, before [`Hold::end`].
    pub fn probing(&self, now: UnixMillis) -> bool {
        self.probe_window_ms > 0 && self.until <= now && now < self.end()
    }

    /// The slot of the probe phase that starts at `until`: the instant
    /// itself, so a phase after an extension is a later slot than any
    /// before it (tokens of an earlier phase are superseded).
    pub fn phase_slot(&self) -> u64 {
        u64::try_from(self.until.0).unwrap_or(0)
    }

    /// The end shown to callers: the probe window's end while probing, else `until`.
    pub fn shown_until(&self, now: UnixMillis) -> UnixMillis {
        if self.probing(now) { self.end() } else { self.until }
    }

    /// When the next probe may go: an open circuit's next slot, or the
    /// probe phase's start (`None` for a hold that never admits a probe).
    pub fn next_probe_at(&self, now: UnixMillis) -> Option<UnixMillis> {
        if self.kind == HoldKind::CircuitOpen && self.probe_every_ms > 0 {
            let next = self.probe_slot(now).map_or(1, |n| n + 1);
            return Some(self.probe_slot_at(next).min(self.until));
        }
        (self.probe_window_ms > 0).then_some(self.until)
    }

    /// The probe slot an open circuit offers at `now`: slot `n` opens at
    /// `since + n·probe_every_ms` (n ≥ 1). `None` before the first slot.
    pub fn probe_slot(&self, now: UnixMillis) -> Option<u64> {
        if self.kind != HoldKind::CircuitOpen || self.probe_every_ms == 0 {
            return None;
        }
        let elapsed = self.since.ms_until(now);
        let n = elapsed / self.probe_every_ms;
        (n >= 1).then_some(n)
    }

    /// When probe slot `n` opens.
    pub fn probe_slot_at(&self, n: u64) -> UnixMillis {
        self.since.plus_ms(n.saturating_mul(self.probe_every_ms))
    }

    /// The earliest time a retry under this hold can go ahead: its end, or
    /// for an open circuit its next probe slot; in a probe phase, the next
    /// poll ([`PROBE_POLL_MS`] from now, at most the phase's end), since the
    /// phase's one probe decides whether the hold lifts.
    pub fn retry_floor(&self, now: UnixMillis) -> UnixMillis {
        if self.kind == HoldKind::CircuitOpen {
            let next = self.probe_slot(now).map_or(1, |n| n + 1);
            self.probe_slot_at(next).min(self.until)
        } else if self.probing(now) {
            now.plus_ms(PROBE_POLL_MS).min(self.end())
        } else {
            self.until
        }
    }
}

/// How often a caller refused during a probe phase is told to ask again
/// (Admit jitters it by ±20 %).
pub const PROBE_POLL_MS: u64 = 1_000;

/// A hold a decision asks to place (borrowed from the request and the catalog).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HoldPlan<'a> {
    /// Tenant, dependency or method.
    pub scope: HoldScope,
    /// Why.
    pub kind: HoldKind,
    /// The catalog.
    pub catalog: &'a str,
    /// The dependency instance.
    pub dependency: &'a str,
    /// Tenant or method, by scope.
    pub subject: &'a str,
    /// The end asked for (already capped by the catalog's `max_delay_ms`).
    pub until: UnixMillis,
    /// Open circuits: the probe interval.
    pub probe_every_ms: u64,
    /// Quota stops and quarantines: the probe phase after `until` (0: none).
    pub probe_window_ms: u64,
    /// The failure's code.
    pub code: &'a str,
    /// The rule that asks for it.
    pub rule: &'a str,
    /// Why, in English.
    pub reason: &'a str,
}

impl HoldPlan<'_> {
    /// The key it would be stored under.
    pub fn key(&self) -> HoldKey {
        HoldKey {
            scope: self.scope,
            catalog: self.catalog.to_owned(),
            dependency: self.dependency.to_owned(),
            subject: self.subject.to_owned(),
        }
    }

    /// The hold it becomes when placed at `now` with `id`.
    pub fn to_hold(&self, id: String, now: UnixMillis) -> Hold {
        Hold {
            id,
            key: self.key(),
            kind: self.kind,
            since: now,
            until: self.until,
            probe_every_ms: self.probe_every_ms,
            probe_window_ms: self.probe_window_ms,
            rank: Rank::default(),
            code: self.code.to_owned(),
            rule: self.rule.to_owned(),
            reason: self.reason.to_owned(),
        }
    }
}

/// What placing a plan does to the hold of the same key and kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// No hold in force: place a new one.
    Place,
    /// Move the end of the one in force to the plan's (worth writing and announcing).
    Extend,
    /// Leave the one in force as it is (the plan ends earlier, or barely later).
    Keep,
}

/// The smallest extension worth a write and an event: max(1 s, 10 % of the hold's length).
pub fn announce_threshold_ms(existing: &Hold) -> u64 {
    (existing.since.ms_until(existing.until) / 10).max(1_000)
}

/// How a plan ending at `until` merges with `existing` (same key and kind) at `now`.
pub fn merge(existing: Option<&Hold>, until: UnixMillis, now: UnixMillis) -> Merge {
    match existing {
        None => Merge::Place,
        Some(h) if !h.active(now) => Merge::Place,
        // A failure in the probe phase re-places the hold: the stop is not over.
        Some(h) if h.probing(now) && until > now => Merge::Extend,
        Some(h) if until <= h.until => Merge::Keep,
        Some(h) if h.until.ms_until(until) > announce_threshold_ms(h) => Merge::Extend,
        Some(_) => Merge::Keep,
    }
}

/// The active hold among `holds` that ends last (ties: the first given).
pub fn ending_last<'h>(holds: impl IntoIterator<Item = &'h Hold>, now: UnixMillis) -> Option<&'h Hold> {
    holds
        .into_iter()
        .filter(|h| h.active(now))
        .fold(None, |best: Option<&Hold>, h| match best {
            Some(b) if b.until >= h.until => Some(b),
            _ => Some(h),
        })
}

/// Whether a call covered by some holds may go ahead at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// No hold refuses it.
    Admitted,
    /// Refused; the earliest time asking again can succeed.
    Refused {
        /// When to ask again.
        retry_at: UnixMillis,
    },
    /// Only open circuits and holds in their probe phase cover it, and one
    /// of them offers probe slot `slot` now: the call is admitted as that
    /// hold's probe if the slot can still be taken (fleet-wide, exactly once).
    ProbeDue {
        /// Index into the holds given to [`admit`].
        hold: usize,
        /// The slot number.
        slot: u64,
    },
}

/// Decides admission from the holds covering the call. `probe_taken(i, n)`
/// says whether probe slot `n` of `holds[i]` is already known to be taken
/// (the caller's mirror of the shared slot), so a refused slot costs no
/// round trip. `poll_ms` is how soon a caller refused in a probe phase
/// asks again (already jittered by the caller).
pub fn admit(holds: &[&Hold], now: UnixMillis, poll_ms: u64, probe_taken: impl Fn(usize, u64) -> bool) -> Admission {
    let mut blocking_until: Option<UnixMillis> = None;
    let mut next_probe: Option<UnixMillis> = None;
    let mut due: Option<(usize, u64)> = None;
    for (i, h) in holds.iter().enumerate().filter(|(_, h)| h.active(now)) {
        if h.probing(now) {
            let slot = h.phase_slot();
            if !probe_taken(i, slot) && due.is_none() {
                due = Some((i, slot));
            } else {
                let at = now.plus_ms(poll_ms).min(h.end());
                next_probe = Some(next_probe.map_or(at, |p| p.max(at)));
            }
            continue;
        }
        if h.kind != HoldKind::CircuitOpen {
            blocking_until = Some(blocking_until.map_or(h.until, |u| u.max(h.until)));
            continue;
        }
        match h.probe_slot(now) {
            Some(n) if !probe_taken(i, n) && due.is_none() => due = Some((i, n)),
            Some(n) => {
                let at = h.probe_slot_at(n + 1).min(h.until);
                next_probe = Some(next_probe.map_or(at, |p| p.max(at)));
            }
            None => {
                let at = h.probe_slot_at(1).min(h.until);
                next_probe = Some(next_probe.map_or(at, |p| p.max(at)));
            }
        }
    }
    match (blocking_until, due, next_probe) {
        (None, None, None) => Admission::Admitted,
        (None, Some((hold, slot)), None) => Admission::ProbeDue { hold, slot },
        (b, _, p) => Admission::Refused {
            retry_at: match (b, p) {
                (Some(b), Some(p)) => b.max(p),
                (b, p) => b.or(p).unwrap_or(now),
            },
        },
    }
}

/// Hex digits of a probe token's nonce: 128 random bits, so a token cannot
/// be guessed from the hold id and slot, which everyone can see.
pub const NONCE_HEX: usize = 32;

/// A probe token, parsed: `<hold id>.<slot>.<nonce>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeToken<'a> {
    /// The hold it probes.
    pub hold: &'a str,
    /// The slot it was issued for (an open circuit's slot number, or a
    /// probe phase's start).
    pub slot: u64,
    /// The nonce, 32 lowercase hex digits.
    pub nonce: &'a str,
}

/// A probe token for slot `slot` of hold `hold_id`.
pub fn probe_token(hold_id: &str, slot: u64, nonce: u128) -> String {
    format!("{hold_id}.{slot}.{nonce:032x}")
}

/// Parses a probe token (`None` when it is not well formed).
pub fn parse_probe_token(token: &str) -> Option<ProbeToken<'_>> {
    let mut parts = token.rsplitn(3, '.');
    let nonce = parts.next()?;
    let slot = parts.next()?.parse::<u64>().ok()?;
    let hold = parts.next()?;
    let ok = nonce.len() == NONCE_HEX
        && nonce.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && !hold.is_empty();
    ok.then_some(ProbeToken { hold, slot, nonce })
}

/// Stored holds carry their instants as plain milliseconds.
mod as_millis {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::core::time::UnixMillis;

    pub fn serialize<S: Serializer>(t: &UnixMillis, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(t.0)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<UnixMillis, D::Error> {
        i64::deserialize(d).map(UnixMillis)
    }
}

mod resume;
pub use resume::{RESUME_BUCKETS, bucket, bucket_digests, digest};
#[cfg(test)]
mod tests;
