#!/usr/bin/env python3
"""How stale a replica's fleet memory is: the time from a hold placed through
replica A (a Classify that places a dependency quarantine) to Admit on
replica B refusing the same dependency. Each sample uses a fresh dependency,
so every sample is a new hold; Admit on B is polled as fast as one channel
answers (each poll is well under a millisecond on loopback).

    bench/fleet_staleness.py --place HOST:PORT --watch HOST:PORT [--n 200]

Prints JSON: n, median_ms, p99_ms, max_ms. Runs with the example client's
virtualenv (scripts/install-tools.sh makes examples/python/.venv) or any
Python with grpcio and grpcio-tools.
"""

import argparse
import json
import os
import statistics
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_DIR = os.path.realpath(os.path.join(HERE, "..", "examples", "python", ".venv"))
VENV = os.path.join(VENV_DIR, "bin", "python")
try:
    import grpc  # noqa: F401
except ImportError:
    # The venv's python is often a symlink to this very interpreter: compare
    # prefixes, not executables.
    if os.path.exists(VENV) and os.path.realpath(sys.prefix) != VENV_DIR:
        os.execv(VENV, [VENV, *sys.argv])
    raise

sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
import client as example  # noqa: E402  (generates the stubs on import)

pb, pb_grpc, grpc = example.pb, example.pb_grpc, example.grpc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--place", required=True)
    ap.add_argument("--watch", required=True)
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    a = pb_grpc.RetryDecisionServiceStub(grpc.insecure_channel(args.place))
    b = pb_grpc.RetryDecisionServiceStub(grpc.insecure_channel(args.watch))
    samples = []
    for _ in range(args.n):
        dep = f"stale-{uuid.uuid4().hex[:12]}"
        failure = pb.Failure(
            catalog="vibecode",
            code="TIMEOUT_QUARANTINE",
            operation=pb.OPERATION_KIND_READ,
            attempt=1,
            retry_after="30",
            dependency=dep,
        )
        req = pb.AdmitRequest(catalog="vibecode", dependency=dep, tenant="t", attempt=1)
        t0 = time.perf_counter()
        a.Classify(pb.ClassifyRequest(failure=failure), timeout=5)
        while b.Admit(req, timeout=5).admitted:
            if time.perf_counter() - t0 > 5:
                sys.exit(f"fleet_staleness: replica {args.watch} never saw the hold on {dep}")
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    print(
        json.dumps(
            {
                "n": len(samples),
                "median_ms": statistics.median(samples),
                "p99_ms": samples[max(0, int(len(samples) * 0.99) - 1)],
                "max_ms": samples[-1],
            }
        )
    )


if __name__ == "__main__":
    main()
