// The local mirror of the fleet's holds (issue #26): one WatchHolds stream per
// client feeds it, and each attempt asks it before sending Admit. Bounded:
// maxHolds holds, 256 dependencies and 256 tenants watched, 4 096 lifted ids.
import type * as grpc from "@grpc/grpc-js";
import type { RetryDecisionServiceClient } from "./gen/retryd/v1/RetryDecisionService.js";
import type { WatchHoldsResponse__Output } from "./gen/retryd/v1/WatchHoldsResponse.js";
import type { Hold__Output } from "./gen/retryd/v1/Hold.js";
import type { Timestamp__Output } from "./gen/google/protobuf/Timestamp.js";
import { Busy } from "./busy.js";
import { bucket, bucketDigests, digest } from "./resume.js";

export const MAX_WATCHED = 256;
const MAX_LIFTED = 4096;
const RECONNECT_BASE_MS = 100, RECONNECT_CAP_MS = 5000;

/** What the mirror and the client's RPCs did. */
export interface MirrorStats {
  /** Every watched scope has its snapshot. */
  synced: boolean;
  /** The stream is down: known holds still refuse, the rest goes to Admit. */
  stale: boolean;
  /** Holds in the mirror now. */
  holds: number;
  admitRpcs: number;
  localAdmissions: number;
  localRefusals: number;
  /** ReportOutcomes RPCs sent, and the first attempts they carried. */
  reportRpcs: number;
  reportedRequests: number;
  /** Answers of a retryd with no room (RESOURCE_EXHAUSTED, or a draining UNAVAILABLE). */
  shedAnswers: number;
  /** RPCs not sent because retryd advised waiting. */
  busySkips: number;
  /** Snapshots resumed from the mirror's digests, and the buckets they resent (summed). */
  resumedSyncs: number;
  resentBuckets: number;
}

interface H {
  id: string; catalog: string; dependency: string; tenant: string; method: string; scope: string;
  /** As the server sent it (ms, not corrected for skew): what the resume digest hashes. */
  until: number; nextProbeAt?: number; probing: boolean; msg: Hold__Output;
  dg?: bigint;
}

/** A hold's resume digest (computed once). */
const digestOf = (h: H): bigint => (h.dg ??= digest(h.id, h.until));

const ms = (t: Timestamp__Output | null | undefined): number | undefined =>
  t && (Number(t.seconds) || t.nanos) ? Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6) : undefined;

function toH(h: Hold__Output, tenant: string): H {
  return { id: h.id, catalog: h.catalog, dependency: h.dependency, tenant, method: h.method, scope: h.scope,
    until: ms(h.until) ?? 0, nextProbeAt: ms(h.next_probe_at), probing: !!h.probing, msg: h };
}

class Holds {
  byId = new Map<string, H>();
  byDep = new Map<string, Map<string, H>>();
  put(h: H) {
    const old = this.byId.get(h.id);
    if (old && old.dependency !== h.dependency) this.remove(h.id);
    this.byId.set(h.id, h);
    let d = this.byDep.get(h.dependency);
    if (!d) this.byDep.set(h.dependency, (d = new Map()));
    d.set(h.id, h);
  }
  remove(id: string) {
    const h = this.byId.get(id);
    if (!h) return;
    this.byId.delete(id);
    const d = this.byDep.get(h.dependency);
    d?.delete(id);
    if (d && d.size === 0) this.byDep.delete(h.dependency);
  }
}

/** Mirror.admit's answer: "ask" (send Admit), "admitted", or a local refusal until retryAt (local ms). */
export type LocalAnswer = "ask" | "admitted" | { hold: Hold__Output; retryAt: number };

interface Gen { deps: Set<string>; tenants: Set<string>; version: number; resuming: boolean; call?: grpc.ClientReadableStream<WatchHoldsResponse__Output> }

