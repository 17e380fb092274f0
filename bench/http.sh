#!/usr/bin/env bash
# The HTTP/JSON door's cost (issue 14), side by side with gRPC, same
# concurrency, same failure (a vibecode BITRIX_TIMEOUT write):
#   A. gRPC Classify throughput and server CPU per call with the HTTP routes
#      on the same port (`serve`, the default) and without (`serve --http false`),
#      rounds alternated so drift from other load on the machine hits both;
#   B. server CPU per call of POST /v1/classify (wrk, HTTP/1.1 keep-alive) vs
#      gRPC Classify (ghz), on the same server.
# Server CPU is user + system from /proc/PID/stat over the run.
#
#   bash bench/http.sh [ROUNDS=3] [SECONDS=8] [CONCURRENCY=50]
# Needs: a release build (cargo build --release), wrk, and retryd-load
# (cargo build --release --bin retryd-load; RETRYD_LOAD=path) or else ghz
# for the gRPC side (ghz spends several times the server's CPU, so on a
# small machine it, not the server, limits gRPC throughput).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-3}" DUR="${2:-8}" C="${3:-50}"
BIN="${RETRYD_BIN:-${CARGO_TARGET_DIR:-target}/release/retryd}"
GHZ="$(command -v ghz || echo "$(go env GOPATH)/bin/ghz")"
LOAD="${RETRYD_LOAD:-${CARGO_TARGET_DIR:-target}/release/retryd-load}"
WORK="$(mktemp -d -t retryd-http-bench.XXXXXX)"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$WORK"' EXIT

start() { # start NAME FLAGS... -> sets ADDR PID
  "$BIN" serve --listen 127.0.0.1:0 --metrics-listen off "${@:2}" 2>"$WORK/$1.log" &
  PID=$!; PIDS+=("$PID")
  for _ in $(seq 100); do
    ADDR="$(grep -oE 'listening on 127\.0\.0\.1:[0-9]+' "$WORK/$1.log" | head -n1 | cut -d' ' -f3)" || true
    [[ -n "$ADDR" ]] && return
    sleep 0.1
  done
  echo "http.sh: $1 did not start" >&2; exit 1
}
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat"; }

GRPC_DATA='{"failure":{"catalog":"vibecode","code":"BITRIX_TIMEOUT","operation":"OPERATION_KIND_WRITE","method":"crm.deal.add","attempt":1}}'
HTTP_BODY='{"failure":{"catalog":"vibecode","code":"BITRIX_TIMEOUT","operation":"write","method":"crm.deal.add","attempt":1}}'
cat >"$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '$HTTP_BODY'
wrk.headers["Content-Type"] = "application/json"
LUA

# grpc_run ADDR PID -> "rps cpu_us_per_call"
grpc_run() {
  local before after
  before="$(cpu_of "$2")"
  if [[ -x "$LOAD" ]]; then
    "$LOAD" --addr "http://$1" --call classify -c "$C" --connections 1 -z "${DUR}s" --json >"$WORK/ghz.json"
  else
  "$GHZ" --insecure --call retryd.v1.RetryDecisionService.Classify -d "$GRPC_DATA" \
    -c "$C" --connections 1 --duration-stop wait -z "${DUR}s" -O json "$1" >"$WORK/ghz.json" 2>/dev/null
  fi
  after="$(cpu_of "$2")"
  python3 - "$WORK/ghz.json" "$before" "$after" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
codes = r.get("statusCodeDistribution") or r.get("status") or {}
assert codes.get("OK", 0) == r["count"], codes
cpu = float(sys.argv[3]) - float(sys.argv[2])
print(f"{r['rps']:.0f} {cpu / r['count'] * 1e6:.1f}")
PY
}

# http_run ADDR PID -> "rps cpu_us_per_call"
http_run() {
  local before after
  before="$(cpu_of "$2")"
  wrk -t 1 -c "$C" -d "${DUR}s" -s "$WORK/post.lua" "http://$1/v1/classify" >"$WORK/wrk.txt"
  after="$(cpu_of "$2")"
  python3 - "$WORK/wrk.txt" "$before" "$after" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
n = int(re.search(r"(\d+) requests in", t).group(1))
assert "Non-2xx" not in t, t
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
cpu = float(sys.argv[3]) - float(sys.argv[2])
print(f"{rps:.0f} {cpu / n * 1e6:.1f}")
PY
}

start with_http; A_ADDR="$ADDR"; A_PID="$PID"
start grpc_only --http false; B_ADDR="$ADDR"; B_PID="$PID"
echo "# gRPC load: $([[ -x "$LOAD" ]] && echo "$LOAD" || echo ghz); HTTP load: wrk -t 1 -c $C; ${DUR}s per run, c=$C"
echo "# warm-up"; grpc_run "$A_ADDR" "$A_PID" >/dev/null; grpc_run "$B_ADDR" "$B_PID" >/dev/null; http_run "$A_ADDR" "$A_PID" >/dev/null
echo "round  grpc(one port: rps cpu_us)  grpc(--http false: rps cpu_us)  http(POST /v1/classify: rps cpu_us)"
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then a="$(grpc_run "$A_ADDR" "$A_PID")"; b="$(grpc_run "$B_ADDR" "$B_PID")"
  else b="$(grpc_run "$B_ADDR" "$B_PID")"; a="$(grpc_run "$A_ADDR" "$A_PID")"; fi
  h="$(http_run "$A_ADDR" "$A_PID")"
  echo "$r      $a      $b      $h"
done
