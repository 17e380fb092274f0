#!/usr/bin/env python3
"""Runs every scenario of clients/conformance/scenarios against the real retryd,
with retryd.Client (threads) and retryd.AsyncClient (asyncio), concurrently.

    RETRYD_BIN=target/debug/retryd python clients/python/conformance.py [SCENARIO_DIR]

Exits 1 when a scenario fails in either mode. Cancellation scenarios run with
AsyncClient only (a blocking call is not cancellable in Python).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import glob
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

import retryd
from retryd.v1 import retryd_pb2 as pb
from retryd.v1 import retryd_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parents[2]
SLOW = ""  # the address of a retryd that never answers (main sets it)
SHEDDING = ""  # the address of a retryd that sheds every call with advice (main sets it when needed)
logging.getLogger("retryd").setLevel(logging.ERROR)  # fallbacks are expected in the retryd-down scenarios
TOKEN = "conformance-operator-token-0123456789"


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, binary: str, *extra: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="retryd-conf-")
        tok = os.path.join(self.dir, "operator.token")
        Path(tok).write_text(TOKEN + "\n")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--metrics-listen", "off",
             "--operator-token-file", tok, "--log-level", "warn", *extra],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "server.log"), "wb"))
        ch = grpc.insecure_channel(self.addr)
        grpc.channel_ready_future(ch).result(timeout=30)
        self.stub = pb_grpc.RetryDecisionServiceStub(ch)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


class FakeGrpcError(grpc.RpcError):
    def __init__(self, status: str, retry_delay_ms: int | None, pushback: list | None = None) -> None:
        self._code = grpc.StatusCode[status]
        md = [("grpc-retry-pushback-ms", v) for v in pushback or []]
        if retry_delay_ms is not None:
            ri = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(
                seconds=retry_delay_ms // 1000, nanos=(retry_delay_ms % 1000) * 1_000_000))
            st = status_pb2.Status(code=self._code.value[0], message="x")
            st.details.add().Pack(ri)
            md.append(("grpc-status-details-bin", st.SerializeToString()))
        self._md = tuple(md)

    def code(self) -> grpc.StatusCode:
        return self._code

    def trailing_metadata(self):  # noqa: ANN201
        return self._md


class FakeResponse:
    def __init__(self, status: int, headers: dict) -> None:
        self.status_code, self.headers = status, headers


class FakeHTTPError(Exception):
    """Shaped like requests.HTTPError / httpx.HTTPStatusError."""

    def __init__(self, status: int, headers: dict) -> None:
        super().__init__(f"HTTP {status}")
        self.response = FakeResponse(status, headers)


class EnvelopeError(Exception):
    def __init__(self, body: dict, headers: dict) -> None:
        super().__init__("envelope")
        self.body, self.headers = body, headers


class Dependency:
    """The scripted dependency: outcomes in order (the last repeats), effects counted."""

    def __init__(self, sc: dict) -> None:
        self.sc = sc
        self.runs = self.effects = self.read_backs = 0
        self.keys: set[str] = set()
        self.lock = threading.Lock()

    def _apply(self) -> None:
        call = self.sc["call"]
        if call.get("operation") != "write":
            return
        key = call.get("idempotency_key")
        if self.sc["dependency"].get("dedupe_by_key") and key:
            if key in self.keys:
                return
            self.keys.add(key)
        self.effects += 1

    def run(self):  # noqa: ANN201
        with self.lock:
            outs = self.sc["dependency"]["outcomes"]
            o = outs[min(self.runs, len(outs) - 1)]
            self.runs += 1
            if "ok" in o:
                self._apply()
                return o["ok"]
            if o.get("applied"):
                self._apply()
        raise self.error(o["error"])

    @staticmethod
    def error(e: dict) -> Exception:
        kind = e["kind"]
        headers = {}
        if "retry_after" in e:
            headers["Retry-After"] = e["retry_after"]
        if "retry_after_date_in_s" in e:
            headers["Retry-After"] = email.utils.formatdate(time.time() + e["retry_after_date_in_s"], usegmt=True)
        if kind == "code":
            extra = {"catalog": e["catalog"]} if "catalog" in e else {}
            return retryd.DependencyError(e["code"], retry_after=e.get("retry_after"), retry_after_ms=e.get("retry_after_ms"), **extra)
        if kind == "http":
            return FakeHTTPError(e["status"], headers)
        if kind == "grpc":
            return FakeGrpcError(e["status"], e.get("retry_delay_ms"), e.get("pushback"))
        if kind == "envelope":
            return EnvelopeError(e["body"], headers)
        return RuntimeError(e.get("message", "other"))

    def read_back(self):  # noqa: ANN201
        with self.lock:
            self.read_backs += 1
            if self.sc["call"].get("read_back") == "inconclusive":
                raise retryd.Inconclusive()
            return "found" if self.effects > 0 else None


def to_failure(exc: BaseException):  # noqa: ANN201
    if isinstance(exc, EnvelopeError):
        return retryd.from_envelope(exc.body, exc.headers)
    return retryd.default_mapper(exc)


def wait_until(cond, what: str, timeout: float = 3.0) -> None:  # noqa: ANN001
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"setup: {what} not within {timeout} s")
        time.sleep(0.01)


async def wait_until_async(cond, what: str, timeout: float = 3.0) -> None:  # noqa: ANN001
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"setup: {what} not within {timeout} s")
        await asyncio.sleep(0.01)


def setup(server: Server, sc: dict, tenant: str, dep: str, client=None) -> None:  # noqa: ANN001
    """The server-side steps, and the mirror's steps of the sync client (mirror steps of
    AsyncClient run in setup_async)."""
    md = (("authorization", f"Bearer {TOKEN}"),)
    for step in sc.get("setup", []):
        if "mirror_sync" in step and client is not None:
            if not client.watch([dep], [tenant], timeout=3.0):
                raise AssertionError("setup: the mirror did not sync within 3 s")
        if "wait_mirror_holds" in step and client is not None:
            n = step["wait_mirror_holds"]["min"]
            wait_until(lambda: len(client.mirror_holds(dep)) >= n, f"{n} mirror holds")
        if "place_quota_stop" in step:
            resets = dt.datetime.now(dt.timezone.utc) + dt.timedelta(milliseconds=step["place_quota_stop"]["resets_in_ms"])
            f = pb.Failure(catalog="frontspin", code="RATE_LIMITED", operation=pb.OPERATION_KIND_WRITE,
                           attempt=1, tenant=tenant, dependency=dep)
            f.quota_resets_at.FromDatetime(resets)
            d = server.stub.Classify(pb.ClassifyRequest(failure=f), timeout=5).decision
            assert d.HasField("hold"), f"setup placed no hold: {d}"
        if "release_holds" in step:
            holds = server.stub.ListHolds(pb.ListHoldsRequest(tenant=tenant, dependency=dep), metadata=md, timeout=5).holds
            assert holds, "setup: no hold to release"
            for h in holds:
                server.stub.ReleaseHold(pb.ReleaseHoldRequest(id=h.id), metadata=md, timeout=5)


def client_kwargs(sc: dict, addr: str, tenant: str, dep: str, waits: list, refusals: list) -> dict:
    def on_event(e: retryd.Event) -> None:
        if e.kind == "admit_refused":
            refusals.append(e)
    # Scenarios test the loop, not the 50 ms default: on a loaded CI machine 34 concurrent first
    # calls to a debug server can take longer (the retryd-down scenarios test the fallback).
    # Likewise the connection: 49 clients connecting at once from threads sharing the GIL took
    # over 0.5 s in CI, and a running retryd's scenario then took the fallback instead of its
    # answer. Only the down and slow ones need a short connect timeout (to be quick).
    running = sc.get("retryd", "up") in ("up", "shedding")
    return dict(catalog=sc["call"].get("catalog"), dependency=dep, tenant=tenant, on_event=on_event,
                connect_timeout=5.0 if running else 0.5, timeout=2.0)


def call_kwargs(sc: dict, dep: Dependency) -> dict:
    c = sc["call"]
    kw = dict(operation=c.get("operation"), method=c.get("method"), idempotency_key=c.get("idempotency_key"),
              idempotency_key_enforced=c.get("idempotency_key_enforced", False), to_failure=to_failure)
    if c.get("read_back"):
        kw["read_back"] = dep.read_back
    if "deadline_ms" in c:
        kw["deadline"] = c["deadline_ms"] / 1000
    return kw


def outcome_of(exc: BaseException | None) -> dict:
    if exc is None:
        return {}
    if isinstance(exc, retryd.Rejected):
        return {"error": "rejected", "field": exc.field}
    if isinstance(exc, retryd.Held):
        return {"error": "held"}
    if isinstance(exc, retryd.DeadlineExceeded):
        return {"error": "deadline_exceeded"}
    if isinstance(exc, retryd.RetrydUnavailable):
        return {"error": "fallback"}
    if isinstance(exc, retryd.RetryRefused):
        d = exc.decision
        # Scenario files name verdicts as the proto does (FIX_BEFORE_RETRY): the enum's name.
        return {"error": "retry_refused", "verdict": d.verdict.name if d and d.verdict else "",
                "terminal_state": d.terminal_state if d else ""}
    if isinstance(exc, asyncio.CancelledError):
        return {"error": "cancelled"}
    return {"error": "unmapped", "detail": repr(exc)}


def check(sc: dict, dep: Dependency, waits: list, refusals: list, result, out: dict, elapsed_ms: float) -> list[str]:
    e = sc["expect"]
    bad = []
    wait_ms = sum(waits) * 1000

    def want(cond: bool, what: str) -> None:
        if not cond:
            bad.append(what)
    if "runs" in e:
        want(dep.runs == e["runs"], f"runs {dep.runs} != {e['runs']}")
    want(dep.runs >= e.get("runs_min", 0), f"runs {dep.runs} < {e.get('runs_min')}")
    want(dep.runs <= e.get("runs_max", 1 << 30), f"runs {dep.runs} > {e.get('runs_max')}")
    if "effects" in e:
        want(dep.effects == e["effects"], f"effects {dep.effects} != {e['effects']}")
    if "read_backs" in e:
        want(dep.read_backs == e["read_backs"], f"read_backs {dep.read_backs} != {e['read_backs']}")
    want(wait_ms >= e.get("wait_ms_min", 0), f"waited {wait_ms:.0f} ms < {e.get('wait_ms_min')}")
    if "wait_ms_max" in e:
        want(wait_ms <= e["wait_ms_max"], f"waited {wait_ms:.0f} ms > {e['wait_ms_max']}")
    if "waits_ms" in e:
        got = [round(w * 1000) for w in waits]
        want(got == e["waits_ms"], f"waits {got} != {e['waits_ms']}")
    if "elapsed_ms_max" in e:
        want(elapsed_ms <= e["elapsed_ms_max"], f"took {elapsed_ms:.0f} ms > {e['elapsed_ms_max']}")
    want(len(refusals) >= e.get("admit_refusals_min", 0), f"admit refusals {len(refusals)} < {e.get('admit_refusals_min')}")
    errs = e.get("error_any") or ([e["error"]] if "error" in e else [])
    if errs:
        want(out.get("error") in errs, f"error {out} not in {errs}")
    else:
        want(not out, f"unexpected error {out}")
    if "result" in e:
        want(result == e["result"], f"result {result!r} != {e['result']!r}")
    if "verdict" in e:
        want(out.get("verdict") == e["verdict"], f"verdict {out.get('verdict')} != {e['verdict']}")
    if "verdict_any" in e:
        want(out.get("verdict") in e["verdict_any"], f"verdict {out.get('verdict')} not in {e['verdict_any']}")
    if "rejected_field" in e:
        want(out.get("field") == e["rejected_field"], f"rejected field {out.get('field')!r} != {e['rejected_field']!r}")
    if "terminal_state" in e:
        want(out.get("terminal_state") == e["terminal_state"], f"terminal_state {out.get('terminal_state')} != {e['terminal_state']}")
    return bad


def names(sc: dict, mode: str) -> tuple[str, str]:
    run = uuid.uuid4().hex[:8]
    return f"t-{sc['name']}-{mode}-{run}", f"d-{sc['name']}-{mode}-{run}"


async def setup_async(server: Server, sc: dict, tenant: str, dep: str, client) -> None:  # noqa: ANN001
    for step in sc.get("setup", []):
        if "mirror_sync" in step:
            if not await client.watch([dep], [tenant], timeout=3.0):
                raise AssertionError("setup: the mirror did not sync within 3 s")
        elif "wait_mirror_holds" in step:
            n = step["wait_mirror_holds"]["min"]
            await wait_until_async(lambda: len(client.mirror_holds(dep)) >= n, f"{n} mirror holds")
        else:
            await asyncio.to_thread(setup, server, {"setup": [step]}, tenant, dep)


def check_rpcs(e: dict, before: retryd.MirrorStats, after: retryd.MirrorStats) -> list[str]:
    """The mirror's expectations: RPCs and local refusals of the call phase (and the final flush)."""
    bad = []
    admits = after.admit_rpcs - before.admit_rpcs
    if "admit_rpcs_max" in e and admits > e["admit_rpcs_max"]:
        bad.append(f"admit RPCs {admits} > {e['admit_rpcs_max']}")
    if "admit_rpcs_min" in e and admits < e["admit_rpcs_min"]:
        bad.append(f"admit RPCs {admits} < {e['admit_rpcs_min']}")
    local = after.local_refusals - before.local_refusals
    if "local_refusals_min" in e and local < e["local_refusals_min"]:
        bad.append(f"local refusals {local} < {e['local_refusals_min']}")
    reports = after.report_rpcs - before.report_rpcs
    if "report_rpcs_max" in e and reports > e["report_rpcs_max"]:
        bad.append(f"report RPCs {reports} > {e['report_rpcs_max']}")
    reqs = after.reported_requests - before.reported_requests
    if "reported_requests" in e and reqs != e["reported_requests"]:
        bad.append(f"reported requests {reqs} != {e['reported_requests']}")
    # Counted from the client's start: its watch may be shed (and start the busy period) before the call.
    if "shed_answers_min" in e and after.shed_answers < e["shed_answers_min"]:
        bad.append(f"shed answers {after.shed_answers} < {e['shed_answers_min']}")
    if "busy_skips_min" in e and after.busy_skips < e["busy_skips_min"]:
        bad.append(f"busy skips {after.busy_skips} < {e['busy_skips_min']}")
    return bad


