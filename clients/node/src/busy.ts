// retryd's own shed advice (issue #25): when retryd has no room it answers
// RESOURCE_EXHAUSTED (or, draining, UNAVAILABLE) with retry advice, and the
// client sends it no Classify, no Admit and no outcome batch until the
// advice has passed. No I/O here: the client and the mirror share it.
import * as grpc from "@grpc/grpc-js";
import { pushback, retryInfoMs } from "./mappers.js";

/** The longest wait a shed answer can impose (ms): a hostile or broken server must not silence the
 * client for long. */
export const MAX_ADVICE_MS = 30_000;

/** Whether an RPC's error is a shed answer, and its advice in ms (capped at MAX_ADVICE_MS; undefined when
 * none): shed for RESOURCE_EXHAUSTED, and for UNAVAILABLE carrying advice (a draining retryd; a bare
 * UNAVAILABLE is an unreachable one). The advice is RetryInfo's retry_delay, else
 * grpc-retry-pushback-ms read by gRFC A6 (a negative, unparsable or conflicting value: none). */
export function shedAdvice(err: unknown): { shed: boolean; ms?: number } {
  const e = err as { code?: unknown; metadata?: unknown };
  const exhausted = e?.code === grpc.status.RESOURCE_EXHAUSTED;
  if (!exhausted && e?.code !== grpc.status.UNAVAILABLE) return { shed: false };
  const md = e.metadata instanceof grpc.Metadata ? e.metadata : undefined;
  const bin = md?.get("grpc-status-details-bin")[0];
  let info: number | undefined;
  if (bin instanceof Buffer) {
    try { info = retryInfoMs(bin); } catch { info = undefined; } // a broken detail is no advice
  }
  const values = md?.get("grpc-retry-pushback-ms") ?? [];
  const ms = info ?? pushback(values).ms;
  return { shed: exhausted || info !== undefined || values.length > 0, ms: ms === undefined ? undefined : Math.min(ms, MAX_ADVICE_MS) };
}

/** When retryd advised waiting (a monotonic instant, ms; 0: never). */
export class Busy {
  until = 0;

  remaining(): number { return Math.max(0, this.until - performance.now()); }

  active(): boolean { return this.until > 0 && performance.now() < this.until; }

  /** Waits `ms` from now (the later instant wins); true when this starts a busy period. */
  advise(ms: number): boolean {
    if (!(ms > 0)) return false; // 0: a draining server's "elsewhere, at once"; nothing to wait for
    const now = performance.now();
    const fresh = now >= this.until;
    this.until = Math.max(this.until, now + ms);
    return fresh;
  }
}
