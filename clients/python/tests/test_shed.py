"""retryd's own shed advice: the parser, then Client and AsyncClient against a real retryd
that sheds every call (`--max-buffered-bytes 1`, RETRYD_BIN)."""

import asyncio
import time
import unittest

from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

import retryd
from retryd._busy import MAX_ADVICE, Busy, shed_advice
from retryd._mirror import Mirror
from test_tenacity import start_retryd


def details(seconds: int, nanos: int = 0) -> bytes:
    st = status_pb2.Status(code=8, message="full")
    st.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds, nanos=nanos)))
    return st.SerializeToString()


class Advice(unittest.TestCase):
    def test_retry_info_first_then_pushback_by_grfc_a6(self) -> None:
        re = "RESOURCE_EXHAUSTED"
        self.assertEqual(shed_advice(re, [("grpc-status-details-bin", details(0, 400_000_000)),
                                          ("grpc-retry-pushback-ms", "900")]), (True, 0.4))
        self.assertEqual(shed_advice(re, [("grpc-retry-pushback-ms", "250")]), (True, 0.25))
        self.assertEqual(shed_advice(re, [("grpc-retry-pushback-ms", "250"), ("grpc-retry-pushback-ms", "250")]), (True, 0.25))
        for bad in (["-1"], ["xxx"], ["100", "200"], ["99999999999999999999"]):
            self.assertEqual(shed_advice(re, [("grpc-retry-pushback-ms", v) for v in bad]), (True, None), bad)
        # An invalid RetryInfo is no advice: the pushback is read instead.
        self.assertEqual(shed_advice(re, [("grpc-status-details-bin", details(-1)), ("grpc-retry-pushback-ms", "7")]),
                         (True, 0.007))
        self.assertEqual(shed_advice(re, [("grpc-status-details-bin", b"\xff\xff")]), (True, None))
        self.assertEqual(shed_advice(re, ()), (True, None))

    def test_capped_and_codes(self) -> None:
        self.assertEqual(shed_advice("RESOURCE_EXHAUSTED", [("grpc-retry-pushback-ms", "99999999999")]), (True, MAX_ADVICE))
        self.assertEqual(shed_advice("RESOURCE_EXHAUSTED", [("grpc-status-details-bin", details(86_400))]), (True, MAX_ADVICE))
        # A draining retryd: UNAVAILABLE advising 0 (elsewhere, at once); a bare UNAVAILABLE is no shed.
        self.assertEqual(shed_advice("UNAVAILABLE", [("grpc-retry-pushback-ms", "0")]), (True, 0.0))
        self.assertEqual(shed_advice("UNAVAILABLE", ()), (False, None))
        self.assertEqual(shed_advice("INTERNAL", [("grpc-retry-pushback-ms", "100")]), (False, None))

    def test_busy_keeps_the_later_instant_and_starts_a_period_once(self) -> None:
        b = Busy()
        self.assertFalse(b.active())
        self.assertFalse(b.advise(0.0))  # 0 advises nothing to wait for
        self.assertTrue(b.advise(0.2))
        self.assertFalse(b.advise(0.05))  # same period, the later end kept
        self.assertGreater(b.remaining(), 0.1)
        time.sleep(0.25)
        self.assertFalse(b.active())
        self.assertTrue(b.advise(0.01))


class WatchBackoff(unittest.TestCase):
    def test_the_watch_reopens_no_earlier_than_the_advice(self) -> None:
        busy = Busy()
        m = Mirror(busy=busy)
        m.want(["d"], ["t"])
        gen, _ = m.begin(lambda: None)
        m.ended(gen)  # the stream failed: full-jitter backoff from 100 ms
        step, secs = m.next_step()
        self.assertEqual(step, "backoff")
        self.assertLessEqual(secs, 0.1)
        busy.advise(0.5)
        step, secs = m.next_step()
        self.assertEqual(step, "backoff")
        self.assertGreater(secs, 0.45)


