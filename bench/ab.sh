#!/usr/bin/env bash
# Paired A/B of two retryd binaries: is the new one as cheap as the old?
#
#   bench/ab.sh OLD_RETRYD NEW_RETRYD [RETRYD_LOAD]   # 5 rounds of 6 s runs
#   ROUNDS=7 DUR=8s bench/ab.sh old new
#   CALLGRIND=1 bench/ab.sh old new                     # instructions per call instead
#
# CALLGRIND=1: each binary serves under valgrind --tool=callgrind in turn;
# after a warm-up the counters are zeroed and retryd-load sends CALLS calls
# (c=50, 1 connection; the realistic mix of src/bin/retryd-load/workload.rs,
# where most failures name a dependency, so holds are placed and met, and
# budgets count) of each kind: Classify, ClassifyBatch (1 000 items; per
# decision), Admit, health Check. Instructions per call are exact, so the
# ratio holds on a busy 2-core machine, where CPU time swings by ±20 %
# from round to round.
#
# Both binaries serve side by side on free loopback ports with the default
# configuration (`--state memory`, the embedded catalogs' holds and budgets;
# only the ports are set). Each round measures, on each server in turn (the
# order alternates every round, so neither always goes first):
#   - ghz Classify, c=50 over 1 connection, bench/ghz-classify.json's mix;
#   - retryd-load ClassifyBatch of 1 000 items, c=4 over 1 connection.
# Server CPU per call is the server process's utime+stime (every thread, from
# /proc/PID/stat) over the whole run, divided by the calls (ghz's count) or
# the decisions (retryd-load's) the run answered. Each round gives one
# new/old ratio per kind (runs seconds apart); the figure is the median of
# the rounds' ratios, printed with every round's value.
#
# Exit 0 with the table (the numbers are the product); non-zero when
# something could not run. Needs python3, ghz (scripts/install-tools.sh)
# and a retryd-load (built with `cargo build --release --bin retryd-load`).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ $# -ge 2 ]] || { sed -n '2,5p' "$0" >&2; exit 2; }
OLD="$(realpath "$1")" NEW="$(realpath "$2")"
LOAD="$(realpath "${3:-$ROOT/target/release/retryd-load}")"
ROUNDS="${ROUNDS:-5}" DUR="${DUR:-6s}"
GHZ="$(command -v ghz || echo "$(go env GOPATH 2>/dev/null)/bin/ghz")"
for bin in "$OLD" "$NEW" "$LOAD" "$GHZ"; do
  [[ -x "$bin" ]] || { echo "ab.sh: $bin is not an executable" >&2; exit 2; }
done

NAME=ab
# shellcheck source=fleet-lib.sh
source "$ROOT/bench/fleet-lib.sh"
if [[ -n "${CALLGRIND:-}" ]]; then
  command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
    { echo "ab.sh: CALLGRIND=1 needs valgrind (apt-get install valgrind)" >&2; exit 2; }
  CALLS="${CALLS:-20000}"
  # ir BIN CALL N [BATCH]: instructions per call (per decision for a batch).
  ir() {
    local bin="$1" call="$2" n="$3" batch="${4:-}" logf="$WORK/serve.log" out="$WORK/cg" pid per
    rm -f "$out".*
    valgrind --tool=callgrind --callgrind-out-file="$out.%p" --dump-instr=no \
      "$bin" serve --listen 127.0.0.1:0 --metrics-listen off 2>"$logf" &
    pid=$!
    local addr=""
    for _ in $(seq 600); do
      addr="$(grep -o 'listening on [0-9.:]*' "$logf" | awk '{print $3}' || true)"
      [[ -n "$addr" ]] && break
      sleep 0.1
    done
    [[ -n "$addr" ]] || { cat "$logf" >&2; exit 1; }
    local extra=()
    [[ -n "$batch" ]] && extra=(--batch-size "$batch")
    "$LOAD" --addr "http://$addr" --call "$call" "${extra[@]}" -c 50 --connections 1 -n $((n / 10)) --json >/dev/null
    callgrind_control -z "$pid" >/dev/null
    "$LOAD" --addr "http://$addr" --call "$call" "${extra[@]}" -c 50 --connections 1 -n "$n" --json >"$WORK/load.json"
    callgrind_control -d "$pid" >/dev/null
    sleep 1
    kill "$pid"; wait "$pid" 2>/dev/null || true
    per=$((n * ${batch:-1}))
    grep -h '^summary:' "$out".* | awk -v per="$per" '{ s += $2 } END { printf "%.0f\n", s / per }'
  }
  printf '%-22s %14s %14s %8s\n' "call" "old instr" "new instr" "new/old"
  for spec in "classify classify $CALLS" "batch(1000)/decision batch $((CALLS / 100)) 1000" "admit admit $CALLS" "health health $CALLS"; do
    read -r name call n batch <<<"$spec"
    o="$(ir "$OLD" "$call" "$n" "${batch:-}")"
    w="$(ir "$NEW" "$call" "$n" "${batch:-}")"
    printf '%-22s %14s %14s %8.3f\n' "$name" "$o" "$w" "$(python3 -c "print($w / $o)")"
  done
  exit 0
