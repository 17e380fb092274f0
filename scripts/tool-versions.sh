# Pinned versions of the tools the polyglot checks use. Sourced by
# install-tools.sh and gen-go.sh; change a version here and nowhere else
# (npm-installed buf is pinned in scripts/tools/package-lock.json).
# shellcheck shell=bash

# go install MODULE/PATH@VERSION, binary name
GO_TOOLS=(
  "github.com/bojand/ghz/cmd/ghz@v0.121.0 ghz"
  "github.com/grpc-ecosystem/grpc-health-probe@v0.4.63 grpc-health-probe"
  "github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4 grpcurl"
  "google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12 protoc-gen-go"
  "google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2 protoc-gen-go-grpc"
  # scripts/deploy-check.sh: helm lint / helm template of deploy/helm/retryd
  "helm.sh/helm/v3/cmd/helm@v3.22.0 helm"
)
