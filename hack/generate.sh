#!/usr/bin/env bash
# Regenerates api/ate/v1 Go code from control.proto, and the Kubernetes
# API's deepcopy code and CRDs, with pinned generators.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh
cache=${ATE_CACHE:-$HOME/.cache/ate}
export PATH=$cache/bin:$PATH
command -v protoc >/dev/null || apt_install protobuf-compiler
[[ -x $cache/bin/protoc-gen-go ]] || GOBIN=$cache/bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
[[ -x $cache/bin/protoc-gen-go-grpc ]] || GOBIN=$cache/bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
protoc -I api --go_out=api --go_opt=paths=source_relative \
  --go-grpc_out=api --go-grpc_opt=paths=source_relative api/ate/v1/control.proto api/ate/v1/node.proto
# Kubernetes API (pkg/apis/ate/v1alpha1): deepcopy code and CRD YAML, with
# controller-gen from hack/install-kube.sh.
bash hack/install-kube.sh control >/dev/null
kube=$cache/kube/bin
"$kube/controller-gen" object paths=./pkg/apis/...
"$kube/controller-gen" crd paths=./pkg/apis/... output:crd:artifacts:config=deploy/crds
# The CRD chart carries them as templates (Helm never upgrades a chart's
# crds/ directory): byte-identical copies, which deploy's tests check.
rm -f deploy/helm/substrate-crds/templates/ate.substrate.dev_*.yaml
cp deploy/crds/ate.substrate.dev_*.yaml deploy/helm/substrate-crds/templates/
