// The words are retryd's own (read from src/core, the `words!` macro): a word changed there fails here.
import assert from "node:assert/strict";
import test from "node:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as retryd from "../dist/esm/index.js";

const core = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../src/core");
const files = (d) => readdirSync(d).flatMap((f) => { const p = path.join(d, f); return statSync(p).isDirectory() ? files(p) : p.endsWith(".rs") ? [p] : []; });
function rustWords(name) {
  for (const f of files(core)) {
    const m = readFileSync(f, "utf8").match(new RegExp(`crate::words!\\(${name} \\{([\\s\\S]*?)\\}\\);`));
    if (m) return [...m[1].matchAll(/=> "(\w+)"/g)].map((x) => x[1]).sort();
  }
  throw new Error(`no words! for ${name}`);
}

test("the enums carry retryd's words", () => {
  for (const name of ["Verdict", "Strategy", "SideEffectState", "HoldScope", "HoldKind"]) {
    assert.deepEqual(Object.values(retryd[name]).sort(), rustWords(name), name);
  }
  assert.equal(retryd.Verdict.RetryWithLimit, "retry_with_limit");
});

test("refusals carry their reason", () => {
  assert.equal(new retryd.Held("x").reason, "held");
  assert.equal(new retryd.DeadlineExceeded("x").reason, "deadline_exceeded");
  assert.equal(new retryd.RetrydUnavailable("x").reason, "fallback");
  assert.equal(new retryd.DoNotRetry("x").reason, "verdict");
});
