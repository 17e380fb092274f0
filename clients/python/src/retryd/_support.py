"""TLS options and the outcome counts batched into ReportOutcomes."""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Optional

from .v1 import retryd_pb2 as pb


class Tls:
    """TLS options; `Tls.from_env()` reads the examples' RETRYD_TLS_* variables."""

    def __init__(self, ca: Optional[bytes] = None, cert: Optional[bytes] = None,
                 key: Optional[bytes] = None, server_name: Optional[str] = None) -> None:
        self.ca, self.cert, self.key, self.server_name = ca, cert, key, server_name

    @classmethod
    def from_env(cls) -> Optional["Tls"]:
        ca = os.environ.get("RETRYD_TLS_CA")
        if not ca:
            return None

        def rd(p: Optional[str]) -> Optional[bytes]:
            return open(p, "rb").read() if p else None
        return cls(rd(ca), rd(os.environ.get("RETRYD_TLS_CLIENT_CERT")),
                   rd(os.environ.get("RETRYD_TLS_CLIENT_KEY")), os.environ.get("RETRYD_TLS_SERVER_NAME"))


def _channel_args(tls: Optional[Tls]) -> list:
    return [("grpc.ssl_target_name_override", tls.server_name)] if tls and tls.server_name else []


class _Counts:
    """Outcome counts per scope, sent in one ReportOutcomes per interval (never one RPC per success)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.lock = threading.Lock()
        self.counts: dict[tuple[str, str, str, str], list[int]] = {}
        self.last = time.monotonic()

    def add(self, key: tuple[str, str, str, str], what: str) -> None:
        with self.lock:
            c = self.counts.setdefault(key, [0, 0, 0])
            c[{"request": 0, "success": 1, "failure": 2}[what]] += 1

    def take(self, force: bool, held_back: Callable[[], bool]) -> Optional[pb.ReportOutcomesRequest]:
        """The next batch when one is due (or `force`), unless `held_back()` (retryd advised waiting)."""
        with self.lock:
            if not self.counts or (not force and time.monotonic() - self.last < self.interval):
                return None
            if held_back():
                return None
            self.last = time.monotonic()
            items = list(self.counts.items())[:1000]
            for k, _ in items:
                del self.counts[k]
        return pb.ReportOutcomesRequest(counts=[
            pb.OutcomeCount(catalog=k[0], dependency=k[1], tenant=k[2], method=k[3],
                            requests=c[0], successes=c[1], failures=c[2]) for k, c in items])

    def put_back(self, req: pb.ReportOutcomesRequest) -> None:
        """A batch retryd shed: kept for the next flush (merged into the counts by scope)."""
        with self.lock:
            for oc in req.counts:
                c = self.counts.setdefault((oc.catalog, oc.dependency, oc.tenant, oc.method), [0, 0, 0])
                c[0] += oc.requests
                c[1] += oc.successes
                c[2] += oc.failures
