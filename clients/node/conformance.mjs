#!/usr/bin/env node
// Runs every scenario of clients/conformance/scenarios against the real
// retryd with @retryd/client (the built dist/esm), concurrently.
//
//   RETRYD_BIN=target/debug/retryd node clients/node/conformance.mjs [SCENARIO_DIR]
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as retryd from "./dist/esm/index.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const TOKEN = "conformance-operator-token-0123456789";

const freePort = () => new Promise((resolve) => {
  const s = net.createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
});

// google.rpc.Status{code, message, details: [Any{type_url, value: RetryInfo{retry_delay: Duration}}]}, encoded by hand.
function retryInfoStatus(code, ms) {
  const varint = (n) => { const b = []; while (n > 127) { b.push((n & 127) | 128); n = Math.floor(n / 128); } b.push(n); return b; };
  const field = (no, bytes) => [...varint((no << 3) | 2), ...varint(bytes.length), ...bytes];
  const duration = [...varint(1 << 3), ...varint(Math.floor(ms / 1000)), ...varint(2 << 3), ...varint((ms % 1000) * 1e6)];
  const retryInfo = field(1, duration);
  const any = [...field(1, [...Buffer.from("type.googleapis.com/google.rpc.RetryInfo")]), ...field(2, retryInfo)];
  return Buffer.from([...varint(1 << 3), ...varint(code), ...field(3, any)]);
}

class EnvelopeError extends Error { constructor(body, headers) { super("envelope"); this.body = body; this.headers = headers; } }

function makeError(e) {
  const headers = {};
  if (e.retry_after !== undefined) headers["Retry-After"] = e.retry_after;
  if (e.retry_after_date_in_s !== undefined) headers["Retry-After"] = new Date(Date.now() + e.retry_after_date_in_s * 1000).toUTCString();
  switch (e.kind) {
    case "code": return new retryd.DependencyError(e.code, { retryAfter: e.retry_after, retryAfterMs: e.retry_after_ms, catalog: e.catalog });
    case "http": return Object.assign(new Error(`HTTP ${e.status}`), { response: { status: e.status, headers: new Headers(headers) } });
    case "grpc": {
      const code = grpc.status[e.status];
      const md = new grpc.Metadata();
      if (e.retry_delay_ms !== undefined) md.set("grpc-status-details-bin", retryInfoStatus(code, e.retry_delay_ms));
      for (const v of e.pushback ?? []) md.add("grpc-retry-pushback-ms", v);
      return Object.assign(new Error("scripted"), { code, details: "scripted", metadata: md });
    }
    case "envelope": return new EnvelopeError(e.body, headers);
    default: return new Error(e.message ?? "other");
  }
}

const toFailure = (err) => (err instanceof EnvelopeError ? retryd.fromEnvelope(err.body, err.headers) : retryd.defaultMapper(err));

function rpc(stub, name, req, md) {
  return new Promise((resolve, reject) => stub[name](req, md ?? new grpc.Metadata(), { deadline: Date.now() + 5000 }, (e, r) => (e ? reject(e) : resolve(r))));
}

async function setup(stub, sc, tenant, dep) {
  const md = new grpc.Metadata();
  md.set("authorization", `Bearer ${TOKEN}`);
  for (const step of sc.setup ?? []) {
    if (step.place_quota_stop) {
      const at = Date.now() + step.place_quota_stop.resets_in_ms;
      const r = await rpc(stub, "Classify", { failure: { catalog: "frontspin", code: "RATE_LIMITED", operation: "OPERATION_KIND_WRITE",
        attempt: 1, tenant, dependency: dep, quota_resets_at: { seconds: Math.floor(at / 1000), nanos: (at % 1000) * 1e6 } } });
      if (!r.decision.hold) throw new Error("setup placed no hold");
    }
    if (step.release_holds) {
      const l = await rpc(stub, "ListHolds", { tenant, dependency: dep }, md);
      if (!l.holds.length) throw new Error("setup: no hold to release");
      for (const h of l.holds) await rpc(stub, "ReleaseHold", { id: h.id }, md);
    }
  }
}