export class Mirror {
  readonly stats: MirrorStats = { synced: false, stale: false, holds: 0, admitRpcs: 0, localAdmissions: 0,
    localRefusals: 0, reportRpcs: 0, reportedRequests: 0, shedAnswers: 0, busySkips: 0, resumedSyncs: 0, resentBuckets: 0 };
  private holds = new Holds();
  private staged?: Holds;
  private lifted = new Map<string, number>();
  private offset = 0; // server clock - local clock, ms
  private wantDeps = new Set<string>();
  private wantTenants = new Set<string>();
  private version = 0;
  private gens = new Map<number, Gen>();
  private nextGen = 0;
  private liveGen = 0;
  private pendingGen = 0;
  private syncedDeps = new Set<string>();
  private syncedTenants = new Set<string>();
  private droppedDeps = new Set<string>();
  private failures = 0;
  private timer?: NodeJS.Timeout;
  private closed = false;
  private waiters = new Set<() => void>();

  /** `busy`: retryd's shed advice (no stream opens before it passes); `onError`: a stream's error. */
  constructor(private stub: RetryDecisionServiceClient | undefined, readonly maxHolds: number,
              private onChange: (state: "stale" | "synced") => void,
              private busy: Busy = new Busy(), private onError: (err: unknown) => void = () => {}) {
    if (!(maxHolds >= 1)) throw new RangeError("mirrorMaxHolds must be at least 1");
  }

  /** Adds dependencies/tenants to watch (beyond 256 each they stay on Admit). */
  want(deps: Iterable<string>, tenants: Iterable<string>) {
    let grew = false;
    for (const d of deps) if (d && !this.wantDeps.has(d) && this.wantDeps.size < MAX_WATCHED) { this.wantDeps.add(d); grew = true; }
    for (const t of tenants) if (t && !this.wantTenants.has(t) && this.wantTenants.size < MAX_WATCHED) { this.wantTenants.add(t); grew = true; }
    if (grew) { this.version++; this.step(); }
  }

  covers(deps: string[], tenants: string[]): boolean {
    return !this.stats.stale && deps.every((d) => !d || (this.syncedDeps.has(d) && !this.droppedDeps.has(d)))
      && tenants.every((t) => !t || this.syncedTenants.has(t));
  }

  /** Resolves true once the mirror's snapshot covers deps and tenants, false after timeoutMs. */
  waitCovered(deps: string[], tenants: string[], timeoutMs: number): Promise<boolean> {
    if (this.covers(deps, tenants)) return Promise.resolve(true);
    return new Promise((resolve) => {
      const check = () => { if (this.covers(deps, tenants)) { done(); resolve(true); } };
      const t = setTimeout(() => { done(); resolve(false); }, timeoutMs);
      const done = () => { clearTimeout(t); this.waiters.delete(check); };
      this.waiters.add(check);
    });
  }

  now(): number { return Date.now() + this.offset; }

  admit(catalog: string, dependency: string, tenant: string, method: string): LocalAnswer {
    if (!dependency) return "ask";
    const synced = this.syncedDeps.has(dependency) && !this.droppedDeps.has(dependency) && (!tenant || this.syncedTenants.has(tenant));
    let best: H | undefined;
    const now = Date.now() + this.offset;
    const held = this.holds.byDep.get(dependency);
    if (held) {
      for (const h of held.values()) {
        // Past its end, a hold with a probe time may be in its probe phase (the PROBING event can
        // lag): in force, so a probe point, until LIFTED says otherwise.
        if ((h.until <= now && h.nextProbeAt === undefined) || (catalog && h.catalog !== catalog)) continue;
        const s = h.scope;
        if (s === "SCOPE_DEPENDENCY" || (s === "SCOPE_TENANT" && h.tenant === tenant) || (s === "SCOPE_METHOD" && h.method === method)) {
          if (!best || h.until > best.until) best = h;
        }
      }
    }
    if (!synced && (!this.wantDeps.has(dependency) || (tenant && !this.wantTenants.has(tenant)))) this.want([dependency], [tenant]);
    if (!best) {
      if (!synced || this.stats.stale) return "ask";
      this.stats.localAdmissions++;
      return "admitted";
    }
    if (best.probing || (best.nextProbeAt !== undefined && best.nextProbeAt <= now)) return "ask"; // retryd arbitrates the probe
    this.stats.localRefusals++;
    const at = best.nextProbeAt === undefined ? best.until : Math.min(best.until, best.nextProbeAt);
    return { hold: best.msg, retryAt: at - this.offset };
  }