def run_sync(server: Server, down: str, sc: dict) -> list[str]:
    tenant, depname = names(sc, "sync")
    dep, waits, refusals = Dependency(sc), [], []

    def sleep(s: float) -> None:
        waits.append(s)
        if sc.get("sleep", "real") == "real":
            time.sleep(s)
    addr = {"up": server.addr, "slow": SLOW, "shedding": SHEDDING}.get(sc.get("retryd", "up"), down)
    # Server-side setup before the client (as without a mirror) up to the first mirror step: the
    # mirror then learns those holds from its snapshot, not from a racing event.
    steps = sc.get("setup", [])
    first = next((i for i, st in enumerate(steps) if "mirror_sync" in st or "wait_mirror_holds" in st), len(steps))
    setup(server, {"setup": steps[:first]}, tenant, depname)
    client = retryd.Client(addr, sleep=sleep, **client_kwargs(sc, addr, tenant, depname, waits, refusals))
    setup(server, {"setup": steps[first:]}, tenant, depname, client)
    before = client.stats()
    t0 = time.monotonic()
    result, exc = None, None
    for _ in range(sc["call"].get("repeat", 1)):
        try:
            result, exc = client.call(dep.run, **call_kwargs(sc, dep)), None
        except Exception as e:  # noqa: BLE001
            result, exc = None, e
    elapsed = (time.monotonic() - t0) * 1000
    client.close()
    out = outcome_of(exc)
    bad = check(sc, dep, waits, refusals, result, out, elapsed) + check_rpcs(sc["expect"], before, client.stats())
    if sc.get("retryd", "up") != "up" and client.fallbacks < sc["expect"].get("fallbacks_min", 0):
        bad.append(f"fallbacks {client.fallbacks} < {sc['expect']['fallbacks_min']}")
    if bad and sc.get("retryd", "up") == "up" and client.fallbacks:
        bad.append(f"took the fallback {client.fallbacks} time(s) against a running retryd (a connect or RPC timeout)")
    return bad