async function runOne(addr, down, slow, shedding, sc) {
  const run = Math.random().toString(36).slice(2, 10);
  const tenant = `t-${sc.name}-node-${run}`, depName = `d-${sc.name}-node-${run}`;
  const up = (sc.retryd ?? "up") === "up";
  const waits = [];
  let refusals = 0;
  const sleep = (ms, signal) => { waits.push(ms); return sc.sleep === "record" ? Promise.resolve() : retryd.sleep(ms, signal); };
  // Scenarios test the loop, not the 50 ms default: on a loaded CI machine 34 concurrent first
  // calls to a debug server can take longer (the retryd-down scenarios test the fallback).
  // Without mirror steps the server-side setup runs before the client exists (its first call then
  // goes to Admit, as before the mirror).
  const early = (sc.setup ?? []).some((st) => st.mirror_sync || st.wait_mirror_holds) ? [] : sc.setup ?? [];
  if (up && early.length) {
    const c0 = new retryd.Client(addr, { mirror: false });
    await setup(c0.stub, sc, tenant, depName);
    await c0.close();
  }
  const client = new retryd.Client(up ? addr : { slow, shedding }[sc.retryd] ?? down, { catalog: sc.call.catalog, dependency: depName, tenant, sleep, connectTimeoutMs: 500, timeoutMs: 2000,
    onEvent: (e) => { if (e.kind === "admit_refused") refusals++; } });
  // Server-side setup up to the first mirror step, then the mirror's steps in order (a hold placed
  // before mirror_sync reaches the mirror in its snapshot, not in a racing event).
  const steps = sc.setup ?? [];
  if (up && !early.length) {
    for (const step of steps) {
      if (step.mirror_sync) {
        if (!(await client.watch({ dependencies: [depName], tenants: [tenant], timeoutMs: 3000 }))) throw new Error("setup: the mirror did not sync within 3 s");
      } else if (step.wait_mirror_holds) {
        const end = Date.now() + 3000;
        while (client.mirrorHolds(depName).length < step.wait_mirror_holds.min) {
          if (Date.now() > end) throw new Error(`setup: ${step.wait_mirror_holds.min} mirror holds not within 3 s`);
          await new Promise((r) => setTimeout(r, 10));
        }
      } else await setup(client.stub, { setup: [step] }, tenant, depName);
    }
  }
  const st = { runs: 0, effects: 0, readBacks: 0, keys: new Set() };
  const c = sc.call;
  const apply = () => {
    if (c.operation !== "write") return;
    if (sc.dependency.dedupe_by_key && c.idempotency_key) {
      if (st.keys.has(c.idempotency_key)) return;
      st.keys.add(c.idempotency_key);
    }
    st.effects++;
  };
  const fn = async () => {
    const outs = sc.dependency.outcomes;
    const o = outs[Math.min(st.runs, outs.length - 1)];
    st.runs++;
    if ("ok" in o) { apply(); return o.ok; }
    if (o.applied) apply();
    throw makeError(o.error);
  };
  const opts = { operation: c.operation, method: c.method, idempotencyKey: c.idempotency_key,
    idempotencyKeyEnforced: !!c.idempotency_key_enforced, toFailure };
  if (c.read_back) {
    opts.readBack = async () => {
      st.readBacks++;
      if (c.read_back === "inconclusive") throw new retryd.Inconclusive();
      return st.effects > 0 ? "found" : null;
    };
  }
  if (c.deadline_ms !== undefined) opts.deadline = c.deadline_ms;
  if (c.cancel_after_ms !== undefined) opts.signal = AbortSignal.timeout(c.cancel_after_ms);
  const before = client.stats();
  const t0 = Date.now();
  let result, out = {};
  for (let i = 0; i < (c.repeat ?? 1); i++) {
  out = {};
  try {
    result = await client.call(fn, opts);
  } catch (err) {
    result = undefined;
    if (err instanceof retryd.Rejected) out = { error: "rejected", field: err.field };
    else if (err instanceof retryd.Held) out = { error: "held" };
    else if (err instanceof retryd.DeadlineExceeded) out = { error: "deadline_exceeded" };
    else if (err instanceof retryd.RetrydUnavailable) out = { error: "fallback" };
    else if (err instanceof retryd.RetryRefused) out = { error: "retry_refused", verdict: err.decision?.verdict?.toUpperCase(), terminal_state: err.decision?.terminalState };
    else if (err instanceof retryd.Cancelled) out = { error: "cancelled" };
    else out = { error: "unmapped", detail: String(err) };
  }
  }
  const elapsed = Date.now() - t0;
  await client.close();
  const after = client.stats();
  const e = sc.expect, bad = [];
  const want = (ok, what) => { if (!ok) bad.push(what); };
  const waitMs = waits.reduce((a, b) => a + b, 0);
  if (e.runs !== undefined) want(st.runs === e.runs, `runs ${st.runs} != ${e.runs}`);
  if (e.runs_min !== undefined) want(st.runs >= e.runs_min, `runs ${st.runs} < ${e.runs_min}`);
  if (e.runs_max !== undefined) want(st.runs <= e.runs_max, `runs ${st.runs} > ${e.runs_max}`);
  if (e.effects !== undefined) want(st.effects === e.effects, `effects ${st.effects} != ${e.effects}`);
  if (e.read_backs !== undefined) want(st.readBacks === e.read_backs, `read_backs ${st.readBacks} != ${e.read_backs}`);
  if (e.wait_ms_min !== undefined) want(waitMs >= e.wait_ms_min, `waited ${waitMs} ms < ${e.wait_ms_min}`);
  if (e.wait_ms_max !== undefined) want(waitMs <= e.wait_ms_max, `waited ${waitMs} ms > ${e.wait_ms_max}`);
  if (e.waits_ms !== undefined) {
    const got = waits.map((w) => Math.round(w));
    want(JSON.stringify(got) === JSON.stringify(e.waits_ms), `waits ${got} != ${e.waits_ms}`);
  }
  if (e.elapsed_ms_max !== undefined) want(elapsed <= e.elapsed_ms_max, `took ${elapsed} ms > ${e.elapsed_ms_max}`);
  if (e.admit_refusals_min !== undefined) want(refusals >= e.admit_refusals_min, `admit refusals ${refusals} < ${e.admit_refusals_min}`);
  const d = (k) => after[k] - before[k];
  if (e.admit_rpcs_max !== undefined) want(d("admitRpcs") <= e.admit_rpcs_max, `admit RPCs ${d("admitRpcs")} > ${e.admit_rpcs_max}`);
  if (e.admit_rpcs_min !== undefined) want(d("admitRpcs") >= e.admit_rpcs_min, `admit RPCs ${d("admitRpcs")} < ${e.admit_rpcs_min}`);
  if (e.local_refusals_min !== undefined) want(d("localRefusals") >= e.local_refusals_min, `local refusals ${d("localRefusals")} < ${e.local_refusals_min}`);
  if (e.report_rpcs_max !== undefined) want(d("reportRpcs") <= e.report_rpcs_max, `report RPCs ${d("reportRpcs")} > ${e.report_rpcs_max}`);
  if (e.reported_requests !== undefined) want(d("reportedRequests") === e.reported_requests, `reported requests ${d("reportedRequests")} != ${e.reported_requests}`);
  // Counted from the client's start: its watch may be shed (and start the busy period) before the call.
  if (e.shed_answers_min !== undefined) want(after.shedAnswers >= e.shed_answers_min, `shed answers ${after.shedAnswers} < ${e.shed_answers_min}`);
  if (e.busy_skips_min !== undefined) want(after.busySkips >= e.busy_skips_min, `busy skips ${after.busySkips} < ${e.busy_skips_min}`);
  if (e.fallbacks_min !== undefined) want(client.fallbacks >= e.fallbacks_min, `fallbacks ${client.fallbacks} < ${e.fallbacks_min}`);
  const errs = e.error !== undefined ? [e.error] : e.error_any ?? [];
  if (errs.length) want(errs.includes(out.error), `error ${JSON.stringify(out)} not in ${errs}`);
  else want(!out.error, `unexpected error ${JSON.stringify(out)}`);
  if (e.result !== undefined) want(result === e.result, `result ${result} != ${e.result}`);
  if (e.verdict !== undefined) want(out.verdict === e.verdict, `verdict ${out.verdict} != ${e.verdict}`);
  if (e.verdict_any !== undefined) want(e.verdict_any.includes(out.verdict), `verdict ${out.verdict} not in ${e.verdict_any}`);
  if (e.rejected_field !== undefined) want(out.field === e.rejected_field, `rejected field ${out.field} != ${e.rejected_field}`);
  if (e.terminal_state !== undefined) want(out.terminal_state === e.terminal_state, `terminal_state ${out.terminal_state} != ${e.terminal_state}`);
  return bad;
}

