// Resume digests (WatchHoldsRequest.resume_digests): a reopened watch says which holds the
// mirror already has, so retryd resends only the buckets that differ (after a restart a mirror
// that is right costs one message, not one per hold). The vectors every library checks are in
// clients/conformance/resume_vectors.json.
import { createHash } from "node:crypto";

export const BUCKETS = 256;

/** First 8 bytes, big-endian, of SHA-256(id UTF-8, 0x00, `until` in Unix ms as decimal ASCII). */
export function digest(id: string, untilMs: number): bigint {
  return createHash("sha256").update(id, "utf8").update(ZERO).update(String(untilMs), "ascii").digest().readBigUInt64BE(0);
}
const ZERO = Buffer.from([0]);

/** A digest's bucket: its first byte. */
export const bucket = (d: bigint): number => Number(d >> 56n);

/** The 256 bucket digests: XOR of the digests in each (0n when empty). */
export function bucketDigests(digests: Iterable<bigint>): bigint[] {
  const out = new Array<bigint>(BUCKETS).fill(0n);
  for (const d of digests) out[bucket(d)] ^= d;
  return out;
}
