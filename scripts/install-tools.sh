#!/usr/bin/env bash
# Installs everything scripts/polyglot-check.sh needs, on a Debian machine
# that already has Go, Python 3 (with pip), Node/npm and Rust. Idempotent:
# what is already there at the pinned version is left alone. Runs as root or
# not, with no prompts.
#
#   scripts/install-tools.sh            # install; prints what it did
#   source scripts/install-tools.sh     # the same, and puts GOBIN on PATH
#
# Installs:
#   - Go tools (pinned in scripts/tool-versions.sh) into $(go env GOPATH)/bin:
#     ghz, grpc_health_probe, grpcurl, protoc-gen-go, protoc-gen-go-grpc, helm
#   - examples/python/.venv with examples/python/requirements.txt
#   - examples/node/node_modules (npm ci)
#   - scripts/tools/node_modules: @bufbuild/buf (npm ci); run it as scripts/buf.sh
#   - the Go example's modules (go mod download)
#   - clients/python/.venv with clients/python/constraints.txt (build and twine
#     for scripts/publish-dry-run.sh too) and the
#     retryd package itself (pip install ./clients/python)
#   - clients/go's modules (go mod download)
#   - clients/node/node_modules (npm ci; the package is built by clients/conformance/run.sh)
#   - clients/java's Maven dependencies and plugins, protoc and protoc-gen-grpc-java
#     (mvn test-compile; needs Java 17+ and Maven)
# Callers must have $(go env GOPATH)/bin on PATH (printed at the end; also
# appended to $GITHUB_PATH when that is set). polyglot-check.sh adds it itself.

