#!/usr/bin/env bash
# Dry-runs the publication of each client library: builds what a release
# would upload, checks it the way the registry would, and builds or runs it
# from the package alone (not from the checkout). Nothing is uploaded.
#
#   bash scripts/publish-dry-run.sh [python|node|rust|java|go ...]   # default: all
#
#   python  python -m build (sdist + wheel) and twine check --strict; the wheel
#           installed in two fresh venvs, with the lowest dependency versions
#           pyproject.toml allows (clients/python/constraints-lowest.txt) and
#           with the newest it allows; in each: pip check, import, unit tests
#           and the conformance suite against RETRYD_BIN
#   node    npm pack (the tarball's files) and publint --strict
#   rust    cargo package (with its proto), then cargo check of the packaged
#           crate unpacked on its own (no workspace, no repository proto)
#   java    mvn -P release verify: main, sources and javadoc jars, no signing
#   go      a module outside the repository that requires the client, with
#           only a replace of the client itself, builds and vets
#
# Needs what scripts/install-tools.sh installs. Each part prints its time.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
export RETRYD_BIN="${RETRYD_BIN:-$target_dir/debug/retryd}"
# The conformance suite's own catalog (a circuit with a 600 ms probe), as run.sh serves it.
export RETRYD_POLICY="$root/clients/conformance/policies"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

