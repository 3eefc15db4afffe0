#!/usr/bin/env bash
# Runs every test: unit tests, then end-to-end tests with real runsc
# sandboxes. Needs root (network namespaces, runsc); CI runs as root.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) != 0 ]]; then
	echo "test: must run as root (network namespaces and runsc need it)" >&2
	exit 1
fi
go vet ./...
"${ATE_CACHE:-$HOME/.cache/ate}/bin/staticcheck" ./...
# Packages run one at a time: the machine has 2 cores and runsc sandboxes
# are heavy; e2e tests start their own `ate up`.
go test -count=1 -p 1 -timeout 60m ./...
# One iteration of every control-plane benchmark (~20 s), so the harness can't rot.
go test -run XXX -bench . -benchtime 1x ./internal/bench/
# One iteration of the activation benchmarks with real runsc (~40 s), for
# the same reason; `make bench` runs them in full.
go test -run XXX -bench 'Activation|Warm$|Density' -benchtime 1x ./test/e2e/
go test -run XXX -bench . -benchtime 1x ./internal/sandbox/gvisor/
