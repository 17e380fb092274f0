#!/usr/bin/env bash
# What a client library adds to a call, against calling retryd's RPCs by hand
# (the Go library; clients/go/cmd/bench). Starts its own retryd on a free port.
#
#   bash bench/clients.sh [-n 5000]        # RETRYD_BIN: the binary (default target/release/retryd, else target/debug/retryd)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
bin="${RETRYD_BIN:-}"
[[ -n "$bin" ]] || { [[ -x "$target_dir/release/retryd" ]] && bin="$target_dir/release/retryd" || bin="$target_dir/debug/retryd"; }
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$bin" serve --listen "127.0.0.1:$port" --metrics-listen off --log-level warn &
pid=$!
trap 'kill "$pid"; wait "$pid" 2>/dev/null' EXIT
until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.1; done
echo "retryd: $bin"
(cd "$root/clients/go" && GOFLAGS="${GOFLAGS:-} -buildvcs=false" go run ./cmd/bench -addr "127.0.0.1:$port" "$@")
