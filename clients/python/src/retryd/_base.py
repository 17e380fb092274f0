"""What Client and AsyncClient share: options, the holds mirror's answers, retryd's shed advice,
events and stats (the RPCs themselves are each client's own)."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

import grpc

from ._busy import Busy, advice_of
from ._loop import Event, Fallback, Opts, deadline_of, to_hold
from ._mirror import ASK, Mirror, MirrorStats
from ._support import Tls, _Counts

log = logging.getLogger("retryd")


class _Base:
    def __init__(self, address: str, *, catalog: Optional[str] = None, dependency: Optional[str] = None,
                 tenant: Optional[str] = None, locale: Optional[str] = None, timeout: float = 0.05,
                 tls: Optional[Tls] = None, connect_timeout: float = 1.0,
                 fallback: Optional[Fallback] = None, on_event: Optional[Callable[[Event], None]] = None,
                 report_interval: float = 1.0, mirror: bool = True, mirror_max_holds: int = 10_000) -> None:
        self.address = address
        self.catalog, self.dependency, self.tenant, self.locale = catalog, dependency, tenant, locale
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.fallback = fallback or Fallback()
        self.on_event = on_event
        self.fallbacks = 0  # how many times retryd was unreachable or slow and the fallback decided
        self._counts = _Counts(report_interval)
        self._tls = tls
        self._mirror_on = mirror
        self._busy = Busy()
        self._held_back_fn = self._held_back  # bound once: _flush runs on every call
        self._mirror = Mirror(mirror_max_holds, on_change=self._mirror_changed, busy=self._busy)
        self._mirror.want((dependency or "",), (tenant or "",))

    def stats(self) -> MirrorStats:
        """A copy of the mirror's and the RPCs' counters (see MirrorStats)."""
        with self._mirror.lock:
            return MirrorStats(**vars(self._mirror.stats))

    def mirror_holds(self, dependency: Optional[str] = None) -> list:
        """The holds in the mirror now (of one dependency, or all), as `Hold`s."""
        with self._mirror.lock:
            hs = list(self._mirror.holds.by_dep.get(dependency, {}).values()) if dependency is not None \
                else list(self._mirror.holds.by_id.values())
        return [to_hold(h.msg) for h in hs]

    def _mirror_changed(self, state: str) -> None:
        # "stale": the watch is down (known holds still refuse, the rest goes to Admit); "synced": back.
        (log.warning if state == "stale" else log.info)("retryd: holds mirror %s", state)
        self._event(Event("mirror_" + state, 0))

    def _local(self, o: Opts) -> Any:
        if not self._mirror_on:
            return ASK
        return self._mirror.admit(o.catalog or "", o.dependency or "", o.tenant or "", o.method or "")

    def _answered(self, o: Opts, resp: Any) -> None:
        """Holds in Admit's and Classify's answers go into the mirror at once."""
        if not self._mirror_on:
            return
        h = resp.hold if hasattr(resp, "admitted") else resp.decision.hold
        if h.id:
            self._mirror.learn(h, o.tenant or "")

    def _sent(self, what: str, req: Any = None) -> None:
        st = self._mirror.stats
        with self._mirror.lock:
            if what == "admit":
                st.admit_rpcs += 1
            else:
                st.report_rpcs += 1
                if req is not None:
                    st.reported_requests += sum(c.requests for c in req.counts)

    def _shed(self, err: Any) -> bool:
        """An RPC's error: a shed answer is counted, and its advice (> 0) starts or extends a
        busy period, logged once per period. True when it was a shed answer."""
        shed, advice = advice_of(err)
        if not shed:
            return False
        with self._mirror.lock:
            self._mirror.stats.shed_answers += 1
        if advice and self._busy.advise(advice):
            log.warning("retryd: busy (%s), advised to wait %.0f ms: no Classify, Admit or outcome report "
                        "until then (calls take the fallback)", err.code().name, advice * 1000)
            self._event(Event("retryd_busy", 0, wait=advice, detail=err.code().name))
        return True

    def _held_back(self) -> bool:
        """While retryd's advice runs, an RPC is not sent (counted in busy_skips)."""
        if not self._busy.active():
            return False
        with self._mirror.lock:
            self._mirror.stats.busy_skips += 1
        return True

    def _busy_skip(self) -> Optional[tuple]:
        if not self._held_back():
            return None
        return ("busy", f"not sent: retryd advised waiting {self._busy.remaining() * 1000:.0f} ms more")

    def _creds(self) -> Optional[grpc.ChannelCredentials]:
        t = self._tls
        return grpc.ssl_channel_credentials(t.ca, t.key, t.cert) if t else None

    def _opts(self, operation: Optional[str], method: Optional[str], idempotency_key: Optional[str],
              idempotency_key_enforced: bool, read_back: Any, to_failure: Any, deadline: Any) -> Opts:
        wall, mono = deadline_of(deadline)
        return Opts(self.catalog, self.dependency, self.tenant, self.locale, operation, method,
                    idempotency_key, idempotency_key_enforced, read_back, to_failure, wall, mono, self.fallback)

    def _rpc_timeout(self, o: Opts) -> float:
        if o.deadline_mono is None:
            return self.timeout
        return max(0.001, min(self.timeout, o.deadline_mono - time.monotonic()))

    def _event(self, e: Event) -> None:
        if e.kind == "fallback":
            self.fallbacks += 1
            # While retryd's advice runs, its one "busy" warning stands for every call.
            (log.debug if e.busy else log.warning)("retryd: %s; conservative fallback (attempt %d)", e.detail, e.attempt)
        else:
            log.debug("retryd: %s", e)
        if self.on_event is not None:
            self.on_event(e)

    def _key(self, o: Opts) -> tuple[str, str, str, str]:
        return (o.catalog or "", o.dependency or "", o.tenant or "", o.method or "")