async def run_async(server: Server, down: str, sc: dict) -> list[str]:
    tenant, depname = names(sc, "async")
    dep, waits, refusals = Dependency(sc), [], []

    async def sleep(s: float) -> None:
        waits.append(s)
        if sc.get("sleep", "real") == "real":
            await asyncio.sleep(s)

    async def fn():  # noqa: ANN202
        return dep.run()
    addr = {"up": server.addr, "slow": SLOW, "shedding": SHEDDING}.get(sc.get("retryd", "up"), down)
    client = retryd.AsyncClient(addr, sleep=sleep, **client_kwargs(sc, addr, tenant, depname, waits, refusals))
    steps = sc.get("setup", [])
    first = next((i for i, st in enumerate(steps) if "mirror_sync" in st or "wait_mirror_holds" in st), len(steps))
    await asyncio.to_thread(setup, server, {"setup": steps[:first]}, tenant, depname)
    await client.connect()
    await setup_async(server, {"setup": steps[first:]}, tenant, depname, client)
    before = client.stats()
    t0 = time.monotonic()
    result, exc = None, None
    for _ in range(sc["call"].get("repeat", 1)):
        task = asyncio.ensure_future(client.call(fn, **call_kwargs(sc, dep)))
        cancel = sc["call"].get("cancel_after_ms")
        if cancel is not None:
            asyncio.get_running_loop().call_later(cancel / 1000, task.cancel)
        try:
            result, exc = await task, None
        except (Exception, asyncio.CancelledError) as e:  # noqa: BLE001
            result, exc = None, e
    elapsed = (time.monotonic() - t0) * 1000
    await client.close()
    bad = check(sc, dep, waits, refusals, result, outcome_of(exc), elapsed) + check_rpcs(sc["expect"], before, client.stats())
    if sc.get("retryd", "up") != "up" and client.fallbacks < sc["expect"].get("fallbacks_min", 0):
        bad.append(f"fallbacks {client.fallbacks} < {sc['expect']['fallbacks_min']}")
    if bad and sc.get("retryd", "up") == "up" and client.fallbacks:
        bad.append(f"took the fallback {client.fallbacks} time(s) against a running retryd (a connect or RPC timeout)")
    return bad


