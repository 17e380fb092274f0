#!/usr/bin/env python3
"""Table of bench/run.sh: per-round paired ratios, their medians, PASS/MISS.

Three modes:

  report.py sample PID OUT
      Every 50 ms, append "time proc_ticks cpu_total cpu_idle cpu_steal switches"
      to OUT: the process's utime + stime (/proc/PID/stat, all its threads), the
      machine's /proc/stat totals and the times the process's threads were
      scheduled in. Ends on SIGTERM or when PID is gone.

  report.py window KIND RUN SAMPLES TIME T_END HEAD TAIL
      Reduce one run to RUN.cpu (JSON): the server CPU between the first sample
      HEAD s after the run's first call started and the last sample TAIL s
      before its last call ended, and the calls that ended in between (ghz's
      per-call details, which it then drops from RUN to keep it small; for
      KIND batch, retryd-load's decisions/s times the window, its measured
      phase being the total_s before T_END). Also the old whole-run figure
      (all the CPU between the sampler's first and last reading, over the
      run's count), the client's CPU from TIME (`time`'s user and system),
      the server's busy share of one core and the machine's idle share.

  report.py
      The table, from $WORK and the settings run.sh exports; with WRITE=1 it
      also rewrites bench/RESULTS.md. Criterion's last medians
      (target/criterion) are included when present.
"""

import datetime
import glob
import json
import os
import signal
import statistics
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")
MIB = 1024.0


# --- sample ------------------------------------------------------------------

def proc_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of proc(5)


def switches(pid):
    """Times the process's threads were scheduled in so far (/proc/PID/task/*/schedstat,
    third field): about one per wake-up, so per call it says how many calls a wake-up
    finds waiting. Threads that have exited are not counted."""
    n = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                n += int(f.read().split()[2])
        except (OSError, IndexError, ValueError):
            pass
    return n


def machine_ticks():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is already in user)
    total = sum(v[:8])
    return total, v[3] + v[4], v[7] if len(v) > 7 else 0


def sample(pid, out, interval=0.05):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with open(out, "w") as f:
        while not stop:
            try:
                t = proc_ticks(pid)
                sw = switches(pid)
            except OSError:
                break
            total, idle, steal = machine_ticks()
            f.write(f"{time.time():.6f} {t} {total} {idle} {steal} {sw}\n")
            f.flush()
            time.sleep(interval)


# --- window ------------------------------------------------------------------

