#!/usr/bin/env bash
# Runs the client libraries' unit tests and conformance runners against the
# real retryd binary: every scenario of clients/conformance/scenarios, each
# library starting its own server on a free loopback port.
#
#   bash clients/conformance/run.sh [python|go|node|java|rust ...]   # default: all
#
# RETRYD_BIN: the binary (default: target/debug/retryd of this checkout,
# built with `cargo build --bin retryd` if missing). Needs what
# scripts/install-tools.sh installs (clients/python/.venv, Go modules,
# clients/node/node_modules, clients/java's Maven artifacts).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
export RETRYD_BIN="${RETRYD_BIN:-$target_dir/debug/retryd}"
if [[ ! -x "$RETRYD_BIN" ]]; then
  cargo build --bin retryd || exit 1
fi
export RETRYD_CONFORMANCE_REQUIRED=1
# The suite's own catalog (a circuit with a 600 ms probe), on top of the embedded ones.
export RETRYD_POLICY="$root/clients/conformance/policies"
# One more server for examples/libraries (the runners start their own).
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$RETRYD_BIN" serve --listen "127.0.0.1:$port" --metrics-listen off --log-level warn &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null' EXIT
export RETRYD_ADDR="127.0.0.1:$port"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
langs=("$@")
((${#langs[@]})) || langs=(python go node java rust)
failed=()
for lang in "${langs[@]}"; do
  started=$SECONDS
  echo "--- clients/$lang"
  case "$lang" in
    python)
      py="$root/clients/python/.venv/bin/python"
      # The committed stubs are what grpcio-tools (examples/python/.venv) generates from proto/ now.
      gen="$(mktemp -d)"
      examples/python/.venv/bin/python -m grpc_tools.protoc -Iproto \
        -I"$(examples/python/.venv/bin/python -c 'import grpc_tools, os; print(os.path.dirname(grpc_tools.__file__))')/_proto" \
        --python_out="$gen" --pyi_out="$gen" --grpc_python_out="$gen" proto/retryd/v1/retryd.proto \
        && for f in retryd_pb2.py retryd_pb2.pyi retryd_pb2_grpc.py; do
             cmp -s "$gen/retryd/v1/$f" "clients/python/src/retryd/v1/$f" \
               || { echo "clients/python/src/retryd/v1/$f is stale: regenerate it (clients/python/README.md)"; false; }
           done
      stubs=$?; rm -rf "$gen"
      ((stubs == 0)) && "$py" -m unittest discover -s clients/python/tests -q && "$py" clients/python/conformance.py \
        && "$py" examples/libraries/deal_add.py ;;
    go)
      (cd clients/go && go vet ./... && go test ./... && go run ./cmd/conformance) \
        && (cd examples/libraries/go && go run .) ;;
    node)
      # Builds ESM + CJS + types (npm run build), checks that `npm pack` takes them, runs the scenarios.
      (cd clients/node && npm run --silent build && npm pack --dry-run --json >/dev/null && node --test test/ && node conformance.mjs) \
        && ( ex="$(mktemp -d)"; mkdir -p "$ex/node_modules/@retryd"; ln -s "$root/clients/node" "$ex/node_modules/@retryd/client"
             cp examples/libraries/deal_add.mjs "$ex/"; node "$ex/deal_add.mjs"; r=$?; rm -rf "$ex"; exit $r ) ;;
    java)
      # Generates the stubs (protoc 3.25.8 + protoc-gen-grpc-java from Maven Central), compiles, runs the scenarios.
      (cd clients/java && mvn -q -B test-compile exec:java \
        && mvn -q -B dependency:build-classpath -Dmdep.outputFile=target/classpath.txt) \
        && (cd examples/libraries/java && java -cp "$(cat "$root/clients/java/target/classpath.txt"):$root/clients/java/target/classes" DealAdd.java) ;;
    rust)
      cargo test -p retryd-client -- --nocapture && cargo run -q -p retryd-client --example deal_add ;;
    *) echo "unknown client: $lang"; false ;;
  esac
  rc=$?
  echo "clients/$lang: exit $rc in $((SECONDS - started)) s"
  ((rc == 0)) || failed+=("$lang")
done
if ((${#failed[@]})); then
  echo "conformance: FAILED: ${failed[*]}"
  exit 1
fi
echo "conformance: all passed (${langs[*]})"
