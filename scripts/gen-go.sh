#!/usr/bin/env bash
# Regenerates the Go stubs (examples/go/retrydv1, clients/go/retrydv1) from
# proto/retryd/v1/retryd.proto with the pinned buf and protoc-gen-go(-grpc).
#
#   scripts/gen-go.sh           # rewrite examples/go/retrydv1 and clients/go/retrydv1
#   scripts/gen-go.sh --check   # exit 1 if the committed stubs are not current
#
# Needs scripts/install-tools.sh to have run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tool-versions.sh
source "$root/scripts/tool-versions.sh"
gobin="$(go env GOBIN)"
[[ -n "$gobin" ]] || gobin="$(go env GOPATH)/bin"
export PATH="$gobin:$PATH"

check=0
[[ "${1:-}" == "--check" ]] && check=1

# The plugins write their versions into the files: pin them.
for entry in "${GO_TOOLS[@]}"; do
  spec="${entry% *}" bin="${entry#* }"
  case "$bin" in protoc-gen-go | protoc-gen-go-grpc) ;; *) continue ;; esac
  have="$(go version -m "$gobin/$bin" 2>/dev/null | awk '$1 == "mod" { print $3; exit }')" || true
  if [[ "$have" != "${spec##*@}" ]]; then
    echo "gen-go: $bin is ${have:-missing}, want ${spec##*@}; run scripts/install-tools.sh" >&2
    exit 2
  fi
done

# Two copies from one proto: the Go example's module and the Go client's own
# (clients/go must build with no replace, so it cannot import the example's).
status=0
for dest in examples/go clients/go; do
  out="$root/$dest"
  if ((check)); then
    out="$(mktemp -d)"
  fi
  (cd "$root" && timeout 120 "$root/scripts/buf.sh" generate proto \
    --path proto/retryd/v1/retryd.proto \
    --template "$dest/buf.gen.yaml" \
    -o "$out")
  if ((check)); then
    if diff -ru "$root/$dest/retrydv1" "$out/retrydv1"; then
      echo "gen-go: $dest/retrydv1 is current"
    else
      echo "gen-go: $dest/retrydv1 is stale; run scripts/gen-go.sh" >&2
      status=1
    fi
    rm -rf "$out"
  else
    echo "gen-go: wrote $dest/retrydv1"
  fi
done
exit "$status"
