#!/usr/bin/env python3
"""Table of bench/run.sh: medians over the rounds, per-round ratios, PASS/MISS.

Reads the run's JSON files from $WORK (ghz -O json and retryd-load --json) and
the settings from the environment run.sh exports; with WRITE=1 it also
rewrites bench/RESULTS.md. Criterion's last medians (target/criterion) are
included when present.
"""

import datetime
import glob
import json
import os
import statistics
import sys

E = os.environ
WORK = E["WORK"]
ROUNDS = int(E["ROUNDS"])
MIB = 1024.0


def load(name):
    with open(os.path.join(WORK, name)) as f:
        return json.load(f)


def ghz_numbers(d):
    """rps, p99 (ms), p50 (ms), count, non-OK calls of one ghz -O json report."""
    pct = {int(x["percentage"]): x["latency"] / 1e6 for x in (d.get("latencyDistribution") or []) if x}
    codes = d.get("statusCodeDistribution") or {}
    bad = sum(v for k, v in codes.items() if k != "OK")
    return {"rps": d["rps"], "p99": pct.get(99, float("nan")), "p50": pct.get(50, float("nan")),
            "count": d["count"], "bad": bad}


rounds = []
for r in range(1, ROUNDS + 1):
    row = {k: ghz_numbers(load(f"r{r}-{k}.json")) for k in ("classify", "health", "greeter")}
    for k in ("classify", "health", "greeter"):
        cpu = load(f"r{r}-{k}.json.cpu")
        row[k]["server_us"] = cpu["server_s"] * 1e6 / max(row[k]["count"], 1)
        row[k]["client_us"] = cpu["client_s"] * 1e6 / max(row[k]["count"], 1)
    b = load(f"r{r}-batch.json")
    row["batch"] = {"dps": b["decisions_per_s"], "rps": b["rps"], "p99": b["p99_ms"], "count": b["count"],
                    "bad": b["count"] - b["status"].get("OK", 0) + b["item_errors"]}
    cpu = load(f"r{r}-batch.json.cpu")
    # Per decision; the warm-up's decisions are not in `decisions` but its CPU is.
    warm = float(E["WARM"].rstrip("s")) * b["decisions_per_s"]
    row["batch"]["server_us"] = cpu["server_s"] * 1e6 / max(b["decisions"] + warm, 1)
    row["batch"]["client_us"] = cpu["client_s"] * 1e6 / max(b["decisions"] + warm, 1)
    rounds.append(row)

med = statistics.median


def m(kind, key):
    return med(r[kind][key] for r in rounds)


ratio_ch = [r["classify"]["rps"] / r["health"]["rps"] for r in rounds]
ratio_cg = [r["classify"]["rps"] / r["greeter"]["rps"] for r in rounds]
ratio_p99 = [r["classify"]["p99"] / r["health"]["p99"] for r in rounds]
rss_early = int(E["RSS_EARLY"]) / MIB
rss_late = int(E["RSS_LATE"]) / MIB
with open(os.path.join(WORK, "rss-samples.txt")) as f:
    samples = [(int(t), int(kb) / MIB) for t, kb in (line.split() for line in f if line.strip())]
