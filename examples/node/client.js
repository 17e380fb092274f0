#!/usr/bin/env node
// Ask a running retryd whether failed calls may be retried, and check the answers.
//
//   node client.js [ADDR]        # default: $RETRYD_ADDR, else localhost:50051
//
// TLS (optional, from the environment): RETRYD_TLS_CA (PEM of the CA that
// signed the server's certificate; setting it turns TLS on),
// RETRYD_TLS_CLIENT_CERT and RETRYD_TLS_CLIENT_KEY (PEM, for mutual TLS),
// RETRYD_TLS_SERVER_NAME (the name to verify instead of ADDR's host).
//
// The proto is loaded at run time with @grpc/proto-loader (no generated code).
// Exit status: 0 when every answer is what the catalog promises, 1 when one is
// not, 2 on a usage or RPC problem.
'use strict';

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const PROTO_ROOT = path.resolve(__dirname, '..', '..', 'proto');

const definition = protoLoader.loadSync('retryd/v1/retryd.proto', {
  includeDirs: [PROTO_ROOT],
  keepCase: true, // field names as in the proto: after_ms, reconciliation_action
  enums: String, // verdicts as names: 'VERDICT_RETRY_WITH_LIMIT'
  longs: Number, // uint64 after_ms as a number
  defaults: true, // unset scalars read as their zero value...
  oneofs: true, // ...and `outcome` names the member that is set
});
const retrydV1 = grpc.loadPackageDefinition(definition).retryd.v1;

// google.rpc.BadRequest, to read an item error's details (a google.protobuf.Any).
const BadRequest = protobuf
  .parse(`syntax = "proto3";
    package google.rpc;
    message BadRequest {
      message FieldViolation { string field = 1; string description = 2; }
      repeated FieldViolation field_violations = 1;
    }`, { keepCase: true })
  .root.lookupType('google.rpc.BadRequest');

const INVALID_ARGUMENT = grpc.status.INVALID_ARGUMENT;
const failures = [];

function expect(what, got, want) {
  if (got !== want) {
    failures.push(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
    return false;
  }
  return true;
}

function call(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + 10_000 }, (err, resp) => (err ? reject(err) : resolve(resp)));
  });
}

async function classify(client) {
  // A write timed out on Bitrix24: the platform stopped waiting, but the write
  // may have gone through. Never resend it blindly.
  const { decision: d } = await call(client, 'Classify', {
    failure: {
      catalog: 'vibecode',
      code: 'BITRIX_TIMEOUT',
      operation: 'OPERATION_KIND_WRITE',
      method: 'crm.deal.add',
      attempt: 1,
      request_id: 'node-example-1',
    },
  });
  const r = d.retry;
  // proto3 `optional` fields are synthetic oneofs: set only when present.
  const action = r._reconciliation_action === 'reconciliation_action' ? r.reconciliation_action : null;
  console.log('Classify vibecode/BITRIX_TIMEOUT write attempt 1:');
  console.log(`  verdict=${d.verdict} rule=${d.rule}`);
  console.log(
    `  retry.retryable=${r.retryable} retry.safe=${r.safe} retry.after_ms=${r.after_ms}` +
      ` retry.max_after_ms=${r.max_after_ms} strategy=${r.strategy}`,
  );
  console.log(`  side_effect_state=${r.side_effect_state} reconciliation_action=${action}`);
  console.log(`  reason: ${d.reason}`);

  expect('Classify verdict', d.verdict, 'VERDICT_STATE_VERIFICATION_REQUIRED');
  expect('Classify retry.safe', r.safe, false);
  expect('Classify retry.retryable', r.retryable, true);
  expect('Classify retry.side_effect_state', r.side_effect_state, 'SIDE_EFFECT_STATE_POSSIBLE');
  expect('Classify retry.reconciliation_action', action, 'read_back_by_business_key');
  expect('Classify retry.attempt', r.attempt, 1);
  expect('Classify target_reached', d.target_reached, 'TARGET_REACHED_YES');
  expect('Classify known_code', d.known_code, true);
  expect('Classify rule', d.rule, 'vibecode/BITRIX_TIMEOUT/write');
  expect('Classify request_id echoed', d.request_id, 'node-example-1');
  expect('Classify retry.after_ms <= retry.max_after_ms', r.after_ms <= r.max_after_ms, true);
}

