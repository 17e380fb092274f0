#!/usr/bin/env node
// What the Node client adds to a successful call: a no-op through client.call
// (holds mirror synced, no hold in force) against awaiting the no-op bare;
// medians over N calls each. Run by bench/clients.sh (RETRYD_ADDR; the client
// built: npm run build in clients/node).
//
//   RETRYD_ADDR=127.0.0.1:50051 node bench/clients_node.mjs [-n 20000]
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const retryd = await import(path.join(here, "../clients/node/dist/esm/index.js"));
const i = process.argv.indexOf("-n");
const n = i > 0 ? Number(process.argv[i + 1]) : 20000;
const run = Math.random().toString(36).slice(2, 10);
const client = new retryd.Client(process.env.RETRYD_ADDR, { catalog: "vibecode", dependency: `bench-dep-${run}`, tenant: `bench-tenant-${run}` });
if (!(await client.watch({ timeoutMs: 5000 }))) throw new Error("the mirror did not sync");
const noop = async () => 1;
const opts = { operation: "read", method: "crm.deal.get" };
async function timed(f, count) {
  const out = new Array(count);
  for (let k = 0; k < count; k++) {
    const t = process.hrtime.bigint();
    await f();
    out[k] = Number(process.hrtime.bigint() - t);
  }
  return out;
}
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
const p99 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.99)];
await timed(() => client.call(noop, opts), 2000); // warm-up (JIT)
await timed(noop, 2000);
const before = client.stats().admitRpcs;
const through = await timed(() => client.call(noop, opts), n);
const admits = client.stats().admitRpcs - before;
const bare = await timed(noop, n);
await client.close();
const row = (name, through, admits) => {
  const mb = median(bare) / 1000, mt = median(through) / 1000;
  console.log(`${name.padEnd(22)} bare ${mb.toFixed(2).padStart(8)} µs  through ${mt.toFixed(2).padStart(8)} µs  added ${(mt - mb).toFixed(2).padStart(8)} µs (median; p99 through ${(p99(through) / 1000).toFixed(1)} µs)  Admit RPCs ${admits}`);
};
row("node Client", through, admits);
// The same with the mirror off: an Admit RPC before every attempt (what every call cost before #26).
const off = new retryd.Client(process.env.RETRYD_ADDR, { catalog: "vibecode", dependency: `bench-dep-${run}`, tenant: `bench-tenant-${run}`, mirror: false });
await timed(() => off.call(noop, opts), 200);
const before2 = off.stats().admitRpcs;
const throughOff = await timed(() => off.call(noop, opts), n);
row("node mirror: false", throughOff, off.stats().admitRpcs - before2);
await off.close();