def rfc3339(s):
    """ghz's per-call timestamp (2026-12-01T00:01:11.668602141Z) in epoch seconds."""
    s = s.rstrip("Z")
    main, frac = s.split(".") if "." in s else (s, "0")
    dt = datetime.datetime.strptime(main, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return dt.timestamp() + float("0." + frac)


def window(kind, run, samples_path, time_path, t_end, head, tail):
    with open(samples_path) as f:
        S = [tuple(float(x) for x in line.split()) for line in f if line.strip()]
    with open(run) as f:
        d = json.load(f)
    if kind == "batch":
        hi = t_end
        lo = hi - d["total_s"]
        whole_calls = d["decisions"]
    else:
        det = d.pop("details", None) or []
        if not det:
            sys.exit(f"report.py: {run} has no per-call details")
        starts = [rfc3339(x["timestamp"]) for x in det]
        ends = [s + x["latency"] / 1e9 for s, x in zip(starts, det)]
        lo, hi = min(starts), max(ends)
        whole_calls = d["count"]
    inside = [s for s in S if lo + head <= s[0] <= hi - tail]
    if len(inside) < 2:
        sys.exit(f"report.py: {run}: no counting window (run too short for {head} s + {tail} s?)")
    a, b = inside[0], inside[-1]
    span = b[0] - a[0]
    if kind == "batch":
        calls = d["decisions_per_s"] * span
    else:
        calls = sum(1 for e in ends if a[0] < e <= b[0])
    server_s = (b[1] - a[1]) / HZ
    all_ticks = b[2] - a[2]
    with open(time_path) as f:
        user, system = (float(x) for x in f.read().split()[-2:])
    res = {
        "server_s": server_s, "calls": calls, "window_s": span,
        "server_us": server_s * 1e6 / max(calls, 1),
        "busy": server_s / span,  # share of one core
        "machine_idle": (b[3] - a[3]) / all_ticks if all_ticks else float("nan"),
        "steal": (b[4] - a[4]) / all_ticks if all_ticks else float("nan"),
        "switches_per_call": (b[5] - a[5]) / max(calls, 1),
        "whole_server_s": (S[-1][1] - S[0][1]) / HZ, "whole_calls": whole_calls,
        "whole_server_us": (S[-1][1] - S[0][1]) / HZ * 1e6 / max(whole_calls, 1),
        "client_s": user + system,
    }
    with open(run + ".cpu", "w") as f:
        json.dump(res, f)
    if kind != "batch":
        with open(run, "w") as f:
            json.dump(d, f)


if __name__ == "__main__" and len(sys.argv) > 1:
    if sys.argv[1] == "sample":
        sample(int(sys.argv[2]), sys.argv[3])
    elif sys.argv[1] == "window":
        kind, run, samples_path, time_path = sys.argv[2:6]
        window(kind, run, samples_path, time_path, *(float(x) for x in sys.argv[6:9]))
    else:
        sys.exit(f"report.py: unknown mode {sys.argv[1]}")
    sys.exit(0)


# --- the report ----------------------------------------------------------------

E = os.environ
WORK = E["WORK"]
ROUNDS = int(E["ROUNDS"])
KINDS = ("classify", "health", "admit", "greeter")


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


orders = {}
with open(os.path.join(WORK, "order.txt")) as f:
    for line in f:
        r, *kinds = line.split()
        orders[int(r)] = kinds

rounds = []
for r in range(1, ROUNDS + 1):
    row = {k: ghz_numbers(load(f"r{r}-{k}.json")) for k in KINDS}
    for k in KINDS:
        cpu = load(f"r{r}-{k}.json.cpu")
        row[k].update(server_us=cpu["server_us"], window_s=cpu["window_s"], whole_us=cpu["whole_server_us"], busy=cpu["busy"],
                      idle=cpu["machine_idle"], steal=cpu["steal"], sw=cpu["switches_per_call"],
                      client_us=cpu["client_s"] * 1e6 / max(row[k]["count"], 1))
    b = load(f"r{r}-batch.json")
    cpu = load(f"r{r}-batch.json.cpu")
    # The client's CPU covers its warm-up too, whose decisions are not in `decisions`.
    warm = float(E["WARM"].rstrip("s")) * b["decisions_per_s"]
    row["batch"] = {"dps": b["decisions_per_s"], "rps": b["rps"], "p99": b["p99_ms"], "count": b["count"],
                    "bad": b["count"] - b["status"].get("OK", 0) + b["item_errors"],
                    "server_us": cpu["server_us"], "busy": cpu["busy"],
                    # The old method counted the warm-up's CPU and estimated its decisions.
                    "whole_us": cpu["whole_server_s"] * 1e6 / max(b["decisions"] + warm, 1),
                    "idle": cpu["machine_idle"], "steal": cpu["steal"], "sw": cpu["switches_per_call"] * 1000,
                    "client_us": cpu["client_s"] * 1e6 / max(b["decisions"] + warm, 1)}
    row["order"] = orders.get(r, [])
    rounds.append(row)

med = statistics.median


def m(kind, key):
    return med(r[kind][key] for r in rounds)


# Paired within each round: both runs of a ratio were made seconds apart.
cpu_ch = [r["classify"]["server_us"] / r["health"]["server_us"] for r in rounds]
cpu_cg = [r["classify"]["server_us"] / r["greeter"]["server_us"] for r in rounds]
cpu_ah = [r["admit"]["server_us"] / r["health"]["server_us"] for r in rounds]
# The same ratios by the whole-run method: all the server's CPU from just
# before ghz started to just after it exited, over ghz's count of calls.
whole_ch = [r["classify"]["whole_us"] / r["health"]["whole_us"] for r in rounds]
whole_cg = [r["classify"]["whole_us"] / r["greeter"]["whole_us"] for r in rounds]
whole_ah = [r["admit"]["whole_us"] / r["health"]["whole_us"] for r in rounds]
p99_ch = [r["classify"]["p99"] / r["health"]["p99"] for r in rounds]
rps_ch = [r["classify"]["rps"] / r["health"]["rps"] for r in rounds]
rps_cg = [r["classify"]["rps"] / r["greeter"]["rps"] for r in rounds]
batch_dps = [r["batch"]["dps"] for r in rounds]
batch_us = [r["batch"]["server_us"] for r in rounds]

rss_early = int(E["RSS_EARLY"]) / MIB
rss_late = int(E["RSS_LATE"]) / MIB
with open(os.path.join(WORK, "rss-samples.txt")) as f:
    samples = [(int(t), int(kb) / MIB) for t, kb in (line.split() for line in f if line.strip())]
# Growth: the median of the last 10 s of samples against the first 10 s
# (one reading each would be at the mercy of second-to-second jitter), and the
# least-squares slope over all of them.
window_n = max(1, min(10, len(samples) // 3))
rss_first = med(v for _, v in samples[:window_n])
rss_last = med(v for _, v in samples[-window_n:])
rss_growth = rss_last - rss_first
mean_t = statistics.fmean(t for t, _ in samples)
mean_v = statistics.fmean(v for _, v in samples)
var_t = sum((t - mean_t) ** 2 for t, _ in samples)
rss_slope = 60 * sum((t - mean_t) * (v - mean_v) for t, v in samples) / var_t if var_t else 0.0
rss_spread = max(v for _, v in samples) - min(v for _, v in samples)
rss_hwm = int(E["RSS_HWM"]) / MIB
rss_load = load("rss-load.json")
errors = sum(r[k]["bad"] for r in rounds for k in (*KINDS, "batch"))


def verdict(ok):
    return "PASS" if ok else "MISS"


def each(values, fmt):
    return " ".join(format(v, fmt) for v in values)


checks = [
    ("Classify / health Check, server CPU per call", each(cpu_ch, ".2f"), f"{med(cpu_ch):.2f}", "<= 1.10",
     verdict(med(cpu_ch) <= 1.10)),
    ("Classify / greeter SayHello, server CPU per call", each(cpu_cg, ".2f"), f"{med(cpu_cg):.2f}", "<= 0.75",
     verdict(med(cpu_cg) <= 0.75)),
    ("Admit (no hold) / health Check, server CPU per call", each(cpu_ah, ".2f"), f"{med(cpu_ah):.2f}", "<= 1.10",
     verdict(med(cpu_ah) <= 1.10)),
    ("Classify / health Check, whole run", each(whole_ch, ".2f"), f"{med(whole_ch):.2f}", "<= 1.10",
     verdict(med(whole_ch) <= 1.10)),
    ("Classify / greeter SayHello, whole run", each(whole_cg, ".2f"), f"{med(whole_cg):.2f}", "<= 0.75",
     verdict(med(whole_cg) <= 0.75)),
    ("Admit (no hold) / health Check, whole run", each(whole_ah, ".2f"), f"{med(whole_ah):.2f}", "<= 1.10",
     verdict(med(whole_ah) <= 1.10)),
    (f"ClassifyBatch x{E['BATCH_ITEMS']}, decisions/s end to end", each((v / 1e6 for v in batch_dps), ".2f") + " M",
     f"{med(batch_dps):,.0f}", ">= 2,000,000", verdict(med(batch_dps) >= 2_000_000)),
    (f"ClassifyBatch x{E['BATCH_ITEMS']}, server CPU per decision", each(batch_us, ".2f") + " µs",
     f"{med(batch_us):.2f} µs", "<= 0.5 µs", verdict(med(batch_us) <= 0.5)),
    ("Classify p99 / health Check p99", each(p99_ch, ".2f"), f"{med(p99_ch):.2f}", "<= 1.2",
     verdict(med(p99_ch) <= 1.2)),
    (f"RSS at {E['RSS_FOR']} s (c={E['RSS_C']}, {E['RSS_CONNS']} conns)", "", f"{rss_late:.1f} MiB", "<= 30 MiB",
     verdict(rss_late <= 30.0)),
    (f"RSS growth {E['RSS_AT']} s -> {E['RSS_FOR']} s (median of first vs last {window_n} s)", "",
     f"{rss_growth:+.1f} MiB", "<= +1 MiB", verdict(rss_growth <= 1.0)),
]


def table(rows, header):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


SHORT = {"classify": "C", "health": "H", "admit": "A", "greeter": "G", "batch": "B"}
targets = table(checks, ("target", "per round", "median", "goal", ""))
of_medians = (f"Ratios of the medians, for comparison (not the targets): server CPU Classify/health "
              f"{m('classify', 'server_us') / m('health', 'server_us'):.2f}, Classify/greeter "
              f"{m('classify', 'server_us') / m('greeter', 'server_us'):.2f}; p99 Classify/health "
              f"{m('classify', 'p99') / m('health', 'p99'):.2f}.")
per_round = table(
    [
        (i + 1, "".join(SHORT[k] for k in r["order"]), f"{r['classify']['server_us']:.1f}",
         f"{r['health']['server_us']:.1f}", f"{r['admit']['server_us']:.1f}", f"{r['greeter']['server_us']:.1f}",
         f"{cpu_ch[i]:.2f}", f"{cpu_ah[i]:.2f}", f"{cpu_cg[i]:.2f}",
         f"{r['batch']['dps']:,.0f}", f"{r['batch']['server_us']:.2f}", f"{p99_ch[i]:.2f}")
        for i, r in enumerate(rounds)
    ],
    ("round", "order", "Classify µs", "health µs", "Admit µs", "greeter µs", "C/H", "A/H", "C/greeter",
     "batch decisions/s", "batch µs/decision", "p99 C/H"),
)
per_round_info = table(
    [
        (i + 1, f"{r['classify']['rps']:,.0f}", f"{r['health']['rps']:,.0f}", f"{r['greeter']['rps']:,.0f}",
         f"{rps_ch[i]:.2f}", f"{rps_cg[i]:.2f}",
         " / ".join(f"{r[k]['busy']:.0%}" for k in (*KINDS, "batch")),
         " / ".join(f"{r[k]['idle']:.0%}" for k in (*KINDS, "batch")),
         " / ".join(f"{r[k]['sw']:.2f}" for k in KINDS))
        for i, r in enumerate(rounds)
    ],
    ("round", "Classify req/s", "health req/s", "greeter req/s", "C/H req/s", "C/greeter req/s",
     "server busy C / H / A / G / B", "machine idle C / H / A / G / B", "wake-ups/call C / H / A / G"),
)
medians = table(
    [
        ("ghz Classify (retryd)", f"{m('classify', 'rps'):,.0f}", f"{m('classify', 'p50'):.2f}",
         f"{m('classify', 'p99'):.2f}"),
        ("ghz Health/Check (retryd, floor)", f"{m('health', 'rps'):,.0f}", f"{m('health', 'p50'):.2f}",
         f"{m('health', 'p99'):.2f}"),
        ("ghz Admit, no hold (retryd)", f"{m('admit', 'rps'):,.0f}", f"{m('admit', 'p50'):.2f}",
         f"{m('admit', 'p99'):.2f}"),
        ("ghz SayHello (grpc-go greeter)", f"{m('greeter', 'rps'):,.0f}", f"{m('greeter', 'p50'):.2f}",
         f"{m('greeter', 'p99'):.2f}"),
        (f"retryd-load ClassifyBatch x{E['BATCH_ITEMS']} (c={E['BATCH_C']})",
         f"{m('batch', 'rps'):,.1f} ({m('batch', 'dps'):,.0f} decisions/s)", "", f"{m('batch', 'p99'):.2f}"),
    ],
    ("run (median of rounds)", "req/s", "p50 ms", "p99 ms"),
)
cpu = table(
    [
        (name, f"{m(k, 'server_us'):.2f}", f"{m(k, 'whole_us'):.2f}", f"{m(k, 'client_us'):.1f}",
         f"{m(k, 'client_us') / (m(k, 'server_us') + m(k, 'client_us')):.0%}", f"{m(k, 'busy'):.0%}",
         f"{m(k, 'idle'):.0%}", f"{m(k, 'sw'):.2f}")
        for name, k in (("ghz Classify (retryd)", "classify"), ("ghz Health/Check (retryd, floor)", "health"),
                        ("ghz Admit, no hold (retryd)", "admit"), ("ghz SayHello (grpc-go greeter)", "greeter"),
                        ("retryd-load ClassifyBatch, per decision (wake-ups: per call)", "batch"))
    ],
    ("run (median of rounds)", "server CPU µs/call", "whole-run µs/call (old)", "client CPU µs/call",
     "client share", "server busy (1 core)", "machine idle", "wake-ups/call"),
)
rss = (f"RSS of a fresh retryd under Classify c={E['RSS_C']} over {E['RSS_CONNS']} connections: "
       f"idle {int(E['RSS_IDLE']) / MIB:.1f} MiB, {E['RSS_AT']} s {rss_early:.1f} MiB, "
       f"{E['RSS_FOR']} s {rss_late:.1f} MiB, peak (VmHWM) {rss_hwm:.1f} MiB, {E['THREADS']} threads; "
       f"{len(samples)} samples, one a second from {E['RSS_AT']} s: median of the first {window_n} "
       f"{rss_first:.1f} MiB, of the last {window_n} {rss_last:.1f} MiB, slope {rss_slope:+.2f} MiB/min, "
       f"spread {rss_spread:.1f} MiB; "
       f"load {rss_load['rps']:,.0f} req/s, p99 {rss_load['p99_ms']:.1f} ms, status {rss_load['status']}. "
       f"The benchmarked retryd after all rounds: {int(E['RSS_SERVE_AFTER']) / MIB:.1f} MiB.")

print()
print("Targets: medians of the per-round paired ratios (server CPU per call in the counting window)")
print(targets)
print(of_medians)
print()
print("Per round: server CPU per call (µs; the batch per decision) and the paired ratios")
print(per_round)
print()
print("Per round, for information: throughput, and the conditions of each run's window")
print(per_round_info)
print()
print(medians)
print()
print(cpu)
print()
print(rss)
slow = [f"round {i + 1} {k}" for i, r in enumerate(rounds) for k in KINDS if r[k]["sw"] > 1.0]
if slow:
    print(f"\nWARNING: one call per wake-up or worse in {', '.join(slow)}: server CPU per call is then "
          "inflated (the greeter's most); see \"Where the CPU goes\" in bench/RESULTS.md", file=sys.stderr)
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
    window_s = med(r[k]["window_s"] for r in rounds for k in KINDS)
    doc = f"""# Performance results

Generated by `bench/run.sh --write-results` ({mode} mode): do not edit by hand, rerun it.

## Machine

- date: {datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
- CPU: {E['CPU']}, nproc {E['NPROC']}
- load average at the start and the end of the run: {E['LOADAVG_START']} / {E['LOADAVG']} (the machine
  is shared: compare the ratios, which pair runs made seconds apart, rather than absolute numbers;
  the machine's idle share in each run's window is in the per-round table)
- {E['RETRYD_VERSION']} (binary of {E['RETRYD_BUILT']}); {E['RUSTC_VERSION']}; {E['GO_VERSION']};
  ghz {E['GHZ_VERSION']}; greeter_server google.golang.org/grpc/examples@{E['GREETER_PIN']} (grpc v1.81.1)

## What ran

Every server on 127.0.0.1; client and server share the machine's {E['NPROC']} cores.
One warm-up run of each kind ({E['WARM']}, not counted), then {ROUNDS} rounds of {E['DUR']} per run,
the order of the five runs rotated every round. retryd runs with its default configuration of the
day, only the ports set: fleet memory in this replica (`--state memory` is the default; the log
says `state={E['SERVE_STATE']}`), the embedded catalogs' default holds and retry budgets on. The
greeter runs as shipped (default GOGC and GOMAXPROCS; its log line per request goes to /dev/null).

```
retryd serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0          # release build
greeter_server -port PORT 2>/dev/null                                    # grpc-go helloworld
ghz --config bench/ghz-classify.json -c {E['C']} --connections 1 -z {E['DUR']} -O json ADDR
ghz --insecure -c {E['C']} --connections 1 --duration-stop wait --call grpc.health.v1.Health.Check -d '{{}}' -z {E['DUR']} -O json ADDR
ghz --insecure -c {E['C']} --connections 1 --duration-stop wait --call retryd.v1.RetryDecisionService.Admit -d '{E['ADMIT_BODY']}' -z {E['DUR']} -O json ADDR
ghz --insecure -c {E['C']} --connections 1 --duration-stop wait --proto helloworld.proto --call helloworld.Greeter.SayHello -d '{{"name":"retryd"}}' -z {E['DUR']} -O json 127.0.0.1:PORT
retryd-load --addr http://ADDR --call batch --batch-size {E['BATCH_ITEMS']} -c {E['BATCH_C']} --connections 1 -z {E['DUR']} --warmup {E['WARM']} --json
# RSS, on a fresh retryd:
retryd-load --addr http://ADDR --call classify -c {E['RSS_C']} --connections {E['RSS_CONNS']} -z {E['RSS_FOR']}s --json
#   VmRSS from /proc/PID/status once a second from {E['RSS_AT']} s to {E['RSS_FOR']} s
```

## Targets

Each ratio is taken within a round (its two runs made seconds apart), and the target is judged on
the median of the {ROUNDS} per-round ratios. Server CPU per call is counted as described in
"Where the CPU goes".

{targets}

{of_medians}

## Per round

Server CPU per call in µs (the batch: per decision) and the paired ratios. Order: C Classify,
H health Check, A Admit, G greeter SayHello, B ClassifyBatch.

{per_round}

For information: throughput, and the conditions in each run's counting window: the server's busy
share of one core, the share of the whole machine that was idle, and the server's wake-ups per call.

{per_round_info}

{("Runs with more than one wake-up per call (CPU per call inflated): " + ", ".join(slow) + ".") if slow else "Every ghz run stayed below one wake-up per call."}

## Medians

{medians}

## Where the CPU goes

Server CPU (the pinned method, issue #17): `bench/report.py sample` reads the server process's
/proc/PID/stat (utime + stime: every thread, Go's GC workers and scheduler threads or tokio's
workers included) every 50 ms during each run. What counts is the CPU between the first reading
{E['WINDOW_HEAD']} s after the run's first call started and the last reading {E['WINDOW_TAIL']} s
before its last call ended (a median {window_s:.2f} s of each {E['DUR']} run), divided by the calls that
ended inside that window, from ghz's per-call timestamps (for the batch: retryd-load's decisions/s
over its measured phase times the window). ghz's start-up (parsing the proto, connecting) and
shutdown, and the ramp of the first calls, are outside it. The "whole-run" column is the old method
for comparison: all the server CPU from just before ghz started to just after it exited, over
ghz's count. Client CPU is ghz's or retryd-load's user + system from the shell's `time` over the
whole run (the batch's includes its warm-up), per call.

Server CPU per call is not a constant of a server: it depends on how many calls each wake-up of
the server finds waiting (the "wake-ups/call" columns: the times the server's threads were
scheduled in during the window, from /proc/PID/task/*/schedstat, over the calls). With 50 calls in
flight on one connection the servers here usually find several calls per wake-up (0.35-0.6
wake-ups per call). When calls come one at a time, every call pays the wake-ups (epoll, futex;
for Go also the scheduler threads it wakes to spin), and grpc-go pays far more of them than
retryd: with ghz pacing the same calls (`-r 4000`) the greeter took 3.0 wake-ups and 49-61 µs per
SayHello, retryd 1.2-1.3 wake-ups and 27-38 µs per Classify or health Check, against 17-21 µs
(greeter), 17-20 µs (Classify) and 12-14 µs (health) unpaced, minutes apart on this machine
(2026-12-01). Counted by `perf stat -e raw_syscalls:sys_enter,context-switches -p PID`, the greeter
made 10.3 system calls and 4.1 context switches per SayHello paced, 1.9 and 0.4 unpaced (one of
the 1.9 its log line); retryd 3.5-3.9 and 1.3-1.5 paced, 1.3-1.65 and 0.3 unpaced (of which 0.9-1.3
writev: about one socket write per answer, where the greeter writes 0.18 per call; since answers
under 1 KiB share writes, src/server/socket.rs, 0.24 per Classify). ghz's own CPU
per call doubles in the paced regime too (97-105 µs against 53-69 µs). So
the ratio against the greeter depends on the regime a run lands in, more than ratios within
retryd do: read it with the wake-ups per call, and distrust a round whose runs are not all below
1 (run.sh warns). Neither the counting window (the whole-run figure stays within 3 %), nor the
run length (5 s and 10 s agree), nor the greeter's GC (548 calls per GC, 2.6 µs of GC CPU per
call by GODEBUG=gctrace=1; GOGC=off changes nothing measurable), nor its log line (at most
1-2 µs) moves the greeter by more than the round-to-round noise. The host matters as well:
the table of 2026-11-30 14:49 (Intel Xeon) read 40.8 µs per SayHello, 21.5 µs per health Check
and 95-113 µs of ghz per call; on the AMD EPYC of 2026-12-01, 17-21, 12-14 and 53-69 µs. Compare
CPU per call only within one run of this script, through its paired ratios.

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
    stray = []
    if os.path.exists(path):
        old = open(path, encoding="utf-8").read()
        if KEEP in old:
            kept = old[old.index(KEEP):]
            old = old[:old.index(KEEP)]
        # A section another bench added above KEEP (not one this script writes)
        # is moved below it rather than lost.
        ours = {"Machine", "What ran", "Targets", "Per round", "Medians", "Where the CPU goes", "Memory"}
        for part in old.split("\n## ")[1:]:
            title = part.split("\n", 1)[0].strip()
            if title not in ours and not title.startswith("Criterion"):
                stray.append("## " + part.rstrip("\n") + "\n")
    kept = kept or KEEP + "\n"
    if stray:
        head, _, rest = kept.partition(KEEP)
        kept = KEEP + "\n\n" + "\n".join(stray) + rest
    doc = doc.rstrip("\n") + "\n\n" + kept
    with open(path, "w") as f:
        f.write(doc)
    print("\nwrote bench/RESULTS.md", file=sys.stderr)
