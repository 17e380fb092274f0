#!/usr/bin/env bash
# What a client library adds to a call against calling the function bare:
# the success path of a no-op through the library with the holds mirror
# synced and no hold in force (no RPC), medians (and p99) per call over -n
# calls; the library with its mirror off (an Admit RPC per call) for
# comparison where the part prints it. Starts its own retryd on a free port.
#   go     — clients/go/cmd/bench (target 5 µs added)
#   rust   — clients/rust/examples/bench.rs, release build (target 5 µs)
#   python — bench/clients_python.py (target 20 µs)
#   node   — bench/clients_node.mjs (target 20 µs)
#
#   bash bench/clients.sh [-n 20000]        # RETRYD_BIN: the binary (default target/release/retryd, else target/debug/retryd)
#   CLIENTS="go rust" bash bench/clients.sh -n 20000   # only these (default: go rust python node)
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
clients=" ${CLIENTS:-go rust python node} "
if [[ "$clients" == *" go "* ]]; then
  echo "--- go"
  (cd "$root/clients/go" && GOFLAGS="${GOFLAGS:-} -buildvcs=false" go run ./cmd/bench -addr "127.0.0.1:$port" "$@")
fi
if [[ "$clients" == *" rust "* ]]; then
  echo "--- rust"
  cargo run -q --release -p retryd-client --example bench -- "127.0.0.1:$port" "$@"
fi
if [[ "$clients" == *" python "* ]]; then
  RETRYD_ADDR="127.0.0.1:$port" "$root/clients/python/.venv/bin/python" "$root/bench/clients_python.py" "$@"
fi
if [[ "$clients" == *" node "* ]]; then
  (cd "$root/clients/node" && npm run --silent build) && RETRYD_ADDR="127.0.0.1:$port" node "$root/bench/clients_node.mjs" "$@"
fi
