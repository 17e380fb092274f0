// Create a Bitrix24 deal under retryd's loop: a timeout after the write went
// through is settled by a read-back by business key, never by a blind resend.
//   (cd clients/node && npm ci && npm run build); RETRYD_ADDR=localhost:50051 node deal_add.mjs
import { Client, DependencyError } from "@retryd/client";

// Stands in for a Bitrix24 REST client: the first add is applied, then its answer is lost.
const deals = new Map();
let calls = 0;
async function addDeal(fields) {
  calls++;
  if (!deals.has(fields.ORIGIN_ID)) deals.set(fields.ORIGIN_ID, `deal-${deals.size + 1}`);
  if (calls === 1) throw new DependencyError("BITRIX_TIMEOUT");
  return deals.get(fields.ORIGIN_ID);
}
const findDeal = async (originId) => deals.get(originId) ?? null; // null: absent

const client = new Client(process.env.RETRYD_ADDR ?? "localhost:50051",
  { catalog: "vibecode", dependency: "portal-7.bitrix24.eu", tenant: "acme" });
const fields = { TITLE: "Order #1042", ORIGIN_ID: "order-1042" };
const dealId = await client.call(() => addDeal(fields), {
  operation: "write", method: "crm.deal.add", readBack: () => findDeal(fields.ORIGIN_ID),
  deadline: 30_000, signal: AbortSignal.timeout(60_000),
});
await client.close();
if (deals.size !== 1 || calls !== 1) throw new Error("applied twice");
console.log(`node: ${dealId} created once, found by its read-back`);
