#!/usr/bin/env bash
# Fleet memory's costs, measured: everything on loopback, bounded in time.
#
#   bench/fleet.sh                      # 5 interleaved rounds of 5 s (~4 min after the build)
#   bench/fleet.sh --rounds 3 --duration 3s
#
# Starts a real redis-server and two retryd replicas: A with --state memory,
# B with --state redis://… (plus C, a second Redis replica, for staleness).
# Per round, in rotating order, ghz at c=50 over 1 connection (as bench/run.sh):
#   - health Check on A (the floor: no work per call),
#   - Admit on A with no hold in force,
#   - Classify on A (--state memory) and on B (--state redis) with the mix of
#     bench/ghz-fleet-classify.json: failures with dependencies and
#     Retry-Afters, so the first of each places a hold and the rest meet it.
# The server's own CPU per call comes from /proc (user + system of the server
# process over the run / the calls answered), which keeps ghz's share out of
# it; ratios are paired within each round and the median is reported.
# Redis commands per Classify come from INFO commandstats around B's runs.
# Last, staleness: a hold placed on B (Classify) and polled with Admit on C,
# 200 times; median and p99 of the time until C refuses.
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
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "fleet.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
GHZ="$(go env GOPATH)/bin/ghz"
[[ -x "$GHZ" ]] || bash scripts/install-tools.sh >&2

NAME=fleet
# shellcheck source=bench/fleet-lib.sh
source bench/fleet-lib.sh
build_release
start_redis
start A memory
start B "$REDIS_URL"
start C "$REDIS_URL"
log "A (memory) $ADDR_A, B (redis) $ADDR_B, C (redis) $ADDR_C, redis :$REDIS_PORT"


# run KIND ADDR PID OUT: ghz, with the server's CPU seconds written to OUT.cpu.
run() {
  local kind="$1" addr="$2" pid="$3" out="$4" before after
  local common=(--insecure -c 50 --connections 1 -z "$DUR" --duration-stop wait --timeout 20s -O json)
  before="$(cpu_of "$pid")"
  case "$kind" in
    health) "$GHZ" "${common[@]}" --call grpc.health.v1.Health.Check -d '{}' "$addr" >"$out" ;;
    admit) "$GHZ" "${common[@]}" --call retryd.v1.RetryDecisionService.Admit \
      -d '{"catalog":"vibecode","dependency":"portal-{{.RequestNumber}}","tenant":"t","method":"crm.deal.add","attempt":1}' "$addr" >"$out" ;;
    classify) "$GHZ" --config bench/ghz-fleet-classify.json -c 50 --connections 1 -z "$DUR" -O json "$addr" >"$out" ;;
  esac
  after="$(cpu_of "$pid")"
  echo "$before $after" >"$out.cpu"
}

log "warm-up"
for k in health admit classify; do run "$k" "$ADDR_A" "$PID_A" "$WORK/warm-$k.json"; done
run classify "$ADDR_B" "$PID_B" "$WORK/warm-classify-redis.json"

KINDS=(health admit classify classify-redis)
for ((r = 1; r <= ROUNDS; r++)); do
  for ((k = 0; k < 4; k++)); do
    kind="${KINDS[$(((k + r - 1) % 4))]}"
    log "round $r/$ROUNDS: $kind ($DUR)"
    if [[ "$kind" == classify-redis ]]; then
      c0="$(commands)"
      run classify "$ADDR_B" "$PID_B" "$WORK/r$r-$kind.json"
      echo "$c0 $(commands)" >"$WORK/r$r-$kind.redis"
    else
      run "$kind" "$ADDR_A" "$PID_A" "$WORK/r$r-$kind.json"
    fi
  done
done

log "staleness: a hold placed through B, until Admit on C refuses (200 times)"
python3 bench/fleet_staleness.py --place "$ADDR_B" --watch "$ADDR_C" --n 200 >"$WORK/staleness.json"

export WORK ROUNDS DUR
python3 - <<'EOF'
import json, os, statistics as st
work, rounds = os.environ["WORK"], int(os.environ["ROUNDS"])
def per_call(r, kind):
    j = json.load(open(f"{work}/r{r}-{kind}.json"))
    ok = j.get("statusCodeDistribution", {}).get("OK", 0)
    b, a = map(float, open(f"{work}/r{r}-{kind}.json.cpu").read().split())
    return (a - b) / ok * 1e6 if ok else float("nan"), j["rps"], ok
rows = {k: [per_call(r, k) for r in range(1, rounds + 1)] for k in ["health", "admit", "classify", "classify-redis"]}
def ratios(a, b): return [x[0] / y[0] for x, y in zip(rows[a], rows[b])]
adm, red = ratios("admit", "health"), ratios("classify-redis", "classify")
cmds = []
for r in range(1, rounds + 1):
    c0, c1 = map(int, open(f"{work}/r{r}-classify-redis.redis").read().split())
    cmds.append((c1 - c0) / rows["classify-redis"][r - 1][2])
stale = json.load(open(f"{work}/staleness.json"))
print(f"rounds: {rounds} x {os.environ['DUR']}, ghz c=50 over 1 connection; server CPU per call from /proc")
for k, v in rows.items():
    print(f"  {k:15s} server µs/call " + " ".join(f"{x[0]:6.1f}" for x in v) + f"   median {st.median(x[0] for x in v):6.1f}   rps median {st.median(x[1] for x in v):8.0f}")
print(f"Admit (no hold) / health Check, per round: {' '.join(f'{x:.2f}' for x in adm)}  median {st.median(adm):.2f}  (target <= 1.10)")
print(f"Classify redis / memory, per round:       {' '.join(f'{x:.2f}' for x in red)}  median {st.median(red):.2f}  (target <= 1.10)")
print(f"Redis commands per Classify, per round:   {' '.join(f'{x:.4f}' for x in cmds)}  max {max(cmds):.4f}  (target <= 0.01)")
print(f"staleness B -> C: median {stale['median_ms']:.1f} ms, p99 {stale['p99_ms']:.1f} ms, max {stale['max_ms']:.1f} ms over {stale['n']} holds (target <= 100 ms)")
EOF
