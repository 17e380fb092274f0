"""The holds mirror: its decisions from scripted WatchHolds events (no I/O), then
the sync client's watch against the real retryd (RETRYD_BIN) through a restart."""

import os
import subprocess
import tempfile
import threading
import time
import unittest

import grpc

import retryd
from retryd._mirror import ADMITTED, ASK, MAX_WATCHED, Mirror
from retryd.v1 import retryd_pb2 as pb
from test_tenacity import ROOT, free_port


def hold(hid: str, until: float, *, dep: str = "d", tenant: str = "", method: str = "", scope: int = pb.SCOPE_DEPENDENCY,
         catalog: str = "frontspin", next_probe_at: float = 0.0, probing: bool = False) -> pb.Hold:
    h = pb.Hold(id=hid, catalog=catalog, dependency=dep, tenant=tenant, method=method, scope=scope, probing=probing)
    h.until.FromNanoseconds(int(until * 1e9))
    if next_probe_at:
        h.next_probe_at.FromNanoseconds(int(next_probe_at * 1e9))
    return h


def ev(kind: int, h: pb.Hold = None, server_time: float = 0.0) -> pb.WatchHoldsResponse:  # type: ignore[assignment]
    e = pb.WatchHoldsResponse(kind=kind)
    if h is not None:
        e.hold.CopyFrom(h)
    e.server_time.FromNanoseconds(int((server_time or time.time()) * 1e9))
    return e


def synced(m: Mirror, deps=("d",), tenants=("t",), holds=()) -> int:  # noqa: ANN001
    m.want(deps, tenants)
    gen, req = m.begin(lambda: None)
    assert list(req.dependencies) == sorted(deps) and list(req.tenants) == sorted(tenants)
    for h in holds:
        m.on_event(gen, ev(pb.HOLD_EVENT_KIND_PLACED, h))
    m.on_event(gen, ev(pb.HOLD_EVENT_KIND_SYNCED))
    return gen


