"""The local mirror of the fleet's holds (MIRROR-SPEC, issue #26): state and decisions, no I/O.

One `WatchHolds` stream per client feeds it (the sync Client pumps it from
threads, AsyncClient from tasks: both call `on_event`/`ended` here); the
retry loop asks `admit` before each attempt and sends `Admit` only when the
mirror cannot answer. Every structure is bounded: `max_holds` holds, 256
dependencies and 256 tenants watched, 4 096 lifted ids remembered.
"""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ._busy import Busy
from ._resume import bucket, bucket_digests, digest, until_ms
from .v1 import retryd_pb2 as pb

MAX_WATCHED = 256  # the server's limit on dependencies (and tenants) per stream
MAX_LIFTED = 4096
RECONNECT_BASE, RECONNECT_CAP = 0.1, 5.0

_PLACED, _EXTENDED, _LIFTED, _PROBING, _SYNCED = (
    pb.HOLD_EVENT_KIND_PLACED, pb.HOLD_EVENT_KIND_EXTENDED, pb.HOLD_EVENT_KIND_LIFTED,
    pb.HOLD_EVENT_KIND_PROBING, pb.HOLD_EVENT_KIND_SYNCED)
_TENANT, _DEPENDENCY, _METHOD = pb.SCOPE_TENANT, pb.SCOPE_DEPENDENCY, pb.SCOPE_METHOD


def _secs(t: Any) -> Optional[float]:
    return t.seconds + t.nanos / 1e9 if (t.seconds or t.nanos) else None


@dataclass
class MirrorStats:
    """What the mirror and the client's RPCs did: `synced` (every watched scope
    has its snapshot), `stale` (the stream is down; known holds still refuse),
    `holds` (held now), `admit_rpcs`, `local_admissions`, `local_refusals`,
    `report_rpcs` (ReportOutcomes sent), `reported_requests` (first attempts
    they carried); `shed_answers` (answers of a retryd with no room: RESOURCE_EXHAUSTED,
    or a draining UNAVAILABLE), `busy_skips` (RPCs not sent because retryd advised
    waiting); `resumed_syncs` (snapshots resumed from the mirror's digests) and
    `resent_buckets` (the buckets they resent, summed)."""

    synced: bool = False
    stale: bool = False
    holds: int = 0
    admit_rpcs: int = 0
    local_admissions: int = 0
    local_refusals: int = 0
    report_rpcs: int = 0
    reported_requests: int = 0
    shed_answers: int = 0
    busy_skips: int = 0
    resumed_syncs: int = 0
    resent_buckets: int = 0


class _H:
    """One hold as the mirror keeps it (times in server seconds)."""

    __slots__ = ("id", "catalog", "dependency", "tenant", "method", "scope", "until", "next_probe_at",
                 "probing", "msg", "dg")

    def __init__(self, h: Any, tenant: str) -> None:
        self.id, self.catalog, self.dependency, self.method, self.scope = h.id, h.catalog, h.dependency, h.method, h.scope
        self.tenant = tenant
        self.until = _secs(h.until) or 0.0
        self.next_probe_at = _secs(h.next_probe_at) if h.HasField("next_probe_at") else None
        self.probing = h.probing
        self.msg = h
        self.dg: Optional[int] = None

    def digest(self) -> int:
        """Its resume digest, of `until` as the server sent it (computed once)."""
        if self.dg is None:
            self.dg = digest(self.id, until_ms(self.msg.until))
        return self.dg


class _Holds:
    """Holds by id and by dependency."""

    def __init__(self) -> None:
        self.by_id: dict[str, _H] = {}
        self.by_dep: dict[str, dict[str, _H]] = {}

    def put(self, h: _H) -> None:
        old = self.by_id.get(h.id)
        if old is not None and old.dependency != h.dependency:
            self.remove(h.id)
        self.by_id[h.id] = h
        self.by_dep.setdefault(h.dependency, {})[h.id] = h

    def remove(self, hid: str) -> Optional[_H]:
        h = self.by_id.pop(hid, None)
        if h is not None:
            d = self.by_dep.get(h.dependency)
            if d is not None:
                d.pop(hid, None)
                if not d:
                    del self.by_dep[h.dependency]
        return h


