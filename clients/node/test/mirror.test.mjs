// The holds mirror's decisions from scripted WatchHolds streams (a stub whose
// streams the test drives), then the client against the real retryd.
import assert from "node:assert/strict";
import test from "node:test";
import { EventEmitter } from "node:events";
import { Mirror, MAX_WATCHED } from "../dist/esm/mirror.js";

const ts = (ms) => ({ seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1e6 });
function hold(id, untilMs, o = {}) {
  return { id, catalog: o.catalog ?? "frontspin", dependency: o.dep ?? "d", tenant: o.tenant ?? "", method: o.method ?? "",
    scope: o.scope ?? "SCOPE_DEPENDENCY", until: ts(untilMs), next_probe_at: o.nextProbeAt ? ts(o.nextProbeAt) : null, probing: !!o.probing };
}
const ev = (kind, h, serverMs = Date.now()) => ({ kind: `HOLD_EVENT_KIND_${kind}`, hold: h ?? null, server_time: ts(serverMs) });

class FakeStub {
  streams = [];
  WatchHolds(req) {
    const s = Object.assign(new EventEmitter(), { req, cancelled: false });
    s.cancel = () => { s.cancelled = true; };
    this.streams.push(s);
    return s;
  }
}

function synced(m, stub, holds = []) {
  const s = stub.streams.at(-1);
  for (const h of holds) s.emit("data", ev("PLACED", h));
  s.emit("data", ev("SYNCED"));
  return s;
}

test("unsynced asks Admit and widens; synced admits locally", () => {
  const stub = new FakeStub(), m = new Mirror(stub, 10_000, () => {});
  assert.equal(m.admit("", "d", "t", ""), "ask");
  assert.deepEqual(stub.streams[0].req.dependencies, ["d"]);
  assert.deepEqual(stub.streams[0].req.tenants, ["t"]);
  synced(m, stub);
  assert.equal(m.admit("", "d", "t", ""), "admitted");
  assert.equal(m.stats.localAdmissions, 1);
  m.close();
});

test("covering holds refuse until the probe point; catalogs, tenants and methods match", () => {
  const now = Date.now(), stub = new FakeStub(), m = new Mirror(stub, 10_000, () => {});
  m.want(["d"], ["t"]);
  synced(m, stub, [hold("h1", now + 60_000, { tenant: "t", scope: "SCOPE_TENANT", nextProbeAt: now + 30_000 }),
    hold("h2", now + 60_000, { method: "crm.deal.add", scope: "SCOPE_METHOD", catalog: "vibecode" })]);
  const r = m.admit("frontspin", "d", "t", "x");
  assert.ok(Math.abs(r.retryAt - (now + 30_000)) < 500);
  assert.equal(m.admit("frontspin", "d", "t2", "x"), "ask"); // t2 not synced
  assert.equal(m.admit("vibecode", "d", "t", "x"), "admitted");
  assert.equal(typeof m.admit("vibecode", "d", "t", "crm.deal.add"), "object");
  assert.equal(typeof m.admit("", "d", "t", "x"), "object"); // no catalog: any catalog's hold
  stub.streams[0].emit("data", ev("PLACED", hold("h3", now + 90_000, { nextProbeAt: now - 1 })));
  assert.equal(m.admit("frontspin", "d", "t", "x"), "ask"); // the one ending last is at its probe point
  m.close();
});

