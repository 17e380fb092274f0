#!/usr/bin/env bash
# retryd from a shell script or cron job with curl and jq: decide a failed
# call over the HTTP/JSON door and act on the ASC contract.
#
#   examples/shell/classify.sh [http://127.0.0.1:50051]
set -euo pipefail
base="${1:-http://127.0.0.1:50051}"

# A FrontSpin sync of tenant acme hit RATE_LIMITED on its 2nd attempt.
answer=$(curl -sS --fail-with-body -X POST "$base/v1/classify" \
  -H 'content-type: application/json' \
  -d '{"failure": {"catalog": "frontspin", "code": "RATE_LIMITED", "operation": "write", "attempt": 2}}')

verdict=$(jq -r '.decision.verdict' <<<"$answer")
after_ms=$(jq -r '.decision.retry.after_ms' <<<"$answer")
action=$(jq -r '.decision.retry.reconciliation_action // "none"' <<<"$answer")
echo "verdict=$verdict after_ms=$after_ms action=$action"

case "$verdict" in
  retry_with_limit) echo "re-drive in $((after_ms / 1000)) s" ;;
  state_verification_required) echo "read the state back before any retry" ;;
  *) echo "hand the record over: $(jq -r '.decision.reason' <<<"$answer")" ;;
esac

# Seed 002's consumer algorithm in jq, on the ASC form alone.
curl -sS --fail-with-body -X POST "$base/v1/classify?format=asc" \
  -H 'content-type: application/json' \
  -d '{"failure": {"code": "QUEUE_OVERFLOW", "operation": "read", "retry_after": "5", "attempt": 1}}' |
  jq -e '.retry | .retryable and .safe and (.attempt < .max_attempts)' >/dev/null &&
  echo "QUEUE_OVERFLOW read: retry is safe"

# What the fleet's retry budgets look like now (the busiest scopes first).
curl -sS --fail-with-body "$base/v1/budgets?limit=5" |
  jq -r '.budgets[] | "\(.catalog) \(.scope) \(.budget.scope_key): \(.budget.retries)/\(.budget.allowed) retries, \(.deferred) deferred"'

# The holds in force, then `synced`, as server-sent events. A stream lasts
# until the client leaves; this one reads for 2 s and prints what came.
{ curl -sS -N --max-time 2 "$base/v1/holds:watch" 2>/dev/null || true; } |
  awk '/^event:/ { kind = $2 } /^data:/ { print kind; if (kind == "synced") exit }'
