#!/usr/bin/env bash
# Fleet holds you can trust (issue 22), measured: watch memory, watch
# capacity and the hold cap. Loopback only, one `retryd serve --state memory`
# at a time (plus a second, hold-free one for the Classify comparison),
# bounded in count and time (~5 min after the build).
#
#   bench/holds.sh                 # all three parts
#   bench/holds.sh --only 3        # one part (1, 2 or 3)
#
# 1. Watch memory: 20 000 tenant quota stops in force (FrontSpin
#    RATE_LIMITED, reset an hour ahead), then 200 WatchHolds streams that
#    never read (HTTP/2 receive window 0, one connection each, from
#    127.0.0.2..127.0.0.5: 50 per caller, under the default 64), held 15 s.
#    Server RSS before, peak during (/proc VmRSS every 100 ms), 5 s after.
#    Targets: growth <= 96 MiB; after within 32 MiB of before.
# 2. Watch capacity: 10 000 holds over 100 dependencies, 2 000 reading
#    streams opened at once (one connection each, 40 source addresses
#    127.0.0.10..49 x 50 streams, so the default
#    --max-watch-streams-per-caller 64 stays in force), 20 s: a) each stream
#    watching every hold, b) each watching one dependency (a client mirror):
#    time until every stream received SYNCED (<= 10 s), peak RSS
#    (<= 256 MiB), server CPU. c) the server killed and started again on the
#    same port, the 10 000 holds placed again (memory state keeps nothing),
#    and b)'s 2 000 streams opened at once. d) c) under --state redis: the
#    holds come back from Redis, and each snapshot must hold them all.
#    e), f): a) and b) after a restart under --state redis, each stream a
#    mirror resuming from its digests (saved before the kill).
# 3. The cap: 100 000 holds in force (the default --max-holds): idle CPU over
#    30 s (<= 3 % of a core), RSS (<= 160 MiB), ListHolds page_size=1 over
#    200 calls (median and p99 <= 5 ms; also with a dependency filter no
#    hold matches, for reference), and Classify p99 under ghz
#    (bench/ghz-classify.json, c=50, 1 connection) against a second server
#    with no holds, paired in alternating rounds (ratio <= 1.2).
#
# Holds are placed with `retryd-load --call place-holds` at a raised
# --hold-placements-per-sec (one load generator is one caller); streams are
# opened by `retryd-load --call watch`. Needs: cargo, python3, ghz
# (scripts/install-tools.sh), and 127.0.0.0/8 on lo (Linux has it).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ONLY=""
ROUNDS=3
while (($#)); do
  case "$1" in
    --only) ONLY="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    -h | --help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "holds.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
GHZ="$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin/ghz"
[[ -x "$GHZ" ]] || GHZ="$HOME/go/bin/ghz"
[[ -x "$GHZ" ]] || bash scripts/install-tools.sh >&2

NAME=holds
# shellcheck source=bench/fleet-lib.sh
source bench/fleet-lib.sh
build_release
# 2 000 connections on each side of the loopback.
ulimit -n "$(ulimit -Hn)"

say() { printf '%s\n' "$*"; }
rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
# sample PID OUT: VmRSS (KiB) every 100 ms into OUT until killed; sets SAMPLER.
sample() {
  (while [[ -r "/proc/$1/status" ]]; do rss_kib "$1" >>"$2" 2>/dev/null || true; sleep 0.1; done) &
  SAMPLER=$!
}
stop_sample() { kill "$SAMPLER" 2>/dev/null || true; wait "$SAMPLER" 2>/dev/null || true; }
peak() { sort -n "$1" | tail -1; }
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, d))' "$@"; }
sources() { # sources FIRST LAST: 127.0.0.FIRST,…,127.0.0.LAST
  seq "$1" "$2" | sed 's/^/127.0.0./' | paste -sd, -
}
# place ADDR N [SPREAD]: N tenant quota stops through Classify (over SPREAD
# dependencies; default one); checks each answer carried a hold.
place() {
  local out="$WORK/place-$2-$RANDOM.json"
  "$LOAD" --addr "http://$1" --call place-holds --tenants "$2" -n "$2" --dependencies "${3:-0}" -c 32 --json >"$out"
  local held
  held="$(json "$out" decisions)"
  log "placed: $held of $2 answers carried a hold ($(json "$out" 'round(rps)') calls/s)"
  [[ "$held" == "$2" ]] || { cat "$out" >&2; exit 1; }
}
# serve_at NAME PORT [METRICS_PORT]: `retryd serve --state memory` on
# 127.0.0.1:PORT with the placement rates lifted for the setup (see
# fleet-lib.sh's start), and room for part 2's 2 000 streams (the default
# --max-watch-streams is 1 024 since issue 24's memory table).
serve_at() {
  local logf="$WORK/$1.log" _ metrics=off
  [[ -n "${3:-}" ]] && metrics="127.0.0.1:$3"
  # A restart reuses NAME: the old log's "listening on" must not count.
  rm -f "$logf"
  "$RETRYD" serve --listen "127.0.0.1:$2" --metrics-listen "$metrics" --state "${STATE:-memory}" \
    --hold-placements-per-sec 100000 --dependency-holds-per-sec 100000 --max-watch-streams 2000 2>"$logf" &
  PIDS+=($!)
  printf -v "PID_$1" '%s' "$!"
  for _ in $(seq 100); do grep -q 'listening on' "$logf" && return; sleep 0.1; done
  cat "$logf" >&2
  exit 1
}

