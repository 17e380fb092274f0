#!/usr/bin/env bash
# End-to-end checks of retryd from other languages and standard gRPC tools.
# Builds retryd, starts `retryd serve` on loopback ports chosen by the OS,
# then checks: the Python, Go and Node example clients, the PHP and shell
# (curl + jq) clients of the HTTP/JSON door; ghz load through
# server reflection with zero errors; grpc_health_probe; grpcurl list,
# describe and a JSON call; `retryd health`; that the committed Go stubs
# are current; and that SIGTERM stops the server with exit 0.
# Ends with `polyglot: N passed, M failed`; exits 1 if any check failed.
#
#   scripts/install-tools.sh && scripts/polyglot-check.sh
#
# Environment:
#   RETRYD_BIN        use this binary instead of building (cargo build)
#   CARGO_PROFILE     dev (default) or release
#   GHZ_REQUESTS      total Classify calls for ghz (default 5000)
#   GHZ_CONCURRENCY   ghz workers (default 20)
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
gobin="$(go env GOBIN 2>/dev/null)"
[[ -n "$gobin" ]] || gobin="$(go env GOPATH 2>/dev/null)/bin"
export PATH="$gobin:$PATH"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

work="$(mktemp -d -t retryd-polyglot.XXXXXX)"
server_pid=""
passed=0
failed=0

cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "polyglot: interrupted" >&2; exit 130' INT TERM

pass() { passed=$((passed + 1)); echo "polyglot: PASS $1"; }
fail() {
  failed=$((failed + 1))
  echo "polyglot: FAIL $1" >&2
  if [[ -n "${2:-}" && -s "$2" ]]; then sed 's/^/    | /' "$2" | tail -n 40 >&2; fi
}
finish() {
  echo "polyglot: $passed passed, $failed failed"
  ((failed == 0))
  exit
}

# check NAME SECONDS CMD...: runs CMD with a time limit, output to a log
# shown on failure; passes on exit 0.
check() {
  local name="$1" secs="$2"
  shift 2
  local log="$work/$(echo "$name" | tr -c 'A-Za-z0-9' '_').log"
  if timeout --kill-after=5 "$secs" "$@" >"$log" 2>&1; then
    pass "$name"
  else
    echo "    (exit $?)" >>"$log"
    fail "$name" "$log"
  fi
}

# --- build -------------------------------------------------------------------
bin="${RETRYD_BIN:-}"
if [[ -z "$bin" ]]; then
  profile="${CARGO_PROFILE:-dev}"
  dir=debug
  [[ "$profile" == release ]] && dir=release
  if timeout 1800 cargo build --manifest-path "$root/Cargo.toml" --profile "$profile" --bin retryd \
    >"$work/build.log" 2>&1; then
    pass "cargo build ($profile)"
  else
    fail "cargo build ($profile)" "$work/build.log"
    finish
  fi
  target_dir="$(cargo metadata --manifest-path "$root/Cargo.toml" --format-version 1 --no-deps 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null)"
  bin="${target_dir:-$root/target}/$dir/retryd"
fi

# --- start the server ----------------------------------------------------------
"$bin" serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
port=""
for _ in $(seq 1 300); do # up to 30 s
  port="$(sed 's/\x1b\[[0-9;]*m//g' "$work/server.err" \
    | grep -oE 'listening on 127\.0\.0\.1:[0-9]+' | head -n1 | grep -oE '[0-9]+$')"
  [[ -n "$port" ]] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -z "$port" ]]; then
  fail "retryd serve started (no 'listening on 127.0.0.1:PORT' on stderr)" "$work/server.err"
  finish
fi
addr="127.0.0.1:$port"
pass "retryd serve listening on $addr"

# --- clients -----------------------------------------------------------------------
check "python example (examples/python/client.py)" 120 \
  "$root/examples/python/.venv/bin/python" "$root/examples/python/client.py" "$addr"
check "go example (examples/go/cmd/retryd-example)" 600 \
  bash -c 'cd "$1" && go run ./cmd/retryd-example "$2"' _ "$root/examples/go" "$addr"
check "node example (examples/node/client.js)" 120 \
  node "$root/examples/node/client.js" "$addr"
check "go stubs current (scripts/gen-go.sh --check)" 180 "$root/scripts/gen-go.sh" --check
# The HTTP/JSON door on the same port: PHP with plain curl_*, bash with curl + jq.
check "php example over HTTP/JSON (examples/php/client.php)" 60 \
  php "$root/examples/php/client.php" "http://$addr"
check "shell example over HTTP/JSON (examples/shell/classify.sh)" 60 \
  bash "$root/examples/shell/classify.sh" "http://$addr"

