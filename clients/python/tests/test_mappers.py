"""Unit tests of the mappers and the loop's pure parts (no server)."""

import unittest

import retryd
from retryd._loop import Opts, loop, Fallback
from retryd.v1 import retryd_pb2 as pb


class FakeResp:
    def __init__(self, status, headers):
        self.status_code, self.headers = status, headers


class FakeHTTPError(Exception):
    def __init__(self, status, headers):
        super().__init__(status)
        self.response = FakeResp(status, headers)


class Mappers(unittest.TestCase):
    def test_dependency_error(self):
        f = retryd.default_mapper(retryd.DependencyError("BITRIX_TIMEOUT", retry_after="5", request_id="r"))
        self.assertEqual(f, {"code": "BITRIX_TIMEOUT", "retry_after": "5", "request_id": "r"})

    def test_http(self):
        f = retryd.default_mapper(FakeHTTPError(429, {"retry-after": "7", "X-Request-Id": "x"}))
        self.assertEqual(f, {"catalog": "http", "code": "429", "retry_after": "7", "request_id": "x"})

    def test_envelope(self):
        self.assertEqual(retryd.from_envelope('{"error":{"code":"QUEUE_OVERFLOW"}}', {"Retry-After": "3"}),
                         {"catalog": "vibecode", "code": "QUEUE_OVERFLOW", "retry_after": "3"})
        self.assertEqual(retryd.from_envelope({"error": "BITRIX_ERROR"})["code"], "BITRIX_ERROR")
        self.assertEqual(retryd.from_envelope(b"<html>")["code"], "")

    def test_unmapped(self):
        self.assertIsNone(retryd.default_mapper(ValueError("x")))


def opts(**kw):
    base = dict(catalog="vibecode", dependency="d", tenant="t", locale=None, operation="write", method="crm.deal.add",
                idempotency_key=None, idempotency_key_enforced=False, read_back=None, to_failure=None,
                deadline_wall=None, deadline_mono=None, fallback=Fallback())
    base.update(kw)
    return Opts(**base)


class Loop(unittest.TestCase):
    def test_write_is_never_resent_when_retryd_is_down(self):
        g = loop(opts(), retryd.default_mapper)
        self.assertEqual(next(g), ("mirror",))
        eff = g.send(None)  # the mirror cannot answer: Admit
        self.assertEqual(eff[0], "admit")
        eff = g.send(("err", "UNAVAILABLE"))  # fallback event
        self.assertEqual(eff[0], "event")
        eff = g.send(None)
        self.assertEqual(eff, ("count", "request"))
        self.assertEqual(g.send(None), ("run",))
        eff = g.send(("err", retryd.DependencyError("BITRIX_TIMEOUT")))
        self.assertEqual(eff[0], "classify")
        self.assertEqual(g.send(("err", "UNAVAILABLE"))[0], "event")
        with self.assertRaises(retryd.RetrydUnavailable) as cm:
            g.send(None)
        self.assertEqual(cm.exception.decision.rule, "client_fallback/write")

    def test_success_returns_the_value(self):
        g = loop(opts(), retryd.default_mapper)
        next(g)
        self.assertEqual(g.send(None)[0], "admit")
        # Admitted by Admit: retryd made the deposit, so no request is counted.
        self.assertEqual(g.send(("ok", pb.AdmitResponse(admitted=True))), ("run",))
        with self.assertRaises(StopIteration) as cm:
            eff = g.send(("ok", 42))
            while True:
                eff = g.send(None)
        self.assertEqual(cm.exception.value, 42)


    def test_admitted_locally_counts_the_first_attempt(self):
        g = loop(opts(), retryd.default_mapper)
        self.assertEqual(next(g), ("mirror",))
        self.assertEqual(g.send(True), ("count", "request"))
        self.assertEqual(g.send(None), ("run",))

    def test_refused_locally_waits_then_asks_again(self):
        import time
        g = loop(opts(), retryd.default_mapper)
        next(g)
        h = pb.Hold(id="h1", dependency="d", scope=pb.SCOPE_TENANT, tenant="t")
        eff = g.send((h, time.time() + 0.5))
        self.assertEqual(eff[0], "event")
        self.assertEqual((eff[1].kind, eff[1].local, eff[1].hold.id), ("admit_refused", True, "h1"))
        self.assertEqual(g.send(None)[1].kind, "wait")
        eff = g.send(None)
        self.assertEqual(eff[0], "sleep")
        self.assertGreater(eff[1], 0.4)
        self.assertEqual(g.send(None), ("mirror",))

    def test_refused_locally_past_the_deadline_is_held(self):
        import time
        g = loop(opts(deadline_mono=time.monotonic() + 0.2), retryd.default_mapper)
        next(g)
        g.send((pb.Hold(id="h1"), time.time() + 60))
        with self.assertRaises(retryd.Held):
            g.send(None)


class PushbackTest(unittest.TestCase):
    """grpc-retry-pushback-ms as gRFC A6 reads it."""

    def test_one_value_or_the_same_value_repeated_is_a_delay(self):
        self.assertEqual(retryd.pushback_ms(["250"]), (250, False))
        self.assertEqual(retryd.pushback_ms([b"250", "250"]), (250, False))
        self.assertEqual(retryd.pushback_ms([]), (None, False))

    def test_negative_unparsable_conflicting_or_too_large_means_do_not_retry(self):
        for values in (["-1"], ["xxx"], [""], ["100", "200"], ["99999999999999999999"], ["1.5"], ["\u0661"]):
            self.assertEqual(retryd.pushback_ms(values), (None, True), values)

    def test_rejection_names_retryds_field(self):
        from retryd.errors import rejection
        r = rejection("INVALID_ARGUMENT", 'failure.catalog: unknown catalog "vibecod"')
        self.assertEqual((r.code, r.field), ("INVALID_ARGUMENT", "failure.catalog"))
        self.assertEqual(rejection("PERMISSION_DENIED", "operator token required").field, "")


if __name__ == "__main__":
    unittest.main()
