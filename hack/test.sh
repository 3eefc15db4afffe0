#!/usr/bin/env bash
# Runs every test: lint, one iteration of every benchmark harness, then
# unit tests and end-to-end tests with real runsc sandboxes. Needs root
# (network namespaces, runsc); CI runs as root.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) != 0 ]]; then
	echo "test: must run as root (network namespaces and runsc need it)" >&2
	exit 1
fi
# The S3 snapshot store's tests run a real SeaweedFS; built once, cached.
bash hack/install-seaweedfs.sh
# The PostgreSQL store's tests run a real PostgreSQL (Debian's package;
# pgtest starts its own server, as the postgres user when root).
bash hack/install-postgres.sh
# The Kubernetes-mode tests run a real kube-apiserver + etcd (envtest), and
# helm, kustomize and controller-gen, and the real-cluster tests' kubelet,
# kube-controller-manager, kube-scheduler, kube-proxy and kubectl; built
# once, cached (~30 min on a fresh 2-core machine, half of it
# kube-apiserver).
bash hack/install-kube.sh
# The real-cluster tests (test/cluster) run a single-node Kubernetes
# cluster of kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet and kube-proxy (install-kube.sh, above) over containerd and runc
# built from their Go modules and Debian's CNI plugins (~4 min once), with
# the ate and pause images packed from this tree (~1 min).
bash hack/install-cluster.sh
bash hack/build-cluster-images.sh
# The dashboard's e2e test drives a real headless Chromium (Debian's).
bash hack/install-chromium.sh
go vet ./...
"${ATE_CACHE:-$HOME/.cache/ate}/bin/staticcheck" ./...
# One iteration of every benchmark (~1 min), so no harness can rot;
# `make bench` runs them in full.
go test -run XXX -bench . -benchtime 1x ./internal/bench/
go test -run XXX -bench . -benchtime 1x ./test/e2e/
go test -run XXX -bench . -benchtime 1x ./internal/sandbox/gvisor/ ./internal/snapshot/
go test -run XXX -bench . -benchtime 1x ./internal/router/
# The stores' conformance suite (concurrent claimers, leases, fencing)
# under the race detector, on both backends (~20 s).
go test -race -count=1 ./internal/store/... ./internal/apidial/
# Packages run one at a time: the machine has 2 cores and runsc sandboxes
# are heavy; e2e tests start their own `ate up`. Last, so the run closes
# on the test results.
go test -count=1 -p 1 -timeout 60m ./...