say "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start; $(ldd --version 2>&1 | head -1)"
if grep -q '^#\[global_allocator\]' src/main.rs && ! grep -B3 '^#\[global_allocator\]' src/main.rs | grep -q 'cfg(feature'; then
  say "allocator: a #[global_allocator] in src/main.rs (see there)"
else
  say "allocator: the system allocator, glibc malloc (src/main.rs sets mimalloc only under --features mimalloc, which this build does not enable); MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX:-unset}"
fi
say "server: retryd serve --state memory (release build), everything else at its default unless named"

part1() {
  local port mport
  port="$(free_port)"
  mport="$(free_port)"
  serve_at W "$port" "$mport"
  log "part 1: 20 000 holds, then 200 never-reading streams for 15 s"
  place "127.0.0.1:$port" 20000
  sleep 3
  local before during after
  before="$(rss_kib "$PID_W")"
  sample "$PID_W" "$WORK/rss1"
  "$LOAD" --addr "http://127.0.0.1:$port" --call watch --never-read --streams 200 \
    --source "$(sources 2 5)" -z 15s >"$WORK/w1.json" &
  local tool=$!
  # The server's view at 5 s and at 13 s (after --stall-timeout, 10 s).
  sleep 5; curl -s "127.0.0.1:$mport/metrics" | grep -E '^retryd_(watch_streams|answers_stalled_total|buffered_bytes|buffered_bytes_peak|watch_queued_bytes) ' >"$WORK/m5" || true
  sleep 8; curl -s "127.0.0.1:$mport/metrics" | grep -E '^retryd_(watch_streams|answers_stalled_total|buffered_bytes|buffered_bytes_peak|watch_queued_bytes) ' >"$WORK/m13" || true
  wait "$tool"
  stop_sample
  during="$(peak "$WORK/rss1")"
  sleep 5
  after="$(rss_kib "$PID_W")"
  say ""
  say "1. Watch memory (20 000 holds in force; 200 never-reading streams from 4 addresses, 15 s)"
  say "   streams opened $(json "$WORK/w1.json" opened)/200, event messages received by the client $(json "$WORK/w1.json" messages) (0: nothing read)"
  say "   streams ended as the client sees them (RST_STREAM or a status) within 15 s: $(json "$WORK/w1.json" ended), all by $(json "$WORK/w1.json" all_ended_s) s; opens refused $(json "$WORK/w1.json" refused)"
  say "   server metrics at 5 s: $(paste -sd' ' "$WORK/m5"); at 13 s: $(paste -sd' ' "$WORK/m13")"
  say "   server RSS before $(mib "$before") MiB, peak during $(mib "$during") MiB, 5 s after closing $(mib "$after") MiB"
  say "   growth $(mib $((during - before))) MiB (target <= 96), after - before $(mib $((after - before))) MiB (target within 32)"
  kill "$PID_W"; wait "$PID_W" 2>/dev/null || true
}

