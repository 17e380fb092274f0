#!/usr/bin/env bash
# Soak test: retryd under a steady c=200 load for N minutes.
#
#   bench/soak.sh [--minutes N] [--bin-dir DIR]
#
#   --minutes N     default 10; CI runs `--minutes 1`
#   --bin-dir DIR   use DIR/retryd and DIR/retryd-load instead of building the
#                   release binaries (CI passes target/debug, which cargo test
#                   built: the soak checks errors, RSS growth and shutdown,
#                   not speed, and a second, release build of the crate cost
#                   CI 8-16 minutes of its 45)
#
# Builds the release binaries (unless --bin-dir), starts `retryd serve` on a free port, and runs
# retryd-load back to back in windows (60 s each, 10 s for runs under 3
# minutes): Classify at c=200 over 4 connections with retryd-load's request
# mix (vibecode mostly, every catalog, reads and writes, idempotency keys,
# Retry-After), plus 2 ClassifyBatch callers with 100 items. After each window
# it prints the p99 of the window, the failed calls, and retryd's VmRSS,
# threads and open fds. At the end: SIGTERM, exit status and a summary.
#
# Exit status: 0 when every call succeeded, RSS did not grow (last window's
# RSS <= 1.5 x the first window's after warm-up) and retryd exited 0 on
# SIGTERM; 1 otherwise; 2 for bad arguments.
set -euo pipefail

MINUTES=10
BIN_DIR=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --minutes) MINUTES="${2:?--minutes needs a number}"; shift 2 ;;
    --minutes=*) MINUTES="${1#--minutes=}"; shift ;;
    --bin-dir) BIN_DIR="${2:?--bin-dir needs a directory}"; shift 2 ;;
    --bin-dir=*) BIN_DIR="${1#--bin-dir=}"; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$MINUTES" =~ ^[1-9][0-9]*$ ]] || { echo "soak.sh: --minutes takes a positive whole number" >&2; exit 2; }

cd "$(dirname "$0")/.."
if (( MINUTES >= 3 )); then WINDOW=60; else WINDOW=10; fi
WINDOWS=$(( MINUTES * 60 / WINDOW ))
C=200
CONNS=4

