package retryd

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
)

// Resuming the mirror: a reopened WatchHolds stream sends the 256 bucket
// digests of the holds the mirror has, and retryd sends only the buckets
// that differ (SYNCED names them), so a reconnect after a restart costs a
// message, not one per hold (the vectors: clients/conformance/resume_vectors.json).

// resumeBuckets: one per value of a digest's first byte.
const resumeBuckets = 256

// holdDigest is a hold's resume digest: the first 8 bytes, big-endian, of
// SHA-256(id, 0x00, until in Unix milliseconds as decimal ASCII), until as
// the server sent it (not corrected for clock skew).
func holdDigest(id string, untilMs int64) uint64 {
	h := sha256.New()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, untilMs, 10))
	return binary.BigEndian.Uint64(h.Sum(nil)[:8])
}

func digestBucket(d uint64) int { return int(d >> 56) }

// resumeDigestsLocked: the bucket digests of s (XOR of its holds' digests
// per bucket), nil when s has no hold (the stream then asks a full snapshot).
func resumeDigestsLocked(s *holdSet) []uint64 {
	if len(s.byID) == 0 {
		return nil
	}
	out := make([]uint64, resumeBuckets)
	for id, h := range s.byID {
		d := holdDigest(id, h.untilMs)
		out[digestBucket(d)] ^= d
	}
	return out
}

// mergeResumedLocked is a resumed stream's SYNCED: its holds in the resent
// buckets are those it received (snap); in every other bucket the mirror's
// (live) match the server's and are kept, unless this stream has since
// lifted or extended them. Returns the merged set.
func (m *mirror) mergeResumedLocked(live, snap *holdSet, resent []uint32) *holdSet {
	var again [resumeBuckets]bool
	for _, b := range resent {
		if b < resumeBuckets {
			again[b] = true
		}
	}
	for id, h := range live.byID {
		if again[digestBucket(holdDigest(id, h.untilMs))] {
			continue
		}
		if l, ok := m.lifted[id]; ok && !h.until.After(l) {
			continue // lifted on this stream before its SYNCED
		}
		if got := snap.byID[id]; got != nil && !got.until.Before(h.until) {
			continue
		}
		m.putLocked(snap, h)
	}
	return snap
}