test("events apply idempotently; a lift wins a racing PLACED; skew from server_time", () => {
  const now = Date.now(), stub = new FakeStub(), m = new Mirror(stub, 10_000, () => {});
  m.want(["d"], []);
  const s = synced(m, stub);
  s.emit("data", ev("PLACED", hold("h", now + 60_000)));
  s.emit("data", ev("PLACED", hold("h", now + 30_000)));
  assert.ok(Math.abs(m.admit("", "d", "", "").retryAt - (now + 60_000)) < 500);
  s.emit("data", ev("LIFTED", hold("h", now + 60_000)));
  s.emit("data", ev("PLACED", hold("h", now + 60_000)));
  assert.equal(m.admit("", "d", "", ""), "admitted");
  // The server's clock 100 s ahead: a hold until server-now + 10 s refuses until local now + 10 s.
  s.emit("data", ev("PLACED", hold("k", now + 110_000), now + 100_000));
  assert.ok(Math.abs(m.admit("", "d", "", "").retryAt - (now + 10_000)) < 500);
  m.close();
});

test("bounded: past maxHolds the soonest-ending is dropped and its dependency goes to Admit", () => {
  const now = Date.now(), stub = new FakeStub(), m = new Mirror(stub, 3, () => {});
  m.want(["a", "b"], []);
  const s = synced(m, stub);
  [["a", 10], ["b", 50], ["b", 60], ["b", 70]].forEach(([dep, sec], i) => s.emit("data", ev("PLACED", hold(`h${i}`, now + sec * 1000, { dep }))));
  assert.equal(m.stats.holds, 3);
  assert.equal(m.admit("", "a", "", ""), "ask");
  assert.equal(typeof m.admit("", "b", "", ""), "object");
  m.want(Array.from({ length: MAX_WATCHED + 5 }, (_, i) => `x${i}`), []);
  assert.equal(stub.streams.length, 2); // one reopen
  m.close();
});

test("widening: the old stream serves until the new one's SYNCED replaces it; reopens coalesce", () => {
  const now = Date.now(), stub = new FakeStub(), m = new Mirror(stub, 10_000, () => {});
  m.want(["d"], []);
  const old = synced(m, stub, [hold("old", now + 60_000)]);
  m.want(["e"], []);
  assert.equal(stub.streams.length, 2);
  assert.deepEqual(stub.streams[1].req.dependencies, ["d", "e"]);
  m.want(["f"], []);
  assert.equal(stub.streams.length, 2); // coalesced
  assert.equal(typeof m.admit("", "d", "", ""), "object");
  synced(m, stub);
  assert.ok(old.cancelled);
  assert.equal(m.admit("", "d", "", ""), "admitted"); // the new snapshot is the truth
  assert.equal(stub.streams.length, 3); // now f
  m.close();
});

test("stale: known holds still refuse, the rest asks Admit, reconnect with backoff, resync", async () => {
  const now = Date.now(), stub = new FakeStub(), changes = [];
  const m = new Mirror(stub, 10_000, (s) => changes.push(s));
  m.want(["d", "e"], []);
  const s = synced(m, stub, [hold("h", now + 60_000)]);
  s.emit("error", new Error("UNAVAILABLE"));
  assert.deepEqual(changes, ["synced", "stale"]);
  assert.ok(m.stats.stale);
  assert.equal(typeof m.admit("", "d", "", ""), "object");
  assert.equal(m.admit("", "e", "", ""), "ask");
  assert.equal(stub.streams.length, 1); // waits its jittered backoff (≤ 100 ms)
  await new Promise((r) => setTimeout(r, 150));
  assert.equal(stub.streams.length, 2);
  synced(m, stub);
  assert.deepEqual(changes, ["synced", "stale", "synced"]);
  assert.equal(m.admit("", "d", "", ""), "admitted");
  m.close();
});

test("a server that hashes tenant holds (no `tenants`) turns local tenant admission off", () => {
  const stub = new FakeStub(), m = new Mirror(stub, 10_000, () => {});
  m.want(["d"], ["t"]);
  const s = synced(m, stub);
  s.emit("data", ev("PLACED", hold("h", Date.now() + 60_000, { tenant: "h:abcd", scope: "SCOPE_TENANT" })));
  assert.equal(m.admit("", "d", "t", ""), "ask");
  assert.equal(m.admit("", "d", "", ""), "admitted");
  m.close();
});
