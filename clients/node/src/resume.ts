// Resume digests (WatchHoldsRequest.resume_digests): a reopened watch says which holds the
// mirror already has, so retryd resends only the buckets that differ (after a restart a mirror
// that is right costs one message, not one per hold). The vectors every library checks are in
// clients/conformance/resume_vectors.json.
import * as crypto from "node:crypto";

export const BUCKETS = 256;

/** First 8 bytes, big-endian, of SHA-256(id UTF-8, 0x00, `until` in Unix ms as decimal ASCII). */
export function digest(id: string, untilMs: number): bigint {
  const text = `${id}\u0000${untilMs}`; // a string hashes as its UTF-8
  // crypto.hash (Node >= 20.12) is about twice as fast as a Hash object; 18 has only the latter.
  const out = oneShot ? oneShot("sha256", text, "buffer") : crypto.createHash("sha256").update(text, "utf8").digest();
  return out.readBigUInt64BE(0);
}
const oneShot = (crypto as { hash?: (alg: string, data: string, enc: "buffer") => Buffer }).hash;

/** A digest's bucket: its first byte. */
export const bucket = (d: bigint): number => Number(d >> 56n);

/** The 256 bucket digests: XOR of the digests in each (0n when empty). */
export function bucketDigests(digests: Iterable<bigint>): bigint[] {
  const out = new Array<bigint>(BUCKETS).fill(0n);
  for (const d of digests) out[bucket(d)] ^= d;
  return out;
}