  /** A hold in an Admit or Classify answer for this call, applied at once (such answers show the
   * tenant hashed; it covers the call's tenant). */
  learn(h: Hold__Output | null | undefined, tenant: string) {
    if (!h?.id) return;
    this.put(this.holds, h, h.scope === "SCOPE_TENANT" ? tenant : h.tenant, true);
  }

  private put(holds: Holds, h: Hold__Output, tenant: string, live: boolean) {
    const until = ms(h.until) ?? 0;
    if ((this.lifted.get(h.id) ?? -1) >= until) return; // a PLACED that raced the snapshot with a lift
    const old = holds.byId.get(h.id);
    if (old && old.until > until) return;
    holds.put(toH(h, tenant));
    this.trim(holds);
    if (live) this.stats.holds = holds.byId.size;
  }

  private trim(holds: Holds) {
    if (holds.byId.size > this.maxHolds) {
      const now = this.now();
      for (const x of [...holds.byId.values()]) if (x.until <= now && x.nextProbeAt === undefined) holds.remove(x.id);
      while (holds.byId.size > this.maxHolds) {
        let soonest: H | undefined;
        for (const x of holds.byId.values()) if (!soonest || x.until < soonest.until) soonest = x;
        holds.remove(soonest!.id);
        // A dropped hold must never let calls through silently: Admit decides until SYNCED.
        this.droppedDeps.add(soonest!.dependency);
      }
    }
  }

  /** A resumed snapshot sent only the buckets in `resent`: the mirror's holds in every other bucket
   * match retryd's and are kept (unless received, or lifted, since). */
  private keepUnsent(staged: Holds, resent: number[]) {
    this.stats.resumedSyncs++;
    this.stats.resentBuckets += resent.length;
    const sent = new Set(resent);
    for (const h of this.holds.byId.values()) {
      if (staged.byId.has(h.id) || sent.has(bucket(digestOf(h))) || (this.lifted.get(h.id) ?? -1) >= h.until) continue;
      staged.put(h);
    }
    this.trim(staged);
  }

  private onEvent(gen: number, ev: WatchHoldsResponse__Output) {
    const st = ms(ev.server_time);
    if (st !== undefined) this.offset = st - Date.now();
    let holds: Holds, live: boolean;
    if (gen === this.pendingGen && this.staged) { holds = this.staged; live = false; }
    else if (gen === this.liveGen) { holds = this.holds; live = true; }
    else return; // a replaced stream's late event
    const g = this.gens.get(gen)!;
    switch (ev.kind) {
      case "HOLD_EVENT_KIND_SYNCED": {
        this.droppedDeps.clear(); // synced again; a hold the resumed merge below drops to the cap stays marked
        if (!live) {
          if (g.resuming && ev.resumed) this.keepUnsent(holds, ev.resent_buckets ?? []);
          // The new stream's snapshot is the truth: it replaces the old mirror.
          this.holds = holds; this.staged = undefined;
          for (const [n, old] of this.gens) if (n < gen) { old.call?.cancel(); this.gens.delete(n); }
          this.liveGen = gen; this.pendingGen = 0;
        }
        this.syncedDeps = g.deps; this.syncedTenants = g.tenants;
        this.failures = 0;
        this.stats.holds = this.holds.byId.size;
        const changed = this.stats.stale || !this.stats.synced;
        this.stats.stale = false; this.stats.synced = true;
        if (changed) this.onChange("synced");
        for (const w of [...this.waiters]) w();
        this.step();
        return;
      }
      case "HOLD_EVENT_KIND_PLACED": case "HOLD_EVENT_KIND_EXTENDED": case "HOLD_EVENT_KIND_PROBING": {
        const h = ev.hold!;
        if (h.scope === "SCOPE_TENANT" && !g.tenants.has(h.tenant)) {
          // A tenant we did not ask for (hashed by a server without `tenants`): it cannot be
          // matched, so tenant calls must use Admit on this server.
          g.tenants = new Set();
          if (live) this.syncedTenants = g.tenants;
        }
        this.put(holds, h, h.tenant, live);
        return;
      }
      case "HOLD_EVENT_KIND_LIFTED": {
        const h = ev.hold!;
        holds.remove(h.id);
        this.lifted.delete(h.id);
        this.lifted.set(h.id, ms(h.until) ?? 0);
        if (this.lifted.size > MAX_LIFTED) this.lifted.delete(this.lifted.keys().next().value as string);
        if (live) this.stats.holds = holds.byId.size;
        return;
      }
    }
  }

