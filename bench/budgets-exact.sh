#!/usr/bin/env bash
# Retry budgets near exhaustion (issue 23, item 4): how exact, how many
# round trips, what Classify latency, with N replicas sharing one Redis.
#
#   bench/budgets-exact.sh                      # 2 replicas, 3 rounds
#   bench/budgets-exact.sh --replicas 3 --rounds 3 --rate 5000
#
# Starts a real redis-server, N release replicas with --state redis://…
# and one with --state memory (the latency baseline: no budget judged).
# Per round, on a fresh dependency of the vibecode catalog (20 % + 10/s
# over 10 s):
# 1. storm: 1 000 first attempts (ghz Admit, spread over the replicas),
#    then 600 retries at once (ghz Classify at --rate per replica): what
#    Redis counted as approved once idle replicas handed their leases back
#    (ListBudgets `retries`; budget 300, target 300 ± 6);
# 2. sustained: for 3 s, --rate retries/s per replica while first attempts
#    arrive at 1 000/s per replica (the scope stays at the edge of its
#    budget the whole time): lease asks (Redis EVAL) and Redis commands
#    per retry, Classify p99 on the replicas against the memory replica's
#    at the same rate, and approved / allowed at the end.
#
# Needs: cargo, python3, ghz (scripts/install-tools.sh), redis-server.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROUNDS=3
N=2
RATE=5000
while (($#)); do
  case "$1" in
    --rounds) ROUNDS="$2"; shift ;;
    --replicas) N="$2"; shift ;;
    --rate) RATE="$2"; shift ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "budgets-exact.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
GHZ="$(go env GOPATH)/bin/ghz"
[[ -x "$GHZ" ]] || bash scripts/install-tools.sh >&2

NAME=budgets-exact
# shellcheck source=bench/fleet-lib.sh
source bench/fleet-lib.sh
build_release
start_redis
ADDRS=()
for ((i = 1; i <= N; i++)); do
  start "R$i" "$REDIS_URL"
  v="ADDR_R$i"
  ADDRS+=("${!v}")
done
start M memory
log "replicas ${ADDRS[*]} (redis :$REDIS_PORT), memory baseline $ADDR_M"

# The load generators started since the last call (not the servers).
JOBS=()
wait_jobs() {
  local j
  for j in "${JOBS[@]}"; do wait "$j"; done
  JOBS=()
}
evals() { redis-cli -p "$REDIS_PORT" info commandstats | awk -F'[=,:]' '$1 == "cmdstat_eval" { print $3 } END { }' | head -1; }
retry_json() { echo "{\"failure\":{\"catalog\":\"vibecode\",\"code\":\"BITRIX_TIMEOUT\",\"operation\":\"OPERATION_KIND_READ\",\"attempt\":2,\"dependency\":\"$1\"}}"; }
admit_json() { echo "{\"catalog\":\"vibecode\",\"dependency\":\"$1\",\"attempt\":1}"; }
standing() {
  "$RETRYD" budgets list --addr "http://${ADDRS[0]}" --dependency "$1" --format json | head -1
}

