#!/usr/bin/env bash
# Installs the node runtime of the real single-node Kubernetes cluster
# the cluster tests (test/cluster) start, into ${ATE_CACHE:-$HOME/.cache/ate}/cluster:
#
#   bin/containerd, containerd-shim-runc-v2, ctr
#                  containerd built from its Go module (github.com/containerd/containerd/v2):
#                  the kubelet v1.37 asks the runtime for its cgroup driver
#                  (CRI RuntimeConfig, KEP-4033), which Debian's containerd
#                  1.6 does not implement, and Kubernetes 1.35 was the last
#                  release to support containerd 1.x. About 3 min on 2 cores.
#   bin/runc       runc built from its Go module (github.com/opencontainers/runc,
#                  the version containerd's own CI pins), with seccomp
#                  (cgo, Debian's libseccomp-dev): Debian's runc 1.1.5 fails
#                  every Pod sandbox containerd 2.2 asks for ("can't get
#                  final child's PID from pipe: EOF"). About 1 min.
#   CNI plugins (bridge, host-local, loopback, portmap), iptables, conntrack
#                  Debian's packages (containernetworking-plugins, iptables,
#                  conntrack).
#
# The control-plane and node commands (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy, kubectl) come from hack/install-kube.sh.
# Idempotent: apt-get runs only for a missing command; containerd is rebuilt
# only when its stamp names another version. Needs root.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

CONTAINERD_VERSION=v2.2.9
RUNC_VERSION=v1.3.6 # containerd v2.2.9 script/setup/runc-version

CACHE="${ATE_CACHE:-$HOME/.cache/ate}"
BIN_DIR="$CACHE/cluster/bin"
mkdir -p "$BIN_DIR"
if [[ $(id -u) != 0 ]]; then
	echo "install-cluster: needs root (apt-get, and the cluster itself)" >&2
	exit 1
fi

need=()
[[ -f /usr/include/seccomp.h ]] || need+=(libseccomp-dev)
[[ -x /usr/lib/cni/bridge ]] || need+=(containernetworking-plugins)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
if ((${#need[@]})); then
	echo "install-cluster: installing Debian packages ${need[*]}..." >&2
	apt_install --no-install-recommends "${need[@]}" >/dev/null
fi

if [[ ! -x "$BIN_DIR/containerd" || "$(cat "$BIN_DIR/containerd.version" 2>/dev/null)" != "$CONTAINERD_VERSION" ]]; then
	echo "install-cluster: building containerd $CONTAINERD_VERSION (about 3 min on 2 cores)..." >&2
	rm -f "$BIN_DIR/containerd.version"
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	(
		cd "$work"
		quiet go mod init cri
		printf 'package main\n\nimport (\n\t_ "github.com/containerd/containerd/v2/cmd/containerd"\n\t_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"\n\t_ "github.com/containerd/containerd/v2/cmd/ctr"\n)\n' >tools.go
		GOFLAGS=-mod=mod quiet go get "github.com/containerd/containerd/v2@$CONTAINERD_VERSION"
		GOFLAGS=-mod=mod quiet go mod tidy
		mkdir -p out
		# no_btrfs: Debian's btrfs headers are not needed for overlayfs.
		GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags=-s -tags "no_btrfs osusergo netgo" -o out/ \
			github.com/containerd/containerd/v2/cmd/containerd \
			github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
			github.com/containerd/containerd/v2/cmd/ctr
		mv out/* "$BIN_DIR/"
	)
	printf '%s\n' "$CONTAINERD_VERSION" >"$BIN_DIR/containerd.version"
fi
if [[ ! -x "$BIN_DIR/runc" || "$(cat "$BIN_DIR/runc.version" 2>/dev/null)" != "$RUNC_VERSION" ]]; then
	echo "install-cluster: building runc $RUNC_VERSION (about 1 min)..." >&2
	rm -f "$BIN_DIR/runc.version"
	gobin=$(mktemp -d)
	GOBIN="$gobin" CGO_ENABLED=1 go install -trimpath -tags seccomp "github.com/opencontainers/runc@$RUNC_VERSION"
	mv "$gobin/runc" "$BIN_DIR/runc"
	rm -rf "$gobin"
	printf '%s\n' "$RUNC_VERSION" >"$BIN_DIR/runc.version"
fi
echo "install-cluster: containerd $CONTAINERD_VERSION and runc $RUNC_VERSION in $BIN_DIR; CNI plugins in /usr/lib/cni"
