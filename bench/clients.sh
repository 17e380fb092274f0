#!/usr/bin/env bash
# What a client library adds to a call against calling the function bare:
# the success path of a no-op through the library with the holds mirror
# synced and no hold (no RPC), median and p99 per call over -n calls; with
# the mirror off (an Admit RPC per call) for comparison. Starts its own
# retryd on a free port. Each language's part runs its own bench:
#   go   — clients/go/cmd/bench
#   rust — clients/rust/examples/bench.rs (release build)
#
#   bash bench/clients.sh [go rust ...]    # default: go rust
#   N=20000 RETRYD_BIN=... bash bench/clients.sh
# RETRYD_BIN: the binary (default target/release/retryd, else target/debug/retryd).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
bin="${RETRYD_BIN:-}"
[[ -n "$bin" ]] || { [[ -x "$target_dir/release/retryd" ]] && bin="$target_dir/release/retryd" || bin="$target_dir/debug/retryd"; }
n="${N:-20000}"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$bin" serve --listen "127.0.0.1:$port" --metrics-listen off --log-level warn &
pid=$!
trap 'kill "$pid"; wait "$pid" 2>/dev/null' EXIT
until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.1; done
echo "retryd: $bin"
langs=("$@")
((${#langs[@]})) || langs=(go rust)
for lang in "${langs[@]}"; do
  echo "--- $lang"
  case "$lang" in
    go) (cd "$root/clients/go" && GOFLAGS="${GOFLAGS:-} -buildvcs=false" go run ./cmd/bench -addr "127.0.0.1:$port" -n "$n") ;;
    rust) cargo run -q --release -p retryd-client --example bench -- "127.0.0.1:$port" "$n" ;;
    *) echo "bench/clients.sh: no bench for $lang"; exit 2 ;;
  esac
done
