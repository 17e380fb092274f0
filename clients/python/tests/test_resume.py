"""Resuming the holds mirror by bucket digests: the shared vectors, the mirror's sweep at a
resumed SYNCED (no I/O), then a widening against the real retryd (RETRYD_BIN)."""

import json
import time
import unittest

import grpc

import retryd
from retryd._mirror import ASK, Mirror
from retryd._resume import bucket, bucket_digests, digest
from retryd.v1 import retryd_pb2 as pb
from retryd.v1 import retryd_pb2_grpc as pb_grpc
from test_mirror import ev, hold
from test_tenacity import ROOT, start_retryd


class Vectors(unittest.TestCase):
    def test_digests_match_the_shared_vectors(self) -> None:
        v = json.loads((ROOT / "clients" / "conformance" / "resume_vectors.json").read_text("utf-8"))
        got = []
        for h in v["holds"]:
            d = digest(h["id"], h["until_ms"])
            self.assertEqual(d, int(h["digest"]), h)
            self.assertEqual(f"{d:016x}", h["digest_hex"])
            self.assertEqual(bucket(d), h["bucket"])
            got.append(d)
        buckets = bucket_digests(got)
        self.assertEqual(len(buckets), 256)
        for b, d in enumerate(buckets):
            self.assertEqual(d, int(v["buckets"].get(str(b), {"digest": "0"})["digest"]), b)
        self.assertLess(len(v["buckets"]), len(v["holds"]))  # two holds share a bucket


def at_ms(ms: int) -> float:
    return ms / 1000.0


class ResumeSweep(unittest.TestCase):
    def setUp(self) -> None:
        # Two holds in different buckets, found by their digests.
        self.until = (int(time.time()) + 600) * 1000
        ids, seen = [], set()
        n = 0
        while len(ids) < 2:
            b = bucket(digest(f"h{n}", self.until))
            if b not in seen:
                seen.add(b)
                ids.append(f"h{n}")
            n += 1
        self.a, self.b = ids
        self.m = Mirror()
        self.m.want(["d"], ["t"])
        gen, req = self.m.begin(lambda: None)
        self.assertEqual(list(req.resume_digests), [])  # an empty mirror asks for a full snapshot
        for hid in ids:
            self.m.on_event(gen, ev(pb.HOLD_EVENT_KIND_PLACED, hold(hid, at_ms(self.until))))
        self.m.on_event(gen, ev(pb.HOLD_EVENT_KIND_SYNCED))

    def reopen(self) -> tuple[int, pb.WatchHoldsRequest]:
        self.m.want(["d2"], [])  # a widening: a new stream
        gen, req = self.m.begin(lambda: None)
        self.assertEqual(len(req.resume_digests), 256)
        want = bucket_digests(digest(h, self.until) for h in (self.a, self.b))
        self.assertEqual(list(req.resume_digests), want)
        return gen, req

    def test_resumed_keeps_other_buckets_and_replaces_resent_ones(self) -> None:
        gen, _ = self.reopen()
        synced = ev(pb.HOLD_EVENT_KIND_SYNCED)
        synced.resumed = True
        synced.resent_buckets.append(bucket(digest(self.b, self.until)))  # b's bucket resent, b absent: lifted
        self.m.on_event(gen, synced)
        self.assertEqual(set(self.m.holds.by_id), {self.a})
        self.assertEqual((self.m.stats.resumed_syncs, self.m.stats.resent_buckets, self.m.stats.holds), (1, 1, 1))

    def test_resumed_with_a_lift_on_the_new_stream_drops_it(self) -> None:
        gen, _ = self.reopen()
        self.m.on_event(gen, ev(pb.HOLD_EVENT_KIND_LIFTED, hold(self.a, at_ms(self.until))))
        synced = ev(pb.HOLD_EVENT_KIND_SYNCED)
        synced.resumed = True
        self.m.on_event(gen, synced)
        self.assertEqual(set(self.m.holds.by_id), {self.b})

    def test_not_resumed_sweeps_as_before(self) -> None:
        gen, _ = self.reopen()
        self.m.on_event(gen, ev(pb.HOLD_EVENT_KIND_PLACED, hold(self.a, at_ms(self.until))))
        self.m.on_event(gen, ev(pb.HOLD_EVENT_KIND_SYNCED))  # an older server: resumed false, a full snapshot
        self.assertEqual(set(self.m.holds.by_id), {self.a})
        self.assertEqual(self.m.stats.resumed_syncs, 0)


