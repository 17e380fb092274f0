#!/usr/bin/env bash
# Where a ClassifyBatch decision's server CPU goes, by part of the server.
#
#   bench/where.sh                          # builds release binaries first
#   RETRYD_BIN=target/release/retryd RETRYD_LOAD=target/release/retryd-load bench/where.sh
#   SECONDS_LOAD=12 PERF_SECONDS=6 bench/where.sh
#
# retryd serves (`--state memory`, the embedded default: its holds and
# budgets) pinned to CPU 0, and retryd-load sends ClassifyBatch x1000 of the
# realistic mix (c=4, one connection, as bench/run.sh) pinned to CPU 1, so
# the two do not share a core and the server's CPU is its own. The server's
# CPU per decision is its utime+stime (/proc/PID/stat) over the whole load
# run, divided by the decisions answered. Meanwhile `perf record` samples
# the server's stacks (cpu-clock, DWARF unwinding) for PERF_SECONDS, and
# bench/where.py sorts every sample into the part of the server it was in:
# transport (kernel socket, HTTP/2, the runtime), reading the request,
# deciding (the core's rules), fleet state (hold lookups, placements,
# budgets) and writing the answer, each shown as a share of the samples
# and as µs a decision.
#
# Needs perf (Debian: linux-perf) allowed to sample this user's processes,
# python3 and taskset; exits 2 when one is missing. Line tables make the
# split exact (CARGO_PROFILE_RELEASE_DEBUG=line-tables-only when building);
# without them inlined frames fall to their callers.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME=where
# shellcheck source=fleet-lib.sh
source "$ROOT/bench/fleet-lib.sh"
for tool in perf python3 taskset; do
  command -v "$tool" >/dev/null || { echo "where.sh: $tool is required" >&2; exit 2; }
done
[[ "$(nproc)" -ge 2 ]] || { echo "where.sh: needs 2 CPUs (server and load apart)" >&2; exit 2; }
SECONDS_LOAD="${SECONDS_LOAD:-10}" PERF_SECONDS="${PERF_SECONDS:-4}"
(( PERF_SECONDS + 3 < SECONDS_LOAD )) || { echo "where.sh: PERF_SECONDS + 3 must be under SECONDS_LOAD" >&2; exit 2; }
build_release

serve main "$RETRYD"
server="$PID_main" addr="$ADDR_main"
# Every thread of the server, and so the threads it starts later, on CPU 0.
taskset -a -p -c 0 "$server" >/dev/null

log "retryd on CPU 0, retryd-load on CPU 1: ClassifyBatch x1000 for ${SECONDS_LOAD}s"
before="$(cpu_of "$server")"
taskset -c 1 "$LOAD" --addr "http://$addr" --call batch --batch-size 1000 -c 4 --connections 1 \
  -z "${SECONDS_LOAD}s" --json >"$WORK/load.json" &
load=$!
PIDS+=("$load")
sleep 2
perf record -q -e cpu-clock -F 1000 --call-graph dwarf,8192 -p "$server" -o "$WORK/perf.data" \
  -- sleep "$PERF_SECONDS" >/dev/null 2>&1 || { echo "where.sh: perf record failed (perf_event_paranoid?)" >&2; exit 2; }
wait "$load"
after="$(cpu_of "$server")"
perf script -i "$WORK/perf.data" -F comm,tid,ip,sym 2>/dev/null >"$WORK/stacks.txt"
python3 "$ROOT/bench/where.py" "$WORK/stacks.txt" "$WORK/load.json" "$before" "$after"
