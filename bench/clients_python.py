#!/usr/bin/env python3
"""What the Python client adds to a successful call: a no-op through Client.call
and AsyncClient.call (holds mirror synced, no hold in force) against calling the
no-op bare; medians over N calls each. Run by bench/clients.sh (RETRYD_ADDR).

    RETRYD_ADDR=127.0.0.1:50051 clients/python/.venv/bin/python bench/clients_python.py [-n 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid

import retryd


def noop() -> int:
    return 1


async def anoop() -> int:
    return 1


def timed(f, n: int) -> list[int]:  # noqa: ANN001
    out = []
    pc = time.perf_counter_ns
    for _ in range(n):
        t = pc()
        f()
        out.append(pc() - t)
    return out


async def atimed(f, n: int) -> list[int]:  # noqa: ANN001
    out = []
    pc = time.perf_counter_ns
    for _ in range(n):
        t = pc()
        await f()
        out.append(pc() - t)
    return out


def row(name: str, bare: list[int], through: list[int], admits: int) -> None:
    mb, mt = statistics.median(bare) / 1000, statistics.median(through) / 1000
    p99 = sorted(through)[int(len(through) * 0.99)] / 1000
    print(f"{name:<22} bare {mb:8.2f} µs  through {mt:8.2f} µs  added {mt - mb:8.2f} µs (median; p99 through {p99:.1f} µs)"
          f"  Admit RPCs {admits}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20000)
    n = ap.parse_args().n
    addr = os.environ["RETRYD_ADDR"]
    run = uuid.uuid4().hex[:8]
    kw = dict(catalog="vibecode", dependency=f"bench-dep-{run}", tenant=f"bench-tenant-{run}", report_interval=1.0)

    c = retryd.Client(addr, **kw)
    assert c.watch(timeout=5.0), "the mirror did not sync"
    call = lambda: c.call(noop, operation="read", method="crm.deal.get")  # noqa: E731
    timed(call, 1000)  # warm-up
    before = c.stats().admit_rpcs
    through = timed(call, n)
    admits = c.stats().admit_rpcs - before
    bare = timed(noop, n)
    c.close()
    row("python Client", bare, through, admits)

    # The same with the mirror off: an Admit RPC before every attempt (what every call cost before #26).
    off = retryd.Client(addr, mirror=False, **kw)
    call = lambda: off.call(noop, operation="read", method="crm.deal.get")  # noqa: E731
    timed(call, 200)
    before = off.stats().admit_rpcs
    through = timed(call, n)
    admits = off.stats().admit_rpcs - before
    off.close()
    row("python mirror=False", bare, through, admits)

    async def amain() -> None:
        a = retryd.AsyncClient(addr, **kw)
        assert await a.watch(timeout=5.0), "the mirror did not sync"
        acall = lambda: a.call(anoop, operation="read", method="crm.deal.get")  # noqa: E731
        await atimed(acall, 1000)
        before = a.stats().admit_rpcs
        through = await atimed(acall, n)
        admits = a.stats().admit_rpcs - before
        bare = await atimed(anoop, n)
        await a.close()
        row("python AsyncClient", bare, through, admits)
    asyncio.run(amain())
    propagation(addr, run)
    return 0


def propagation(addr: str, run: str, samples: int = 100) -> None:
    """How long a hold placed through another connection takes to reach the mirror (a quota stop on a
    fresh watched tenant each time), polled every 0.2 ms."""
    import datetime as dt

    import grpc

    from retryd.v1 import retryd_pb2 as pb
    from retryd.v1 import retryd_pb2_grpc as pb_grpc
    dep = f"bench-prop-{run}"
    tenants = [f"bench-prop-{run}-{i}" for i in range(samples)]
    c = retryd.Client(addr, catalog="frontspin", dependency=dep, timeout=2.0)
    assert c.watch(tenants=tenants, timeout=10.0), "the mirror did not sync"
    stub = pb_grpc.RetryDecisionServiceStub(grpc.insecure_channel(addr))
    lags = []
    for t in tenants:
        f = pb.Failure(catalog="frontspin", code="RATE_LIMITED", operation=pb.OPERATION_KIND_WRITE, attempt=1,
                       tenant=t, dependency=dep)
        f.quota_resets_at.FromDatetime(dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=10))
        have = len(c.mirror_holds(dep))
        t0 = time.perf_counter()
        stub.Classify(pb.ClassifyRequest(failure=f), timeout=5)
        while len(c.mirror_holds(dep)) == have:
            time.sleep(0.0002)
        lags.append((time.perf_counter() - t0) * 1000)
    c.close()
    lags.sort()
    print(f"{'python hold → mirror':<22} median {statistics.median(lags):.2f} ms  p99 {lags[int(len(lags) * 0.99)]:.2f} ms"
          f"  max {lags[-1]:.2f} ms ({samples} holds placed by Classify on another channel, from its send)")


if __name__ == "__main__":
    raise SystemExit(main())
