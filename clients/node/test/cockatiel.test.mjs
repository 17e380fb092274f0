// CockatielAdvisor inside a real cockatiel retry policy, against the real
// retryd binary (RETRYD_BIN, default target/debug/retryd of this checkout).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { handleWhen, retry } from "cockatiel";
import * as retryd from "../dist/esm/index.js";
import { CockatielAdvisor } from "../dist/esm/cockatiel.js";
import { startRetryd } from "./retryd.mjs";

let server, addr;

before(async () => { ({ proc: server, addr } = await startRetryd()); });
after(() => server.kill("SIGKILL"));

function client(catalog = "vibecode") {
  return new retryd.Client(addr, { catalog, dependency: `d-cockatiel-${process.hrtime.bigint()}`, tenant: "t-cockatiel", timeoutMs: 2000 });
}

async function run(advisor, outcomes) {
  let calls = 0;
  const policy = retry(handleWhen(advisor.handles), { maxAttempts: 4, backoff: advisor.backoff });
  const fn = async () => {
    const o = outcomes[Math.min(calls++, outcomes.length - 1)];
    if (o instanceof Error) throw o;
    return o;
  };
  try {
    return { value: await advisor.execute(policy, fn), calls };
  } catch (error) {
    return { error, calls };
  }
}

test("a transient read failure is retried with retryd's wait", async () => {
  const c = client();
  const down = new retryd.DependencyError("BITRIX_UNAVAILABLE");
  const r = await run(new CockatielAdvisor(c, { operation: "read", method: "crm.deal.get" }), [down, down, "deal-1"]);
  await c.close();
  assert.deepEqual({ value: r.value, calls: r.calls }, { value: "deal-1", calls: 3 });
});

test("a failure retryd says not to retry stops at once, as the dependency's own error", async () => {
  const c = client("grpc");
  const bad = new retryd.DependencyError("INVALID_ARGUMENT");
  const r = await run(new CockatielAdvisor(c, { operation: "read", method: "inventory.Get" }), [bad, "never"]);
  await c.close();
  assert.equal(r.calls, 1);
  assert.equal(r.error, bad);
});

test("an unknown catalog is a rejection, not a retry", async () => {
  const c = client("vibecod");
  const r = await run(new CockatielAdvisor(c, { operation: "read", method: "crm.deal.get" }), ["deal-1"]);
  await c.close();
  assert.ok(r.error instanceof retryd.Rejected, String(r.error));
  assert.equal(r.error.field, "catalog");
  assert.equal(r.calls, 0);
});

test("a write of unknown outcome is refused; with an enforced key it is retried", async () => {
  const c = client();
  assert.throws(() => new CockatielAdvisor(c, { operation: "write", method: "crm.deal.add" }));
  assert.throws(() => new CockatielAdvisor(c, { operation: "write", method: "crm.deal.add", idempotencyKey: "k" }));
  const a = new CockatielAdvisor(c, { operation: "write", method: "crm.deal.add", idempotencyKey: "k-1", idempotencyKeyEnforced: true });
  const r = await run(a, [new retryd.DependencyError("BITRIX_TIMEOUT"), "deal-2"]);
  await c.close();
  assert.deepEqual({ value: r.value, calls: r.calls }, { value: "deal-2", calls: 2 });
});