_retryd_install_tools() {
  set -euo pipefail
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  # shellcheck source=tool-versions.sh
  source "$root/scripts/tool-versions.sh"

  local missing=()
  for cmd in go python3 node npm cargo; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
  done
  if ((${#missing[@]})); then
    echo "install-tools: missing prerequisites: ${missing[*]}" >&2
    return 1
  fi

  export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
  local gobin
  gobin="$(go env GOBIN)"
  [[ -n "$gobin" ]] || gobin="$(go env GOPATH)/bin"
  mkdir -p "$gobin"
  export GOBIN="$gobin"

  # --- Go tools -----------------------------------------------------------
  local entry spec bin module version have
  for entry in "${GO_TOOLS[@]}"; do
    spec="${entry% *}"
    bin="${entry#* }"
    version="${spec##*@}"
    module="${spec%@*}"
    have=""
    if [[ -x "$gobin/$bin" ]]; then
      # `go version -m` prints "path <pkg>" and "mod <module> <version>".
      have="$(go version -m "$gobin/$bin" 2>/dev/null | awk '$1 == "mod" { print $3; exit }')"
    fi
    if [[ "$have" == "$version" ]]; then
      echo "install-tools: $bin $version already installed"
    else
      echo "install-tools: go install $spec${have:+ (had $have)}"
      timeout 900 go install "$spec"
    fi
    : "$module"
  done
  # Upstream's release binary is called grpc_health_probe; `go install` names
  # it after the module. Offer both names.
  ln -sf grpc-health-probe "$gobin/grpc_health_probe"

  # --- Python example -----------------------------------------------------
  local venv="$root/examples/python/.venv"
  if [[ ! -x "$venv/bin/python" ]]; then
    if ! python3 -m venv "$venv" 2>/dev/null; then
      # Debian's python3 needs python3-venv for `python3 -m venv`.
      if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
        echo "install-tools: apt-get install python3-venv"
        rm -rf "$venv"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null \
          || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null; }
        python3 -m venv "$venv"
      else
        echo "install-tools: python3 -m venv failed (install python3-venv)" >&2
        return 1
      fi
    fi
  fi
  echo "install-tools: pip install -r examples/python/requirements.txt into examples/python/.venv"
  timeout 900 "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    -r "$root/examples/python/requirements.txt"

  # --- PHP and jq for the HTTP/JSON examples (examples/php, examples/shell) ---
  if ! { command -v php >/dev/null 2>&1 && php -m 2>/dev/null | grep -qx curl && command -v jq >/dev/null 2>&1; }; then
    if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
      echo "install-tools: apt-get install php-cli php-curl jq"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q php-cli php-curl jq >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q php-cli php-curl jq >/dev/null; }
    else
      echo "install-tools: php-cli, php-curl or jq missing (install them from your distribution)" >&2
      return 1
    fi
  fi

  # --- Python client library (clients/python) --------------------------------
  local cvenv="$root/clients/python/.venv"
  if [[ ! -x "$cvenv/bin/python" ]]; then
    python3 -m venv "$cvenv"
  fi
  echo "install-tools: pip install ./clients/python (-c clients/python/constraints.txt) into clients/python/.venv"
  timeout 900 "$cvenv/bin/python" -m pip install -q --disable-pip-version-check \
    -c "$root/clients/python/constraints.txt" grpcio protobuf googleapis-common-protos setuptools build twine tenacity
  # --no-build-isolation: build with the pinned setuptools just installed;
  # the copy installed is what `pip install ./clients/python` gives a user.
  (cd "$root/clients/python" && timeout 900 "$cvenv/bin/python" -m pip install -q --disable-pip-version-check \
    --no-deps --no-build-isolation --force-reinstall . && rm -rf build src/*.egg-info)

  # --- npm packages (lockfiles committed; npm ci only when the lock changed) ---
  local dir stamp want
  for dir in examples/node scripts/tools clients/node; do
    stamp="$root/$dir/node_modules/.retryd-lock-sha256"
    want="$(sha256sum "$root/$dir/package-lock.json" | cut -d' ' -f1)"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
      echo "install-tools: $dir/node_modules current"
    else
      echo "install-tools: npm ci in $dir"
      (cd "$root/$dir" && timeout 900 npm ci --no-audit --no-fund --loglevel=error)
      echo "$want" >"$stamp"
    fi
  done

  # --- Go example's modules -------------------------------------------------
  echo "install-tools: go mod download in examples/go"
  (cd "$root/examples/go" && timeout 900 go mod download)
  echo "install-tools: go mod download in clients/go"
  (cd "$root/clients/go" && timeout 900 go mod download)

  # --- Java client library's artifacts (versions fixed in clients/java/pom.xml) ---
  if command -v mvn >/dev/null 2>&1; then
    echo "install-tools: mvn test-compile in clients/java (downloads the pinned artifacts)"
    (cd "$root/clients/java" && timeout 900 mvn -q -B test-compile dependency:build-classpath \
      -Dmdep.outputFile=target/classpath.txt)
  else
    echo "install-tools: no mvn: clients/java is not prepared (apt-get install maven)" >&2
  fi

  # --- summary ------------------------------------------------------------
  echo "install-tools: installed:"
  for entry in "${GO_TOOLS[@]}"; do
    bin="${entry#* }"
    echo "  $gobin/$bin $(go version -m "$gobin/$bin" | awk '$1 == "mod" { print $3; exit }')"
  done
  echo "  $gobin/grpc_health_probe -> grpc-health-probe"
  echo "  examples/python/.venv: $("$venv/bin/python" -m pip freeze --disable-pip-version-check \
    | grep -iE '^(grpcio|grpcio-tools|protobuf|googleapis-common-protos)==' | tr '\n' ' ')"
  echo "  examples/node: $(cd "$root/examples/node" && node -p \
    "['@grpc/grpc-js','@grpc/proto-loader','protobufjs'].map(n => n + '@' + require(n + '/package.json').version).join(' ')")"
  echo "  scripts/tools: buf $("$root/scripts/tools/node_modules/.bin/buf" --version) (run as scripts/buf.sh)"
  echo "install-tools: put the Go tools on PATH with:  export PATH=\"$gobin:\$PATH\""
  if [[ -n "${GITHUB_PATH:-}" ]]; then
    echo "$gobin" >>"$GITHUB_PATH"
  fi
  case ":$PATH:" in
    *":$gobin:"*) ;;
    *) export PATH="$gobin:$PATH" ;;
  esac
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  _retryd_install_tools
else
  # Sourced: install in a child bash (its `set -e` must neither end the
  # caller's shell nor be ignored, as it would be in a subshell under `||`),
  # then put GOBIN on the caller's PATH.
  _retryd_rc=0
  bash "${BASH_SOURCE[0]}" || _retryd_rc=$?
  if ((_retryd_rc == 0)); then
    _retryd_gobin="$(go env GOBIN)"
    [[ -n "$_retryd_gobin" ]] || _retryd_gobin="$(go env GOPATH)/bin"
    case ":$PATH:" in
      *":$_retryd_gobin:"*) ;;
      *) export PATH="$_retryd_gobin:$PATH" ;;
    esac
    unset _retryd_gobin
  else
    echo "install-tools: failed" >&2
  fi
  unset -f _retryd_install_tools
  return "$_retryd_rc"
fi