  private ended(gen: number) {
    const g = this.gens.get(gen);
    if (!g || this.closed) return;
    this.gens.delete(gen);
    if (gen === this.pendingGen) { this.pendingGen = 0; this.staged = undefined; this.failures++; }
    else if (gen === this.liveGen) {
      this.failures++;
      const wasSynced = this.stats.synced && !this.stats.stale;
      this.stats.stale = true; this.stats.synced = false;
      if (wasSynced) this.onChange("stale");
    }
    this.step();
  }

  /** Opens a stream when one is needed: at start, on widening (one reopen in flight, further
   * widenings coalesce), after a failure with full-jitter backoff (100 ms ×2, cap 5 s). */
  private step() {
    if (this.closed || !this.stub || this.timer || this.pendingGen || this.wantDeps.size === 0) return;
    const live = this.gens.get(this.liveGen);
    if (live && !this.stats.stale && live.version === this.version) return;
    // retryd advised waiting: no stream before then.
    const busy = this.busy.remaining();
    if (this.failures || busy > 0) {
      const jitter = this.failures ? Math.random() * Math.min(RECONNECT_CAP_MS, RECONNECT_BASE_MS * 2 ** (this.failures - 1)) : 0;
      this.timer = setTimeout(() => { this.timer = undefined; this.open(); }, Math.max(busy, jitter));
      return;
    }
    this.open();
  }

  private open() {
    if (this.closed || !this.stub || this.pendingGen) return;
    const gen = ++this.nextGen;
    // A mirror with holds resumes: retryd resends only the buckets whose digest differs.
    const resume = this.holds.byId.size ? bucketDigests([...this.holds.byId.values()].map(digestOf)).map(String) : [];
    const g: Gen = { deps: new Set(this.wantDeps), tenants: new Set(this.wantTenants), version: this.version, resuming: resume.length > 0 };
    this.gens.set(gen, g);
    this.pendingGen = gen;
    this.staged = new Holds();
    const call = this.stub.WatchHolds({ catalog: "", dependencies: [...g.deps].sort(), tenants: [...g.tenants].sort(), resume_digests: resume });
    g.call = call;
    let over = false;
    const end = () => { if (!over) { over = true; this.ended(gen); } };
    call.on("data", (ev: WatchHoldsResponse__Output) => this.onEvent(gen, ev));
    call.on("error", (err) => { this.onError(err); end(); });
    call.on("end", end);
  }

  /** The holds in the mirror now (of one dependency, or all). */
  list(dependency?: string): Hold__Output[] {
    const hs = dependency === undefined ? this.holds.byId.values() : this.holds.byDep.get(dependency)?.values() ?? [];
    return [...hs].map((h) => h.msg);
  }

  close() {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    for (const g of this.gens.values()) g.call?.cancel();
    this.gens.clear();
  }
}
