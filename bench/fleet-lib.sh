# Shared by bench/fleet.sh, bench/budgets.sh, bench/fleet_callgrind.sh and bench/ab.sh:
# a scratch directory and child processes cleaned up on exit, a real
# redis-server on a free loopback port, release retryd replicas, and the
# counters those benches read (server CPU from /proc, Redis commands from
# INFO commandstats). Source it after setting NAME (the log prefix).

WORK="$(mktemp -d -t "retryd-$NAME.XXXXXX")"
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
log() { printf '[%s %s] %s\n' "$NAME" "$(date +%H:%M:%S)" "$*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
# CPU seconds (user + system) process $1 has used so far.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat"; }

# build_release: sets RETRYD and LOAD (RETRYD_BIN / RETRYD_LOAD skip the build).
build_release() {
  if [[ -z "${RETRYD_BIN:-}" ]]; then
    log "building release retryd and retryd-load"
    timeout 1800 cargo build --release --quiet --bin retryd --bin retryd-load
  fi
  local target
  target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
  RETRYD="${RETRYD_BIN:-$target/release/retryd}"
  LOAD="${RETRYD_LOAD:-$target/release/retryd-load}"
}

# start_redis: a redis-server with persistence off; sets REDIS_PORT, REDIS_URL.
start_redis() {
  command -v redis-server >/dev/null || { echo "$NAME: redis-server is required (apt-get install redis-server)" >&2; exit 2; }
  REDIS_PORT="$(free_port)"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" >/dev/null 2>&1 &
  PIDS+=($!)
  local _
  for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
  REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
}

# Redis commands served so far (INFO itself not counted).
commands() { redis-cli -p "$REDIS_PORT" info commandstats | awk -F'[=,:]' '/^cmdstat_/ && $1 != "cmdstat_info" { n += $3 } END { print n + 0 }'; }

# serve NAME BIN [FLAGS...]: `BIN serve` on a free loopback port with
# FLAGS; sets PID_NAME and ADDR_NAME once it listens.
serve() {
  local name="$1" bin="$2" logf="$WORK/$1.log"
  shift 2
  "$bin" serve --listen 127.0.0.1:0 --metrics-listen off "$@" 2>"$logf" &
  local pid=$!
  PIDS+=("$pid")
  local addr="" _
  for _ in $(seq 100); do
    addr="$(grep -o 'listening on [0-9.:]*' "$logf" | awk '{print $3}' || true)"
    [[ -n "$addr" ]] && break
    sleep 0.1
  done
  [[ -n "$addr" ]] || { cat "$logf" >&2; exit 1; }
  printf -v "PID_$name" '%s' "$pid"
  printf -v "ADDR_$name" '%s' "$addr"
}

# start REPLICA STATE: `retryd serve --state STATE` (see serve). Per-caller
# hold rates are lifted: one load generator is one caller, and the benches
# place many holds on purpose.
start() {
  serve "$1" "$RETRYD" --state "$2" --hold-placements-per-sec 100000 --dependency-holds-per-sec 100000
}