# --- ghz through reflection (no --proto) ---------------------------------------------
n="${GHZ_REQUESTS:-5000}"
c="${GHZ_CONCURRENCY:-20}"
payload='{"failure":{"catalog":"vibecode","code":"BITRIX_TIMEOUT","operation":"OPERATION_KIND_WRITE","method":"crm.deal.add","attempt":1}}'
if timeout --kill-after=5 300 ghz --insecure --call retryd.v1.RetryDecisionService.Classify \
  -d "$payload" -n "$n" -c "$c" --timeout 10s --format json -o "$work/ghz.json" "$addr" \
  >"$work/ghz.log" 2>&1 \
  && python3 - "$work/ghz.json" "$n" >>"$work/ghz.log" 2>&1 <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
want = int(sys.argv[2])
codes = report.get("statusCodeDistribution") or {}
errors = report.get("errorDistribution") or {}
ms = lambda ns: ns / 1e6
lat = {d["percentage"]: d["latency"] for d in report.get("latencyDistribution") or []}
print(f"ghz: count={report['count']} rps={report['rps']:.0f} average={ms(report['average']):.2f}ms "
      f"p50={ms(lat.get(50, 0)):.2f}ms p99={ms(lat.get(99, 0)):.2f}ms "
      f"slowest={ms(report['slowest']):.2f}ms status={codes} errors={errors}")
ok = report["count"] == want and codes == {"OK": want} and not errors
sys.exit(0 if ok else 1)
PY
then
  pass "ghz $n Classify calls (-c $c, reflection): 0 errors"
  grep '^ghz:' "$work/ghz.log" | sed 's/^/    /'
else
  fail "ghz $n Classify calls (-c $c, reflection)" "$work/ghz.log"
fi

# --- health, reflection ------------------------------------------------------------------
if timeout 15 grpc_health_probe -addr "$addr" -connect-timeout 5s -rpc-timeout 5s >"$work/probe.log" 2>&1 \
  && grep -q 'SERVING' "$work/probe.log"; then
  pass "grpc_health_probe -addr $addr: SERVING"
else
  fail "grpc_health_probe -addr $addr" "$work/probe.log"
fi
check "retryd health --addr http://$addr" 15 "$bin" health --addr "http://$addr"

if timeout 15 grpcurl -plaintext "$addr" list >"$work/list.log" 2>&1 \
  && grep -qx 'retryd.v1.RetryDecisionService' "$work/list.log" \
  && grep -qx 'grpc.health.v1.Health' "$work/list.log"; then
  pass "grpcurl list: retryd.v1.RetryDecisionService, grpc.health.v1.Health"
else
  fail "grpcurl list" "$work/list.log"
fi
if timeout 15 grpcurl -plaintext "$addr" describe retryd.v1.RetryDecisionService >"$work/describe.log" 2>&1 \
  && grep -q 'rpc Classify ( .retryd.v1.ClassifyRequest ) returns ( .retryd.v1.ClassifyResponse )' "$work/describe.log" \
  && grep -q 'rpc ClassifyBatch ( .retryd.v1.ClassifyBatchRequest ) returns ( .retryd.v1.ClassifyBatchResponse )' "$work/describe.log"; then
  pass "grpcurl describe retryd.v1.RetryDecisionService: Classify, ClassifyBatch"
else
  fail "grpcurl describe retryd.v1.RetryDecisionService" "$work/describe.log"
fi
if timeout 15 grpcurl -plaintext -d "$payload" "$addr" retryd.v1.RetryDecisionService/Classify \
  >"$work/call.log" 2>&1 \
  && grep -q '"verdict": "VERDICT_STATE_VERIFICATION_REQUIRED"' "$work/call.log" \
  && grep -q '"reconciliationAction": "read_back_by_business_key"' "$work/call.log"; then
  pass "grpcurl Classify (JSON through reflection): VERDICT_STATE_VERIFICATION_REQUIRED"
else
  fail "grpcurl Classify (JSON through reflection)" "$work/call.log"
fi

# --- graceful stop -----------------------------------------------------------------------
kill -TERM "$server_pid"
for _ in $(seq 1 150); do # up to 15 s
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$server_pid" 2>/dev/null; then
  fail "SIGTERM: server still running after 15 s" "$work/server.err"
else
  wait "$server_pid"
  rc=$?
  server_pid=""
  if ((rc == 0)); then
    pass "SIGTERM: server exited 0"
  else
    echo "    (exit $rc)" >>"$work/server.err"
    fail "SIGTERM: server exited $rc" "$work/server.err"
  fi
fi

finish
