// @retryd/client: runs calls to a dependency under retryd's retry loop.
// Admit before each attempt; the call; successes reported in batches; a
// failure mapped to a Failure and classified; waits from the decision's
// window; a read-back before a write is resent; a deadline and an
// AbortSignal over everything; a conservative fallback when retryd is
// unreachable or slow.
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import protobuf from "protobufjs";
import { PROTOS } from "./proto.generated.js";
// Types generated from proto/ by proto-loader-gen-types (npm run build), with
// the loader options service() uses: keepCase, longs Number, enums String.
import type { RetryDecisionServiceClient } from "./gen/retryd/v1/RetryDecisionService.js";
import type { AdmitRequest } from "./gen/retryd/v1/AdmitRequest.js";
import type { AdmitResponse__Output } from "./gen/retryd/v1/AdmitResponse.js";
import type { ClassifyRequest } from "./gen/retryd/v1/ClassifyRequest.js";
import type { ClassifyResponse__Output } from "./gen/retryd/v1/ClassifyResponse.js";
import type { ReportOutcomesRequest } from "./gen/retryd/v1/ReportOutcomesRequest.js";
import type { ReportOutcomesResponse__Output } from "./gen/retryd/v1/ReportOutcomesResponse.js";
import type { Failure as FailureMessage } from "./gen/retryd/v1/Failure.js";
import type { Decision__Output } from "./gen/retryd/v1/Decision.js";
import type { Hold__Output } from "./gen/retryd/v1/Hold.js";
import type { Timestamp__Output } from "./gen/google/protobuf/Timestamp.js";
import { Mirror, type MirrorStats } from "./mirror.js";
import { Busy, shedAdvice } from "./busy.js";
import { DependencyError, defaultMapper, GRPC_NAMES, type FailureFields } from "./mappers.js";
export { DependencyError, defaultMapper, fromEnvelope, fromGrpc, fromHttp, pushback, type FailureFields } from "./mappers.js";
import { HoldKind, HoldScope, RefusedReason, SideEffectState, Strategy, Verdict, wordOf } from "./words.js";
export { HoldKind, HoldScope, RefusedReason, SideEffectState, Strategy, Verdict };
export type { RetryDecisionServiceClient, MirrorStats };

export type Operation = "read" | "write";


export interface Hold {
  id: string; catalog: string; dependency: string; tenant: string; method: string;
  scope?: HoldScope; kind?: HoldKind; until?: Date; code: string; rule: string; reason: string;
}

/** retryd's answer for one failure. `verdict` is retryd's word ("retry_with_limit"). */
export interface Decision {
  verdict: Verdict;
  reason: string; rule: string; requiredTransition: string; terminalState: string;
  afterMs: number; maxAfterMs: number; strategy?: Strategy; sideEffectState?: SideEffectState;
  hold?: Hold; raw?: Decision__Output;
}

export interface Event {
  /** "retryd_busy": once per busy period, retryd shed an RPC and advised waiting `waitMs`. */
  kind: "admit_refused" | "decision" | "wait" | "read_back" | "fallback" | "success" | "mirror_stale" | "mirror_synced" | "retryd_busy";
  attempt: number; decision?: Decision; hold?: Hold; waitMs?: number; detail?: string;
  /** Decided by the client's holds mirror, with no RPC. */
  local?: boolean;
  /** A fallback because retryd advised waiting: the RPC was not sent. */
  busy?: boolean;
}

/** An RPC not sent because retryd advised waiting (its shed advice): taken as retryd unavailable. */
export class RetrydBusy extends Error {}

export interface Fallback { maxAttempts: number; baseMs: number; capMs: number }
export const DEFAULT_FALLBACK: Fallback = { maxAttempts: 3, baseMs: 100, capMs: 2000 };

export type Sleep = (ms: number, signal?: AbortSignal) => Promise<void>;

export interface ClientOptions {
  catalog?: string; dependency?: string; tenant?: string; locale?: string;
  /** Per-RPC bound once connected (default 50 ms). */
  timeoutMs?: number;
  /** Bound on the eager connect (default 1000 ms). */
  connectTimeoutMs?: number;
  /** TLS/mTLS credentials (see tlsFromEnv); default insecure. */
  credentials?: grpc.ChannelCredentials;
  sleep?: Sleep;
  fallback?: Fallback;
  onEvent?: (e: Event) => void;
  reportIntervalMs?: number;
  /** Admit from a local mirror of the fleet's holds, fed by one WatchHolds stream (default true). */
  mirror?: boolean;
  /** The most holds the mirror keeps (default 10 000); beyond it the soonest-ending is dropped and
   * its dependency goes back to Admit until the next snapshot. */
  mirrorMaxHolds?: number;
}