async function classifyBatch(client) {
  // Three pending records re-driven at once; the third names a catalog the
  // server does not have and gets its own error, the others are decided.
  const resp = await call(client, 'ClassifyBatch', {
    failures: [
      // The queue rejected it before it ran: safe to resend after Retry-After.
      { catalog: 'vibecode', code: 'QUEUE_OVERFLOW', operation: 'OPERATION_KIND_WRITE', attempt: 1, retry_after: '5' },
      // A read timed out (operation inferred from the method): just retry it.
      { catalog: 'vibecode', code: 'BITRIX_TIMEOUT', method: 'crm.deal.get', attempt: 1 },
      // Unknown catalog: an error for this item only.
      { catalog: 'no-such-catalog', code: 'BITRIX_TIMEOUT', attempt: 1 },
    ],
  });
  console.log('ClassifyBatch (3 items):');
  for (const res of resp.results) {
    if (res.outcome === 'decision') {
      const d = res.decision;
      const action = d.retry._reconciliation_action ? d.retry.reconciliation_action : null;
      console.log(
        `  [${res.index}] verdict=${d.verdict} safe=${d.retry.safe} after_ms=${d.retry.after_ms}` +
          ` reconciliation_action=${action}`,
      );
    } else if (res.outcome === 'error') {
      console.log(`  [${res.index}] error code=${res.error.code} message=${JSON.stringify(res.error.message)}`);
    } else {
      console.log(`  [${res.index}] neither decision nor error`);
    }
  }
  const s = resp.summary;
  console.log(
    `  summary: retry_with_limit=${s.retry_with_limit}` +
      ` state_verification_required=${s.state_verification_required} errors=${s.errors}`,
  );

  if (!expect('ClassifyBatch result count', resp.results.length, 3)) return;
  resp.results.forEach((res, i) => expect(`results[${i}].index`, res.index, i));

  const [r0, r1, r2] = resp.results;
  if (expect('results[0] outcome', r0.outcome, 'decision')) {
    expect('results[0] verdict', r0.decision.verdict, 'VERDICT_RETRY_WITH_LIMIT');
    expect('results[0] retry.safe', r0.decision.retry.safe, true);
    expect('results[0] retry.after_ms', r0.decision.retry.after_ms, 5000);
    expect('results[0] retry.strategy', r0.decision.retry.strategy, 'STRATEGY_RETRY_AFTER');
    expect('results[0] no reconciliation_action', r0.decision.retry._reconciliation_action, undefined);
  }
  if (expect('results[1] outcome', r1.outcome, 'decision')) {
    expect('results[1] verdict', r1.decision.verdict, 'VERDICT_RETRY_WITH_LIMIT');
    expect('results[1] retry.safe', r1.decision.retry.safe, true);
    expect('results[1] operation', r1.decision.operation, 'OPERATION_KIND_READ');
    expect('results[1] operation_inferred', r1.decision.operation_inferred, true);
  }
  if (expect('results[2] outcome', r2.outcome, 'error')) {
    expect('results[2] error code', r2.error.code, INVALID_ARGUMENT);
    const fields = r2.error.details
      .filter((any) => any.type_url === 'type.googleapis.com/google.rpc.BadRequest')
      .flatMap((any) => BadRequest.decode(any.value).field_violations.map((v) => v.field));
    expect('results[2] BadRequest names failures[2].catalog', fields.includes('failures[2].catalog'), true);
  }
  expect('summary.retry_with_limit', s.retry_with_limit, 2);
  expect('summary.errors', s.errors, 1);
}

// Plaintext, or TLS (mutual with a client certificate) when RETRYD_TLS_CA is set.
function channelSettings() {
  const env = process.env;
  if (!env.RETRYD_TLS_CA) return { credentials: grpc.credentials.createInsecure(), options: {} };
  const read = (p) => (p ? require('node:fs').readFileSync(p) : null);
  return {
    credentials: grpc.credentials.createSsl(
      read(env.RETRYD_TLS_CA), read(env.RETRYD_TLS_CLIENT_KEY), read(env.RETRYD_TLS_CLIENT_CERT)),
    options: env.RETRYD_TLS_SERVER_NAME ? { 'grpc.ssl_target_name_override': env.RETRYD_TLS_SERVER_NAME } : {},
  };
}

async function main() {
  const addr = process.argv[2] || process.env.RETRYD_ADDR || 'localhost:50051';
  const { credentials, options } = channelSettings();
  const client = new retrydV1.RetryDecisionService(addr, credentials, options);
  try {
    await classify(client);
    await classifyBatch(client);
  } catch (err) {
    console.error(`node example: RPC failed: ${err.code !== undefined ? grpc.status[err.code] : ''} ${err.details || err.message}`);
    return 2;
  } finally {
    client.close();
  }
  if (failures.length > 0) {
    console.error(`node example: ${failures.length} unexpected answer(s):`);
    for (const f of failures) console.error(`  - ${f}`);
    return 1;
  }
  console.log('node example: all answers as expected');
  return 0;
}

main().then((code) => {
  process.exitCode = code;
});
