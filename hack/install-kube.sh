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
#
# Usage: install-kube.sh [control|node|all]
#   control  what envtest and the manifest tests need: kube-apiserver, etcd,
#            controller-gen, helm, kustomize
#   node     what only the real-cluster tests need: kube-controller-manager,
#            kube-scheduler, kubelet, kube-proxy, kubectl
#   all      both (the default)
# hack/test.sh builds control first and node later, in the background while
# other suites run: the second build reuses the first one's compiled
# packages from the Go build cache.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh
what=${1:-all}
case $what in
control | node | all) ;;
*)
	echo "usage: install-kube.sh [control|node|all]" >&2
	exit 2
	;;
esac

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

if [[ $what != node ]]; then
goinstall controller-gen "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION" "$CONTROLLER_TOOLS_VERSION"
goinstall kustomize "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" "$KUSTOMIZE_VERSION"
goinstall helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "$HELM_VERSION"
fi

if [[ $what != node ]] && ! fresh etcd "$ETCD_VERSION"; then
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
	(cd "$work/etcd" && quiet go mod init etcd &&
		quiet go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" &&
		quiet go mod tidy &&
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
case $what in
control) KUBE_COMMANDS=(kube-apiserver) ;;
node) KUBE_COMMANDS=(kube-controller-manager kube-scheduler kubelet kube-proxy kubectl) ;;
all) KUBE_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl) ;;
esac
missing=()
for c in "${KUBE_COMMANDS[@]}"; do
	fresh "$c" "$KUBE_VERSION" || missing+=("$c")
done
if ((${#missing[@]})); then
	echo "install-kube: building ${missing[*]} $KUBE_VERSION (about 13 min on 2 cores for kube-apiserver, ~10 more for the rest)..." >&2
	mkdir -p "$work/kube"
	cd "$work/kube"
	quiet go mod init kube
	staging_version="v0.${KUBE_VERSION#v1.}"
	# k8s.io/kubernetes's own go.mod, through the go command (GOPROXY and
	# the checksum database apply), names the staging modules to replace.
	kmod=$(goproxy_mod "k8s.io/kubernetes@$KUBE_VERSION")
	[[ -f $kmod ]] || { echo "install-kube: no go.mod for k8s.io/kubernetes@$KUBE_VERSION" >&2; exit 1; }
	sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*|\1|p' "$kmod" |
		while read -r m; do
			go mod edit -replace "$m=$m@$staging_version"
		done
	go mod edit -require "k8s.io/kubernetes@$KUBE_VERSION"
	{
		printf 'package main\n\nimport (\n'
		for c in "${missing[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
		printf ')\n'
	} >tools.go
	# tidy resolves every requirement of the commands at once; its errors
	# are a real failure (an unreachable proxy, a missing version).
	GOFLAGS=-mod=mod quiet go mod tidy
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