const bin = process.env.RETRYD_BIN ?? path.join(root, "target/debug/retryd");
const dir = process.argv[2] ?? path.join(root, "clients/conformance/scenarios");
const scenarios = readdirSync(dir).filter((f) => f.endsWith(".json")).sort().map((f) => JSON.parse(readFileSync(path.join(dir, f), "utf8")));
const tmp = mkdtempSync(path.join(os.tmpdir(), "retryd-conf-node-"));
writeFileSync(path.join(tmp, "operator.token"), TOKEN + "\n");
const serve = async (...extra) => {
  const port = await freePort();
  const proc = spawn(bin, ["serve", "--listen", `127.0.0.1:${port}`, "--metrics-listen", "off", "--log-level", "warn",
    "--operator-token-file", path.join(tmp, "operator.token"), ...extra], { stdio: ["ignore", "ignore", "inherit"] });
  return { port, addr: `127.0.0.1:${port}`, proc };
};
const started = async (port) => {
  for (let i = 0; ; i++) {
    const ok = await new Promise((resolve) => { const s = net.connect(port, "127.0.0.1", () => { s.end(); resolve(true); }); s.on("error", () => resolve(false)); });
    if (ok) return;
    if (i > 200) throw new Error("retryd did not start");
    await new Promise((r) => setTimeout(r, 50));
  }
};
const main = await serve();
const server = main.proc, addr = main.addr;
// A retryd with no room (only if a scenario needs it): every call but health is shed
// RESOURCE_EXHAUSTED with retry advice.
const shed = scenarios.some((sc) => sc.retryd === "shedding") ? await serve("--max-buffered-bytes", "1") : undefined;
let code = 1;
try {
  await started(main.port);
  if (shed) await started(shed.port);
  const down = `127.0.0.1:${await freePort()}`;
  // A retryd slower than any timeout: it accepts connections and never answers.
  const slowServer = net.createServer(() => {});
  await new Promise((r) => slowServer.listen(0, "127.0.0.1", r));
  const slow = `127.0.0.1:${slowServer.address().port}`;
  const t0 = Date.now();
  const results = await Promise.all(scenarios.map((sc) => runOne(addr, down, slow, shed?.addr, sc).catch((e) => [`threw: ${e?.stack ?? e}`])));
  let failed = 0;
  scenarios.forEach((sc, i) => {
    if (results[i].length) { failed++; console.log(`conformance node: FAIL ${sc.name}: ${results[i].join("; ")}`); }
    else console.log(`conformance node: PASS ${sc.name}`);
  });
  console.log(`conformance node: ${scenarios.length - failed} passed, ${failed} failed (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  code = failed ? 1 : 0;
} finally {
  server.kill("SIGTERM");
  shed?.proc.kill("SIGTERM");
  rmSync(tmp, { recursive: true, force: true });
}
process.exit(code);
