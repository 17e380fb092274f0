#!/usr/bin/env bash
# Lints the OpenAPI document the HTTP door serves (generated from the proto
# and the routes; src/http/openapi/) with Redocly's CLI (pinned in
# scripts/tools/package-lock.json, installed by scripts/install-tools.sh),
# its recommended rules: tags, a root security, info.license, a 4xx for
# every operation, every $ref resolving, the 3.1 schema.
#
#   scripts/openapi-lint.sh [RETRYD_BIN]     # default: target/debug/retryd
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-${CARGO_TARGET_DIR:-$root/target}/debug/retryd}"
redocly="$root/scripts/tools/node_modules/.bin/redocly"
[[ -x "$redocly" ]] || { echo "openapi-lint.sh: $redocly missing; run scripts/install-tools.sh" >&2; exit 127; }
[[ -x "$bin" ]] || { echo "openapi-lint.sh: $bin missing; build it (cargo build)" >&2; exit 2; }

work="$(mktemp -d)"
pid=""
trap '[[ -n "$pid" ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
"$bin" serve --listen 127.0.0.1:0 --metrics-listen off 2>"$work/serve.log" &
pid=$!
addr=""
for _ in $(seq 100); do
  addr="$(grep -o 'listening on [0-9.:]*' "$work/serve.log" | awk '{print $3}' || true)"
  [[ -n "$addr" ]] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[[ -n "$addr" ]] || { echo "openapi-lint.sh: retryd did not start" >&2; cat "$work/serve.log" >&2; exit 1; }
python3 - "http://$addr/v1/openapi.json" "$work/openapi.json" <<'PY'
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
    assert r.status == 200, r.status
    open(sys.argv[2], "wb").write(r.read())
PY
cp "$root/scripts/openapi-lint-ignore.yaml" "$work/.redocly.lint-ignore.yaml"
cd "$work"
echo "openapi-lint.sh: linting the document served at http://$addr/v1/openapi.json (exceptions: scripts/openapi-lint-ignore.yaml)"
# No telemetry; the recommended ruleset; warnings fail too.
REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
  "$redocly" lint --extends recommended-strict --format stylish openapi.json
