import assert from "node:assert/strict";
import test from "node:test";
import { createRequire } from "node:module";
import * as esm from "../dist/esm/index.js";
import * as grpc from "@grpc/grpc-js";

const retryd = esm;

const cjs = createRequire(import.meta.url)("../dist/cjs/index.js");

test("the CommonJS build exports what the ESM build does", () => {
  assert.deepEqual(Object.keys(cjs).sort(), Object.keys(esm).filter((k) => k !== "default").sort());
});

test("HTTP errors: status and Retry-After", () => {
  const f = esm.defaultMapper({ response: { status: 429, headers: new Headers({ "retry-after": "7" }) } });
  assert.equal(f.catalog, "http");
  assert.equal(f.code, "429");
  assert.equal(f.retryAfter, "7");
});

test("the Vibecode / Bitrix24 envelope", () => {
  assert.equal(esm.fromEnvelope('{"error":{"code":"QUEUE_OVERFLOW"}}').code, "QUEUE_OVERFLOW");
  assert.equal(esm.fromEnvelope({ error: "BITRIX_ERROR" }).code, "BITRIX_ERROR");
  assert.equal(esm.fromEnvelope("<html>").code, "");
});

test("an error no mapper understands is not mapped", () => {
  assert.equal(esm.defaultMapper(new Error("x")), undefined);
});

test("grpc-retry-pushback-ms as gRFC A6 reads it", () => {
  assert.deepEqual(retryd.pushback(["250", "250"]), { ms: 250, doNotRetry: false });
  assert.deepEqual(retryd.pushback([]), { doNotRetry: false });
  for (const vs of [["-1"], ["xxx"], [""], ["100", "200"], ["99999999999999999999"], ["1.5"], ["+5"]]) {
    assert.deepEqual(retryd.pushback(vs), { doNotRetry: true }, JSON.stringify(vs));
  }
  const md = new grpc.Metadata();
  md.add("grpc-retry-pushback-ms", "-1");
  const f = retryd.defaultMapper(Object.assign(new Error("x"), { code: grpc.status.UNAVAILABLE, metadata: md }));
  assert.equal(f.noRetry, true);
  assert.equal(f.retryAfterMs, undefined);
});
