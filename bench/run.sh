#!/usr/bin/env bash
# The performance harness: one command, everything on loopback, bounded in time.
#
#   bench/run.sh                  # full: 3 interleaved rounds of 10 s each + 60 s RSS check (~5 min)
#   bench/run.sh --quick          # CI: 2 rounds of 3 s + 15 s RSS check (~1 min after the build)
#   bench/run.sh --write-results  # also regenerate bench/RESULTS.md
#   bench/run.sh --rounds 5 --duration 8s
#
# It builds retryd and retryd-load (release) and grpc-go's greeter_server (pinned
# below), starts `retryd serve` and the greeter on free loopback ports and, per
# round, in rotating order: ghz Classify (c=50, 1 connection, bench/ghz-classify.json),
# ghz grpc.health.v1.Health/Check on the same retryd (the floor: no work per call),
# ghz SayHello on the greeter (same settings), then retryd-load ClassifyBatch with
# 1 000 items. Last, a fresh retryd under retryd-load Classify at c=1000 over 10
# connections, VmRSS read at 10 s and at the end (60 s). It prints medians, the
# per-round ratios and PASS/MISS against the targets; exit 0 even on a MISS (the
# numbers are the product), non-zero when something could not run.
#
# Needs: cargo, go, python3, ghz (installed by scripts/install-tools.sh when missing).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# grpc-go's examples module has no tags: a pseudo-version of grpc-go master
# (resolved through the module proxy); its go.mod selects grpc v1.81.1.
GREETER_PIN="v0.0.0-20260825154716-030ee8becb20"

QUICK=0
WRITE=0
ROUNDS=""
DUR=""
while (($#)); do
  case "$1" in
    --quick) QUICK=1 ;;
    --write-results) WRITE=1 ;;
    --rounds) ROUNDS="$2"; shift ;;
    --duration) DUR="$2"; shift ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if ((QUICK)); then
  ROUNDS="${ROUNDS:-2}" DUR="${DUR:-3s}" WARM="1s" RSS_AT=5 RSS_FOR=15
else
  ROUNDS="${ROUNDS:-3}" DUR="${DUR:-10s}" WARM="2s" RSS_AT=10 RSS_FOR=60
fi
DUR_S="${DUR%s}"
C=50
BATCH_ITEMS=1000
BATCH_C=4
RSS_C=1000
RSS_CONNS=10

for cmd in cargo go python3 timeout; do
  command -v "$cmd" >/dev/null || { echo "run.sh: $cmd is required" >&2; exit 2; }
done
GOBIN_DIR="$(go env GOBIN)"
GOBIN_DIR="${GOBIN_DIR:-$(go env GOPATH)/bin}"
GHZ="$GOBIN_DIR/ghz"
if [[ ! -x "$GHZ" ]]; then
  echo "run.sh: ghz missing; running scripts/install-tools.sh" >&2
  bash scripts/install-tools.sh >&2
fi

WORK="$(mktemp -d -t retryd-bench.XXXXXX)"
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# --- build -------------------------------------------------------------------
log "building release binaries (retryd, retryd-load)"
timeout 1800 cargo build --release --quiet --bin retryd --bin retryd-load
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
RETRYD="$TARGET_DIR/release/retryd"
LOAD="$TARGET_DIR/release/retryd-load"

TOOLS="$TARGET_DIR/bench-tools"
GREETER="$TOOLS/greeter_server-$GREETER_PIN"
if [[ ! -x "$GREETER" ]]; then
  log "building greeter_server @ $GREETER_PIN"
  # `go install pkg@version` refuses the examples module (its go.mod has replace
  # directives), so build it from a throwaway module that requires it.
  mkdir -p "$TOOLS" "$WORK/greeter"
  (
    cd "$WORK/greeter"
    go mod init retryd-bench-greeter >/dev/null 2>&1
    timeout 600 go get "google.golang.org/grpc/examples/helloworld/greeter_server@$GREETER_PIN" >/dev/null 2>&1
    timeout 600 go build -o "$GREETER" google.golang.org/grpc/examples/helloworld/greeter_server
  )
