// @retryd/client/cockatiel: retryd's decisions inside a cockatiel retry policy.
//
//   import { retry, handleWhen } from "cockatiel";
//   import { CockatielAdvisor } from "@retryd/client/cockatiel";
//   const advisor = new CockatielAdvisor(client, { operation: "read", method: "crm.deal.get" });
//   const policy = retry(handleWhen(advisor.handles), { maxAttempts: 5, backoff: advisor.backoff });
//   const deal = await advisor.execute(policy, (signal) => b24.getDeal(id, { signal }));
//
// The wrapped function asks Admit before each attempt (a fleet hold throws
// Held) and, when the call fails, Classify: retry_with_limit becomes a
// RetrydAdvice that `handles` accepts and whose wait `backoff` returns;
// anything else stops. Read-back cannot be expressed in cockatiel, so the
// advisor serves reads and writes whose idempotency key the dependency
// enforces; a write of unknown outcome is refused when the advisor is made.
// No runtime dependency on cockatiel: its interfaces are matched by shape.
import * as grpc from "@grpc/grpc-js";
import { defaultMapper, Held, rejectionOf, type Client, type FailureFields } from "./index.js";
import type { Failure as FailureMessage } from "./gen/retryd/v1/Failure.js";
import { Verdict, wordOf } from "./words.js";

/** What the wrapped function throws when the call failed: retryd's advice, the dependency's error as `cause`. */
export class RetrydAdvice extends Error {
  /** `verdict`: retryd's word ("retry_with_limit"), or "client_fallback" when retryd was unreachable. */
  constructor(readonly retry: boolean, readonly waitMs: number, readonly verdict: Verdict | "client_fallback" | "", readonly cause: unknown) {
    super(`retryd: ${verdict}${retry ? ` (retry in ${Math.round(waitMs)} ms)` : ""}`);
  }
}

export interface AdvisorOptions {
  operation: "read" | "write";
  method: string;
  idempotencyKey?: string;
  /** The dependency deduplicates by the key: only then may a write be resent. */
  idempotencyKeyEnforced?: boolean;
  toFailure?: (err: unknown) => FailureFields | undefined;
}

type Unary<Req, Res> = (req: Req, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: Res) => void) => unknown;

function unary<Req, Res>(call: Unary<Req, Res>, req: Req, timeoutMs: number): Promise<Res> {
  return new Promise((resolve, reject) =>
    call(req, { deadline: Date.now() + Math.max(1, timeoutMs) }, (err, res) => (err || !res ? reject(err) : resolve(res))));
}

/** cockatiel's IBackoffFactory / IBackoff, matched by shape. */
export interface Backoff {
  next(ctx: { result?: { error?: unknown } }): Backoff & { duration: number };
}

function backoffOf(ctx: { result?: { error?: unknown } }): Backoff & { duration: number } {
  const e = ctx.result?.error;
  return { duration: e instanceof RetrydAdvice ? e.waitMs : 0, next: backoffOf };
}

export class CockatielAdvisor {
  constructor(private readonly client: Client, private readonly opts: AdvisorOptions) {
    if (opts.operation === "write" && !(opts.idempotencyKey && opts.idempotencyKeyEnforced)) {
      throw new Error("a write of unknown outcome cannot be retried blindly and cockatiel has no read-back: "
        + "give an idempotency key the dependency enforces, or use client.call(fn, { readBack })");
    }
  }

  /** For cockatiel's handleWhen: retry exactly what retryd said to retry. */
  readonly handles = (err: unknown): boolean => err instanceof RetrydAdvice && err.retry;

  /** For cockatiel's retry(…, { backoff }): the wait retryd's decision gave. */
  readonly backoff: Backoff = { next: (ctx) => backoffOf(ctx) };

  /** Runs fn under the policy; a failure ends as the dependency's own error (RetrydAdvice unwrapped). */
  async execute<T>(policy: { execute(fn: (ctx: { signal: AbortSignal }) => Promise<T>, signal?: AbortSignal): Promise<T> },
    fn: (signal?: AbortSignal) => Promise<T>, signal?: AbortSignal): Promise<T> {
    let attempt = 0;
    try {
      return await policy.execute((ctx) => this.attempt(++attempt, fn, ctx.signal), signal);
    } catch (err) {
      throw err instanceof RetrydAdvice ? err.cause : err;
    }
  }

  private async attempt<T>(attempt: number, fn: (signal?: AbortSignal) => Promise<T>, signal?: AbortSignal): Promise<T> {
    const s = this.client.settings, stub = this.client.stub;
    const operation = this.opts.operation === "read" ? "OPERATION_KIND_READ" : "OPERATION_KIND_WRITE";
    const local = this.client.admitLocally(this.opts.method, attempt); // the holds mirror, when it can answer
    if (local instanceof Held) throw local;
    if (local === "ask") try {
      const admit = await unary(stub.Admit.bind(stub) as Unary<unknown, { admitted: boolean; hold?: { reason?: string } | null }>,
        { catalog: s.catalog, dependency: s.dependency, tenant: s.tenant, method: this.opts.method, operation, attempt }, s.timeoutMs);
      if (!admit.admitted) throw new Held(`held: ${admit.hold?.reason ?? ""}`);
    } catch (err) {
      const rejected = rejectionOf(err);
      if (rejected) throw rejected;
      if (err instanceof Held) throw err;
      // retryd unreachable, slow or shedding: fail open, as the client does.
      this.client.shed(err);
    }
    let error: unknown;
    try {
      return await fn(signal);
    } catch (err) {
      error = err;
    }
    const f = (this.opts.toFailure ?? defaultMapper)(error);
    if (!f) throw error;
    const failure: FailureMessage = {
      catalog: f.catalog || s.catalog, code: f.code ?? "", operation, method: this.opts.method, attempt,
      retry_after: f.retryAfter ?? "", idempotency_key: this.opts.idempotencyKey ?? "",
      idempotency_key_enforced: !!this.opts.idempotencyKeyEnforced, request_id: f.requestId ?? "",
      tenant: s.tenant, dependency: s.dependency,
    };
    if (f.retryAfterMs !== undefined) failure.retry_after_ms = f.retryAfterMs;
    if (f.noRetry) failure.upstream = { retryable: false };
    let decision: { verdict: string; retry?: { after_ms: number; max_after_ms: number } | null } | undefined;
    try {
      if (this.client.heldBack()) throw new Error("not sent: retryd advised waiting");
      const resp = await unary(stub.Classify.bind(stub) as Unary<unknown, { decision?: typeof decision | null }>,
        { failure, locale: s.locale }, s.timeoutMs);
      decision = resp.decision ?? undefined;
    } catch (err) {
      const rejected = rejectionOf(err, error);
      if (rejected) throw rejected;
      this.client.shed(err);
      // The client's conservative fallback: reads and enforced-key writes, capped exponential backoff.
      const may = attempt < s.fallback.maxAttempts;
      throw new RetrydAdvice(may, Math.random() * Math.min(s.fallback.capMs, s.fallback.baseMs * 2 ** (attempt - 1)),
        "client_fallback", error);
    }
    const verdict = wordOf(Verdict, decision?.verdict, "VERDICT_") ?? "";
    const lo = Number(decision?.retry?.after_ms ?? 0), hi = Math.max(lo, Number(decision?.retry?.max_after_ms ?? 0));
    throw new RetrydAdvice(verdict === Verdict.RetryWithLimit, lo + Math.random() * (hi - lo), verdict, error);
  }
}
