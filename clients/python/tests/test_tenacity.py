"""retryd.tenacity.Policy inside tenacity, against the real retryd binary
(RETRYD_BIN, default target/debug/retryd of this checkout)."""

import os
import socket
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any

import grpc
from tenacity import Retrying, stop_after_attempt

import retryd
from retryd.tenacity import Policy

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_retryd(*extra: str) -> tuple[subprocess.Popen, str, Any]:
    """A real `retryd serve` (RETRYD_BIN) on a free port, ready: (process, address, its log file)."""
    binary = os.environ.get("RETRYD_BIN") or str(ROOT / "target" / "debug" / "retryd")
    log = tempfile.TemporaryFile()
    addr = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([binary, "serve", "--listen", addr, "--metrics-listen", "off", "--log-level", "warn", *extra],
                            stdout=subprocess.DEVNULL, stderr=log)
    ch = grpc.insecure_channel(addr)
    grpc.channel_ready_future(ch).result(timeout=30)
    ch.close()
    return proc, addr, log


class TenacityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.proc, cls.addr, cls.log = start_retryd()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.proc.kill()  # its graceful drain is not what this tests
        cls.proc.wait(30)
        cls.log.close()

    def client(self, catalog: str = "vibecode") -> retryd.Client:
        c = retryd.Client(self.addr, catalog=catalog, dependency=f"d-tenacity-{time.monotonic_ns()}",
                          tenant="t-tenacity", timeout=2.0)
        self.addCleanup(c.close)
        return c

    def run_under(self, policy: Policy, outcomes: list) -> tuple[object, int]:
        calls = 0

        def fn() -> object:
            nonlocal calls
            o = outcomes[min(calls, len(outcomes) - 1)]
            calls += 1
            if isinstance(o, BaseException):
                raise o
            return o
        waits: list = []
        r = Retrying(retry=policy.retry, wait=policy.wait, before=policy.before, stop=stop_after_attempt(5),
                     reraise=True, sleep=waits.append)
        return r(fn), calls

    def test_a_transient_read_failure_is_retried_with_retryds_wait(self) -> None:
        p = Policy(self.client(), operation="read", method="crm.deal.get")
        unavailable = retryd.DependencyError("BITRIX_UNAVAILABLE")
        result, calls = self.run_under(p, [unavailable, unavailable, "deal-1"])
        self.assertEqual((result, calls), ("deal-1", 3))

    def test_a_failure_retryd_says_not_to_retry_stops_at_once(self) -> None:
        p = Policy(self.client(catalog="grpc"), operation="read", method="inventory.Get")
        with self.assertRaises(retryd.DependencyError):
            self.run_under(p, [retryd.DependencyError("INVALID_ARGUMENT"), "never"])

    def test_an_unknown_catalog_is_a_rejection_not_a_retry(self) -> None:
        p = Policy(self.client(catalog="vibecod"), operation="read", method="crm.deal.get")
        with self.assertRaises(retryd.Rejected) as cm:
            self.run_under(p, ["deal-1"])
        self.assertEqual(cm.exception.field, "catalog")

    def test_a_write_of_unknown_outcome_is_refused(self) -> None:
        with self.assertRaises(ValueError):
            Policy(self.client(), operation="write", method="crm.deal.add")
        with self.assertRaises(ValueError):
            Policy(self.client(), operation="write", method="crm.deal.add", idempotency_key="k")
        # With a key the dependency enforces, a resend is safe: retried.
        p = Policy(self.client(), operation="write", method="crm.deal.add", idempotency_key="k-1",
                   idempotency_key_enforced=True)
        result, calls = self.run_under(p, [retryd.DependencyError("BITRIX_TIMEOUT"), "deal-2"])
        self.assertEqual((result, calls), ("deal-2", 2))


if __name__ == "__main__":
    unittest.main()
