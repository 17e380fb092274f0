#!/usr/bin/env python3
"""The server's CPU samples of bench/where.sh sorted into parts of the server.

    where.py STACKS LOAD_JSON CPU_BEFORE CPU_AFTER

STACKS is `perf script -F comm,tid,ip,sym` of DWARF call graphs: a line per
sample, then its frames, innermost first, then a blank line. Each sample
belongs to the part named by the innermost frame that matches one of PARTS
(in their order, so a hold lookup inside a decision is fleet state, not
deciding); a sample no frame of which matches is transport (the kernel's
socket work, HTTP/2, the runtime, gRPC framing and dispatch). The µs a
decision of each part are its share of the samples times the server's CPU
per decision over the whole load run (CPU_AFTER - CPU_BEFORE seconds over
LOAD_JSON's decisions).
"""

import json
import re
import sys
from collections import Counter

# (part, frames that belong to it): checked in this order for each frame.
PARTS = [
    ("fleet state (holds, placements, budgets)", re.compile(r"retryd::fleet::|service::budget_step|Standing>::place|retryd::core::budget|retryd::core::hold")),
    ("reading the request", re.compile(r"retryd::grpc::wire::(view|pool)")),
    ("writing the answer", re.compile(r"retryd::grpc::wire::(answer|encoded)")),
    ("deciding (catalog rules, limits)", re.compile(r"retryd::core::|retryd::service::")),
    ("the batch call's own work", re.compile(r"retryd::grpc::batch")),
]
TRANSPORT = "transport (kernel socket, HTTP/2, runtime)"


def samples(path):
    """Each sample's frames, innermost first."""
    frames = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                if frames:
                    yield frames
                frames = []
            elif line[0] in " \t":
                frames.append(line.strip().split(" ", 1)[-1])
            elif frames:
                yield frames
                frames = []
    if frames:
        yield frames


def part_of(frames):
    for frame in frames:
        for name, pattern in PARTS:
            if pattern.search(frame):
                return name
    return TRANSPORT


def main():
    stacks, load_json, before, after = sys.argv[1:5]
    with open(load_json, encoding="utf-8") as f:
        load = json.load(f)
    decisions = load["decisions"]
    if decisions <= 0:
        sys.exit("where.py: the load run answered no decisions")
    us_per_decision = (float(after) - float(before)) * 1e6 / decisions
    counts = Counter(part_of(s) for s in samples(stacks))
    total = sum(counts.values())
    if total == 0:
        sys.exit("where.py: perf recorded no samples")
    print(f"ClassifyBatch x1000: {load['decisions_per_s'] / 1e6:.2f} M decisions/s, "
          f"server CPU {us_per_decision:.3f} µs a decision ({total} samples)")
    print()
    print("| part | share of samples | µs a decision |")
    print("|---|---|---|")
    for name in [p for p, _ in PARTS] + [TRANSPORT]:
        share = counts[name] / total
        print(f"| {name} | {100 * share:.1f} % | {share * us_per_decision:.3f} |")


if __name__ == "__main__":
    main()
