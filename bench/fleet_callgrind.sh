#!/usr/bin/env bash
# Fleet memory's cost in instructions per call, counted by callgrind: a count
# that does not depend on what else the machine is doing (unlike CPU time on
# 2 shared cores), so the ratios the fleet-memory issue sets can be checked
# on a busy machine too.
#
#   bench/fleet_callgrind.sh [--calls 20000]
#   RETRYD_BIN=… RETRYD_LOAD=… bench/fleet_callgrind.sh   # binaries already built
#
# For each of: health Check, Admit (no hold in force), Classify with
# --state memory, Classify with --state redis://… (a real redis-server), and
# ClassifyBatch x1000 with --state memory (c=4, 6 warm-up and 40 counted
# batches, divided per item), it
# starts the release `retryd serve` under valgrind --tool=callgrind, warms it
# with 2 000 calls, zeroes the counters, sends --calls calls with retryd-load
# (c=50, 1 connection; the realistic mix of src/bin/retryd-load/workload.rs,
# 80 % of failures naming a dependency, so 429s and quota stops place holds
# and the rest meet them), dumps, and divides. Redis commands per Classify
# come from INFO commandstats around the counted calls.
#
# Needs: cargo, valgrind, redis-server, python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CALLS=20000
while (($#)); do
  case "$1" in
    --calls) CALLS="$2"; shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "fleet_callgrind.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
for cmd in valgrind callgrind_control redis-server redis-cli; do
  command -v "$cmd" >/dev/null || { echo "fleet_callgrind.sh: $cmd is required" >&2; exit 2; }
done

WORK="$(mktemp -d -t retryd-callgrind.XXXXXX)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
log() { printf '[callgrind %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# RETRYD_BIN / RETRYD_LOAD: measure these binaries instead of building them.
if [[ -z "${RETRYD_BIN:-}" ]]; then
  log "building release retryd and retryd-load"
  timeout 1800 cargo build --release --quiet --bin retryd --bin retryd-load
fi
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
RETRYD="${RETRYD_BIN:-$TARGET_DIR/release/retryd}"
LOAD="${RETRYD_LOAD:-$TARGET_DIR/release/retryd-load}"

REDIS_PORT="$(free_port)"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" >/dev/null 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
commands() { redis-cli -p "$REDIS_PORT" info commandstats | awk -F'[=,:]' '/^cmdstat_/ && $1 != "cmdstat_info" { n += $3 } END { print n + 0 }'; }

# measure NAME STATE CALL [CONCURRENCY WARM-UP CALLS PER-CALL]: prints "NAME
# instructions-per-unit redis-commands-per-unit", the unit a call, or a
# decision when PER-CALL (a batch's items) is given.
measure() {
  local name="$1" state="$2" call="$3" port logf out pid
  local conc="${4:-50}" warm="${5:-2000}" calls="${6:-$CALLS}" per="${7:-1}"
  port="$(free_port)"
  logf="$WORK/$name.log"
  out="$WORK/$name.callgrind"
  valgrind --tool=callgrind --callgrind-out-file="$out.%p" --dump-instr=no \
    "$RETRYD" serve --listen "127.0.0.1:$port" --metrics-listen off --state "$state" 2>"$logf" &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 600); do grep -q "listening on" "$logf" && break; sleep 0.1; done
  grep -q "listening on" "$logf" || { cat "$logf" >&2; exit 1; }
  "$LOAD" --addr "http://127.0.0.1:$port" --call "$call" -c "$conc" --connections 1 -n "$warm" --json >/dev/null
  callgrind_control -z "$pid" >/dev/null
  local c0
  c0="$(commands)"
  "$LOAD" --addr "http://127.0.0.1:$port" --call "$call" -c "$conc" --connections 1 -n "$calls" --json >"$WORK/$name.json"
  local c1
  c1="$(commands)"
  callgrind_control -d "$pid" >/dev/null
  sleep 1
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local ir
  ir="$(grep -h '^summary:' "$out".* | awk '{ s += $2 } END { print s }')"
  local units=$((calls * per))
  python3 -c "import sys; print('$name', round($ir / $units), round(($c1 - $c0) / $units, 4))"
}

REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
{
  measure health memory health
  measure admit memory admit
  measure classify-memory memory classify
  measure classify-redis "$REDIS_URL" classify
  # 1 000 items a call (retryd-load's default), 4 in flight, 40 counted.
  measure batch-memory memory batch 4 6 40 1000
} | tee "$WORK/table"
python3 - "$WORK/table" <<'EOF'
import sys
rows = {l.split()[0]: (int(l.split()[1]), float(l.split()[2])) for l in open(sys.argv[1]) if l.strip()}
h, a, m, r = rows["health"][0], rows["admit"][0], rows["classify-memory"][0], rows["classify-redis"][0]
print(f"Classify (memory) / health:     {m / h:.2f}  (target <= 1.10, issue #30)")
print(f"Admit (no hold) / health Check: {a / h:.2f}  (target <= 1.10)")
print(f"ClassifyBatch x1000, per item:  {rows['batch-memory'][0]}")
print(f"Classify redis / memory:        {r / m:.2f}  (target <= 1.10)")
print(f"Redis commands per Classify:    {rows['classify-redis'][1]:.4f}  (target <= 0.01)")
EOF
