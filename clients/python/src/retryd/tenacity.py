"""retryd's decisions inside tenacity: `retry`, `wait` and `before` callables.

    from tenacity import Retrying, stop_after_attempt
    from retryd.tenacity import Policy

    policy = Policy(client, operation="read", method="crm.deal.get")
    for attempt in Retrying(retry=policy.retry, wait=policy.wait, before=policy.before,
                            stop=stop_after_attempt(5), reraise=True):
        with attempt:
            deal = b24.get_deal(deal_id)

`before` asks Admit (a fleet hold raises `retryd.Held`: tenacity cannot wait
on one); `retry` maps the exception and asks Classify (`retry_with_limit` →
retry, anything else → stop); `wait` is the decision's window, jittered. A
mistake (`INVALID_ARGUMENT`, `NOT_FOUND`, `PERMISSION_DENIED` from retryd)
raises `retryd.Rejected`; retryd unreachable or slow → the client's
conservative fallback (capped exponential backoff, its attempt limit).

Read-back cannot be expressed in tenacity, so a Policy serves reads and
writes whose idempotency key the dependency enforces; a write of unknown
outcome without one is refused at construction, never retried blindly.
"""

from __future__ import annotations

import datetime as _dt
import random
from typing import Any, Callable, Optional

import grpc

from ._client import Client
from ._loop import Opts, failure_of, to_hold
from .errors import REJECTION_CODES, Held, rejection
from .mappers import default_mapper
from .v1 import retryd_pb2 as pb


class Policy:
    """tenacity callables for one kind of call (operation, method, key)."""

    def __init__(self, client: Client, *, operation: str, method: str,
                 idempotency_key: Optional[str] = None, idempotency_key_enforced: bool = False,
                 to_failure: Optional[Callable[[BaseException], Optional[dict]]] = None) -> None:
        if operation not in ("read", "write"):
            raise ValueError(f"operation must be 'read' or 'write', not {operation!r}")
        if operation == "write" and not (idempotency_key and idempotency_key_enforced):
            raise ValueError("a write of unknown outcome cannot be retried blindly and tenacity has no read-back: "
                             "give an idempotency key the dependency enforces, or use client.call(..., read_back=...)")
        self._client = client
        self._o = Opts(client.catalog, client.dependency, client.tenant, client.locale, operation, method,
                       idempotency_key, idempotency_key_enforced, None, to_failure, None, None, client.fallback)
        self._mapper = to_failure or default_mapper

    def _rpc(self, name: str, req: Any, cause: Optional[BaseException] = None) -> Optional[Any]:
        """The answer, None when retryd is unreachable, slow or advised waiting (its shed advice:
        not sent); raises Rejected on a mistake."""
        if self._client._held_back():
            self._client.fallbacks += 1
            return None
        if name == "Admit":
            self._client._sent("admit")
        try:
            return getattr(self._client._stub, name)(req, timeout=self._client.timeout)
        except grpc.RpcError as e:
            code = e.code().name  # type: ignore[attr-defined]
            if code in REJECTION_CODES:
                raise rejection(code, e.details(), cause) from cause  # type: ignore[attr-defined]
            self._client._shed(e)
            self._client.fallbacks += 1
            return None

    def before(self, retry_state: Any) -> None:
        """Admit before each attempt; a hold raises retryd.Held (fail open when retryd is down)."""
        o = self._o
        local = self._client._local(o)  # the holds mirror, when it can answer
        if local is True:
            if retry_state.attempt_number <= 1:
                self._client._counts.add(self._client._key(o), "request")  # the deposit Admit would make
                self._client._flush(False)
            return
        if local is not None:
            hold = to_hold(local[0])
            raise Held(f"held until {hold.until if hold else local[1]}: {hold.reason if hold else ''} (local)", hold)
        resp = self._rpc("Admit", pb.AdmitRequest(catalog=o.catalog or "", dependency=o.dependency or "",
                                                  tenant=o.tenant or "", method=o.method or "",
                                                  operation=pb.OPERATION_KIND_READ if o.operation == "read"
                                                  else pb.OPERATION_KIND_WRITE,
                                                  attempt=retry_state.attempt_number))
        if resp is not None and not resp.admitted:
            hold = to_hold(resp.hold) if resp.HasField("hold") else None
            until = resp.retry_at.ToDatetime(tzinfo=_dt.timezone.utc) if resp.HasField("retry_at") else None
            raise Held(f"held until {until}: {hold.reason if hold else ''}", hold)

    def retry(self, retry_state: Any) -> bool:
        """Classify the attempt's exception: True to retry (the wait is kept for `wait`)."""
        outcome = retry_state.outcome
        if outcome is None or not outcome.failed:
            return False
        exc = outcome.exception()
        fields = self._mapper(exc)
        if fields is None:
            return False
        failure = failure_of(self._o, fields, retry_state.attempt_number)
        resp = self._rpc("Classify", pb.ClassifyRequest(failure=failure, locale=self._o.locale or ""), exc)
        if resp is None:
            fb = self._o.fallback
            if retry_state.attempt_number >= fb.max_attempts:
                return False
            retry_state.retryd_wait = random.uniform(0.0, min(fb.cap, fb.base * 2 ** (retry_state.attempt_number - 1)))
            return True
        d = resp.decision
        if d.verdict != pb.VERDICT_RETRY_WITH_LIMIT:
            return False
        lo, hi = d.retry.after_ms, max(d.retry.after_ms, d.retry.max_after_ms)
        retry_state.retryd_wait = random.uniform(lo, hi) / 1000.0
        return True

    def wait(self, retry_state: Any) -> float:
        """The wait `retry` took from the decision (seconds)."""
        return float(getattr(retry_state, "retryd_wait", 0.0))
