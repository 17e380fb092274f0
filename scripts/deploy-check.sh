#!/usr/bin/env bash
# Checks deploy/: the Helm chart lints, renders, and every object it renders
# (with its defaults, and with every optional part switched on) decodes
# strictly into the Kubernetes API types (deploy/check, a Go test over
# k8s.io/api with unknown fields rejected); deploy/kubernetes/retryd.yaml is
# the chart rendered with its defaults; the Grafana dashboard is JSON.
#
#   scripts/deploy-check.sh            # check
#   scripts/deploy-check.sh --write    # re-render deploy/kubernetes/retryd.yaml
#
# Needs helm (scripts/install-tools.sh installs it with go install) and Go.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
gobin="$(go env GOBIN)"
[[ -n "$gobin" ]] || gobin="$(go env GOPATH)/bin"
export PATH="$gobin:$PATH"
command -v helm >/dev/null || { echo "deploy-check: helm missing; run scripts/install-tools.sh" >&2; exit 2; }
chart="$root/deploy/helm/retryd"
plain="$root/deploy/kubernetes/retryd.yaml"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# go install builds helm without its release ldflags: its default Kubernetes
# version is then 1.20, below the chart's kubeVersion; name a current one.
kube=(--kube-version 1.33.0)
render() { helm template retryd "$chart" --namespace retryd "${kube[@]}" "$@"; }
{
  echo "# retryd: the Helm chart deploy/helm/retryd rendered with its defaults"
  echo "# (helm template retryd deploy/helm/retryd --namespace retryd)."
  echo "# Regenerate with scripts/deploy-check.sh --write; CI checks it is current."
  render
} >"$tmp/defaults.yaml"
if [[ "${1:-}" == "--write" ]]; then
  mkdir -p "$(dirname "$plain")"
  cp "$tmp/defaults.yaml" "$plain"
  echo "deploy-check: wrote $plain"
  exit 0
fi

helm lint --strict "${kube[@]}" "$chart"
helm lint --strict "${kube[@]}" "$chart" --set serviceMonitor.enabled=true,prometheusRule.enabled=true,headlessService.enabled=true,autoscaling.enabled=true,state.redis.enabled=true
render --set serviceMonitor.enabled=true,prometheusRule.enabled=true,headlessService.enabled=true,autoscaling.enabled=true \
  --set state.redis.enabled=true --set-file "catalogs.payments\.toml=$root/examples/policies/payments.toml" \
  >"$tmp/everything.yaml"
for kind in Deployment Service PodDisruptionBudget ServiceMonitor PrometheusRule HorizontalPodAutoscaler ConfigMap ServiceAccount; do
  grep -q "^kind: $kind\$" "$tmp/everything.yaml" || { echo "deploy-check: no $kind rendered with everything on" >&2; exit 1; }
done
grep -q 'name: RETRYD_STATE' "$tmp/everything.yaml" || { echo "deploy-check: no RETRYD_STATE from the Secret" >&2; exit 1; }

if ! diff -u "$plain" "$tmp/defaults.yaml"; then
  echo "deploy-check: deploy/kubernetes/retryd.yaml is stale; run scripts/deploy-check.sh --write" >&2
  exit 1
fi
echo "deploy-check: deploy/kubernetes/retryd.yaml is the chart's rendering"

(cd "$root/deploy/check" && MANIFESTS="$plain,$tmp/everything.yaml" go test -count=1 -v ./... 2>&1 | grep -v '^=== RUN')
python3 -m json.tool "$root/deploy/grafana/retryd-dashboard.json" >/dev/null
# Every dashboard query and alert expression parses as PromQL (a venv kept
# under target/, so a second run downloads nothing).
venv="$root/target/promql-venv"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import promql_parser, yaml' 2>/dev/null; then
  python3 -m venv "$venv" && "$venv/bin/pip" install -q 'promql-parser>=0.5,<1' 'pyyaml>=6,<7'
fi
"$venv/bin/python" "$root/scripts/promql-check.py" "$root/deploy/grafana/retryd-dashboard.json" \
  "$root/deploy/helm/retryd/files/alerts.yaml"
echo "deploy-check: OK"
