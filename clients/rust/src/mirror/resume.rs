//! Resuming the mirror: a reopened `WatchHolds` stream sends the 256
//! bucket digests of the holds the mirror has, and retryd sends only the
//! buckets that differ (SYNCED names them), so a reconnect after a restart
//! costs a message, not one per hold (the vectors:
//! `clients/conformance/resume_vectors.json`).

use sha2::{Digest, Sha256};

use super::holds::{HoldSet, State, put};

/// One bucket per value of a digest's first byte.
pub(super) const RESUME_BUCKETS: usize = 256;

/// A hold's resume digest: the first 8 bytes, big-endian, of SHA-256(id,
/// 0x00, until in Unix milliseconds as decimal ASCII), until as the server
/// sent it (not corrected for clock skew).
pub(super) fn digest(id: &str, until_ms: i64) -> u64 {
    let mut h = Sha256::new();
    h.update(id.as_bytes());
    h.update([0]);
    h.update(until_ms.to_string().as_bytes());
    let out = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&out[..8]);
    u64::from_be_bytes(first)
}

pub(super) fn bucket(digest: u64) -> usize {
    (digest >> 56) as usize
}

/// The bucket digests of `set` (XOR of its holds' digests per bucket);
/// empty when it has no hold (the stream then asks a full snapshot).
pub(super) fn bucket_digests(set: &HoldSet) -> Vec<u64> {
    if set.by_id.is_empty() {
        return Vec::new();
    }
    let mut out = vec![0u64; RESUME_BUCKETS];
    for (id, h) in set.by_dep.values().flatten() {
        let d = digest(id, h.until_ms);
        out[bucket(d)] ^= d;
    }
    out
}

impl State {
    /// A resumed stream's SYNCED: its holds in the `resent` buckets are
    /// those it received (`snap`); in every other bucket the mirror's (the
    /// live set) match the server's and are kept, unless this stream has
    /// since lifted or extended them. Returns the merged set.
    pub(super) fn merge_resumed(&mut self, mut snap: HoldSet, resent: &[u32], max: usize) -> HoldSet {
        let mut again = [false; RESUME_BUCKETS];
        for &b in resent {
            if let Some(x) = again.get_mut(b as usize) {
                *x = true;
            }
        }
        let live = std::mem::take(&mut self.live);
        for (id, h) in live.by_dep.into_values().flatten() {
            if again[bucket(digest(&id, h.until_ms))]
                || self.lifted.get(&id).is_some_and(|l| h.until <= *l) // lifted on this stream before its SYNCED
                || snap.get(&id).is_some_and(|got| got.until >= h.until)
            {
                continue;
            }
            put(&mut snap, h, max);
        }
        snap
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::pb;

    fn placed(s: &mut State, id: &str, until_ms: i64) {
        let until = SystemTime::UNIX_EPOCH + Duration::from_millis(until_ms as u64);
        let h = pb::Hold {
            id: id.into(),
            dependency: "d".into(),
            scope: pb::Scope::Dependency as i32,
            until: Some(until.into()),
            ..Default::default()
        };
        s.apply(None, pb::HoldEventKind::Placed as i32, h, 100);
    }

    /// The shared vectors, through the mirror's own path: events in, digests out.
    #[test]
    fn digests_match_the_shared_vectors() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../conformance/resume_vectors.json");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut s = State::default();
        assert!(bucket_digests(&s.live).is_empty(), "an empty mirror sends no digests");
        let holds = v["holds"].as_array().unwrap();
        for h in holds {
            let (id, ms) = (h["id"].as_str().unwrap(), h["until_ms"].as_i64().unwrap());
            let want: u64 = h["digest"].as_str().unwrap().parse().unwrap();
            assert_eq!(digest(id, ms), want, "{h}");
            assert_eq!(bucket(want) as u64, h["bucket"].as_u64().unwrap());
            placed(&mut s, id, ms);
        }
        let got = bucket_digests(&s.live);
        assert_eq!(got.len(), RESUME_BUCKETS);
        let named = v["buckets"].as_object().unwrap();
        for (b, d) in got.iter().enumerate() {
            let want = named
                .get(&b.to_string())
                .map_or(0, |x| x["digest"].as_str().unwrap().parse().unwrap());
            assert_eq!(*d, want, "bucket {b}");
        }
        assert!(named.len() < holds.len(), "the vectors put two holds in one bucket");
    }

    /// A resumed SYNCED: resent buckets are what the stream sent; the others
    /// are kept, unless the stream lifted a hold before its SYNCED.
    #[test]
    fn a_resumed_sync_replaces_only_the_resent_buckets() {
        let mut s = State::default();
        // buckets 136, 136, 174, 134
        for (id, ms) in [
            ("h-1", 1_700_000_000_000),
            ("c-1365", 1_700_000_000_000),
            ("h-2", 1_700_000_000_001),
            ("x", 253_402_300_799_999),
        ] {
            placed(&mut s, id, ms);
        }
        let mut snap = HoldSet::default();
        let until = |ms: u64| Some((SystemTime::UNIX_EPOCH + Duration::from_millis(ms)).into());
        let h1 = pb::Hold {
            id: "h-1".into(),
            dependency: "d".into(),
            until: until(1_700_000_000_000),
            ..Default::default()
        };
        s.apply(Some(&mut snap), pb::HoldEventKind::Placed as i32, h1, 100); // bucket 136 resent: h-1, not c-1365
        let x = pb::Hold {
            id: "x".into(),
            until: until(253_402_300_799_999),
            ..Default::default()
        };
        s.apply(Some(&mut snap), pb::HoldEventKind::Lifted as i32, x, 100); // lifted while syncing
        let merged = s.merge_resumed(snap, &[136, 999], 100);
        let mut ids: Vec<&str> = merged.by_id.keys().map(String::as_str).collect();
        ids.sort_unstable();
        assert_eq!(ids, ["h-1", "h-2"]);
    }
}