# What `Mirror.admit` answers besides a refusal: ask retryd, or go ahead.
ASK = None
ADMITTED = True


class Mirror:
    """Holds known to cover this process's calls, and local admission by them.

    Thread-safe (the sync client's stream threads write, callers read). `notify`
    wakes the stream supervisor (a widening, a stream's end); `on_change`
    receives "stale" / "synced" as the mirror's health changes.
    """

    def __init__(self, max_holds: int = 10_000, notify: Callable[[], None] = lambda: None,
                 on_change: Callable[[str], None] = lambda s: None, busy: Optional[Busy] = None) -> None:
        if max_holds < 1:
            raise ValueError("mirror_max_holds must be at least 1")
        self.max_holds = max_holds
        self.notify, self.on_change = notify, on_change
        self.lock = threading.Lock()
        self.stats = MirrorStats()
        self.busy = busy or Busy()  # retryd's shed advice: no stream opens before it passes
        self.holds = _Holds()
        self.lifted: OrderedDict[str, float] = OrderedDict()
        self.offset = 0.0  # server clock - local clock
        # Wanted: what the next stream watches; version bumps on every widening.
        self.want_deps: set[str] = set()
        self.want_tenants: set[str] = set()
        self.version = 0
        # The stream serving the mirror (live) and the one replacing it (pending).
        self.live_gen = 0
        self.pending_gen = 0
        self.gen_sets: dict[int, tuple[frozenset, frozenset, int]] = {}
        self.staged: Optional[_Holds] = None
        self.synced_deps: frozenset = frozenset()
        self.synced_tenants: frozenset = frozenset()
        self.dropped_deps: set[str] = set()  # lost a hold to max_holds: Admit until the next SYNCED
        self.next_gen = 0
        self.cancels: dict[int, Callable[[], None]] = {}
        self.failures = 0  # consecutive stream failures, for the backoff
        self.resuming = False  # the pending stream sent resume digests
        self.closed = False

    # ---- what the process calls ---------------------------------------------------------------

    def want(self, deps: Any, tenants: Any) -> bool:
        """Adds dependencies/tenants to watch (beyond 256 each they stay on Admit); True when
        a new stream is needed."""
        grew = False
        with self.lock:
            for d in deps:
                if d and d not in self.want_deps and len(self.want_deps) < MAX_WATCHED:
                    self.want_deps.add(d)
                    grew = True
            for t in tenants:
                if t and t not in self.want_tenants and len(self.want_tenants) < MAX_WATCHED:
                    self.want_tenants.add(t)
                    grew = True
            if grew:
                self.version += 1
        if grew:
            self.notify()
        return grew

    def covers(self, deps: Any, tenants: Any) -> bool:
        with self.lock:
            return self._synced_for_all(deps, tenants)

    def _synced_for_all(self, deps: Any, tenants: Any) -> bool:
        return (not self.stats.stale and all(d in self.synced_deps and d not in self.dropped_deps for d in deps if d)
                and all(t in self.synced_tenants for t in tenants if t))

    def now(self) -> float:
        return time.time() + self.offset

    def admit(self, catalog: str, dependency: str, tenant: str, method: str) -> Any:
        """ASK (send Admit), ADMITTED, or (hold, retry_at as local unix seconds) to refuse locally."""
        if not dependency:
            return ASK
        lock = self.lock
        lock.acquire()
        try:
            synced = (dependency in self.synced_deps and dependency not in self.dropped_deps
                      and (not tenant or tenant in self.synced_tenants))
            if not synced:
                unwatched = dependency not in self.want_deps or (tenant and tenant not in self.want_tenants)
            else:
                unwatched = False
            best = None
            held = self.holds.by_dep.get(dependency)
            if held:
                now = time.time() + self.offset
                for h in held.values():
                    # Past its end, a hold with a probe time may be in its probe phase (the
                    # PROBING event can lag): in force, so a probe point, until LIFTED says otherwise.
                    if (h.until <= now and h.next_probe_at is None) or (catalog and h.catalog != catalog):
                        continue
                    s = h.scope
                    if s == _DEPENDENCY or (s == _TENANT and h.tenant == tenant) or (s == _METHOD and h.method == method):
                        if best is None or h.until > best.until:
                            best = h
            if best is None:
                if not synced or self.stats.stale:
                    answer = ASK
                else:
                    self.stats.local_admissions += 1
                    answer = ADMITTED
            elif best.probing or (best.next_probe_at is not None and best.next_probe_at <= now):
                answer = ASK  # a probe point: retryd arbitrates the one probe
            else:
                self.stats.local_refusals += 1
                at = best.until if best.next_probe_at is None else min(best.until, best.next_probe_at)
                answer = (best.msg, at - self.offset)
        finally:
            lock.release()
        if unwatched:
            self.want((dependency,), (tenant,))
        return answer

    # ---- events ------------------------------------------------------------------------------

    def learn(self, h: Any, tenant: str) -> None:
        """A hold from an Admit or Classify answer for this call: applied at once, so a retry
        right after a failure cannot slip through before the watch event arrives. Such answers
        show the tenant hashed; it covers the call's tenant."""
        if not h.id:
            return
        with self.lock:
            self._put(self.holds, h, tenant if h.scope == _TENANT else h.tenant, True)

    def _put(self, holds: _Holds, h: Any, tenant: str, live: bool) -> None:
        until = _secs(h.until) or 0.0
        if self.lifted.get(h.id, -1.0) >= until:
            return  # a PLACED that raced the snapshot with a lift
        old = holds.by_id.get(h.id)
        if old is not None and old.until > until:
            return
        holds.put(_H(h, tenant))
        self._trim(holds)
        if live:
            self.stats.holds = len(holds.by_id)

    def _trim(self, holds: _Holds) -> None:
        if len(holds.by_id) > self.max_holds:
            now = self.now()
            for x in [x for x in holds.by_id.values() if x.until <= now and x.next_probe_at is None]:
                holds.remove(x.id)
            while len(holds.by_id) > self.max_holds:
                soonest = min(holds.by_id.values(), key=lambda x: x.until)
                holds.remove(soonest.id)
                # A dropped hold must never let calls through silently: Admit decides until SYNCED.
                self.dropped_deps.add(soonest.dependency)

    def _lift(self, holds: _Holds, h: Any) -> None:
        holds.remove(h.id)
        self.lifted[h.id] = _secs(h.until) or 0.0
        self.lifted.move_to_end(h.id)
        while len(self.lifted) > MAX_LIFTED:
            self.lifted.popitem(last=False)

    def begin(self, cancel: Callable[[], None]) -> tuple[int, Any]:
        """A new stream: its generation and the request for the sets wanted now."""
        with self.lock:
            self.next_gen += 1
            gen = self.next_gen
            deps, tenants = frozenset(self.want_deps), frozenset(self.want_tenants)
            self.gen_sets[gen] = (deps, tenants, self.version)
            self.pending_gen = gen
            self.staged = _Holds()
            self.cancels[gen] = cancel
            # A mirror with holds resumes: retryd resends only the buckets whose digest differs.
            resume = bucket_digests(h.digest() for h in self.holds.by_id.values()) if self.holds.by_id else []
            self.resuming = bool(resume)
        return gen, pb.WatchHoldsRequest(dependencies=sorted(deps), tenants=sorted(tenants), resume_digests=resume)

    def set_cancel(self, gen: int, cancel: Callable[[], None]) -> None:
        with self.lock:
            if gen in self.cancels:
                self.cancels[gen] = cancel

    def on_event(self, gen: int, ev: Any) -> None:
        kind = ev.kind
        changed = ""
        to_cancel: list = []
        with self.lock:
            if ev.HasField("server_time"):
                self.offset = _secs(ev.server_time) - time.time()  # type: ignore[operator]
            if gen == self.pending_gen and self.staged is not None:
                holds, live = self.staged, False
            elif gen == self.live_gen:
                holds, live = self.holds, True
            else:
                return  # a replaced stream's late event
            if kind == _SYNCED:
                # Synced again; a hold the resumed merge below drops to the cap stays marked.
                self.dropped_deps.clear()
                if not live:
                    if self.resuming and ev.resumed:
                        self._keep_unsent(holds, ev.resent_buckets)
                    # The new stream's snapshot is the truth: it replaces the old mirror.
                    self.holds, self.staged = holds, None
                    self.live_gen, self.pending_gen = gen, 0
                    to_cancel = [c for g, c in self.cancels.items() if g < gen]
                    self.cancels = {g: c for g, c in self.cancels.items() if g >= gen}
                    self.gen_sets = {g: s for g, s in self.gen_sets.items() if g >= gen}
                deps, tenants, _ = self.gen_sets[gen]
                self.synced_deps, self.synced_tenants = deps, tenants
                self.failures = 0
                self.stats.holds = len(self.holds.by_id)
                if self.stats.stale or not self.stats.synced:
                    changed = "synced"
                self.stats.stale, self.stats.synced = False, True
            elif kind in (_PLACED, _EXTENDED, _PROBING):
                h = ev.hold
                tenants = self.gen_sets[gen][1]
                if h.scope == _TENANT and h.tenant not in tenants:
                    # A tenant we did not ask for (hashed by a server without `tenants`):
                    # it cannot be matched, so tenant calls must use Admit on this server.
                    self.gen_sets[gen] = (self.gen_sets[gen][0], frozenset(), self.gen_sets[gen][2])
                    if live:
                        self.synced_tenants = frozenset()
                self._put(holds, h, h.tenant, live)
            elif kind == _LIFTED:
                self._lift(holds, ev.hold)
                if live:
                    self.stats.holds = len(holds.by_id)
        for c in to_cancel:
            c()
        if changed:
            self.on_change(changed)
            self.notify()

    def _keep_unsent(self, staged: _Holds, resent: Any) -> None:
        """A resumed snapshot sent only the buckets in `resent`: the mirror's holds in every
        other bucket match retryd's and are kept (unless received, or lifted, since)."""
        self.stats.resumed_syncs += 1
        self.stats.resent_buckets += len(resent)
        sent = set(resent)
        for h in self.holds.by_id.values():
            if h.id in staged.by_id or bucket(h.digest()) in sent or self.lifted.get(h.id, -1.0) >= h.until:
                continue
            staged.put(h)
        self._trim(staged)

    def ended(self, gen: int) -> None:
        """A stream ended (error, server gone). The live one's end makes the mirror stale."""
        stale = False
        with self.lock:
            self.cancels.pop(gen, None)
            if self.closed:
                return
            if gen == self.pending_gen:
                self.pending_gen, self.staged = 0, None
                self.failures += 1
            elif gen == self.live_gen:
                self.failures += 1
                if not self.stats.stale and self.stats.synced:
                    stale = True
                self.stats.stale = True
                self.stats.synced = False
        if stale:
            self.on_change("stale")
        self.notify()

    def next_step(self) -> tuple[str, float]:
        """What the supervisor does now: ("open", 0), ("wait", s) for a signal, or ("backoff", s)."""
        with self.lock:
            if not self.want_deps:
                return "wait", 60.0
            if self.pending_gen:
                return "wait", 60.0  # one reopen in flight; further widenings coalesce
            live_ok = self.live_gen and self.live_gen in self.cancels and not self.stats.stale
            if live_ok and self.gen_sets.get(self.live_gen, (None, None, -1))[2] == self.version:
                return "wait", 60.0
            busy = self.busy.remaining()  # retryd advised waiting: no stream before then
            if self.failures:
                # Full jitter, base 100 ms, x2, cap 5 s: a restarting retryd is not stampeded.
                jitter = random.uniform(0, min(RECONNECT_CAP, RECONNECT_BASE * 2 ** (self.failures - 1)))
                return "backoff", max(busy, jitter)
            if busy > 0:
                return "backoff", busy
            return "open", 0.0

    def close(self) -> list:
        with self.lock:
            self.closed = True
            cs = list(self.cancels.values())
            self.cancels.clear()
            self.want_deps.clear()
        return cs
