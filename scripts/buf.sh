#!/usr/bin/env bash
# Runs the pinned buf (scripts/tools/package-lock.json; installed by
# scripts/install-tools.sh), e.g. `scripts/buf.sh lint proto`.
set -euo pipefail
buf="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/tools/node_modules/.bin/buf"
if [[ ! -x "$buf" ]]; then
  echo "buf.sh: $buf missing; run scripts/install-tools.sh" >&2
  exit 127
fi
exec "$buf" "$@"