export interface CallOptions<T> {
  operation?: Operation;
  method?: string;
  idempotencyKey?: string;
  idempotencyKeyEnforced?: boolean;
  /** Resolves the effect (returned without resending), or null/undefined when absent; throws Inconclusive when it cannot tell. */
  readBack?: () => Promise<T | null | undefined>;
  /** Maps fn's error to Failure fields; undefined: rethrown untouched. Default: defaultMapper. */
  toFailure?: (err: unknown) => FailureFields | undefined;
  /** A Date, or milliseconds from now. */
  deadline?: Date | number;
  signal?: AbortSignal;
}

export class Inconclusive extends Error {}
/** The loop stopped without a result; `reason` says why. */
export class RetryRefused extends Error {
  readonly reason: RefusedReason = RefusedReason.Verdict;
  constructor(message: string, public decision?: Decision, public cause?: unknown) { super(message); }
}
export class FixBeforeRetry extends RetryRefused {}
export class DoNotRetry extends RetryRefused {}
export class VerificationRequired extends RetryRefused {}
export class Held extends RetryRefused {
  override readonly reason: RefusedReason = RefusedReason.Held;
  constructor(message: string, public hold?: Hold) { super(message); }
}
export class DeadlineExceeded extends RetryRefused { override readonly reason: RefusedReason = RefusedReason.DeadlineExceeded; }
export class RetrydUnavailable extends RetryRefused { override readonly reason: RefusedReason = RefusedReason.Fallback; }
export class Cancelled extends Error {}

/** retryd refused the request itself (INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED): a mistake in the
 * client's configuration or in what a mapper sent, not an outage, so no fallback runs. `field` is the
 * field retryd named ("failure.catalog"), `cause` the dependency's error when there was one. */
export class Rejected extends Error {
  constructor(public code: string, public field: string, public details: string, public cause?: unknown) {
    super(`retryd rejected the request (${code}): ${details}`);
  }
}

const REJECTION_CODES = new Set([grpc.status.INVALID_ARGUMENT, grpc.status.NOT_FOUND, grpc.status.PERMISSION_DENIED]);

/** retryd's status says the request is wrong (undefined otherwise); its messages start with the field.
 * @internal shared with ./cockatiel */
export function rejectionOf(rpcErr: unknown, cause?: unknown): Rejected | undefined {
  const e = rpcErr as { code?: number; details?: string };
  if (typeof e?.code !== "number" || !REJECTION_CODES.has(e.code)) return undefined;
  const details = e.details ?? "";
  const i = details.indexOf(":");
  const head = i > 0 ? details.slice(0, i).trim() : "";
  return new Rejected(GRPC_NAMES[e.code] ?? String(e.code), head && !/\s/.test(head) ? head : "", details, cause);
}

/** TLS from the examples' environment (RETRYD_TLS_CA turns it on; RETRYD_TLS_CLIENT_CERT/KEY for mTLS). */
export async function tlsFromEnv(): Promise<grpc.ChannelCredentials | undefined> {
  const ca = process.env.RETRYD_TLS_CA;
  if (!ca) return undefined;
  const { readFileSync } = await import("node:fs");
  const cert = process.env.RETRYD_TLS_CLIENT_CERT, key = process.env.RETRYD_TLS_CLIENT_KEY;
  return grpc.credentials.createSsl(readFileSync(ca), key ? readFileSync(key) : null, cert ? readFileSync(cert) : null);
}

let serviceCtor: grpc.ServiceClientConstructor | undefined;
function service(): grpc.ServiceClientConstructor {
  if (!serviceCtor) {
    const root = new protobuf.Root();
    for (const wk of ["google/protobuf/timestamp.proto", "google/protobuf/any.proto"]) {
      root.addJSON((protobuf.common as any).get(wk).nested);
    }
    for (const [, text] of Object.entries(PROTOS)) protobuf.parse(text, root, { keepCase: true });
    const def = protoLoader.fromJSON(root.toJSON(), { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true });
    const pkg = grpc.loadPackageDefinition(def) as any;
    serviceCtor = pkg.retryd.v1.RetryDecisionService as grpc.ServiceClientConstructor;
  }
  return serviceCtor;
}

