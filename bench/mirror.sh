#!/usr/bin/env bash
# The clients' holds mirror in a fleet (issue 26), measured with the Go
# client (clients/go/cmd/mirrorbench): a real redis-server on a free
# loopback port and two `retryd serve --state redis` replicas the program
# starts itself. Bounded: four parts, about 30 s after the builds.
#   1. Admit RPCs retryd receives for 1 000 successful calls after the
#      snapshot (grpc_server_started_total; target 0);
#   2. hold placed (on either replica) -> in a client's mirror, p99 over 200
#      placements (target <= 200 ms);
#   3. the reset of #22 with 40 mirror clients, each call to the dependency
#      taking 150 ms to fail again: calls reaching it in the 3 s after the
#      reset (target 1);
#   4. a replica restarted under 40 mirror clients during a quota stop:
#      calls reaching the stopped tenant (target 0).
#
#   bash bench/mirror.sh [--only N]
# RETRYD_BIN: the binary (default target/release/retryd, else target/debug/retryd).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
NAME=mirror
# shellcheck source=bench/fleet-lib.sh
source bench/fleet-lib.sh
target_dir="${CARGO_TARGET_DIR:-$root/target}"
bin="${RETRYD_BIN:-}"
[[ -n "$bin" ]] || { [[ -x "$target_dir/release/retryd" ]] && bin="$target_dir/release/retryd" || bin="$target_dir/debug/retryd"; }
bin="$(realpath "$bin")"
start_redis
log "retryd: $bin; redis: $REDIS_URL"
(cd clients/go && GOFLAGS="${GOFLAGS:-} -buildvcs=false" timeout 300 go run ./cmd/mirrorbench -bin "$bin" -redis "$REDIS_URL" "$@")