fi
HELLO_PROTO="$(go env GOMODCACHE)/google.golang.org/grpc/examples@$GREETER_PIN/helloworld/helloworld/helloworld.proto"
[[ -f "$HELLO_PROTO" ]] || { echo "run.sh: $HELLO_PROTO not found" >&2; exit 2; }

# --- servers -----------------------------------------------------------------
# start_retryd NAME: starts `retryd serve` on a free port; sets RETRYD_PID, RETRYD_ADDR.
start_retryd() {
  local logf="$WORK/$1.log"
  "$RETRYD" serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 2>"$logf" &
  RETRYD_PID=$!
  PIDS+=("$RETRYD_PID")
  local i
  for i in $(seq 100); do
    RETRYD_ADDR="$(grep -o 'listening on [0-9.:]*' "$logf" | awk '{print $3}' || true)"
    [[ -n "$RETRYD_ADDR" ]] && return 0
    kill -0 "$RETRYD_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "run.sh: retryd did not start:" >&2
  cat "$logf" >&2
  exit 1
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

start_retryd retryd
SERVE_ADDR="$RETRYD_ADDR"
SERVE_PID="$RETRYD_PID"
GREETER_PORT="$(free_port)"
# greeter_server logs every request: its log goes to /dev/null (the write stays in its cost).
"$GREETER" -port "$GREETER_PORT" 2>/dev/null &
GREETER_PID=$!
PIDS+=("$GREETER_PID")
for i in $(seq 100); do
  (echo >"/dev/tcp/127.0.0.1/$GREETER_PORT") 2>/dev/null && break
  sleep 0.1
  ((i == 100)) && { echo "run.sh: greeter_server did not start" >&2; exit 1; }
done
log "retryd on $SERVE_ADDR (pid $SERVE_PID), greeter_server on 127.0.0.1:$GREETER_PORT"

# --- the runs ----------------------------------------------------------------
GHZ_COMMON=(--insecure -c "$C" --connections 1 --duration-stop wait --timeout 20s)
RUN_TIMEOUT=$((DUR_S + 60))

# CPU seconds (user + system) a process has used so far.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }

# ghz_run KIND DURATION OUTFILE: also writes OUTFILE.cpu, the CPU seconds the
# server and ghz spent in the run (both share the machine's cores, so this
# says which side a throughput ratio is limited by).
ghz_run() {
  local server_pid="$SERVE_PID"
  [[ "$1" == greeter ]] && server_pid="$GREETER_PID"
  with_cpu "$server_pid" "$3" ghz_call "$@"
}

# with_cpu SERVER_PID OUTFILE COMMAND...: runs COMMAND, writes OUTFILE.cpu.
with_cpu() {
  local server_pid="$1" out="$2" before after
  shift 2
  before="$(cpu_of "$server_pid")"
  local TIMEFORMAT='%3U %3S'
  { time "$@" 2>&3; } 3>&2 2>"$out.time"
  after="$(cpu_of "$server_pid")"
  awk -v b="$before" -v a="$after" '{ printf "{\"server_s\": %.2f, \"client_s\": %.3f}\n", a - b, $1 + $2 }' \
    "$out.time" >"$out.cpu"
}

ghz_call() {
  local kind="$1" dur="$2" out="$3"
  case "$kind" in
    classify)
      timeout "$RUN_TIMEOUT" "$GHZ" --config bench/ghz-classify.json -c "$C" --connections 1 -z "$dur" -O json "$SERVE_ADDR" >"$out" ;;
    health)
      timeout "$RUN_TIMEOUT" "$GHZ" "${GHZ_COMMON[@]}" --call grpc.health.v1.Health.Check -d '{}' -z "$dur" -O json "$SERVE_ADDR" >"$out" ;;
    greeter)
      timeout "$RUN_TIMEOUT" "$GHZ" "${GHZ_COMMON[@]}" --proto "$HELLO_PROTO" --call helloworld.Greeter.SayHello \
        -d '{"name":"retryd"}' -z "$dur" -O json "127.0.0.1:$GREETER_PORT" >"$out" ;;
  esac
}