const ts = (d: Date) => ({ seconds: Math.floor(d.getTime() / 1000), nanos: (d.getTime() % 1000) * 1e6 });
const fromTs = (t: Timestamp__Output | null | undefined): Date | undefined => (t && (t.seconds || t.nanos) ? new Date(Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6)) : undefined);

function toHold(h: Hold__Output | null | undefined): Hold | undefined {
  if (!h?.id) return undefined;
  return { id: h.id, catalog: h.catalog, dependency: h.dependency, tenant: h.tenant, method: h.method,
    scope: wordOf(HoldScope, h.scope, "SCOPE_"), kind: wordOf(HoldKind, h.kind, "HOLD_KIND_"), until: fromTs(h.until), code: h.code, rule: h.rule, reason: h.reason };
}

function toDecision(d: Decision__Output): Decision {
  const r = d.retry;
  return { verdict: wordOf(Verdict, d.verdict, "VERDICT_") as Verdict, reason: d.reason, rule: d.rule,
    requiredTransition: d.required_transition, terminalState: d.terminal_state,
    afterMs: Number(r?.after_ms ?? 0), maxAfterMs: Number(r?.max_after_ms ?? 0),
    strategy: wordOf(Strategy, r?.strategy, "STRATEGY_"), sideEffectState: wordOf(SideEffectState, r?.side_effect_state, "SIDE_EFFECT_STATE_"),
    hold: toHold(d.hold), raw: d };
}

/** The default Sleep: setTimeout, rejected with Cancelled when the signal aborts. */
export const sleep: Sleep = (ms, signal) => new Promise((resolve, reject) => {
  if (signal?.aborted) return reject(new Cancelled("cancelled"));
  const t = setTimeout(() => { signal?.removeEventListener("abort", onAbort); resolve(); }, ms);
  const onAbort = () => { clearTimeout(t); reject(new Cancelled("cancelled")); };
  signal?.addEventListener("abort", onAbort, { once: true });
});

export class Client {
  /** The generated, typed gRPC stub (every RPC of retryd.v1.RetryDecisionService). */
  readonly stub: RetryDecisionServiceClient;
  fallbacks = 0;
  private o: Required<Omit<ClientOptions, "credentials" | "onEvent">> & Pick<ClientOptions, "onEvent">;
  private mirror: Mirror;
  private busy = new Busy();
  private counts = new Map<string, { key: string[]; c: [number, number, number] }>();
  private timer: NodeJS.Timeout;
  private ready: Promise<void>;

  constructor(address: string, opts: ClientOptions = {}) {
    this.o = { catalog: "", dependency: "", tenant: "", locale: "", timeoutMs: 50, connectTimeoutMs: 1000, sleep,
      fallback: DEFAULT_FALLBACK, reportIntervalMs: 1000, mirror: true, mirrorMaxHolds: 10_000, ...opts } as any;
    const Ctor = service();
    this.stub = new Ctor(address, opts.credentials ?? grpc.credentials.createInsecure()) as unknown as RetryDecisionServiceClient;
    this.mirror = new Mirror(this.o.mirror ? this.stub : undefined, this.o.mirrorMaxHolds,
      (state) => this.event({ kind: state === "stale" ? "mirror_stale" : "mirror_synced", attempt: 0 }),
      this.busy, (err) => this.shed(err));
    this.mirror.want([this.o.dependency], [this.o.tenant]);
    // Connect eagerly, bounded; an unreachable retryd is not an error (the fallback decides).
    this.ready = new Promise((resolve) => this.stub.waitForReady(Date.now() + this.o.connectTimeoutMs, () => resolve()));
    this.timer = setInterval(() => this.flush(), this.o.reportIntervalMs);
    this.timer.unref();
  }

  /** The settings the adapters (./cockatiel) build their requests from. */
  get settings(): Readonly<{ catalog: string; dependency: string; tenant: string; locale: string; timeoutMs: number; fallback: Fallback }> {
    const { catalog, dependency, tenant, locale, timeoutMs, fallback } = this.o;
    return { catalog, dependency, tenant, locale, timeoutMs, fallback };
  }

  /** The holds mirror's answer for one attempt, a first attempt admitted locally counted as a
   * request (the deposit Admit would make). @internal shared with ./cockatiel */
  admitLocally(method: string, attempt: number): "ask" | "admitted" | "busy" | Held {
    const local = this.o.mirror ? this.mirror.admit(this.o.catalog, this.o.dependency, this.o.tenant, method) : "ask";
    if (local === "admitted") { if (attempt <= 1) this.count(method, 0); return local; }
    if (local === "ask") {
      if (this.heldBack()) return "busy"; // fail open without the RPC, as with retryd down
      this.mirror.stats.admitRpcs++;
      return local;
    }
    const hold = toHold(local.hold);
    return new Held(`held until ${hold?.until?.toISOString()}: ${hold?.reason ?? ""} (local)`, hold);
  }