fi
trap 'exit 130' INT TERM

# Default configuration: only the ports are set.
serve old "$OLD"
serve new "$NEW"
log "old $OLD on $ADDR_old, new $NEW on $ADDR_new; $ROUNDS rounds of $DUR"

# CPU ticks (utime + stime) of a process, every thread.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ="$(getconf CLK_TCK)"

# measure NAME KIND OUT: one run against server NAME; prints "calls cpu_us_per_call".
measure() {
  local name="$1" kind="$2" out="$WORK/$1-$2-$ROUND.json" addr pid t0 t1
  addr="ADDR_$name" pid="PID_$name"
  t0="$(ticks "${!pid}")"
  case "$kind" in
    classify)
      timeout 120 "$GHZ" --config "$ROOT/bench/ghz-classify.json" -c 50 --connections 1 -z "$DUR" -O json "${!addr}" >"$out" ;;
    batch)
      timeout 120 "$LOAD" --addr "http://${!addr}" --call batch --batch-size 1000 -c 4 --connections 1 -z "$DUR" --json >"$out" ;;
  esac
  t1="$(ticks "${!pid}")"
  python3 - "$kind" "$out" "$t0" "$t1" "$HZ" <<'EOF'
import json, sys
kind, path, t0, t1, hz = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
d = json.load(open(path))
if kind == "classify":
    ok = d.get("statusCodeDistribution", {}).get("OK", 0)
    if ok != d["count"]:
        sys.exit(f"ab.sh: {ok} of {d['count']} Classify calls OK")
    calls = d["count"]
else:
    if d.get("errors"):
        sys.exit(f"ab.sh: batch errors {d['errors']}")
    calls = d["decisions"]
print(calls, (t1 - t0) / hz * 1e6 / calls)
EOF
}

# Warm both servers (pools, caches, the branch predictors of each binary).
ROUND=warm
for name in old new; do
  DUR=2s measure "$name" classify >/dev/null
  DUR=2s measure "$name" batch >/dev/null
done

declare -a R_CLASSIFY R_BATCH
printf '%-6s %-8s %12s %12s %12s %12s\n' round kind "old calls" "old us/call" "new calls" "new us/call" >"$WORK/table"
for ((r = 0; r < ROUNDS; r++)); do
  ROUND=$r
  if ((r % 2 == 0)); then order=(old new); else order=(new old); fi
  for kind in classify batch; do
    declare -A got=()
    for name in "${order[@]}"; do
      got[$name]="$(measure "$name" "$kind")"
    done
    read -r oc ou <<<"${got[old]}"
    read -r nc nu <<<"${got[new]}"
    printf '%-6s %-8s %12s %12.3f %12s %12.3f\n' "$r" "$kind" "$oc" "$ou" "$nc" "$nu" >>"$WORK/table"
    ratio="$(python3 -c "print(f'{$nu / $ou:.3f}')")"
    if [[ $kind == classify ]]; then R_CLASSIFY+=("$ratio"); else R_BATCH+=("$ratio"); fi
  done
  log "round $r: Classify new/old ${R_CLASSIFY[-1]}, ClassifyBatch per decision new/old ${R_BATCH[-1]}"
done

cat "$WORK/table"
python3 - "${R_CLASSIFY[*]}" "${R_BATCH[*]}" <<'EOF'
import statistics, sys
for name, values in (("Classify, server CPU per call", sys.argv[1]), ("ClassifyBatch, server CPU per decision", sys.argv[2])):
    v = [float(x) for x in values.split()]
    print(f"{name}: new/old median {statistics.median(v):.3f} (rounds: {' '.join(f'{x:.3f}' for x in v)}; min {min(v):.3f}, max {max(v):.3f})")
EOF