# storm PORT PID TAG SECONDS SPREAD [ARGS...]: 2 000 reading streams opened
# at once (SPREAD 0: each watches every hold; N: stream s watches dependency
# s % N); figures into $WORK/TAG.*; ARGS go to retryd-load (--resume-digests).
storm() {
  local cpu0 cpu1
  cpu0="$(cpu_of "$2")"
  sample "$2" "$WORK/$3.rss"
  "$LOAD" --addr "http://127.0.0.1:$1" --call watch --streams 2000 --dependencies "$5" \
    --source "$(sources 10 49)" -z "$4" "${@:6}" >"$WORK/$3.json"
  stop_sample
  cpu1="$(cpu_of "$2")"
  echo "$cpu0 $cpu1" >"$WORK/$3.cpu"
}
report_storm() {
  local j="$WORK/$1.json"
  say "   streams opened $(json "$j" opened), synced $(json "$j" synced)/2000; all synced after $(json "$j" all_synced_s) s (median $(json "$j" median_synced_s) s; all 2 000 connections up after $(json "$j" 'round(connect_s, 3)') s)"
  say "   snapshot holds per stream (min, max) $(json "$j" snapshot_holds); resumed $(json "$j" resumed) (buckets resent $(json "$j" resent_buckets)); events received $(json "$j" messages) ($(json "$j" 'round(messages_per_s)')/s); opens refused $(json "$j" refused); ended early $(json "$j" ended)"
  say "   server peak RSS $(mib "$(peak "$WORK/$1.rss")") MiB; server CPU $(awk '{ printf "%.2f", $2 - $1 }' "$WORK/$1.cpu") s, load generator CPU $(json "$j" client_cpu_s) s, over the $2 s run"
}

part2() {
  local port idle idle2
  port="$(free_port)"
  serve_at V "$port"
  log "part 2: 10 000 holds over 100 dependencies"
  place "127.0.0.1:$port" 10000 100
  sleep 2
  idle="$(rss_kib "$PID_V")"
  log "part 2: 2 000 reading streams, each on every hold, 20 s"
  storm "$port" "$PID_V" all 20s 0
  sleep 2
  log "part 2: 2 000 reading streams, each on one dependency, 20 s"
  storm "$port" "$PID_V" dep 20s 100
  log "part 2: restart, place the holds again, 2 000 streams (one dependency each) at once"
  kill -KILL "$PID_V"; wait "$PID_V" 2>/dev/null || true
  serve_at V "$port"
  place "127.0.0.1:$port" 10000 100
  sleep 2
  idle2="$(rss_kib "$PID_V")"
  storm "$port" "$PID_V" restart 15s 100
  kill "$PID_V"; wait "$PID_V" 2>/dev/null || true
  log "part 2: the restart under --state redis: the holds come back from Redis, the streams open as the replica listens"
  start_redis
  STATE="$REDIS_URL" serve_at R "$port"
  place "127.0.0.1:$port" 10000 100
  sleep 3
  kill -KILL "$PID_R"; wait "$PID_R" 2>/dev/null || true
  STATE="$REDIS_URL" serve_at R "$port"
  storm "$port" "$PID_R" redis 15s 100
  # The mirrors' digests, as the 2 000 clients hold them: one stream per
  # scope is enough (every stream of a scope was sent the same holds).
  "$LOAD" --addr "http://127.0.0.1:$port" --call watch --streams 1 -z 10s --save-digests "$WORK/all.digests" >"$WORK/save-all.json"
  "$LOAD" --addr "http://127.0.0.1:$port" --call watch --streams 100 --dependencies 100 --source "$(sources 10 13)" -z 10s --save-digests "$WORK/dep.digests" >"$WORK/save-dep.json"
  log "part 2: restarts under --state redis, the 2 000 mirrors resuming from their digests"
  local tag spread
  for tag in all dep; do
    spread=0; [[ $tag == dep ]] && spread=100
    kill -KILL "$PID_R"; wait "$PID_R" 2>/dev/null || true
    STATE="$REDIS_URL" serve_at R "$port"
    storm "$port" "$PID_R" "resume-$tag" 15s "$spread" --resume-digests "$WORK/$tag.digests"
  done
  kill "$PID_R"; wait "$PID_R" 2>/dev/null || true
  say ""
  say "2. Watch capacity (10 000 holds over 100 dependencies; 2 000 reading streams opened at once, one connection each, 40 addresses x 50, so the default --max-watch-streams-per-caller 64 holds)"
  say "   RSS with the holds and no stream: $(mib "$idle") MiB"
  say "   a) every stream watches every hold (a 10 000-hold snapshot each, 20 000 000 events in all):"
  report_storm all 20
  say "   b) each stream watches one dependency (dependency s % 100: a 100-hold snapshot each, as a client mirror of the dependencies it calls):"
  report_storm dep 20
  say "   c) b) after a restart (kill -9, start on the same port, the 10 000 holds placed again; RSS before $(mib "$idle2") MiB):"
  report_storm restart 15
  say "   d) c) under --state redis (one redis-server): kill -9 after the 10 000 holds reached Redis, start again, and the 2 000 streams open as soon as it listens — each snapshot must hold its 100 holds, read back from Redis, before SYNCED:"
  report_storm redis 15
  say "   e) a) after a restart under --state redis, every stream a client mirror resuming from its bucket digests (WatchHoldsRequest.resume_digests, saved from a stream of the same scope before the kill): each SYNCED must come alone (no bucket differs):"
  report_storm resume-all 15
  say "   f) d) the same way (mirrors of one dependency each, resumed):"
  report_storm resume-dep 15
  say "   targets: peak RSS <= 256 MiB; every stream SYNCED within 10 s of the storm"
}