  /** While retryd's advice runs an RPC is not sent: true (counted in busySkips) then.
   * @internal shared with ./cockatiel */
  heldBack(): boolean {
    if (!this.busy.active()) return false;
    this.mirror.stats.busySkips++;
    return true;
  }

  /** An RPC's error: a shed answer is counted and its advice (> 0) starts or extends a busy period,
   * told once per period (event "retryd_busy"). True when it was a shed answer.
   * @internal shared with ./cockatiel */
  shed(err: unknown): boolean {
    const { shed, ms } = shedAdvice(err);
    if (!shed) return false;
    this.mirror.stats.shedAnswers++;
    if (ms !== undefined && this.busy.advise(ms)) {
      this.event({ kind: "retryd_busy", attempt: 0, waitMs: ms, detail: GRPC_NAMES[(err as { code: number }).code] });
    }
    return true;
  }

  /** The mirror's and the RPCs' counters (a copy). */
  stats(): MirrorStats { return { ...this.mirror.stats }; }

  /** The holds in the mirror now (of one dependency, or all). */
  mirrorHolds(dependency?: string): Hold[] { return this.mirror.list(dependency).map((h) => toHold(h)!); }

  /** Declares dependencies and tenants this process calls (the client's own are declared already);
   * resolves true once the mirror's snapshot covers them, false after timeoutMs (default 2000). */
  async watch(w: { dependencies?: string[]; tenants?: string[]; timeoutMs?: number } = {}): Promise<boolean> {
    if (!this.o.mirror) return false;
    const deps = [this.o.dependency, ...(w.dependencies ?? [])].filter(Boolean);
    const tenants = [this.o.tenant, ...(w.tenants ?? [])].filter(Boolean);
    this.mirror.want(deps, tenants);
    return this.mirror.waitCovered(deps, tenants, w.timeoutMs ?? 2000);
  }