# Growth: the median of the last 10 s of samples against the first 10 s
# (one reading each would be at the mercy of second-to-second jitter), and the
# least-squares slope over all of them.
window = max(1, min(10, len(samples) // 3))
rss_first = med(v for _, v in samples[:window])
rss_last = med(v for _, v in samples[-window:])
rss_growth = rss_last - rss_first
mean_t = statistics.fmean(t for t, _ in samples)
mean_v = statistics.fmean(v for _, v in samples)
var_t = sum((t - mean_t) ** 2 for t, _ in samples)
rss_slope = 60 * sum((t - mean_t) * (v - mean_v) for t, v in samples) / var_t if var_t else 0.0
rss_spread = max(v for _, v in samples) - min(v for _, v in samples)
rss_hwm = int(E["RSS_HWM"]) / MIB
rss_load = load("rss-load.json")
errors = sum(r[k]["bad"] for r in rounds for k in r)


def verdict(ok):
    return "PASS" if ok else "MISS"


checks = [
    ("Classify / Health throughput", f"{med(ratio_ch):.2f}", ">= 0.90", verdict(med(ratio_ch) >= 0.90)),
    ("Classify / greeter throughput", f"{med(ratio_cg):.2f}", ">= 1.0", verdict(med(ratio_cg) >= 1.0)),
    ("Classify p99 / Health p99", f"{med(ratio_p99):.2f}", "<= 2", verdict(med(ratio_p99) <= 2.0)),
    ("ClassifyBatch decisions/s", f"{m('batch', 'dps'):,.0f}", ">= 1,000,000",
     verdict(m("batch", "dps") >= 1_000_000)),
    (f"RSS at {E['RSS_FOR']} s (c={E['RSS_C']}, {E['RSS_CONNS']} conns)", f"{rss_late:.1f} MiB", "<= 30 MiB",
     verdict(rss_late <= 30.0)),
    (f"RSS growth {E['RSS_AT']} s -> {E['RSS_FOR']} s (median of first vs last {window} s)", f"{rss_growth:+.1f} MiB",
     "<= +1 MiB", verdict(rss_growth <= 1.0)),
]


def table(rows, header):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


medians = table(
    [
        ("ghz Classify (retryd)", f"{m('classify', 'rps'):,.0f}", f"{m('classify', 'p50'):.2f}",
         f"{m('classify', 'p99'):.2f}"),
        ("ghz Health/Check (retryd, floor)", f"{m('health', 'rps'):,.0f}", f"{m('health', 'p50'):.2f}",
         f"{m('health', 'p99'):.2f}"),
        ("ghz SayHello (grpc-go greeter)", f"{m('greeter', 'rps'):,.0f}", f"{m('greeter', 'p50'):.2f}",
         f"{m('greeter', 'p99'):.2f}"),
        (f"retryd-load ClassifyBatch x{E['BATCH_ITEMS']} (c={E['BATCH_C']})",
         f"{m('batch', 'rps'):,.1f} ({m('batch', 'dps'):,.0f} decisions/s)", "", f"{m('batch', 'p99'):.2f}"),
    ],
    ("run (median of rounds)", "req/s", "p50 ms", "p99 ms"),
)
per_round = table(
    [
        (i + 1, f"{r['classify']['rps']:,.0f}", f"{r['health']['rps']:,.0f}", f"{r['greeter']['rps']:,.0f}",
         f"{ratio_ch[i]:.2f}", f"{ratio_cg[i]:.2f}", f"{ratio_p99[i]:.2f}", f"{r['batch']['dps']:,.0f}")
        for i, r in enumerate(rounds)
    ],
    ("round", "Classify req/s", "Health req/s", "greeter req/s", "C/H", "C/greeter", "p99 C/H", "batch decisions/s"),
)
targets = table(checks, ("target", "measured", "goal", ""))
cpu = table(
    [
        (name, f"{m(k, 'server_us'):.1f}", f"{m(k, 'client_us'):.1f}", f"{m(k, 'server_us') + m(k, 'client_us'):.1f}",
         f"{m(k, 'client_us') / (m(k, 'server_us') + m(k, 'client_us')):.0%}")
        for name, k in (("ghz Classify (retryd)", "classify"), ("ghz Health/Check (retryd, floor)", "health"),
                        ("ghz SayHello (grpc-go greeter)", "greeter"),
                        (f"retryd-load ClassifyBatch, per decision", "batch"))
    ],
    ("run (median of rounds)", "server CPU µs/call", "client CPU µs/call", "both", "client share"),
)
rss = (f"RSS of a fresh retryd under Classify c={E['RSS_C']} over {E['RSS_CONNS']} connections: "
       f"idle {int(E['RSS_IDLE']) / MIB:.1f} MiB, {E['RSS_AT']} s {rss_early:.1f} MiB, "
       f"{E['RSS_FOR']} s {rss_late:.1f} MiB, peak (VmHWM) {rss_hwm:.1f} MiB, {E['THREADS']} threads; "
       f"{len(samples)} samples, one a second from {E['RSS_AT']} s: median of the first {window} "
       f"{rss_first:.1f} MiB, of the last {window} {rss_last:.1f} MiB, slope {rss_slope:+.2f} MiB/min, "
       f"spread {rss_spread:.1f} MiB; "
       f"load {rss_load['rps']:,.0f} req/s, p99 {rss_load['p99_ms']:.1f} ms, status {rss_load['status']}. "
       f"The benchmarked retryd after all rounds: {int(E['RSS_SERVE_AFTER']) / MIB:.1f} MiB.")

print()
print(medians)
print()
print(per_round)
print()
print(targets)
print()
print(cpu)
print()
print(rss)
if errors:
    print(f"\nWARNING: {errors} calls/items were not OK; see the JSON in the run's logs", file=sys.stderr)


def criterion_medians():
    root = os.path.join(E["TARGET_DIR"], "criterion")
    rows = []
    for path in sorted(glob.glob(os.path.join(root, "**", "new", "estimates.json"), recursive=True)):
        name = os.path.relpath(os.path.dirname(os.path.dirname(path)), root)
        with open(path) as f:
            ns = json.load(f)["median"]["point_estimate"]
        per_item = f"{ns / 1000:.1f} ns/item" if name.endswith("/1000") else ""
        when = datetime.datetime.fromtimestamp(os.path.getmtime(path)).strftime("%Y-%m-%d %H:%M")
        rows.append((name, f"{ns / 1000:.2f} µs" if ns >= 1000 else f"{ns:.1f} ns", per_item, when))
    return table(rows, ("criterion bench", "median", "per item", "run at")) if rows else None


if E.get("WRITE") == "1":
    mode = "--quick" if E["QUICK"] == "1" else "full"
    crit = criterion_medians()
    doc = f"""# Performance results

Generated by `bench/run.sh --write-results` ({mode} mode): do not edit by hand, rerun it.

## Machine

- date: {datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
- CPU: {E['CPU']}, nproc {E['NPROC']}
- load average at the end of the run: {E['LOADAVG']} (the machine is shared: compare the ratios,
  which pair runs made seconds apart, rather than absolute numbers)
- {E['RUSTC_VERSION']}; {E['GO_VERSION']}; ghz {E['GHZ_VERSION']};
  greeter_server google.golang.org/grpc/examples@{E['GREETER_PIN']} (grpc v1.81.1)

## What ran

Every server on 127.0.0.1; client and server share the machine's {E['NPROC']} cores.
{ROUNDS} rounds, each {E['DUR']} per run, order rotated every round; one warm-up run of each first.

```
retryd serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0          # release build
greeter_server -port PORT                                                # grpc-go helloworld
ghz --config bench/ghz-classify.json -c {E['C']} --connections 1 -z {E['DUR']} -O json ADDR
ghz --insecure -c {E['C']} --connections 1 --duration-stop wait --call grpc.health.v1.Health.Check -d '{{}}' -z {E['DUR']} -O json ADDR
ghz --insecure -c {E['C']} --connections 1 --duration-stop wait --proto helloworld.proto --call helloworld.Greeter.SayHello -d '{{"name":"retryd"}}' -z {E['DUR']} -O json 127.0.0.1:PORT
retryd-load --addr http://ADDR --call batch --batch-size {E['BATCH_ITEMS']} -c {E['BATCH_C']} --connections 1 -z {E['DUR']} --warmup 2s --json
# RSS, on a fresh retryd:
retryd-load --addr http://ADDR --call classify -c {E['RSS_C']} --connections {E['RSS_CONNS']} -z {E['RSS_FOR']}s --json
#   VmRSS from /proc/PID/status once a second from {E['RSS_AT']} s to {E['RSS_FOR']} s
```

## Targets

{targets}

## Medians

{medians}

## Per round

{per_round}

## Where the CPU goes

CPU seconds (user + system, from /proc/PID/stat for the server and the shell's
`time` for the client, ghz or retryd-load) over each run, per call (per
decision for the batch, whose warm-up is counted in). Client and server share the cores: a
throughput ratio between two ghz runs is limited by whichever side the extra
work per call is on.

{cpu}

## Memory

{rss}
"""
    if crit:
        doc += f"""
## Criterion (`cargo bench --bench decide`, `cargo bench --bench batch`)

The last medians found in target/criterion when the file was written (no network, one thread):

{crit}
"""
    # Sections other benches append (bench/policy-safety.sh, bench/http.sh,
    # bench/fleet_callgrind.sh …) sit below KEEP and survive a rewrite.
    path = os.path.join(E["ROOT"], "bench", "RESULTS.md")
    KEEP = "<!-- sections below are written by other benches and kept by bench/run.sh --write-results -->"
    kept = ""
    if os.path.exists(path):
        old = open(path, encoding="utf-8").read()
        if KEEP in old:
            kept = old[old.index(KEEP):]
    doc = doc.rstrip("\n") + "\n\n" + (kept or KEEP + "\n")
    with open(path, "w") as f:
        f.write(doc)
    print(f"\nwrote bench/RESULTS.md", file=sys.stderr)