log() { printf '[soak %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

WORK="$(mktemp -d)"
RETRYD_PID=""
BATCH_PID=""
cleanup() {
  [[ -n "$BATCH_PID" ]] && kill "$BATCH_PID" 2>/dev/null || true
  [[ -n "$RETRYD_PID" ]] && kill -KILL "$RETRYD_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -z "$BIN_DIR" ]]; then
  log "building release binaries (retryd, retryd-load)"
  timeout 1800 cargo build --release --quiet --bin retryd --bin retryd-load
  TARGET_DIR="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
  BIN_DIR="$TARGET_DIR/release"
fi
RETRYD="$BIN_DIR/retryd"
LOAD="$BIN_DIR/retryd-load"
for b in "$RETRYD" "$LOAD"; do
  [[ -x "$b" ]] || { echo "soak.sh: no executable $b" >&2; exit 2; }
done
log "binaries: $RETRYD, $LOAD"

"$RETRYD" serve --listen 127.0.0.1:0 --metrics-listen off --shutdown-grace 10s 2>"$WORK/retryd.log" &
RETRYD_PID=$!
ADDR=""
for _ in $(seq 100); do
  ADDR="$(grep -o 'listening on [0-9.:]*' "$WORK/retryd.log" | awk '{print $3}' || true)"
  [[ -n "$ADDR" ]] && break
  kill -0 "$RETRYD_PID" 2>/dev/null || break
  sleep 0.1
done
[[ -n "$ADDR" ]] || { echo "soak.sh: retryd did not start:" >&2; cat "$WORK/retryd.log" >&2; exit 1; }

status_field() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$RETRYD_PID/status"; }
fds() { ls "/proc/$RETRYD_PID/fd" | wc -l; }

log "retryd $ADDR (pid $RETRYD_PID): ${MINUTES} min, $WINDOWS windows of ${WINDOW}s, Classify c=$C over $CONNS connections + 2 ClassifyBatch(100) callers"
log "start: VmRSS $(status_field VmRSS) kB, threads $(status_field Threads), fds $(fds)"

# The batch callers run through the whole soak (one long retryd-load).
timeout $(( MINUTES * 60 + 120 )) "$LOAD" --addr "http://$ADDR" --call batch --batch-size 100 -c 2 \
  -z "$(( WINDOWS * WINDOW ))s" --json >"$WORK/batch.json" 2>"$WORK/batch.err" &
BATCH_PID=$!

printf '%-7s %10s %9s %9s %8s %10s %8s %5s\n' window calls rps p99_ms errors rss_kB threads fds >"$WORK/table"
for w in $(seq 1 "$WINDOWS"); do
  if ! timeout $(( WINDOW + 60 )) "$LOAD" --addr "http://$ADDR" --call classify -c "$C" --connections "$CONNS" \
      -z "${WINDOW}s" --json >"$WORK/w$w.json" 2>"$WORK/w$w.err"; then
    log "retryd-load failed in window $w: $(tail -3 "$WORK/w$w.err")"
  fi
  kill -0 "$RETRYD_PID" 2>/dev/null || { log "retryd died"; cat "$WORK/retryd.log" >&2; exit 1; }
  python3 - "$WORK/w$w.json" "$w" "$(status_field VmRSS)" "$(status_field Threads)" "$(fds)" >>"$WORK/table" <<'PY'
import json, sys
path, w, rss, threads, fds = sys.argv[1:]
try:
    r = json.load(open(path))
    calls, rps, p99 = r["count"], r["rps"], r["p99_ms"]
    errors = calls - r["status"].get("OK", 0)
except Exception:
    calls, rps, p99, errors = 0, 0.0, 0.0, 1  # no report: count as an error
print(f"{w:<7} {calls:>10} {rps:>9.0f} {p99:>9.2f} {errors:>8} {rss:>10} {threads:>8} {fds:>5}")
PY
  tail -1 "$WORK/table" | sed 's/^/  /' >&2
done

wait "$BATCH_PID" || log "the batch retryd-load exited non-zero"
BATCH_PID=""

log "SIGTERM"
kill -TERM "$RETRYD_PID"
EXIT=0
wait "$RETRYD_PID" || EXIT=$?
RETRYD_PID=""

echo
echo "retryd soak: ${MINUTES} min, Classify c=$C over $CONNS connections (+ 2 ClassifyBatch(100) callers), ${WINDOW}s windows"
cat "$WORK/table"
python3 - "$WORK/table" "$WORK/batch.json" "$EXIT" "$WINDOWS" <<'PY'
import json, sys
table, batch_path, exit_code, windows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [l.split() for l in open(table).read().splitlines()[1:]]
calls = sum(int(r[1]) for r in rows)
errors = sum(int(r[4]) for r in rows)
p99 = [float(r[3]) for r in rows]
rss = [int(r[5]) for r in rows]
try:
    b = json.load(open(batch_path))
    batch_calls, batch_errors = b["count"], b["count"] - b["status"].get("OK", 0) + b.get("item_errors", 0)
    batch_p99 = b["p99_ms"]
except Exception:
    batch_calls, batch_errors, batch_p99 = 0, 1, float("nan")
# Warm-up: the first window (allocator pools, connection buffers).
steady = rss[1:] if len(rss) > 2 else rss
first, last, peak = steady[0], steady[-1], max(steady)
grows = last > first * 1.5
monotonic = all(b >= a for a, b in zip(steady, steady[1:])) and last > first
print(f"Classify calls: {calls}, errors: {errors}; ClassifyBatch calls: {batch_calls}, errors: {batch_errors}, p99 {batch_p99:.2f} ms")
print(f"p99 ms per window: min {min(p99):.2f}, median {sorted(p99)[len(p99)//2]:.2f}, max {max(p99):.2f}")
print(f"VmRSS kB after warm-up: first {first}, last {last}, peak {peak} "
      f"({'GROWS' if grows else 'flat'}{'; rising every window' if monotonic and len(steady) > 3 else ''})")
print(f"retryd exit status after SIGTERM: {exit_code}")
ok = errors == 0 and batch_errors == 0 and not grows and exit_code == 0 and len(rows) == windows
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