  /** Stops the mirror's watch, sends the outcome counts not yet reported and closes the channel. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    this.mirror.close();
    await this.flush();
    this.stub.close();
  }

  private count(method: string, i: 0 | 1 | 2) {
    const key = [this.o.catalog, this.o.dependency, this.o.tenant, method];
    const k = key.join("\u0000");
    const e = this.counts.get(k) ?? { key, c: [0, 0, 0] as [number, number, number] };
    e.c[i]++;
    this.counts.set(k, e);
  }

  private flush(): Promise<void> {
    if (this.counts.size === 0 || this.heldBack()) return Promise.resolve(); // kept while retryd advises waiting
    const counts = [...this.counts.values()].slice(0, 1000).map(({ key, c }) => ({
      catalog: key[0], dependency: key[1], tenant: key[2], method: key[3], requests: c[0], successes: c[1], failures: c[2] }));
    this.counts.clear();
    this.mirror.stats.reportedRequests += counts.reduce((a, c) => a + c.requests, 0);
    return this.report({ counts }, 1000).then(() => undefined, (err) => {
      if (!this.shed(err)) return;
      // Shed, not lost: put back for the next flush after the advice.
      for (const c of counts) {
        const key = [c.catalog, c.dependency, c.tenant, c.method], k = key.join("\u0000");
        const e = this.counts.get(k) ?? { key, c: [0, 0, 0] as [number, number, number] };
        e.c[0] += c.requests; e.c[1] += c.successes; e.c[2] += c.failures;
        this.counts.set(k, e);
      }
    });
  }

  private static options(timeoutMs: number): grpc.CallOptions {
    return { deadline: Date.now() + Math.max(1, timeoutMs) };
  }

  private busyError(): RetrydBusy {
    return new RetrydBusy(`not sent: retryd advised waiting ${Math.round(this.busy.remaining())} ms more`);
  }

  private admit(req: AdmitRequest, timeoutMs: number): Promise<AdmitResponse__Output> {
    if (this.heldBack()) return Promise.reject(this.busyError());
    this.mirror.stats.admitRpcs++;
    return new Promise((resolve, reject) =>
      this.stub.Admit(req, Client.options(timeoutMs), (err, resp) => {
        if (err) this.shed(err);
        if (err || !resp) return reject(err);
        if (this.o.mirror) this.mirror.learn(resp.hold, req.tenant ?? "");
        resolve(resp);
      }));
  }

  private classify(req: ClassifyRequest, timeoutMs: number): Promise<ClassifyResponse__Output> {
    if (this.heldBack()) return Promise.reject(this.busyError());
    return new Promise((resolve, reject) =>
      this.stub.Classify(req, Client.options(timeoutMs), (err, resp) => {
        if (err) this.shed(err);
        if (err || !resp) return reject(err);
        if (this.o.mirror) this.mirror.learn(resp.decision?.hold, req.failure?.tenant ?? "");
        resolve(resp);
      }));
  }

  private report(req: ReportOutcomesRequest, timeoutMs: number): Promise<ReportOutcomesResponse__Output> {
    this.mirror.stats.reportRpcs++;
    return new Promise((resolve, reject) =>
      this.stub.ReportOutcomes(req, Client.options(timeoutMs), (err, resp) => (err || !resp ? reject(err) : resolve(resp))));
  }

  private event(e: Event) {
    if (e.kind === "fallback") this.fallbacks++;
    this.o.onEvent?.(e);
  }

  /** Runs fn under the loop and resolves with its result (or a read-back's). */
  async call<T>(fn: (signal?: AbortSignal) => Promise<T>, opts: CallOptions<T> = {}): Promise<T> {
    await this.ready;
    const signal = opts.signal;
    const deadline = opts.deadline === undefined ? undefined : opts.deadline instanceof Date ? opts.deadline.getTime() : Date.now() + opts.deadline;
    const op = opts.operation === "read" ? "OPERATION_KIND_READ" : opts.operation === "write" ? "OPERATION_KIND_WRITE" : "OPERATION_KIND_UNSPECIFIED";
    const method = opts.method ?? "";
    const mapper = opts.toFailure ?? defaultMapper;
    const past = (waitMs: number) => deadline !== undefined && Date.now() + waitMs > deadline;
    const rpcTimeout = () => (deadline === undefined ? this.o.timeoutMs : Math.min(this.o.timeoutMs, deadline - Date.now()));
    const checkCancel = () => { if (signal?.aborted) throw new Cancelled("cancelled"); };
    let attempt = 1;
    let admittedOnce = false;
    const held = async (hold: Hold | undefined, retryAt: number, local: boolean) => {
      const waitMs = Math.max(0, retryAt - Date.now()) + 10;
      this.event({ kind: "admit_refused", attempt, hold, waitMs, local });
      if (past(waitMs)) throw new Held(`held until ${hold?.until?.toISOString()}: ${hold?.reason ?? ""}`, hold);
      this.event({ kind: "wait", attempt, hold, waitMs, detail: "hold", local });
      await this.o.sleep(waitMs, signal);
    };
    for (;;) {
      // 1. Admission: from the holds mirror when it can answer, else Admit (fail open: retryd
      // unreachable does not stop the call).
      let probe = "";
      for (;;) {
        checkCancel();
        if (past(0)) throw new DeadlineExceeded("deadline passed before the attempt");
        const local = this.o.mirror ? this.mirror.admit(this.o.catalog, this.o.dependency, this.o.tenant, method) : "ask";
        if (local === "admitted") {
          if (!admittedOnce) this.count(method, 0); // the deposit Admit would have made
          break;
        }
        if (local !== "ask") { await held(toHold(local.hold), local.retryAt, true); continue; }
        let resp: AdmitResponse__Output;
        try {
          resp = await this.admit({ catalog: this.o.catalog, dependency: this.o.dependency, tenant: this.o.tenant,
            method, operation: op, attempt }, rpcTimeout());
        } catch (err: any) {
          const rejected = rejectionOf(err);
          if (rejected) throw rejected;
          this.event({ kind: "fallback", attempt, detail: `Admit failed: ${err?.message ?? err}`, busy: err instanceof RetrydBusy });
          if (!admittedOnce) this.count(method, 0); // Admit made no deposit
          break;
        }
        if (resp.admitted) { probe = resp.probe_token; break; }
        await held(toHold(resp.hold), fromTs(resp.retry_at)?.getTime() ?? Date.now() + 1000, false);
      }
      admittedOnce = true;

      // 2. The call.
      let error: unknown;
      try {
        const v = await fn(signal);
        this.count(method, 1);
        if (probe) await this.report({ probe_token: probe, probe_succeeded: true }, this.o.timeoutMs).catch((err) => { this.shed(err); });
        this.event({ kind: "success", attempt });
        return v;
      } catch (err) {
        error = err;
      }
      checkCancel();

      // 3. Map the failure.
      const f = mapper(error);
      if (!f) { this.count(method, 2); throw error; }
      const failure: FailureMessage & { read_back: string; idempotency_key_enforced: boolean } = {
        catalog: f.catalog || this.o.catalog, code: f.code ?? "", operation: op, method, attempt,
        retry_after: f.retryAfter ?? "", idempotency_key: opts.idempotencyKey ?? "",
        idempotency_key_enforced: !!opts.idempotencyKeyEnforced, request_id: f.requestId ?? "",
        tenant: this.o.tenant, dependency: this.o.dependency, probe_token: probe, read_back: "READ_BACK_UNSPECIFIED",
      };
      if (f.retryAfterMs !== undefined) failure.retry_after_ms = f.retryAfterMs;
      if (f.quotaResetsAt) failure.quota_resets_at = ts(f.quotaResetsAt);
      if (f.noRetry) failure.upstream = { retryable: false };
      if (deadline !== undefined) failure.deadline = ts(new Date(deadline));

      // 4. Classify and act; a read-back's answer goes in a second Classify.
      let readBackValue: T | undefined;
      let waitMs = 0;
      for (;;) {
        let resp: ClassifyResponse__Output;
        try {
          resp = await this.classify({ failure, locale: this.o.locale }, rpcTimeout());
        } catch (err: any) {
          checkCancel();
          const rejected = rejectionOf(err, error);
          if (rejected) throw rejected;
          if (past(0)) throw new DeadlineExceeded("the deadline passed while asking retryd", undefined, error);
          const may = op === "OPERATION_KIND_READ" || failure.idempotency_key_enforced;
          const detail = `Classify failed: ${err?.message ?? err}`, busy = err instanceof RetrydBusy;
          if (!may || attempt >= this.o.fallback.maxAttempts) {
            this.event({ kind: "fallback", attempt, detail, busy });
            const kind = op === "OPERATION_KIND_READ" ? "read" : "write";
            const d: Decision = { verdict: Verdict.DoNotRetry, rule: `client_fallback/${kind}`, requiredTransition: "", terminalState: "",
              afterMs: 0, maxAfterMs: 0, reason: `retryd unavailable (${err?.message ?? err}); the conservative fallback does not retry this ${kind}` };
            throw new RetrydUnavailable(d.reason, d, error);
          }
          waitMs = Math.random() * Math.min(this.o.fallback.capMs, this.o.fallback.baseMs * 2 ** (attempt - 1));
          this.event({ kind: "fallback", attempt, detail, waitMs, busy });
          break;
        }
        if (!resp.decision) throw new Error("retryd answered Classify without a decision");
        const d = toDecision(resp.decision);
        this.event({ kind: "decision", attempt, decision: d });
        if (d.verdict === Verdict.AlreadyApplied) return readBackValue as T;
        if (d.verdict === Verdict.StateVerificationRequired && opts.readBack && failure.read_back === "READ_BACK_UNSPECIFIED") {
          try {
            const v = await opts.readBack();
            if (v === null || v === undefined) failure.read_back = "READ_BACK_EFFECT_ABSENT";
            else { failure.read_back = "READ_BACK_EFFECT_PRESENT"; readBackValue = v; }
          } catch (err) {
            if (!(err instanceof Inconclusive)) throw err;
            failure.read_back = "READ_BACK_INCONCLUSIVE";
          }
          this.event({ kind: "read_back", attempt, detail: failure.read_back });
          continue;
        }
        if (d.verdict !== Verdict.RetryWithLimit) {
          const Cls = d.verdict === Verdict.FixBeforeRetry ? FixBeforeRetry : d.verdict === Verdict.DoNotRetry ? DoNotRetry
            : d.verdict === Verdict.StateVerificationRequired ? VerificationRequired : RetryRefused;
          throw new Cls(`${d.verdict}: ${d.reason}`, d, error);
        }
        const hi = Math.max(d.afterMs, d.maxAfterMs);
        waitMs = d.afterMs + Math.random() * (hi - d.afterMs);
        break;
      }
      if (past(waitMs)) throw new DeadlineExceeded(`the next attempt (${Math.round(waitMs)} ms away) would pass the deadline`, undefined, error);
      this.event({ kind: "wait", attempt, waitMs });
      await this.o.sleep(waitMs, signal);
      attempt++;
    }
  }
}
