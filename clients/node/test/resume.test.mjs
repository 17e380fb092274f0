// Resuming the holds mirror by bucket digests: the shared vectors, the mirror's sweep at a
// resumed SYNCED (scripted streams), then a widening against the real retryd (RETRYD_BIN).
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { readFileSync } from "node:fs";
import test from "node:test";
import * as grpc from "@grpc/grpc-js";
import * as retryd from "../dist/esm/index.js";
import { Mirror } from "../dist/esm/mirror.js";
import { bucket, bucketDigests, digest } from "../dist/esm/resume.js";
import { startRetryd } from "./retryd.mjs";

test("digests match the shared vectors", () => {
  const v = JSON.parse(readFileSync(new URL("../../conformance/resume_vectors.json", import.meta.url), "utf8"));
  const got = [];
  for (const h of v.holds) {
    const d = digest(h.id, h.until_ms);
    assert.equal(d, BigInt(h.digest), h.id);
    assert.equal(d.toString(16).padStart(16, "0"), h.digest_hex);
    assert.equal(bucket(d), h.bucket);
    got.push(d);
  }
  const buckets = bucketDigests(got);
  assert.equal(buckets.length, 256);
  buckets.forEach((d, b) => assert.equal(d, BigInt(v.buckets[b]?.digest ?? "0"), `bucket ${b}`));
  assert.ok(Object.keys(v.buckets).length < v.holds.length); // two holds share a bucket
});

const ts = (ms) => ({ seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1e6 });
const hold = (id, untilMs) => ({ id, catalog: "frontspin", dependency: "d", tenant: "", method: "", scope: "SCOPE_DEPENDENCY",
  until: ts(untilMs), next_probe_at: null, probing: false });
const ev = (kind, h, extra = {}) => ({ kind: `HOLD_EVENT_KIND_${kind}`, hold: h ?? null, server_time: ts(Date.now()), resumed: false, resent_buckets: [], ...extra });
class FakeStub {
  streams = [];
  WatchHolds(req) {
    const s = Object.assign(new EventEmitter(), { req, cancel() {} });
    this.streams.push(s);
    return s;
  }
}

function twoHolds() {
  const until = (Math.floor(Date.now() / 1000) + 600) * 1000;
  const ids = [], seen = new Set();
  for (let n = 0; ids.length < 2; n++) {
    const b = bucket(digest(`h${n}`, until));
    if (!seen.has(b)) { seen.add(b); ids.push(`h${n}`); }
  }
  const stub = new FakeStub(), m = new Mirror(stub, 10_000, () => {});
  m.want(["d"], ["t"]);
  assert.deepEqual(stub.streams[0].req.resume_digests, []); // an empty mirror asks for a full snapshot
  for (const id of ids) stub.streams[0].emit("data", ev("PLACED", hold(id, until)));
  stub.streams[0].emit("data", ev("SYNCED"));
  m.want(["d2"], []); // a widening: a new stream, resuming
  const s = stub.streams[1];
  assert.deepEqual(s.req.resume_digests, bucketDigests(ids.map((id) => digest(id, until))).map(String));
  return { m, s, ids, until };
}

test("a resumed SYNCED keeps other buckets and replaces the resent ones", () => {
  const { m, s, ids, until } = twoHolds();
  s.emit("data", ev("SYNCED", null, { resumed: true, resent_buckets: [bucket(digest(ids[1], until))] }));
  assert.deepEqual(m.list().map((h) => h.id), [ids[0]]);
  assert.deepEqual([m.stats.resumedSyncs, m.stats.resentBuckets, m.stats.holds], [1, 1, 1]);
  m.close();
});

test("a hold lifted on the resuming stream is dropped; not resumed sweeps as before", () => {
  let { m, s, ids, until } = twoHolds();
  s.emit("data", ev("LIFTED", hold(ids[0], until)));
  s.emit("data", ev("SYNCED", null, { resumed: true }));
  assert.deepEqual(m.list().map((h) => h.id), [ids[1]]);
  m.close();
  ({ m, s, ids, until } = twoHolds());
  s.emit("data", ev("PLACED", hold(ids[0], until)));
  s.emit("data", ev("SYNCED")); // an older server: resumed false, a full snapshot
  assert.deepEqual(m.list().map((h) => h.id), [ids[0]]);
  assert.equal(m.stats.resumedSyncs, 0);
  m.close();
});