class MirrorDecisions(unittest.TestCase):
    def test_unsynced_asks_and_widens(self) -> None:
        m = Mirror()
        self.assertIs(m.admit("", "d", "t", ""), ASK)
        self.assertEqual(m.want_deps, {"d"})  # asked to widen
        self.assertEqual(m.next_step()[0], "open")
        synced(m)
        self.assertIs(m.admit("", "d", "t", ""), ADMITTED)
        self.assertIs(m.admit("", "d", "other-tenant", ""), ASK)  # a tenant not yet synced

    def test_covering_holds_refuse_until_the_probe_point(self) -> None:
        now = time.time()
        m = Mirror()
        synced(m, holds=[hold("h1", now + 60, tenant="t", scope=pb.SCOPE_TENANT, next_probe_at=now + 30)])
        got = m.admit("frontspin", "d", "t", "m")
        self.assertIsInstance(got, tuple)
        self.assertAlmostEqual(got[1], now + 30, delta=0.5)  # the earlier of until and next_probe_at
        self.assertIs(m.admit("vibecode", "d", "t", "m"), ADMITTED)  # another catalog's hold
        self.assertIsInstance(m.admit("", "d", "t", "m"), tuple)  # no catalog: any catalog's hold
        self.assertIs(m.admit("frontspin", "d", "t2", "m"), ASK)  # t2 not watched
        m2 = Mirror()
        synced(m2, holds=[hold("h2", now + 60, next_probe_at=now - 1)])
        self.assertIs(m2.admit("", "d", "t", ""), ASK)  # a probe point: retryd arbitrates
        m3 = Mirror()
        synced(m3, holds=[hold("h3", now - 1, next_probe_at=now - 2)])
        self.assertIs(m3.admit("", "d", "t", ""), ASK)  # past its end, PROBING not seen yet
        m4 = Mirror()
        synced(m4, holds=[hold("h4", now - 1)])
        self.assertIs(m4.admit("", "d", "t", ""), ADMITTED)  # a pause that ended

    def test_method_and_dependency_scopes(self) -> None:
        now = time.time()
        m = Mirror()
        synced(m, holds=[hold("hm", now + 60, method="crm.deal.add", scope=pb.SCOPE_METHOD)])
        self.assertIsInstance(m.admit("", "d", "t", "crm.deal.add"), tuple)
        self.assertIs(m.admit("", "d", "t", "crm.deal.get"), ADMITTED)

    def test_events_apply_idempotently_and_lifts_win_races(self) -> None:
        now = time.time()
        m = Mirror()
        gen = synced(m)
        m.on_event(gen, ev(pb.HOLD_EVENT_KIND_PLACED, hold("h", now + 60)))
        m.on_event(gen, ev(pb.HOLD_EVENT_KIND_PLACED, hold("h", now + 30)))  # older: ignored
        self.assertAlmostEqual(m.admit("", "d", "t", "")[1], now + 60, delta=0.5)
        m.on_event(gen, ev(pb.HOLD_EVENT_KIND_LIFTED, hold("h", now + 60)))
        self.assertIs(m.admit("", "d", "t", ""), ADMITTED)
        m.on_event(gen, ev(pb.HOLD_EVENT_KIND_PLACED, hold("h", now + 60)))  # raced the lift
        self.assertIs(m.admit("", "d", "t", ""), ADMITTED)
        m.on_event(gen, ev(pb.HOLD_EVENT_KIND_PLACED, hold("h", now + 90)))  # placed again, later
        self.assertIsInstance(m.admit("", "d", "t", ""), tuple)

    def test_clock_skew_from_server_time(self) -> None:
        now = time.time()
        m = Mirror()
        gen = synced(m)
        # The server's clock runs 100 s ahead: a hold until server-now + 10 s is in force, and
        # its retry_at comes back in local time.
        m.on_event(gen, ev(pb.HOLD_EVENT_KIND_PLACED, hold("h", now + 110), server_time=now + 100))
        got = m.admit("", "d", "t", "")
        self.assertAlmostEqual(got[1], now + 10, delta=0.5)

    def test_bounded_holds_drop_soonest_and_unsync_its_dependency(self) -> None:
        now = time.time()
        m = Mirror(max_holds=3)
        gen = synced(m, deps=("a", "b"))
        for i, (dep, secs) in enumerate([("a", 10), ("b", 50), ("b", 60), ("b", 70)]):
            m.on_event(gen, ev(pb.HOLD_EVENT_KIND_PLACED, hold(f"h{i}", now + secs, dep=dep)))
        self.assertEqual(m.stats.holds, 3)
        self.assertIs(m.admit("", "a", "t", ""), ASK)  # its hold was dropped: never admitted silently
        self.assertIsInstance(m.admit("", "b", "t", ""), tuple)

    def test_watched_sets_are_bounded(self) -> None:
        m = Mirror()
        m.want([f"d{i}" for i in range(MAX_WATCHED + 10)], [f"t{i}" for i in range(MAX_WATCHED + 10)])
        self.assertEqual(len(m.want_deps), MAX_WATCHED)
        self.assertEqual(len(m.want_tenants), MAX_WATCHED)
        self.assertIs(m.admit("", f"d{MAX_WATCHED + 5}", "", ""), ASK)  # beyond 256: always Admit
        self.assertEqual(len(m.want_deps), MAX_WATCHED)

    def test_lift_tombstones_are_bounded(self) -> None:
        m = Mirror()
        gen = synced(m)
        for i in range(5000):
            m.on_event(gen, ev(pb.HOLD_EVENT_KIND_LIFTED, hold(f"h{i}", time.time())))
        self.assertEqual(len(m.lifted), 4096)

    def test_widening_keeps_the_old_stream_until_the_new_snapshot(self) -> None:
        now = time.time()
        m = Mirror()
        cancelled = []
        gen1 = synced(m, holds=[hold("old", now + 60)])
        m.cancels[gen1] = lambda: cancelled.append(gen1)
        m.want(["e"], [])
        self.assertEqual(m.next_step()[0], "open")
        gen2, req = m.begin(lambda: cancelled.append(gen2))
        self.assertEqual(list(req.dependencies), ["d", "e"])
        m.want(["f"], [])
        self.assertEqual(m.next_step()[0], "wait")  # one reopen in flight; f coalesces
        m.on_event(gen2, ev(pb.HOLD_EVENT_KIND_PLACED, hold("new", now + 60, dep="e")))
        self.assertIsInstance(m.admit("", "d", "t", ""), tuple)  # the old mirror still serves
        self.assertIs(m.admit("", "e", "t", ""), ASK)
        m.on_event(gen2, ev(pb.HOLD_EVENT_KIND_SYNCED))
        self.assertEqual(cancelled, [gen1])
        self.assertIs(m.admit("", "d", "t", ""), ADMITTED)  # "old" was not in the new snapshot
        self.assertIsInstance(m.admit("", "e", "t", ""), tuple)
        self.assertEqual(m.next_step()[0], "open")  # now f

    def test_stale_keeps_known_holds_and_asks_for_the_rest(self) -> None:
        now = time.time()
        changes = []
        m = Mirror(on_change=changes.append)
        gen = synced(m, deps=("d", "e"), holds=[hold("h", now + 60)])
        m.ended(gen)
        self.assertEqual(changes, ["synced", "stale"])
        self.assertTrue(m.stats.stale)
        self.assertIsInstance(m.admit("", "d", "t", ""), tuple)
        self.assertIs(m.admit("", "e", "t", ""), ASK)
        step, secs = m.next_step()
        self.assertEqual(step, "backoff")
        self.assertLessEqual(secs, 0.1)
        m.ended(m.begin(lambda: None)[0])
        m.ended(m.begin(lambda: None)[0])
        self.assertLessEqual(m.next_step()[1], 0.4)  # 100 ms x 2^2, full jitter
        gen = synced(m, deps=("d", "e"))
        self.assertEqual(changes, ["synced", "stale", "synced"])
        self.assertIs(m.admit("", "d", "t", ""), ADMITTED)

    def test_tenant_holds_a_server_hashed_disable_local_tenant_admission(self) -> None:
        m = Mirror()
        gen = synced(m)
        m.on_event(gen, ev(pb.HOLD_EVENT_KIND_PLACED, hold("h", time.time() + 60, tenant="h:abcd", scope=pb.SCOPE_TENANT)))
        self.assertIs(m.admit("", "d", "t", ""), ASK)
        self.assertIs(m.admit("", "d", "", ""), ADMITTED)


