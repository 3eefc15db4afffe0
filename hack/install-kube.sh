#!/usr/bin/env bash
# Installs the Kubernetes tools the Kubernetes-mode tests and `make generate`
# need into ${ATE_CACHE:-$HOME/.cache/ate}/kube/bin:
#
#   kube-apiserver  real API server the controller and resolver tests run
#                   against (envtest starts it, with etcd)
#   etcd            its storage
#   controller-gen  generates deepcopy code and CRD YAML (make generate)
#   helm            helm lint / helm template in tests
#   kustomize       renders deploy/ overlays in tests
#
# No container engine runs on these machines, so kind is out; the binaries
# are built from the Go module proxy (../shared/notes/kubernetes-test-control-plane.md):
# kube-apiserver from a scratch module that requires k8s.io/kubernetes and
# replaces every staging module with its published version (about 13 min on
# 2 cores), etcd from a three-line main over etcdmain (about 1 min).
#
# Not part of hack/install-deps.sh: `make up` must not wait for this.
# hack/test.sh calls it. Idempotent: each binary has a stamp file with its
# version, and nothing is rebuilt while the stamp matches.
set -euo pipefail

KUBE_VERSION=v1.37.2       # kube-apiserver
ETCD_VERSION=v3.6.16       # go.etcd.io/etcd/server/v3
CONTROLLER_TOOLS_VERSION=v0.23.0
HELM_VERSION=v3.22.0
KUSTOMIZE_VERSION=v5.8.1

CACHE="${ATE_CACHE:-$HOME/.cache/ate}"
BIN_DIR="$CACHE/kube/bin"
mkdir -p "$BIN_DIR"
if ! command -v go >/dev/null 2>&1; then
	echo "install-kube: go is required" >&2
	exit 1
fi

# fresh NAME VERSION: true when BIN_DIR/NAME is built at VERSION.
fresh() {
	[[ -x "$BIN_DIR/$1" && -f "$BIN_DIR/$1.version" && "$(cat "$BIN_DIR/$1.version")" == "$2" ]]
}
stamp() { printf '%s\n' "$2" >"$BIN_DIR/$1.version"; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Plain `go install` for modules without replace directives.
goinstall() { # NAME PACKAGE@VERSION VERSION
	fresh "$1" "$3" && return 0
	echo "install-kube: building $1 $3..." >&2
	rm -f "$BIN_DIR/$1.version"
	rm -rf "$work/gobin"
	(cd "$work" && GOBIN="$work/gobin" CGO_ENABLED=0 go install -trimpath -ldflags=-s "$2")
	# The one binary go install wrote (a /vN module path names it by its parent).
	mv "$work/gobin/"* "$BIN_DIR/$1"
	stamp "$1" "$3"
}

goinstall controller-gen "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION" "$CONTROLLER_TOOLS_VERSION"
goinstall kustomize "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" "$KUSTOMIZE_VERSION"
goinstall helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "$HELM_VERSION"

if ! fresh etcd "$ETCD_VERSION"; then
	echo "install-kube: building etcd $ETCD_VERSION..." >&2
	rm -f "$BIN_DIR/etcd.version"
	mkdir -p "$work/etcd"
	cat >"$work/etcd/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
	(cd "$work/etcd" && go mod init etcd >/dev/null 2>&1 &&
		go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null &&
		go mod tidy >/dev/null &&
		CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$BIN_DIR/etcd.tmp" .)
	mv "$BIN_DIR/etcd.tmp" "$BIN_DIR/etcd"
	stamp etcd "$ETCD_VERSION"
fi

# Every k8s.io/kubernetes command is built in one scratch module that
# requires k8s.io/kubernetes and replaces each staging module (which its
# go.mod points at ./staging/...) with the published version. One `go
# build` for all missing commands shares the compile of their common
# packages: kube-apiserver alone about 13 min on 2 cores; the node and
# control-plane commands of the real-cluster tests (kubelet,
# kube-controller-manager, kube-scheduler, kube-proxy, kubectl) about
# 10 more.
KUBE_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
missing=()
for c in "${KUBE_COMMANDS[@]}"; do
	fresh "$c" "$KUBE_VERSION" || missing+=("$c")
done
if ((${#missing[@]})); then
	echo "install-kube: building ${missing[*]} $KUBE_VERSION (about 13 min on 2 cores for kube-apiserver, ~10 more for the rest)..." >&2
	mkdir -p "$work/kube"
	cd "$work/kube"
	go mod init kube >/dev/null 2>&1
	staging_version="v0.${KUBE_VERSION#v1.}"
	curl -fsS "https://proxy.golang.org/k8s.io/kubernetes/@v/$KUBE_VERSION.mod" |
		sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*|\1|p' |
		while read -r m; do
			go mod edit -replace "$m=$m@$staging_version"
		done
	go mod edit -require "k8s.io/kubernetes@$KUBE_VERSION"
	{
		printf 'package main\n\nimport (\n'
		for c in "${missing[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
		printf ')\n'
	} >tools.go
	GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
	mkdir -p out
	pkgs=()
	for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
	GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags=-s -o out/ "${pkgs[@]}"
	for c in "${missing[@]}"; do
		mv "out/$c" "$BIN_DIR/$c"
		stamp "$c" "$KUBE_VERSION"
	done
	cd - >/dev/null
fi
echo "install-kube: ${KUBE_COMMANDS[*]} $KUBE_VERSION, etcd $ETCD_VERSION, controller-gen $CONTROLLER_TOOLS_VERSION, helm $HELM_VERSION, kustomize $KUSTOMIZE_VERSION in $BIN_DIR"