class ResumeAtTheCap(unittest.TestCase):
    def test_a_hold_the_merge_drops_sends_its_dependency_to_admit(self) -> None:
        base = (int(time.time()) + 600) * 1000
        untils = {"x": base, "y": base + 60_000, "z": base + 120_000}  # x ends soonest
        ids, seen, n = {}, set(), 0
        for k in "xyz":
            while bucket(digest(f"{k}{n}", untils[k])) in seen:
                n += 1
            ids[k] = f"{k}{n}"
            seen.add(bucket(digest(ids[k], untils[k])))
        m = Mirror(max_holds=2)
        m.want(["dx", "d"], ["t"])
        gen, _ = m.begin(lambda: None)
        m.on_event(gen, ev(pb.HOLD_EVENT_KIND_PLACED, hold(ids["x"], at_ms(untils["x"]), dep="dx")))
        m.on_event(gen, ev(pb.HOLD_EVENT_KIND_PLACED, hold(ids["y"], at_ms(untils["y"]), dep="d")))
        m.on_event(gen, ev(pb.HOLD_EVENT_KIND_SYNCED))
        m.want(["d2"], [])
        gen, req = m.begin(lambda: None)
        self.assertEqual(len(req.resume_digests), 256)
        m.on_event(gen, ev(pb.HOLD_EVENT_KIND_PLACED, hold(ids["z"], at_ms(untils["z"]), dep="d")))
        synced = ev(pb.HOLD_EVENT_KIND_SYNCED)
        synced.resumed = True
        synced.resent_buckets.append(bucket(digest(ids["z"], untils["z"])))
        m.on_event(gen, synced)
        self.assertEqual(set(m.holds.by_id), {ids["y"], ids["z"]})  # x dropped to the cap of 2
        self.assertIs(m.admit("", "dx", "t", ""), ASK)  # never let through: Admit decides until the next SYNCED


class AgainstRetryd(unittest.TestCase):
    def test_widening_resumes_and_the_hold_still_refuses_locally(self) -> None:
        proc, addr, log = start_retryd()
        self.addCleanup(log.close)
        self.addCleanup(lambda: (proc.kill(), proc.wait(30)))
        ch = grpc.insecure_channel(addr)
        self.addCleanup(ch.close)
        stub = pb_grpc.RetryDecisionServiceStub(ch)
        # Does this server resume? (one predating it answers resumed false: the fallback path)
        probe = stub.WatchHolds(pb.WatchHoldsRequest(dependencies=["probe"], resume_digests=[0] * 256), timeout=5)
        resumes = next(iter(probe)).resumed
        probe.cancel()
        f = pb.Failure(catalog="frontspin", code="RATE_LIMITED", operation=pb.OPERATION_KIND_WRITE, attempt=1,
                       tenant="t-resume", dependency="d-resume")
        f.quota_resets_at.FromNanoseconds(int((time.time() + 600) * 1e9))
        self.assertTrue(stub.Classify(pb.ClassifyRequest(failure=f), timeout=5).decision.HasField("hold"))
        c = retryd.Client(addr, catalog="frontspin", dependency="d-resume", tenant="t-resume", timeout=2.0)
        self.addCleanup(c.close)
        self.assertTrue(c.watch(timeout=5.0))
        self.assertEqual(len(c.mirror_holds("d-resume")), 1)
        self.assertTrue(c.watch(["d-other"], timeout=5.0))  # a widening: a new stream, resumed if it can
        st = c.stats()
        self.assertEqual(st.resumed_syncs, 1 if resumes else 0)
        self.assertEqual(st.resent_buckets, 0)  # the mirror was right: nothing resent
        self.assertEqual(len(c.mirror_holds("d-resume")), 1)
        runs = []
        with self.assertRaises(retryd.Held):
            c.call(lambda: runs.append(1), operation="write", method="crm.deal.add", deadline=1.0)
        self.assertEqual(runs, [])
        self.assertEqual(c.stats().admit_rpcs, 0)  # refused from the mirror, no Admit


if __name__ == "__main__":
    unittest.main()