for ((r = 1; r <= ROUNDS; r++)); do
  dep="exact-$r-$RANDOM.example"
  log "round $r/$ROUNDS: storm on $dep"
  for a in "${ADDRS[@]}"; do
    "$GHZ" --insecure -c 10 --connections 1 -n $((1000 / N)) --call retryd.v1.RetryDecisionService.Admit \
      -d "$(admit_json "$dep")" "$a" >/dev/null &
    JOBS+=($!)
  done
  wait_jobs
  sleep 0.5
  e0="$(evals)"
  for a in "${ADDRS[@]}"; do
    "$GHZ" --insecure -c 20 --connections 1 --rps "$RATE" -n $((600 / N)) --call retryd.v1.RetryDecisionService.Classify \
      -d "$(retry_json "$dep")" -O json "$a" >"$WORK/r$r-storm-$a.json" &
    JOBS+=($!)
  done
  wait_jobs
  e1="$(evals)"
  sleep 1
  standing "$dep" >"$WORK/r$r-storm.standing"
  echo "${e0:-0} ${e1:-0}" >"$WORK/r$r-storm.evals"

  dep="edge-$r-$RANDOM.example"
  log "round $r/$ROUNDS: 3 s at the edge of the budget on $dep"
  for a in "${ADDRS[@]}"; do
    "$GHZ" --insecure -c 10 --connections 1 -n 200 --call retryd.v1.RetryDecisionService.Admit -d "$(admit_json "$dep")" "$a" >/dev/null
  done
  sleep 0.3
  e0="$(evals)"
  c0="$(commands)"
  for a in "${ADDRS[@]}"; do
    "$GHZ" --insecure -c 10 --connections 1 --rps 1000 -z 3s --call retryd.v1.RetryDecisionService.Admit \
      -d "$(admit_json "$dep")" "$a" >/dev/null &
    JOBS+=($!)
    "$GHZ" --insecure -c 20 --connections 1 --rps "$RATE" -z 3s --call retryd.v1.RetryDecisionService.Classify \
      -d "$(retry_json "$dep")" -O json "$a" >"$WORK/r$r-edge-$a.json" &
    JOBS+=($!)
  done
  "$GHZ" --insecure -c 20 --connections 1 --rps "$RATE" -z 3s --call retryd.v1.RetryDecisionService.Classify \
    -d "$(retry_json "$dep")" -O json "$ADDR_M" >"$WORK/r$r-edge-memory.json" &
  JOBS+=($!)
  wait_jobs
  e1="$(evals)"
  c1="$(commands)"
  sleep 1
  standing "$dep" >"$WORK/r$r-edge.standing"
  echo "${e0:-0} ${e1:-0} $c0 $c1" >"$WORK/r$r-edge.evals"
done

export WORK ROUNDS N RATE
python3 - <<'PY'
import glob, json, os, statistics as st
work, rounds, n, rate = os.environ["WORK"], int(os.environ["ROUNDS"]), int(os.environ["N"]), os.environ["RATE"]
def ghz(path):
    j = json.load(open(path))
    p99 = next((d["latency"] for d in j.get("latencyDistribution") or [] if d["percentage"] == 99), 0) / 1e6
    return j.get("count", 0), j.get("rps", 0.0), p99
print(f"{n} replicas sharing one Redis, ghz c=20 at --rps {rate} per replica, vibecode 20 % + 10/s over 10 s")
for r in range(1, rounds + 1):
    s = json.loads(open(f"{work}/r{r}-storm.standing").read())
    e0, e1 = map(int, open(f"{work}/r{r}-storm.evals").read().split())
    runs = [ghz(p) for p in glob.glob(f"{work}/r{r}-storm-*.json")]
    calls = sum(c for c, _, _ in runs)
    print(f"  round {r} storm: {calls} retries at {min(x[1] for x in runs):.0f}-{max(x[1] for x in runs):.0f}/s per replica; "
          f"approved (Redis count) {s['retries']} of {s['allowed']} allowed; lease asks {e1 - e0} "
          f"({(e1 - e0) / max(calls, 1):.3f} per retry); Classify p99 {max(x[2] for x in runs):.2f} ms")
    e0, e1, c0, c1 = map(int, open(f"{work}/r{r}-edge.evals").read().split())
    s = json.loads(open(f"{work}/r{r}-edge.standing").read())
    runs = [ghz(p) for p in glob.glob(f"{work}/r{r}-edge-*.json") if not p.endswith("memory.json")]
    mem = ghz(f"{work}/r{r}-edge-memory.json")
    calls = sum(c for c, _, _ in runs)
    print(f"  round {r} edge 3 s: {calls} retries ({min(x[1] for x in runs):.0f}-{max(x[1] for x in runs):.0f}/s per replica), "
          f"approved (Redis count) {s['retries']} of {s['allowed']} allowed; lease asks {(e1 - e0) / max(calls, 1):.4f} per retry, "
          f"Redis commands {(c1 - c0) / max(calls, 1):.4f} per Classify (Admits' flushes included); "
          f"Classify p99 {max(x[2] for x in runs):.2f} ms (memory, no budget: {mem[2]:.2f} ms)")
PY
