//! Resume digests: how a client mirror that reconnects says which holds it
//! already has, so a watch's snapshot sends only the buckets that differ
//! (after a restart, a mirror that is right costs one message, not one per
//! hold). Defined once here; every client library computes the same (the
//! vectors in `clients/conformance/resume_vectors.json`).

use sha2::{Digest, Sha256};

use super::Hold;
use crate::core::UnixMillis;

/// Buckets a resume names: one per value of a digest's first byte.
pub const RESUME_BUCKETS: usize = 256;

/// A hold's digest: the first 8 bytes (big-endian) of
/// SHA-256(id, 0x00, `until` in Unix milliseconds as decimal ASCII), where
/// `until` is the one a watcher was shown (the probe window's end in a
/// probe phase). Only id and `until` are hashed: everything else a hold
/// carries is fixed for its id, or moves only with `until`, or (an open
/// circuit's next probe slot) is asked of `Admit` anyway when it comes.
pub fn digest(id: &str, until: UnixMillis) -> u64 {
    let mut h = Sha256::new();
    h.update(id.as_bytes());
    h.update([0]);
    h.update(until.0.to_string().as_bytes());
    let out = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&out[..8]);
    u64::from_be_bytes(first)
}

/// The bucket of a digest: its first byte.
pub fn bucket(digest: u64) -> usize {
    (digest >> 56) as usize
}

impl Hold {
    /// This hold's digest as a watcher shown it at `now` sees it.
    pub fn resume_digest(&self, now: UnixMillis) -> u64 {
        digest(&self.id, self.shown_until(now))
    }
}

/// The 256 bucket digests of `holds`: XOR of the digests in each (0 when
/// empty; ids are unique, so nothing cancels out).
pub fn bucket_digests(digests: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let mut out = vec![0u64; RESUME_BUCKETS];
    for d in digests {
        out[bucket(d)] ^= d;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors every client library checks too.
    #[test]
    fn digests_match_the_shared_vectors() {
        let text = include_str!("../../../clients/conformance/resume_vectors.json");
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        let holds = v["holds"].as_array().unwrap();
        assert!(holds.len() >= 5);
        let mut all = Vec::new();
        for h in holds {
            let want: u64 = h["digest"].as_str().unwrap().parse().unwrap();
            let got = digest(h["id"].as_str().unwrap(), UnixMillis(h["until_ms"].as_i64().unwrap()));
            assert_eq!(got, want, "{h}");
            assert_eq!(bucket(got) as u64, h["bucket"].as_u64().unwrap());
            all.push(got);
        }
        let buckets = bucket_digests(all);
        let named = v["buckets"].as_object().unwrap();
        for (b, d) in buckets.iter().enumerate() {
            let want = named
                .get(&b.to_string())
                .map_or(0, |x| x["digest"].as_str().unwrap().parse().unwrap());
            assert_eq!(*d, want, "bucket {b}");
        }
        assert!(named.len() < holds.len(), "the vectors put two holds in one bucket");
    }
}