class AgainstShedding(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.proc, cls.addr, cls.log = start_retryd("--max-buffered-bytes", "1")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.proc.kill()
        cls.proc.wait(30)
        cls.log.close()

    def test_sync_client_waits_out_the_advice(self) -> None:
        events = []
        c = retryd.Client(self.addr, catalog="vibecode", dependency=f"d-shed-{time.monotonic_ns()}", tenant="t",
                          timeout=2.0, mirror=False, on_event=lambda e: events.append(e))
        self.addCleanup(c.close)
        runs = []

        def fails_once() -> str:
            runs.append(1)
            if len(runs) == 1:
                raise retryd.DependencyError("BITRIX_UNAVAILABLE")
            return "ok"
        with self.assertLogs("retryd", "WARNING") as logs:
            self.assertEqual(c.call(fails_once, operation="read", method="crm.deal.get"), "ok")
        # One warning for the busy period and one for the shed Admit's fallback; the calls not
        # sent meanwhile are logged at debug, not once each.
        self.assertEqual(len(logs.records), 2, logs.output)
        self.assertEqual(sum("busy (RESOURCE_EXHAUSTED)" in m for m in logs.output), 1, logs.output)
        st = c.stats()
        # Admit was sent and shed; the Classify and the second Admit were not sent.
        self.assertEqual((st.admit_rpcs, st.shed_answers), (1, 1))
        self.assertGreaterEqual(st.busy_skips, 2)
        busy = [e for e in events if e.kind == "retryd_busy"]
        self.assertEqual(len(busy), 1)  # once per busy period, not per call
        self.assertTrue(0.2 <= busy[0].wait <= 0.8, busy[0].wait)  # 500 ms +-50 %
        self.assertTrue(any(e.kind == "fallback" and e.busy for e in events))
        # A shed outcome batch is kept, not lost: not sent while busy, put back when shed.
        c._flush(True)
        self.assertEqual(c.stats().report_rpcs, 0)
        time.sleep(busy[0].wait + 0.05)
        c._flush(True)
        self.assertEqual(c.stats().report_rpcs, 1)
        end = time.monotonic() + 2  # the answer's callback runs on grpc's thread
        while not c._counts.counts and time.monotonic() < end:
            time.sleep(0.005)
        self.assertEqual(c.stats().shed_answers, 2)
        self.assertTrue(c._counts.counts, "the shed batch was put back")
        # The advice passed: the next call asks retryd again (and is shed again).
        time.sleep(c._busy.remaining() + 0.05)
        c.call(lambda: "ok", operation="read")
        self.assertEqual(c.stats().admit_rpcs, 2)
        self.assertEqual(len([e for e in events if e.kind == "retryd_busy"]), 3)

    def test_async_client_unknown_write_is_not_resent_and_watch_waits(self) -> None:
        async def go() -> retryd.MirrorStats:
            c = retryd.AsyncClient(self.addr, catalog="vibecode", dependency=f"d-shed-a-{time.monotonic_ns()}",
                                   tenant="t", timeout=2.0)
            await c.connect()
            runs = []

            async def write() -> None:
                runs.append(1)
                raise retryd.DependencyError("BITRIX_TIMEOUT")
            with self.assertRaises(retryd.RetrydUnavailable):
                await c.call(write, operation="write", method="crm.deal.add")
            self.assertEqual(runs, [1])  # never resent blindly
            await asyncio.sleep(1.0)
            st = c.stats()
            await c.close()
            return st
        st = asyncio.run(go())
        self.assertGreaterEqual(st.shed_answers, 1)
        self.assertGreaterEqual(st.busy_skips, 1)
        self.assertFalse(st.synced)
        # The watch reconnects no earlier than each advice: about one stream per advice (0.25-0.75 s)
        # in the second the test slept, not one per backoff step (from 100 ms, full jitter).
        self.assertLessEqual(st.shed_answers, 8)


if __name__ == "__main__":
    unittest.main()