part3() {
  local pc pn
  pc="$(free_port)"
  serve_at C "$pc"
  pn="$(free_port)"
  serve_at N "$pn"
  log "part 3: 100 000 holds on C (N stays without)"
  place "127.0.0.1:$pc" 100000
  # A reading stream counts what is in force (its snapshot).
  "$LOAD" --addr "http://127.0.0.1:$pc" --call watch --streams 1 -z 10s >"$WORK/count.json"
  sleep 5
  local c0 c1 n0 n1 rss_c rss_n
  log "part 3: idle for 30 s"
  c0="$(cpu_of "$PID_C")"; n0="$(cpu_of "$PID_N")"
  sleep 30
  c1="$(cpu_of "$PID_C")"; n1="$(cpu_of "$PID_N")"
  rss_c="$(rss_kib "$PID_C")"; rss_n="$(rss_kib "$PID_N")"
  log "part 3: ListHolds page_size=1, 200 calls one at a time"
  "$LOAD" --addr "http://127.0.0.1:$pc" --call list-holds -c 1 -n 200 --warmup 20 --json >"$WORK/list-c.json"
  "$LOAD" --addr "http://127.0.0.1:$pn" --call list-holds -c 1 -n 200 --warmup 20 --json >"$WORK/list-n.json"
  # A filter no hold matches: how much of the mirror a filtered page walks.
  "$LOAD" --addr "http://127.0.0.1:$pc" --call list-holds --list-dependency nothing-here -c 1 -n 200 --warmup 20 --json >"$WORK/list-f.json"
  local r k addr pid cpu0
  for k in N C; do "$GHZ" --config bench/ghz-classify.json -c 50 --connections 1 -z 2s -O json \
    "127.0.0.1:$([[ $k == C ]] && echo "$pc" || echo "$pn")" >/dev/null; done
  for ((r = 1; r <= ROUNDS; r++)); do
    for k in $( ((r % 2)) && echo N C || echo C N); do
      addr="127.0.0.1:$([[ $k == C ]] && echo "$pc" || echo "$pn")"
      log "part 3: Classify round $r/$ROUNDS on $k (5 s)"
      pid="$([[ $k == C ]] && echo "$PID_C" || echo "$PID_N")"
      cpu0="$(cpu_of "$pid")"
      "$GHZ" --config bench/ghz-classify.json -c 50 --connections 1 -z 5s -O json "$addr" >"$WORK/ghz-$k-$r.json"
      echo "$cpu0 $(cpu_of "$pid")" >"$WORK/ghz-$k-$r.cpu"
    done
  done
  say ""
  say "3. The cap (100 000 holds in force, default --max-holds; a second server N with none)"
  say "   holds in force on C (a watch's snapshot): $(json "$WORK/count.json" snapshot_holds)"
  say "   idle CPU over 30 s: C $(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", (b - a) / 30 * 100 }') % of a core (target <= 3 %), N $(awk -v a="$n0" -v b="$n1" 'BEGIN { printf "%.2f", (b - a) / 30 * 100 }') %"
  say "   RSS: C $(mib "$rss_c") MiB (target <= 160), N $(mib "$rss_n") MiB; C - N = $(awk -v c="$rss_c" -v n="$rss_n" 'BEGIN { printf "%.0f", (c - n) * 1024 / 100000 }') bytes per hold"
  say "   ListHolds page_size=1 on C: median $(json "$WORK/list-c.json" 'round(p50_ms, 3)') ms, p99 $(json "$WORK/list-c.json" 'round(p99_ms, 3)') ms, max $(json "$WORK/list-c.json" 'round(slowest_ms, 3)') ms over $(json "$WORK/list-c.json" count) calls $(json "$WORK/list-c.json" status) (target <= 5 ms); on N: median $(json "$WORK/list-n.json" 'round(p50_ms, 3)') ms, p99 $(json "$WORK/list-n.json" 'round(p99_ms, 3)') ms"
  say "   ListHolds page_size=1 dependency=nothing-here (no hold matches) on C: median $(json "$WORK/list-f.json" 'round(p50_ms, 3)') ms, p99 $(json "$WORK/list-f.json" 'round(p99_ms, 3)') ms $(json "$WORK/list-f.json" status)"
  export WORK ROUNDS
  python3 - <<'EOF'