class MirrorAgainstRetryd(unittest.TestCase):
    def start(self, addr: str) -> subprocess.Popen:
        binary = os.environ.get("RETRYD_BIN") or str(ROOT / "target" / "debug" / "retryd")
        p = subprocess.Popen([binary, "serve", "--listen", addr, "--metrics-listen", "off", "--log-level", "warn"],
                             stdout=subprocess.DEVNULL, stderr=self.log)
        grpc.channel_ready_future(grpc.insecure_channel(addr)).result(timeout=30)
        return p

    def test_restart_goes_stale_keeps_refusing_then_resyncs(self) -> None:
        self.log = tempfile.TemporaryFile()
        self.addCleanup(self.log.close)
        addr = f"127.0.0.1:{free_port()}"
        proc = self.start(addr)
        self.addCleanup(lambda: (proc.kill(), proc.wait(30)))
        events, lock = [], threading.Lock()

        def on_event(e: retryd.Event) -> None:
            with lock:
                events.append(e.kind)
        c = retryd.Client(addr, catalog="frontspin", dependency="d-restart", tenant="t-restart", timeout=0.5,
                          on_event=on_event)
        self.addCleanup(c.close)
        self.assertTrue(c.watch(timeout=5.0))
        self.assertEqual(c.call(lambda: "ok", operation="read"), "ok")
        self.assertEqual(c.stats().admit_rpcs, 0)
        # A quota stop the mirror learns from the stream.
        f = pb.Failure(catalog="frontspin", code="RATE_LIMITED", operation=pb.OPERATION_KIND_WRITE, attempt=1,
                       tenant="t-restart", dependency="d-restart")
        f.quota_resets_at.FromNanoseconds(int((time.time() + 600) * 1e9))
        from retryd.v1 import retryd_pb2_grpc as pb_grpc
        pb_grpc.RetryDecisionServiceStub(grpc.insecure_channel(addr)).Classify(pb.ClassifyRequest(failure=f), timeout=5)
        end = time.monotonic() + 3
        while not c.mirror_holds("d-restart") and time.monotonic() < end:
            time.sleep(0.01)
        proc.kill()
        proc.wait(30)
        # The state flips under the mirror's lock; its event is delivered just after, outside it.
        end = time.monotonic() + 3
        while not (c.stats().stale and "mirror_stale" in events) and time.monotonic() < end:
            time.sleep(0.01)
        self.assertTrue(c.stats().stale)
        self.assertIn("mirror_stale", events)
        runs = []
        with self.assertRaises(retryd.Held):
            c.call(lambda: runs.append(1), operation="write", deadline=1.0)
        self.assertEqual(runs, [])  # refused locally while retryd is away
        proc = self.start(addr)
        self.addCleanup(lambda: (proc.kill(), proc.wait(30)))
        end = time.monotonic() + 8  # the backoff is capped at 5 s
        while not (c.stats().synced and events.count("mirror_synced") == 2) and time.monotonic() < end:
            time.sleep(0.02)
        self.assertTrue(c.stats().synced)
        self.assertFalse(c.stats().stale)
        self.assertEqual(events.count("mirror_synced"), 2)
        # The restarted retryd (in-process state) has no hold: its snapshot replaced the mirror.
        self.assertEqual(c.mirror_holds("d-restart"), [])


if __name__ == "__main__":
    unittest.main()
