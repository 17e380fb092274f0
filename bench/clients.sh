#!/usr/bin/env bash
# What a client library adds to a call, against calling retryd's RPCs by hand
# (the Go library; clients/go/cmd/bench). Starts its own retryd on a free port.
# Python and Node: a no-op through the client (holds mirror synced, no hold)
# against the bare no-op, medians (bench/clients_python.py, bench/clients_node.mjs;
# targets: 20 µs added each).
#
#   bash bench/clients.sh [-n 5000]        # RETRYD_BIN: the binary (default target/release/retryd, else target/debug/retryd)
#   CLIENTS="python node" bash bench/clients.sh -n 20000   # only these (default: go python node)
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
clients=" ${CLIENTS:-go python node} "
[[ "$clients" != *" go "* ]] || \
(cd "$root/clients/go" && GOFLAGS="${GOFLAGS:-} -buildvcs=false" go run ./cmd/bench -addr "127.0.0.1:$port" "$@")
if [[ "$clients" == *" python "* ]]; then
  RETRYD_ADDR="127.0.0.1:$port" "$root/clients/python/.venv/bin/python" "$root/bench/clients_python.py" "$@"
fi
if [[ "$clients" == *" node "* ]]; then
  (cd "$root/clients/node" && npm run --silent build) && RETRYD_ADDR="127.0.0.1:$port" node "$root/bench/clients_node.mjs" "$@"
fi