py_runs() { # $1: a venv's python; imports the installed wheel and runs it
  local py="$1"
  "$py" -m pip check --disable-pip-version-check \
    && (cd "$work" && "$py" -c 'import retryd, retryd.v1.retryd_pb2, retryd.v1.retryd_pb2_grpc, google.protobuf, grpc
print("retryd-client loads with protobuf", google.protobuf.__version__, "grpcio", grpc.__version__)') \
    && (cd "$work" && "$py" -m unittest discover -s "$root/clients/python/tests" -t "$root/clients/python/tests" -q) \
    && (cd "$work" && "$py" "$root/clients/python/conformance.py" | grep -v ': PASS ')
}

python_part() {
  local venv="$root/clients/python/.venv" dist="$work/py-dist"
  "$venv/bin/python" -m build --no-isolation --outdir "$dist" clients/python >"$work/build.log" 2>&1 \
    || { cat "$work/build.log"; return 1; }
  rm -rf clients/python/build clients/python/src/*.egg-info
  ls "$dist"
  "$venv/bin/python" -m twine check --strict "$dist"/* || return 1
  local wheel end
  wheel="$(ls "$dist"/*.whl)"
  for end in lowest newest; do
    python3 -m venv "$work/py-$end" || return 1
    if [[ "$end" == lowest ]]; then
      "$work/py-$end/bin/pip" install -q --disable-pip-version-check -c clients/python/constraints-lowest.txt "$wheel[tenacity]"
    else
      "$work/py-$end/bin/pip" install -q --disable-pip-version-check --upgrade "$wheel[tenacity]"
    fi || return 1
    echo "python ($end): $("$work/py-$end/bin/pip" freeze --disable-pip-version-check | grep -iE '^(grpcio|protobuf|googleapis-common-protos|tenacity|retryd-client)' | tr '\n' ' ')"
    py_runs "$work/py-$end/bin/python" || return 1
  done
}

node_part() {
  (cd clients/node && npm run --silent build && npm pack --dry-run --json --ignore-scripts >"$work/pack.json" \
    && node -e 'const p = require(process.argv[1])[0]; const f = p.files.map((x) => x.path);
      for (const want of ["LICENSE", "dist/esm/index.js", "dist/esm/index.d.ts", "dist/cjs/index.js", "dist/esm/gen/retryd/v1/RetryDecisionService.d.ts", "dist/esm/cockatiel.js", "dist/cjs/cockatiel.js"])
        if (!f.includes(want)) { console.error("npm pack: missing " + want); process.exit(1); }
      console.log(`npm pack: ${p.name}@${p.version}, ${p.entryCount} files, ${p.size} bytes`);' "$work/pack.json" \
    && node_modules/.bin/publint --strict --pack false)
}

rust_part() {
  cargo package -p retryd-client --allow-dirty --no-verify --quiet || return 1
  local crate="$target_dir/package/retryd-client-0.1.0.crate"
  # (listed to a file: grep -q closing the pipe early would fail tar under pipefail)
  tar -tzf "$crate" >"$work/crate.list" || return 1
  grep -qx 'retryd-client-0.1.0/proto/retryd/v1/retryd.proto' "$work/crate.list" \
    || { echo "cargo package: the crate does not carry proto/retryd/v1/retryd.proto"; return 1; }
  tar -xzf "$crate" -C "$work" || return 1
  # Alone: outside the workspace, with the lockfile cargo package wrote, and
  # the shared target dir (its dependencies are mostly built already).
  (cd "$work/retryd-client-0.1.0" && cargo check --locked --quiet --target-dir "$target_dir")
}

java_part() {
  (cd clients/java && mvn -q -B -P release verify -DskipTests) || return 1
  local jar
  for jar in retryd-client-0.1.0.jar retryd-client-0.1.0-sources.jar retryd-client-0.1.0-javadoc.jar; do
    [[ -s "clients/java/target/$jar" ]] || { echo "mvn -P release verify: no $jar"; return 1; }
  done
  python3 -m zipfile -l clients/java/target/retryd-client-0.1.0.jar >"$work/jar.list" && grep -q 'META-INF/LICENSE' "$work/jar.list" \
    || { echo "the jar has no META-INF/LICENSE"; return 1; }
  # What Maven Central refuses a pom without.
  local tag
  for tag in '<url>' '<licenses>' '<developers>' '<scm>' '<description>'; do
    grep -q "$tag" clients/java/pom.xml || { echo "clients/java/pom.xml has no $tag"; return 1; }
  done
  ls clients/java/target/*.jar
}

go_part() {
  local mod="$work/outside-go"
  mkdir -p "$mod"
  cat >"$mod/go.mod" <<EOF
module example.com/outside

go 1.26.0

require github.com/retryd/retryd/clients/go v0.0.0

replace github.com/retryd/retryd/clients/go => $root/clients/go
EOF
  cat >"$mod/main.go" <<'EOF'
// A module outside the repository: the client and its stubs, nothing else.
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	retryd "github.com/retryd/retryd/clients/go"
	pb "github.com/retryd/retryd/clients/go/retrydv1"
)

func main() {
	c, err := retryd.New("127.0.0.1:1", retryd.WithCatalog("vibecode"), retryd.WithDependency("outside"))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	var _ pb.RetryDecisionServiceClient = c.Stub()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// Nothing listens on port 1: the fallback retries a read, then gives up.
	_, err = retryd.Do(ctx, c, func(context.Context) (string, error) { return "", errors.New("dependency down") },
		retryd.Call[string]{Operation: retryd.Read, Method: "crm.deal.get",
			ToFailure: func(error) *retryd.Failure { return &retryd.Failure{Code: "BITRIX_UNAVAILABLE"} }})
	fmt.Println("outside module: built and ran:", err)
}
EOF
  (cd "$mod" && GOFLAGS="$GOFLAGS -mod=mod" go mod tidy && go vet ./... && go build -o "$work/outside" . && "$work/outside")
}

parts=("$@")
((${#parts[@]})) || parts=(python node rust java go)
failed=()
# The Rust part is mostly compiling (the packaged crate's dependencies with
# its own features): it runs beside the others, which mostly wait on I/O.
rust_bg=""
for part in "${parts[@]}"; do
  if [[ "$part" == rust && ${#parts[@]} -gt 1 ]]; then
    ( started=$SECONDS; rust_part >"$work/rust.log" 2>&1; rc=$?
      echo "publish dry-run rust: exit $rc in $((SECONDS - started)) s" >>"$work/rust.log"; exit $rc ) &
    rust_bg=$!
  fi
done
for part in "${parts[@]}"; do
  [[ "$part" == rust && -n "$rust_bg" ]] && continue
  started=$SECONDS
  echo "--- publish dry-run: $part"
  case "$part" in
    python | node | rust | java | go) "${part}_part" ;;
    *) echo "unknown part: $part"; false ;;
  esac
  rc=$?
  echo "publish dry-run $part: exit $rc in $((SECONDS - started)) s"
  ((rc == 0)) || failed+=("$part")
done
if [[ -n "$rust_bg" ]]; then
  wait "$rust_bg"
  rc=$?
  echo "--- publish dry-run: rust (ran beside the others)"
  cat "$work/rust.log"
  ((rc == 0)) || failed+=(rust)
fi
if ((${#failed[@]})); then
  echo "publish dry-run: FAILED: ${failed[*]}"
  exit 1
fi
echo "publish dry-run: all passed (${parts[*]})"
