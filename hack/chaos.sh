#!/usr/bin/env bash
# The fault-injection run (`make chaos`): TestChaos (test/e2e/chaos_test.go)
# for as long and with as many seeds as asked. Two API server replicas over
# PostgreSQL, two nodes and a router run as separate processes, each in its
# own network namespace on a bridge, with PostgreSQL and SeaweedFS on the
# machine behind it; faults are chosen from each seed (full, partial and one-way partitions by nftables
# rules, kill -9, SIGSTOP, PostgreSQL restarts, S3 errors and latency)
# while clients send requests to counter actors, and porcupine checks
# every actor's history. A failing seed replays its fault
# schedule: `make chaos SEEDS=<seed>`.
#
# Usage: hack/chaos.sh [DURATION per seed, default 10m] [SEEDS, default 1] [FAULTS]
#   e.g. make chaos DURATION=30m SEEDS=1,2,3
#   FAULTS: comma-separated fault kinds to draw from, as the report names
#   them (default all), e.g. make chaos FAULTS="SIGSTOP replica,kill -9 node"
# Prints, per seed, the faults injected by kind (with the longest request
# and recovery after each kind), requests sent and answered, and the
# violations found; exits non-zero on any violation, failed request or
# actor that did not serve again after a heal. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10m}
seeds=${2:-1}
faults=${3:-}
if [[ $(id -u) != 0 ]]; then
	echo "chaos: must run as root (runsc, network namespaces, nftables)" >&2
	exit 1
fi
export ATE_CACHE=${ATE_CACHE:-$HOME/.cache/ate}
export PATH=$ATE_CACHE/bin:$PATH
bash hack/install-deps.sh
bash hack/build-examples.sh
bash hack/install-seaweedfs.sh
bash hack/install-postgres.sh
bin=/var/tmp/ate-chaos
mkdir -p "$bin"
go test -vet=off -c -o "$bin/e2e.test" ./test/e2e/
# Each seed's run bounds itself (faults for the duration, 90 s for the
# last recovery, 2 min per actor for the check); the timeout is a backstop.
cd test/e2e
exec "$bin/e2e.test" -test.run '^TestChaos$' -test.v -test.count=1 -test.timeout 24h \
	-chaos.seeds "$seeds" -chaos.duration "$duration" -chaos.faults "$faults"
