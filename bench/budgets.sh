#!/usr/bin/env bash
# Fleet retry budgets' costs, measured on loopback, bounded in time.
#
#   bench/budgets.sh                      # 5 interleaved rounds of 5 s
#   bench/budgets.sh --rounds 3 --duration 3s
#
# Starts a real redis-server and two retryd replicas: A with --state memory
# (no first attempt ever recorded there, so no budget is judged: today's
# cost), B with --state redis://… and budgets on: before each of B's runs,
# ghz Admits (attempt 1) deposit first attempts for every dependency and
# tenant of the mix, so every Classify of bench/ghz-fleet-classify.json is
# judged against its dependency's budget (and frontspin's tenant budget),
# counted as a withdrawal, and most are deferred (a storm: the budget is
# spent within the first second). Per round, in alternating order, ghz
# Classify at c=50 over 1 connection on A and on B. Server CPU per call from
# /proc (user + system of the server process / calls answered); Redis
# commands per Classify from INFO commandstats around B's Classify run
# (Admit deposits are flushed in that run too, so they are counted: an
# upper bound).
#
# Needs: cargo, python3, ghz (scripts/install-tools.sh), redis-server.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROUNDS=5
DUR=5s
while (($#)); do
  case "$1" in
    --rounds) ROUNDS="$2"; shift ;;
    --duration) DUR="$2"; shift ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "budgets.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
GHZ="$(go env GOPATH)/bin/ghz"
[[ -x "$GHZ" ]] || bash scripts/install-tools.sh >&2

NAME=budgets
# shellcheck source=bench/fleet-lib.sh
source bench/fleet-lib.sh
build_release
start_redis
start A memory
start B "$REDIS_URL"
log "A (memory, no budgets) $ADDR_A, B (redis, budgets on) $ADDR_B, redis :$REDIS_PORT"


# First attempts for every scope of the mix, 200 each, through B.
deposit() {
  local d
  for d in 'vibecode portal-1.bitrix24.ru tenant-1' 'vibecode portal-1.bitrix24.ru tenant-2' \
    'frontspin frontspin-eu tenant-3' 'http api.example.com tenant-4' 'grpc orders.svc tenant-5' \
    'vibecode portal-2.bitrix24.ru tenant-6'; do
    set -- $d
    "$GHZ" --insecure -c 10 --connections 1 -n 200 --call retryd.v1.RetryDecisionService.Admit \
      -d "{\"catalog\":\"$1\",\"dependency\":\"$2\",\"tenant\":\"$3\",\"attempt\":1}" "$ADDR_B" >/dev/null
  done
}

run() {
  local addr="$1" pid="$2" out="$3" before after
  before="$(cpu_of "$pid")"
  "$GHZ" --config bench/ghz-fleet-classify.json -c 50 --connections 1 -z "$DUR" -O json "$addr" >"$out"
  after="$(cpu_of "$pid")"
  echo "$before $after" >"$out.cpu"
}

log "warm-up"
run "$ADDR_A" "$PID_A" "$WORK/warm-a.json"
deposit
run "$ADDR_B" "$PID_B" "$WORK/warm-b.json"

for ((r = 1; r <= ROUNDS; r++)); do
  for k in 0 1; do
    if (((k + r) % 2 == 0)); then
      log "round $r/$ROUNDS: memory, no budgets ($DUR)"
      run "$ADDR_A" "$PID_A" "$WORK/r$r-memory.json"
    else
      log "round $r/$ROUNDS: redis, budgets on ($DUR)"
      deposit
      c0="$(commands)"
      run "$ADDR_B" "$PID_B" "$WORK/r$r-budgets.json"
      echo "$c0 $(commands)" >"$WORK/r$r-budgets.redis"
    fi
  done
done

export WORK ROUNDS DUR
python3 - <<'PY'
import json, os, statistics as st
work, rounds = os.environ["WORK"], int(os.environ["ROUNDS"])
def per_call(r, kind):
    j = json.load(open(f"{work}/r{r}-{kind}.json"))
    ok = j.get("statusCodeDistribution", {}).get("OK", 0)
    b, a = map(float, open(f"{work}/r{r}-{kind}.json.cpu").read().split())
    return (a - b) / ok * 1e6 if ok else float("nan"), j["rps"], ok
rows = {k: [per_call(r, k) for r in range(1, rounds + 1)] for k in ["memory", "budgets"]}
ratio = [b[0] / m[0] for m, b in zip(rows["memory"], rows["budgets"])]
cmds = []
for r in range(1, rounds + 1):
    c0, c1 = map(int, open(f"{work}/r{r}-budgets.redis").read().split())
    cmds.append((c1 - c0) / rows["budgets"][r - 1][2])
print(f"rounds: {rounds} x {os.environ['DUR']}, ghz c=50 over 1 connection, mix bench/ghz-fleet-classify.json; server CPU per call from /proc")
for k, v in rows.items():
    print(f"  {k:8s} server µs/call " + " ".join(f"{x[0]:6.1f}" for x in v) + f"   median {st.median(x[0] for x in v):6.1f}   rps median {st.median(x[1] for x in v):8.0f}")
print(f"Classify budgets on (redis) / memory without budgets, per round: {' '.join(f'{x:.2f}' for x in ratio)}  median {st.median(ratio):.2f}  (target <= 1.10)")
print(f"Redis commands per Classify, per round: {' '.join(f'{x:.4f}' for x in cmds)}  max {max(cmds):.4f}  (target <= 0.05)")
PY
