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
#   java   — JMH, clients/java/src/test/java/dev/retryd/client/bench (target 5 µs), then how fast a
#            hold reaches a mirror, a reset and a restart under 40 mirror clients
#
#   bash bench/clients.sh [-n 20000]        # RETRYD_BIN: the binary (default target/release/retryd, else target/debug/retryd)
#   CLIENTS="go rust" bash bench/clients.sh -n 20000   # only these (default: go rust python node java)
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
clients=" ${CLIENTS:-go rust python node java} "
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

# --- Java (clients/java): JMH sample time, a no-op through client.call (holds mirror synced, no hold in force)
# against the no-op called bare; the median is over every sampled call (hundreds of thousands). The mirror-off
# line (one Admit RPC per call) is for reference; then the propagation, reset and restart measures.
if [[ "$clients" == *" java "* ]]; then
  (cd "$root/clients/java" && mvn -q -B test-compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt >/dev/null)
  jcp="$(cat "$root/clients/java/target/classpath.txt"):$root/clients/java/target/classes:$root/clients/java/target/test-classes"
  jout="$(mktemp)"
  java -cp "$jcp" org.openjdk.jmh.Main 'dev.retryd.client.bench.ClientBench' -p "addr=127.0.0.1:$port" \
    -rf json -rff "$jout" >"$jout.log" 2>&1 || { cat "$jout.log"; exit 1; }
  grep 'mirrored client:' "$jout.log" || true
  python3 - "$jout" <<'PY'
import json, sys
runs = {r["benchmark"].rsplit(".", 1)[1]: r["primaryMetric"] for r in json.load(open(sys.argv[1]))}
def p50(name): return runs[name]["scorePercentiles"]["50.0"]
def n(name): return sum(c for it in runs[name]["rawDataHistogram"] for fork in [it] for hist in fork for _, c in hist)
bare, mirror, off = p50("bare"), p50("clientMirror"), p50("clientMirrorOff")
print(f"java: bare no-op         median {bare:9.0f} ns  ({n('bare')} sampled calls)")
print(f"java: client.call mirror median {mirror:9.0f} ns  ({n('clientMirror')} sampled calls): adds {(mirror - bare) / 1000:.2f} us (target <= 5 us)")
print(f"java: client.call no mirror (one Admit RPC per call) median {off / 1000:.1f} us ({n('clientMirrorOff')} sampled calls)")
PY
  rm -f "$jout" "$jout.log"
  java -cp "$jcp" dev.retryd.client.MirrorLag "127.0.0.1:$port" 100
  # A quota stop's reset under 40 mirror clients whose calls fail again: calls reaching the dependency (target 1).
  java -cp "$jcp" dev.retryd.client.MirrorReset "127.0.0.1:$port" 40 2>/dev/null | grep '^java:'
  # retryd killed and restarted (state in a real redis-server) under 40 mirror clients during a quota stop.
  if command -v redis-server >/dev/null; then
    java -cp "$jcp" dev.retryd.client.MirrorRestart "$bin" 40 2>/dev/null | grep '^java:'
  else
    echo "java: no redis-server: the restart measure is skipped"
  fi
fi