test("a hold the resumed merge drops to the cap sends its dependency to Admit", () => {
  const base = (Math.floor(Date.now() / 1000) + 600) * 1000;
  const untils = { x: base, y: base + 60_000, z: base + 120_000 }; // x ends soonest
  const ids = {}, seen = new Set();
  let n = 0;
  for (const k of ["x", "y", "z"]) {
    while (seen.has(bucket(digest(`${k}${n}`, untils[k])))) n++;
    ids[k] = `${k}${n}`;
    seen.add(bucket(digest(ids[k], untils[k])));
  }
  const stub = new FakeStub(), m = new Mirror(stub, 2, () => {});
  m.want(["dx", "d"], ["t"]);
  stub.streams[0].emit("data", ev("PLACED", { ...hold(ids.x, untils.x), dependency: "dx" }));
  stub.streams[0].emit("data", ev("PLACED", hold(ids.y, untils.y)));
  stub.streams[0].emit("data", ev("SYNCED"));
  m.want(["d2"], []);
  const s = stub.streams[1];
  assert.equal(s.req.resume_digests.length, 256);
  s.emit("data", ev("PLACED", hold(ids.z, untils.z)));
  s.emit("data", ev("SYNCED", null, { resumed: true, resent_buckets: [bucket(digest(ids.z, untils.z))] }));
  assert.deepEqual(m.list().map((h) => h.id).sort(), [ids.y, ids.z].sort()); // x dropped to the cap of 2
  assert.equal(m.admit("", "dx", "t", ""), "ask"); // never let through: Admit decides until the next SYNCED
  m.close();
});

test("against retryd: a widening resumes and the hold still refuses locally", async () => {
  const { proc: server, addr } = await startRetryd();
  try {
    const c0 = new retryd.Client(addr, { mirror: false, timeoutMs: 5000, connectTimeoutMs: 10_000 });
    await new Promise((r) => c0.stub.waitForReady(Date.now() + 10_000, r));
    // Does this server resume? (one predating it answers resumed false: the fallback path)
    const resumes = await new Promise((resolve, reject) => {
      const call = c0.stub.WatchHolds({ dependencies: ["probe"], resume_digests: new Array(256).fill("0") });
      call.on("data", (e) => { resolve(e.resumed); call.cancel(); });
      call.on("error", (e) => { if (e.code !== grpc.status.CANCELLED) reject(e); });
    });
    const at = Date.now() + 600_000;
    await new Promise((resolve, reject) => c0.stub.Classify({ failure: { catalog: "frontspin", code: "RATE_LIMITED", operation: "OPERATION_KIND_WRITE",
      attempt: 1, tenant: "t-resume", dependency: "d-resume", quota_resets_at: ts(at) } }, (e, r) => (e ? reject(e) : resolve(r))));
    await c0.close();
    const c = new retryd.Client(addr, { catalog: "frontspin", dependency: "d-resume", tenant: "t-resume", timeoutMs: 2000 });
    assert.equal(await c.watch({ timeoutMs: 5000 }), true);
    assert.equal(c.mirrorHolds("d-resume").length, 1);
    assert.equal(await c.watch({ dependencies: ["d-other"], timeoutMs: 5000 }), true); // a new stream
    const st = c.stats();
    assert.equal(st.resumedSyncs, resumes ? 1 : 0);
    assert.equal(st.resentBuckets, 0); // the mirror was right: nothing resent
    assert.equal(c.mirrorHolds("d-resume").length, 1);
    let runs = 0;
    await assert.rejects(c.call(async () => { runs++; }, { operation: "write", method: "crm.deal.add", deadline: 1000 }), retryd.Held);
    assert.equal(runs, 0);
    assert.equal(c.stats().admitRpcs, 0); // refused from the mirror, no Admit
    await c.close();
  } finally {
    server.kill("SIGKILL");
  }
});
