// retryd's own shed advice: the parser, then the client against a real retryd that sheds every
// call (--max-buffered-bytes 1; RETRYD_BIN, default target/debug/retryd of this checkout).
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { after, before, test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import * as retryd from "../dist/esm/index.js";
import { Busy, MAX_ADVICE_MS, shedAdvice } from "../dist/esm/busy.js";
import { Mirror } from "../dist/esm/mirror.js";
import { startRetryd } from "./retryd.mjs";

// google.rpc.Status{code, details: [Any{RetryInfo{retry_delay: Duration{seconds, nanos}}}]}, encoded by hand.
function retryInfo(seconds, nanos = 0) {
  const varint = (n) => { const b = []; let v = BigInt.asUintN(64, BigInt(n)); while (v > 127n) { b.push(Number(v & 127n) | 128); v >>= 7n; } b.push(Number(v)); return b; };
  const field = (no, bytes) => [...varint((no << 3) | 2), ...varint(bytes.length), ...bytes];
  const duration = [...varint(1 << 3), ...varint(seconds), ...varint(2 << 3), ...varint(nanos)];
  const any = [...field(1, [...Buffer.from("type.googleapis.com/google.rpc.RetryInfo")]), ...field(2, field(1, duration))];
  return Buffer.from([...varint(1 << 3), ...varint(8), ...field(3, any)]);
}
function err(code, { info, pushback = [] } = {}) {
  const md = new grpc.Metadata();
  if (info) md.set("grpc-status-details-bin", info);
  for (const v of pushback) md.add("grpc-retry-pushback-ms", v);
  return Object.assign(new Error("x"), { code: grpc.status[code], details: "x", metadata: md });
}

test("advice: RetryInfo first, then grpc-retry-pushback-ms by gRFC A6, capped at 30 s", () => {
  const re = "RESOURCE_EXHAUSTED";
  assert.deepEqual(shedAdvice(err(re, { info: retryInfo(0, 400e6), pushback: ["900"] })), { shed: true, ms: 400 });
  assert.deepEqual(shedAdvice(err(re, { pushback: ["250"] })), { shed: true, ms: 250 });
  assert.deepEqual(shedAdvice(err(re, { pushback: ["250", "250"] })), { shed: true, ms: 250 });
  for (const bad of [["-1"], ["xxx"], ["100", "200"], ["99999999999999999999"]]) {
    assert.deepEqual(shedAdvice(err(re, { pushback: bad })), { shed: true, ms: undefined }, bad.join());
  }
  // An invalid RetryInfo is no advice: the pushback is read instead.
  assert.deepEqual(shedAdvice(err(re, { info: retryInfo(-1), pushback: ["7"] })), { shed: true, ms: 7 });
  assert.deepEqual(shedAdvice(err(re, { info: Buffer.from([0xff, 0xff]) })), { shed: true, ms: undefined });
  assert.deepEqual(shedAdvice(err(re, { pushback: ["99999999999"] })), { shed: true, ms: MAX_ADVICE_MS });
  assert.deepEqual(shedAdvice(err(re, { info: retryInfo(86_400) })), { shed: true, ms: MAX_ADVICE_MS });
  // A draining retryd advises 0 (elsewhere, at once); a bare UNAVAILABLE is an unreachable one.
  assert.deepEqual(shedAdvice(err("UNAVAILABLE", { pushback: ["0"] })), { shed: true, ms: 0 });
  assert.deepEqual(shedAdvice(err("UNAVAILABLE")), { shed: false, ms: undefined });
  assert.deepEqual(shedAdvice(err("INTERNAL", { pushback: ["100"] })), { shed: false });
  assert.deepEqual(shedAdvice(new Error("not grpc")), { shed: false });
});

test("busy: the later instant wins; a period starts once", async () => {
  const b = new Busy();
  assert.equal(b.active(), false);
  assert.equal(b.advise(0), false);
  assert.equal(b.advise(200), true);
  assert.equal(b.advise(50), false);
  assert.ok(b.remaining() > 100);
  await new Promise((r) => setTimeout(r, 250));
  assert.equal(b.active(), false);
  assert.equal(b.advise(10), true);
});

test("the watch reopens no earlier than retryd's advice", async () => {
  const streams = [];
  const stub = { WatchHolds(req) { const s = Object.assign(new EventEmitter(), { req, cancel() {} }); streams.push(s); return s; } };
  const busy = new Busy(), m = new Mirror(stub, 10_000, () => {}, busy);
  m.want(["d"], ["t"]);
  assert.equal(streams.length, 1);
  busy.advise(400);
  streams[0].emit("error", Object.assign(new Error("shed"), { code: grpc.status.RESOURCE_EXHAUSTED })); // backoff alone: <= 100 ms
  await new Promise((r) => setTimeout(r, 250));
  assert.equal(streams.length, 1);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(streams.length, 2);
  m.close();
});

let server, addr;
before(async () => { ({ proc: server, addr } = await startRetryd("--max-buffered-bytes", "1")); });
after(() => server.kill("SIGKILL"));

test("against a shedding retryd: one Admit, then nothing sent until the advice passes; batches kept", async () => {
  const events = [];
  const c = new retryd.Client(addr, { catalog: "vibecode", dependency: `d-shed-${process.hrtime.bigint()}`, tenant: "t",
    timeoutMs: 2000, mirror: false, reportIntervalMs: 60_000, onEvent: (e) => events.push(e) });
  let runs = 0;
  const v = await c.call(async () => { if (++runs === 1) throw new retryd.DependencyError("BITRIX_UNAVAILABLE"); return "ok"; },
    { operation: "read", method: "crm.deal.get" });
  assert.equal(v, "ok");
  let st = c.stats();
  assert.deepEqual([st.admitRpcs, st.shedAnswers], [1, 1]); // the Classify and the second Admit were not sent
  assert.ok(st.busySkips >= 2, `busy skips ${st.busySkips}`);
  const busy = events.filter((e) => e.kind === "retryd_busy");
  assert.equal(busy.length, 1); // once per busy period, not per call
  assert.ok(busy[0].waitMs >= 200 && busy[0].waitMs <= 800, `advice ${busy[0].waitMs}`); // 500 ms ±50 %
  assert.ok(events.some((e) => e.kind === "fallback" && e.busy));
  // Outcome batches: not sent while busy; a shed one is put back.
  await c["flush"]();
  assert.equal(c.stats().reportRpcs, 0);
  await new Promise((r) => setTimeout(r, busy[0].waitMs + 50));
  await c["flush"]();
  st = c.stats();
  assert.deepEqual([st.reportRpcs, st.shedAnswers], [1, 2]);
  assert.ok(c["counts"].size > 0, "the shed batch was put back");
  // The advice passed: the next call asks retryd again.
  await new Promise((r) => setTimeout(r, c["busy"].remaining() + 50));
  await c.call(async () => "ok", { operation: "read" });
  assert.equal(c.stats().admitRpcs, 2);
  assert.equal(events.filter((e) => e.kind === "retryd_busy").length, 3);
  await c.close();
});

test("against a shedding retryd: an unknown write is not resent; the watch waits out each advice", async () => {
  const c = new retryd.Client(addr, { catalog: "vibecode", dependency: `d-shed-w-${process.hrtime.bigint()}`, tenant: "t", timeoutMs: 2000 });
  let runs = 0;
  await assert.rejects(c.call(async () => { runs++; throw new retryd.DependencyError("BITRIX_TIMEOUT"); },
    { operation: "write", method: "crm.deal.add" }), retryd.RetrydUnavailable);
  assert.equal(runs, 1);
  await new Promise((r) => setTimeout(r, 1000));
  const st = c.stats();
  await c.close();
  assert.ok(st.shedAnswers >= 1 && st.busySkips >= 1, JSON.stringify(st));
  assert.equal(st.synced, false);
  // About one stream per advice (0.25-0.75 s) in that second, not one per backoff step (from 100 ms).
  assert.ok(st.shedAnswers <= 8, `shed answers ${st.shedAnswers}`);
});