def main() -> int:
    binary = os.environ.get("RETRYD_BIN") or str(ROOT / "target" / "debug" / "retryd")
    sdir = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "clients" / "conformance" / "scenarios")
    scenarios = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(sdir, "*.json")))]
    server = Server(binary)
    down = f"127.0.0.1:{free_port()}"  # nothing listens there
    # A retryd with no room (only if a scenario needs it): every call but health is shed
    # RESOURCE_EXHAUSTED with retry advice.
    global SLOW, SHEDDING
    shedding = Server(binary, "--max-buffered-bytes", "1") if any(sc.get("retryd") == "shedding" for sc in scenarios) else None
    if shedding is not None:
        SHEDDING = shedding.addr
    # A retryd slower than any timeout: it accepts connections (the kernel
    # does, from the backlog) and never answers.
    slow = socket.socket()
    slow.bind(("127.0.0.1", 0))
    slow.listen(64)
    SLOW = f"127.0.0.1:{slow.getsockname()[1]}"
    t0 = time.monotonic()
    failed = 0
    try:
        sync_sc = [sc for sc in scenarios if "cancel_after_ms" not in sc["call"]]
        with ThreadPoolExecutor(max_workers=len(sync_sc)) as ex:
            sync_res = list(ex.map(lambda sc: run_sync(server, down, sc), sync_sc))

        async def all_async() -> list:
            return await asyncio.gather(*(run_async(server, down, sc) for sc in scenarios))
        async_res = asyncio.run(all_async())
        for mode, scs, res in (("sync", sync_sc, sync_res), ("async", scenarios, async_res)):
            for sc, bad in zip(scs, res):
                if bad:
                    failed += 1
                    print(f"conformance python/{mode}: FAIL {sc['name']}: {'; '.join(bad)}")
                else:
                    print(f"conformance python/{mode}: PASS {sc['name']}")
    finally:
        server.stop()
        if shedding is not None:
            shedding.stop()
    total = len(sync_sc) + len(scenarios)
    print(f"conformance python: {total - failed} passed, {failed} failed ({len(scenarios)} scenarios, "
          f"{time.monotonic() - t0:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
