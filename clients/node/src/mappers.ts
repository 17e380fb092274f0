// The ready-made mappers: a dependency's error (DependencyError, a gRPC status,
// an HTTP error, the Vibecode / Bitrix24 envelope) to the Failure fields retryd classifies.
import * as grpc from "@grpc/grpc-js";
import protobuf from "protobufjs";

/** Failure fields a mapper knows; the rest come from the client and the call. */
export interface FailureFields {
  catalog?: string;
  code: string;
  retryAfter?: string;
  retryAfterMs?: number;
  requestId?: string;
  quotaResetsAt?: Date;
  /** The dependency itself said "do not retry" (e.g. a negative, unparsable or conflicting
   * grpc-retry-pushback-ms): sent as its retry contract, Failure.upstream retryable false. */
  noRetry?: boolean;
}

export class DependencyError extends Error {
  constructor(public code: string, public opts: { retryAfter?: string; retryAfterMs?: number; catalog?: string } = {}) {
    super(`dependency failed: ${code}`);
  }
}

function header(headers: unknown, name: string): string | undefined {
  if (!headers) return undefined;
  const h = headers as { get?: (n: string) => string | null };
  if (typeof h.get === "function") return h.get(name) ?? undefined;
  for (const [k, v] of Object.entries(headers as Record<string, unknown>)) {
    if (k.toLowerCase() === name.toLowerCase()) return String(v);
  }
  return undefined;
}

/** An HTTP status and headers (a Headers object or a plain object): catalog "http". */
export function fromHttp(status: number, headers?: unknown): FailureFields {
  return { catalog: "http", code: String(status), retryAfter: header(headers, "retry-after"), requestId: header(headers, "x-request-id") };
}

/** The Vibecode / Bitrix24 JSON envelope ({"error":{"code":…}} or {"error":"CODE"}): catalog "vibecode". */
export function fromEnvelope(body: unknown, headers?: unknown): FailureFields {
  let b: any = body;
  if (typeof b === "string") { try { b = JSON.parse(b); } catch { b = undefined; } }
  let code = "";
  if (b && typeof b === "object") {
    if (typeof b.error === "string") code = b.error;
    else if (b.error && typeof b.error === "object" && typeof b.error.code === "string") code = b.error.code;
  }
  return { catalog: "vibecode", code, retryAfter: header(headers, "retry-after"), requestId: header(headers, "x-request-id") };
}

/** @internal */
export const GRPC_NAMES: Record<number, string> = Object.fromEntries(Object.entries(grpc.status).filter(([, v]) => typeof v === "number").map(([k, v]) => [v, k]));

/** The grpc-retry-pushback-ms values of one response, read as gRFC A6 does: one value, or the same
 * value repeated, is a delay; a negative, unparsable or too large value (past 2^53 ms, beyond any
 * catalog's cap), or values that disagree, mean "do not retry". */
export function pushback(values: Array<string | Buffer>): { ms?: number; doNotRetry: boolean } {
  let got: bigint | undefined;
  for (const raw of values) {
    const v = String(raw).trim();
    if (!/^[0-9]+$/.test(v)) return { doNotRetry: true };
    const n = BigInt(v);
    if (n > BigInt(Number.MAX_SAFE_INTEGER) || (got !== undefined && got !== n)) return { doNotRetry: true };
    got = n;
  }
  return got === undefined ? { doNotRetry: false } : { ms: Number(got), doNotRetry: false };
}

/** A grpc-js ServiceError: its status name (catalog "grpc"), RetryInfo or grpc-retry-pushback-ms as retryAfterMs
 * (a pushback that says "do not retry" as noRetry). */
export function fromGrpc(err: unknown): FailureFields | undefined {
  const e = err as { code?: unknown; metadata?: grpc.Metadata };
  if (typeof e?.code !== "number" || !(e.metadata instanceof grpc.Metadata)) return undefined;
  const out: FailureFields = { catalog: "grpc", code: GRPC_NAMES[e.code] ?? String(e.code) };
  const bin = e.metadata.get("grpc-status-details-bin")[0];
  if (bin instanceof Buffer) {
    const ms = retryInfoMs(bin);
    if (ms !== undefined) out.retryAfterMs = ms;
  }
  const p = pushback(e.metadata.get("grpc-retry-pushback-ms"));
  if (p.doNotRetry) { out.noRetry = true; delete out.retryAfterMs; }
  else if (p.ms !== undefined) out.retryAfterMs = Math.max(out.retryAfterMs ?? 0, p.ms);
  return out;
}

// google.rpc.Status{details: repeated Any} → google.rpc.RetryInfo{retry_delay: Duration}, decoded by hand
// (undefined when absent, or negative or malformed). @internal shared with ./busy
export function retryInfoMs(bin: Uint8Array): number | undefined {
  const r = protobuf.Reader.create(bin);
  let found: number | undefined;
  while (r.pos < r.len) {
    const tag = r.uint32();
    if (tag >>> 3 !== 3) { r.skipType(tag & 7); continue; }
    const any = protobuf.Reader.create(r.bytes());
    let typeUrl = "", value: Uint8Array | undefined;
    while (any.pos < any.len) {
      const t = any.uint32();
      if (t >>> 3 === 1) typeUrl = any.string();
      else if (t >>> 3 === 2) value = any.bytes();
      else any.skipType(t & 7);
    }
    if (!typeUrl.endsWith("google.rpc.RetryInfo") || !value) continue;
    const ri = protobuf.Reader.create(value);
    while (ri.pos < ri.len) {
      const t = ri.uint32();
      if (t >>> 3 !== 1) { ri.skipType(t & 7); continue; }
      const d = protobuf.Reader.create(ri.bytes());
      let s = 0, n = 0;
      while (d.pos < d.len) {
        const dt = d.uint32();
        if (dt >>> 3 === 1) s = Number(d.int64());
        else if (dt >>> 3 === 2) n = d.int32();
        else d.skipType(dt & 7);
      }
      found = s < 0 || n < 0 || n >= 1e9 ? undefined : s * 1000 + Math.floor(n / 1e6);
    }
  }
  return found;
}

/** DependencyError, gRPC errors, then HTTP errors (err.status/statusCode or err.response.status, with headers). */
export function defaultMapper(err: unknown): FailureFields | undefined {
  if (err instanceof DependencyError) {
    return { code: err.code, catalog: err.opts.catalog, retryAfter: err.opts.retryAfter, retryAfterMs: err.opts.retryAfterMs };
  }
  const g = fromGrpc(err);
  if (g) return g;
  const e = err as any;
  const resp = e?.response;
  const status = resp?.status ?? resp?.statusCode ?? e?.status ?? e?.statusCode;
  if (typeof status === "number" && status >= 100 && status <= 599) return fromHttp(status, resp?.headers ?? e?.headers);
  return undefined;
}
