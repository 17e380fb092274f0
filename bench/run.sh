#!/usr/bin/env bash
# The performance harness: one command, everything on loopback, bounded in time.
#
#   bench/run.sh                  # full: warm-up, 5 interleaved rounds of 6 s runs, 60 s RSS check (~4 min)
#   bench/run.sh --quick          # CI: warm-up, 2 rounds of 3 s + 15 s RSS check (~1 min after the build)
#   bench/run.sh --write-results  # also regenerate bench/RESULTS.md
#   bench/run.sh --rounds 5 --duration 8s
#   RETRYD_BIN=… RETRYD_LOAD=… bench/run.sh   # measure these binaries, no cargo build
#   GREETER_BIN=… bench/run.sh                 # a greeter_server already built at GREETER_PIN
#   BENCH_KEEP=1 bench/run.sh --quick          # keep the scratch directory (the runs' JSON and samples)
#
# It builds retryd and retryd-load (release; skipped with RETRYD_BIN/RETRYD_LOAD)
# and grpc-go's greeter_server (pinned below, run as shipped: default GOGC and
# GOMAXPROCS, its per-request log line to /dev/null), starts `retryd serve` with
# the default configuration (`--state memory`, the embedded catalogs' default
# holds and budgets; only the ports are set) and the greeter on free loopback
# ports. After one warm-up run of each kind, per round, in an order rotated
# every round: ghz Classify (c=50, 1 connection, bench/ghz-classify.json), ghz
# grpc.health.v1.Health/Check on the same retryd (the floor: no work per
# call), ghz Admit on the same retryd (a first attempt, no hold in force:
# ADMIT_BODY below), ghz SayHello on the greeter (same settings), retryd-load ClassifyBatch
# with 1 000 items. Last, a fresh retryd under retryd-load Classify at c=1000
# over 10 connections, VmRSS once a second from 10 s to the end (60 s).
#
# Server CPU per call (the pinned method, issue #17): a sampler reads the
# server's /proc/PID/stat (utime + stime, every thread of the process: Go's GC
# and scheduler threads, tokio's workers) every 50 ms while a run goes on. The
# CPU counted is between the first sample 0.5 s after the run's first call
# started and the last sample 0.25 s before its last call ended, divided by
# the calls that ended inside that window (ghz's per-call details; for the
# batch, retryd-load's decisions/s over its measured phase times the window).
# So ghz's start-up and shutdown, the connection set-up and the first calls
# are not in it, and nothing is estimated from a run's nominal length. With
# the default 6 s runs the window is about 5.2 s (the samples' 50 ms grain).
# Each round's ratios (Classify/health, Classify/greeter, p99) pair runs made
# seconds apart; the targets are the medians of those per-round ratios.
#
# The sampler also records, per window, the server's busy share of one core,
# the machine's idle share and the server's wake-ups per call (its threads'
# schedstat): CPU per call depends on how many calls a wake-up finds waiting,
# grpc-go's greeter far more than retryd (2-3x when calls arrive one at a
# time), and on the host. That, not the counting window (the old whole-run
# figure agrees within 3 %), is why an earlier table read 40.8 us per SayHello;
# see "Where the CPU goes" in bench/RESULTS.md. A ghz run above one wake-up
# per call is flagged.
#
# It prints the per-round table, the medians and PASS/MISS against the
# targets; exit 0 even on a MISS (the numbers are the product), non-zero when
# something could not run.
#
# Needs: go, python3, ghz (installed by scripts/install-tools.sh when
# missing); cargo unless RETRYD_BIN and RETRYD_LOAD are given.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Prebuilt binaries given as relative paths are relative to where run.sh was called.
for v in RETRYD_BIN RETRYD_LOAD GREETER_BIN; do
  if [[ -n "${!v:-}" && "${!v}" != /* ]]; then
    printf -v "$v" '%s' "$PWD/${!v}"
  fi
done
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
    -h | --help) sed -n '2,51p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if ((QUICK)); then
  ROUNDS="${ROUNDS:-2}" DUR="${DUR:-3s}" WARM="1s" RSS_AT=5 RSS_FOR=15
else
  ROUNDS="${ROUNDS:-5}" DUR="${DUR:-6s}" WARM="2s" RSS_AT=10 RSS_FOR=60
fi
DUR_S="${DUR%s}"
[[ "$DUR_S" =~ ^[0-9]+$ && "$ROUNDS" =~ ^[0-9]+$ && "$DUR_S" -ge 2 && "$ROUNDS" -ge 1 ]] ||
  { echo "run.sh: --duration takes whole seconds (>= 2s), --rounds a count" >&2; exit 2; }
C=50
BATCH_ITEMS=1000
BATCH_C=4
RSS_C=1000
RSS_CONNS=10
# The counting window inside each run (see the header).
WINDOW_HEAD=0.5
WINDOW_TAIL=0.25

need=(go python3 timeout)
[[ -n "${RETRYD_BIN:-}" && -n "${RETRYD_LOAD:-}" ]] || need+=(cargo)
for cmd in "${need[@]}"; do
  command -v "$cmd" >/dev/null || { echo "run.sh: $cmd is required" >&2; exit 2; }
done
GOBIN_DIR="$(go env GOBIN)"
GOBIN_DIR="${GOBIN_DIR:-$(go env GOPATH)/bin}"
GHZ="$GOBIN_DIR/ghz"
if [[ ! -x "$GHZ" ]]; then
  GHZ="$(command -v ghz || true)"
  if [[ -z "$GHZ" ]]; then
    echo "run.sh: ghz missing; running scripts/install-tools.sh" >&2
    bash scripts/install-tools.sh >&2
    GHZ="$GOBIN_DIR/ghz"
  fi
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
  if [[ -n "${BENCH_KEEP:-}" ]]; then
    echo "run.sh: kept $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# --- build -------------------------------------------------------------------
if [[ -n "${RETRYD_BIN:-}" && -n "${RETRYD_LOAD:-}" ]]; then
  RETRYD="$RETRYD_BIN"
  LOAD="$RETRYD_LOAD"
  log "prebuilt binaries: $RETRYD, $LOAD (no cargo build)"
  TARGET_DIR="$ROOT/target"
  if command -v cargo >/dev/null; then
    TARGET_DIR="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
  fi
else
  log "building release binaries (retryd, retryd-load)"
  timeout 1800 cargo build --release --quiet --bin retryd --bin retryd-load
  TARGET_DIR="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
  RETRYD="$TARGET_DIR/release/retryd"
  LOAD="$TARGET_DIR/release/retryd-load"
fi
for bin in "$RETRYD" "$LOAD"; do
  [[ -x "$bin" ]] || { echo "run.sh: $bin is not an executable" >&2; exit 2; }
done

TOOLS="$TARGET_DIR/bench-tools"
GREETER="${GREETER_BIN:-$TOOLS/greeter_server-$GREETER_PIN}"
if [[ ! -x "$GREETER" ]]; then
  log "building greeter_server @ $GREETER_PIN"
  # `go install pkg@version` refuses the examples module (its go.mod has replace
  # directives), so build it from a throwaway module that requires it.
  mkdir -p "$(dirname "$GREETER")" "$WORK/greeter"
  (
    cd "$WORK/greeter"
    go mod init retryd-bench-greeter >/dev/null 2>&1
    timeout 600 go get "google.golang.org/grpc/examples/helloworld/greeter_server@$GREETER_PIN" >/dev/null 2>&1
    timeout 600 go build -o "$GREETER" google.golang.org/grpc/examples/helloworld/greeter_server
  )
fi
HELLO_PROTO="$(go env GOMODCACHE)/google.golang.org/grpc/examples@$GREETER_PIN/helloworld/helloworld/helloworld.proto"
if [[ ! -f "$HELLO_PROTO" ]]; then
  # A prebuilt GREETER_BIN and an empty module cache: fetch the module for its .proto.
  (cd "$WORK" && timeout 600 go mod download "google.golang.org/grpc/examples@$GREETER_PIN" >/dev/null 2>&1) || true
fi
[[ -f "$HELLO_PROTO" ]] || { echo "run.sh: $HELLO_PROTO not found" >&2; exit 2; }

# --- servers -----------------------------------------------------------------
# start_retryd NAME: starts `retryd serve` on a free port; sets RETRYD_PID, RETRYD_ADDR.
# Nothing but the ports is set: the default configuration of the day
# (`--state memory`, default holds and budgets).
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
SERVE_STATE="$(grep -o 'fleet memory state=[^ ]*' "$WORK/retryd.log" | head -1 | cut -d= -f2 || true)"
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
log "retryd on $SERVE_ADDR (pid $SERVE_PID, state ${SERVE_STATE:-?}), greeter_server on 127.0.0.1:$GREETER_PORT"

# --- the runs ----------------------------------------------------------------
GHZ_COMMON=(--insecure -c "$C" --connections 1 --duration-stop wait --timeout 20s)
ADMIT_BODY='{"catalog":"vibecode","dependency":"portal-7.bitrix24.ru","tenant":"tenant-19","method":"crm.deal.add","operation":"OPERATION_KIND_WRITE","attempt":1}'
RUN_TIMEOUT=$((DUR_S + 60))
REPORT="$ROOT/bench/report.py"

# measured KIND OUTFILE COMMAND...: runs COMMAND (ghz or retryd-load writing
# OUTFILE) with the sampler on the server's /proc/PID/stat, then reduces the
# samples to OUTFILE.cpu (report.py window; see the header for the window).
measured() {
  local kind="$1" out="$2" server_pid="$SERVE_PID" sampler t_end
  shift 2
  [[ "$kind" == greeter ]] && server_pid="$GREETER_PID"
  python3 "$REPORT" sample "$server_pid" "$out.samples" &
  # Not in PIDS: it ends by itself once the server is gone.
  sampler=$!
  sleep 0.1
  local TIMEFORMAT='%3U %3S'
  { time "$@" 2>&3; } 3>&2 2>"$out.time"
  t_end="$(date +%s.%N)"
  sleep 0.1
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  python3 "$REPORT" window "$kind" "$out" "$out.samples" "$out.time" "$t_end" "$WINDOW_HEAD" "$WINDOW_TAIL"
}

ghz_call() {
  local kind="$1" dur="$2" out="$3"
  case "$kind" in
    classify)
      timeout "$RUN_TIMEOUT" "$GHZ" --config bench/ghz-classify.json -c "$C" --connections 1 -z "$dur" -O json "$SERVE_ADDR" >"$out" ;;
    health)
      timeout "$RUN_TIMEOUT" "$GHZ" "${GHZ_COMMON[@]}" --call grpc.health.v1.Health.Check -d '{}' -z "$dur" -O json "$SERVE_ADDR" >"$out" ;;
    admit)
      # A first attempt with no hold in force: the call every successful call makes.
      timeout "$RUN_TIMEOUT" "$GHZ" "${GHZ_COMMON[@]}" --call retryd.v1.RetryDecisionService.Admit \
        -d "$ADMIT_BODY" -z "$dur" -O json "$SERVE_ADDR" >"$out" ;;
    greeter)
      timeout "$RUN_TIMEOUT" "$GHZ" "${GHZ_COMMON[@]}" --proto "$HELLO_PROTO" --call helloworld.Greeter.SayHello \
        -d '{"name":"retryd"}' -z "$dur" -O json "127.0.0.1:$GREETER_PORT" >"$out" ;;
  esac
}

batch_call() {
  # --warmup: retryd-load's own warm-up, outside its measured phase (and the window).
  timeout "$RUN_TIMEOUT" "$LOAD" --addr "http://$SERVE_ADDR" --call batch --batch-size "$BATCH_ITEMS" \
    -c "$BATCH_C" --connections 1 -z "$2" --warmup "$WARM" --json >"$3"
}

# run KIND DURATION OUTFILE
run() {
  if [[ "$1" == batch ]]; then
    measured batch "$3" batch_call "$@"
  else
    measured "$1" "$3" ghz_call "$@"
  fi
}

LOADAVG_START="$(cut -d' ' -f1-3 /proc/loadavg)"
log "warm-up: one run of each ($WARM, not recorded)"
# Not measured: only to warm the servers and the caches (on a busy machine a 1 s
# run may leave no counting window).
for kind in classify health admit greeter batch; do
  if [[ "$kind" == batch ]]; then
    batch_call "$kind" "$WARM" "$WORK/warm-$kind.json"
  else
    ghz_call "$kind" "$WARM" "$WORK/warm-$kind.json"
  fi
done

KINDS=(classify health admit greeter batch)
: >"$WORK/order.txt"
for ((r = 1; r <= ROUNDS; r++)); do
  order=()
  for ((k = 0; k < ${#KINDS[@]}; k++)); do
    order+=("${KINDS[$(((k + r - 1) % ${#KINDS[@]}))]}")
  done
  echo "$r ${order[*]}" >>"$WORK/order.txt"
  for kind in "${order[@]}"; do
    log "round $r/$ROUNDS: $kind ($DUR)"
    run "$kind" "$DUR" "$WORK/r$r-$kind.json"
  done
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
  RSS_SERVE_AFTER THREADS NPROC CPU LOADAVG LOADAVG_START QUICK GREETER_PIN WRITE ROOT TARGET_DIR SERVE_STATE \
  WINDOW_HEAD WINDOW_TAIL
# ghz built by `go install` reports "dev": take the module version from the binary.
GHZ_VERSION="$(go version -m "$GHZ" 2>/dev/null | awk '$1 == "mod" { print $3; exit }')"
RUSTC_VERSION="$(rustc --version 2>/dev/null || echo "rustc: not on PATH (prebuilt binaries)")"
GO_VERSION="$(go version | awk '{print $3}')"
RETRYD_VERSION="$("$RETRYD" --version 2>/dev/null || echo "retryd ?")"
RETRYD_BUILT="$(date -u -r "$RETRYD" '+%Y-%m-%d %H:%M UTC')"
export ADMIT_BODY GHZ_VERSION RUSTC_VERSION GO_VERSION RETRYD_VERSION RETRYD_BUILT
# With BENCH_KEEP=1 the table can be redone from the kept directory:
#   set -a; . DIR/report.env; set +a; python3 bench/report.py
for v in WORK ROUNDS DUR WARM C BATCH_ITEMS BATCH_C RSS_C RSS_CONNS RSS_AT RSS_FOR RSS_IDLE RSS_EARLY RSS_LATE \
  RSS_HWM RSS_SERVE_AFTER THREADS NPROC CPU LOADAVG LOADAVG_START QUICK GREETER_PIN WRITE ROOT TARGET_DIR \
  ADMIT_BODY SERVE_STATE WINDOW_HEAD WINDOW_TAIL GHZ_VERSION RUSTC_VERSION GO_VERSION RETRYD_VERSION RETRYD_BUILT; do
  printf '%s=%q\n' "$v" "${!v}"
done >"$WORK/report.env"
python3 "$ROOT/bench/report.py"