batch_run() { with_cpu "$SERVE_PID" "$2" batch_call "$@"; }

batch_call() {
  timeout "$RUN_TIMEOUT" "$LOAD" --addr "http://$SERVE_ADDR" --call batch --batch-size "$BATCH_ITEMS" \
    -c "$BATCH_C" --connections 1 -z "$1" --warmup "$WARM" --json >"$2"
}

log "warm-up ($WARM each, not recorded)"
for kind in classify health greeter; do ghz_run "$kind" "$WARM" "$WORK/warm-$kind.json"; done

KINDS=(classify health greeter)
for ((r = 1; r <= ROUNDS; r++)); do
  for ((k = 0; k < 3; k++)); do
    kind="${KINDS[$(((k + r - 1) % 3))]}"
    log "round $r/$ROUNDS: ghz $kind ($DUR)"
    ghz_run "$kind" "$DUR" "$WORK/r$r-$kind.json"
  done
  log "round $r/$ROUNDS: retryd-load batch of $BATCH_ITEMS ($DUR)"
  batch_run "$DUR" "$WORK/r$r-batch.json"
done
RSS_SERVE_AFTER="$(awk '/VmRSS/ {print $2}' "/proc/$SERVE_PID/status")"

log "RSS: fresh retryd, retryd-load Classify c=$RSS_C over $RSS_CONNS connections for ${RSS_FOR}s"
start_retryd retryd-rss
RSS_PID="$RETRYD_PID"
RSS_IDLE="$(awk '/VmRSS/ {print $2}' "/proc/$RSS_PID/status")"
timeout $((RSS_FOR + 60)) "$LOAD" --addr "http://$RETRYD_ADDR" --call classify -c "$RSS_C" --connections "$RSS_CONNS" \
  -z "${RSS_FOR}s" --json >"$WORK/rss-load.json" &
LOAD_PID=$!
PIDS+=("$LOAD_PID")
# VmRSS once a second from RSS_AT on: RSS under load moves by a MiB or two
# from second to second (allocator arenas), so two lone readings can show a
# "growth" that is only that jitter; report.py compares medians and a slope.
sleep "$RSS_AT"
RSS_EARLY="$(awk '/VmRSS/ {print $2}' "/proc/$RSS_PID/status")"
for ((s = RSS_AT; s < RSS_FOR - 1; s++)); do
  echo "$s $(awk '/VmRSS/ {print $2}' "/proc/$RSS_PID/status")" >>"$WORK/rss-samples.txt"
  sleep 1
done
RSS_LATE="$(awk '/VmRSS/ {print $2}' "/proc/$RSS_PID/status")"
RSS_HWM="$(awk '/VmHWM/ {print $2}' "/proc/$RSS_PID/status")"
THREADS="$(awk '/Threads/ {print $2}' "/proc/$RSS_PID/status")"
wait "$LOAD_PID"

# --- the table -----------------------------------------------------------------
NPROC="$(nproc)"
CPU="$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
LOADAVG="$(cut -d' ' -f1-3 /proc/loadavg)"
export WORK ROUNDS DUR WARM C BATCH_ITEMS BATCH_C RSS_C RSS_CONNS RSS_AT RSS_FOR RSS_IDLE RSS_EARLY RSS_LATE RSS_HWM \
  RSS_SERVE_AFTER THREADS NPROC CPU LOADAVG QUICK GREETER_PIN WRITE ROOT TARGET_DIR
# ghz built by `go install` reports "dev": take the module version from the binary.
GHZ_VERSION="$(go version -m "$GHZ" 2>/dev/null | awk '$1 == "mod" { print $3; exit }')"
RUSTC_VERSION="$(rustc --version)"
GO_VERSION="$(go version | awk '{print $3}')"
export GHZ_VERSION RUSTC_VERSION GO_VERSION
python3 "$ROOT/bench/report.py"
