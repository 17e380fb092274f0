"""retryd's own shed advice (issue #25): when retryd has no room it answers
RESOURCE_EXHAUSTED (or, draining, UNAVAILABLE) with retry advice, and the
client sends it no Classify, no Admit and no outcome batch until the advice
has passed. No I/O here: both clients and the mirror's pumps share it."""

from __future__ import annotations

import threading
import time
from typing import Any, Optional

from .mappers import pushback_ms

# The longest wait a shed answer can impose: a hostile or broken server must
# not silence the client for long.
MAX_ADVICE = 30.0
_SHED_CODES = ("RESOURCE_EXHAUSTED", "UNAVAILABLE")


def _retry_info(value: Any) -> Optional[float]:
    """RetryInfo's retry_delay in seconds, from grpc-status-details-bin; None if absent or invalid."""
    from google.rpc import error_details_pb2, status_pb2

    try:
        st = status_pb2.Status.FromString(value)
    except Exception:  # noqa: BLE001 - a broken detail is no advice
        return None
    for d in st.details:
        if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            ri = error_details_pb2.RetryInfo()
            if not d.Unpack(ri):
                return None
            s, n = ri.retry_delay.seconds, ri.retry_delay.nanos
            if s < 0 or n < 0 or n >= 1_000_000_000:
                return None
            return s + n / 1e9
    return None


def shed_advice(code: str, trailers: Any) -> tuple[bool, Optional[float]]:
    """(shed, advice in seconds) of an answer with status `code` and `trailers` ((key, value) pairs):
    shed is True for RESOURCE_EXHAUSTED, and for UNAVAILABLE that carries advice (a draining
    retryd; a bare UNAVAILABLE is an unreachable one). The advice is RetryInfo's retry_delay, else
    grpc-retry-pushback-ms read by gRFC A6 (a negative, unparsable or conflicting value: none),
    capped at MAX_ADVICE; None when there is none."""
    if code not in _SHED_CODES:
        return False, None
    pushback, info = [], None
    for key, value in trailers or ():
        if key == "grpc-retry-pushback-ms":
            pushback.append(value)
        elif key == "grpc-status-details-bin" and info is None:
            info = _retry_info(value)
    advice = info
    if advice is None:
        ms, _ = pushback_ms(pushback)
        advice = None if ms is None else ms / 1000.0
    shed = code == "RESOURCE_EXHAUSTED" or bool(pushback) or info is not None
    return shed, None if advice is None else min(advice, MAX_ADVICE)


def advice_of(err: Any) -> tuple[bool, Optional[float]]:
    """shed_advice of a grpc.RpcError / AioRpcError (anything else: not shed)."""
    try:
        code = err.code().name
        trailers = err.trailing_metadata()
    except Exception:  # noqa: BLE001 - not an RPC error with a status
        return False, None
    return shed_advice(code, trailers)


class Busy:
    """When retryd advised waiting: `until` on the monotonic clock (0: not busy)."""

    def __init__(self) -> None:
        self.until = 0.0
        self.lock = threading.Lock()

    def remaining(self) -> float:
        return max(0.0, self.until - time.monotonic())

    def active(self) -> bool:
        return self.until > 0.0 and time.monotonic() < self.until

    def advise(self, advice: float) -> bool:
        """Waits `advice` seconds from now (the later instant wins); True when this starts a busy period."""
        if advice <= 0:
            return False  # 0: a draining server's "elsewhere, at once"; nothing to wait for
        now = time.monotonic()
        with self.lock:
            new = now >= self.until
            self.until = max(self.until, now + advice)
        return new