import json, os, statistics as st
work, rounds = os.environ["WORK"], int(os.environ["ROUNDS"])
def p(k, r, q):
    j = json.load(open(f"{work}/ghz-{k}-{r}.json"))
    lat = {d["percentage"]: d["latency"] / 1e6 for d in j["latencyDistribution"]}
    ok = j.get("statusCodeDistribution", {}).get("OK", 0)
    b, a = map(float, open(f"{work}/ghz-{k}-{r}.cpu").read().split())
    return lat[q], j["rps"], j.get("statusCodeDistribution", {}), (a - b) / ok * 1e6 if ok else float("nan")
rows, cpu = [], []
for r in range(1, rounds + 1):
    (n99, nrps, ncodes, ncpu), (c99, crps, ccodes, ccpu) = p("N", r, 99), p("C", r, 99)
    n50, c50 = p("N", r, 50)[0], p("C", r, 50)[0]
    rows.append(c99 / n99)
    cpu.append(ccpu / ncpu)
    print(f"   Classify round {r}: p99 N {n99:.2f} ms / C {c99:.2f} ms = {c99 / n99:.2f}; p50 N {n50:.2f} / C {c50:.2f} ms; server CPU per call N {ncpu:.1f} / C {ccpu:.1f} us; rps N {nrps:.0f} / C {crps:.0f}; codes N {ncodes} C {ccodes}")
print(f"   Classify p99 with 100 000 holds / without, median of {rounds} paired rounds: {st.median(rows):.2f} (target <= 1.2; per round {' '.join(f'{x:.2f}' for x in rows)})")
print(f"   Classify server CPU per call with / without, median: {st.median(cpu):.2f} (per round {' '.join(f'{x:.2f}' for x in cpu)})")
EOF
}

case "$ONLY" in
  "") part1; part2; part3 ;;
  1) part1 ;;
  2) part2 ;;
  3) part3 ;;
  *) echo "holds.sh: --only 1, 2 or 3" >&2; exit 2 ;;
esac
say ""
say "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
