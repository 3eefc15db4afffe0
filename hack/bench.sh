#!/usr/bin/env bash
# The full benchmark run (`make bench`): activation tiers through the
# router with real runsc, the runtime alone, the router's overhead and the
# control plane with the fake sandbox, in one run on this machine. The
# results go into BENCHMARKS.md's generated section; the hand-written
# sections there explain them. Takes ~10 minutes on 2 cores.
set -euo pipefail
# Harnesses whose size is not b.N (actor counts, state sizes) run full size.
export ATE_BENCH_SCALE=full
cd "$(dirname "$0")/.."
# Density runs ~1000 sandboxes of ~50 tasks each: more than the kernel's
# default pid_max (32768) holds. Raise it for the run (never lower it),
# and put the host's value back afterwards.
out=$(mktemp)
pid_max=$(cat /proc/sys/kernel/pid_max)
trap 'rm -f "$out"; echo "$pid_max" >/proc/sys/kernel/pid_max' EXIT
if ((pid_max < 4194304)); then
	echo 4194304 >/proc/sys/kernel/pid_max
fi
{
	go test -run XXX -bench 'Activation|Warm$' -benchtime 30x ./test/e2e/
	go test -run XXX -bench 'EvictionLoad' -benchtime 3x ./test/e2e/
	go test -run XXX -bench 'ResumeBurst' -benchtime 2x -timeout 30m ./test/e2e/
	go test -run XXX -bench 'RouterParkedMemory' -benchtime 2x ./test/e2e/
	go test -run XXX -bench 'DensityRunning' -benchtime 1x -timeout 30m ./test/e2e/
	go test -run XXX -bench 'DensitySuspended' -benchtime 1x -timeout 30m ./test/e2e/
	go test -run XXX -bench 'LocalCompression' -benchtime 30x ./internal/snapshot/
	go test -run XXX -bench 'ColdBoot|Restore/^(run|default|prepared.*|compressed|zero-pages-excluded)$' -benchtime 30x ./internal/sandbox/gvisor/
	go test -run XXX -bench 'Restore/python' -benchtime 30x ./internal/sandbox/gvisor/
	go test -run XXX -bench 'RouterPerCore' -benchtime 1x ./test/e2e/ ./internal/router/
	go test -run XXX -bench 'Workloads' -benchtime 20x -timeout 30m ./test/e2e/
	go test -run XXX -bench 'SecurityOverhead' -benchtime 50x -timeout 30m ./test/e2e/
	go test -run XXX -bench 'ForkRunning' -benchtime 20x ./test/e2e/
	go test -run XXX -bench 'Wakeups|Ceilings|Scale|Workers' -benchtime 2s ./internal/bench/
	go test -run XXX -bench 'NodeProtocol' -benchtime 2000x -timeout 30m ./internal/bench/
	go test -run XXX -bench 'ClaimScale' -benchtime 2000x -timeout 30m ./internal/store/postgres/
} 2>&1 | tee "$out" | grep -E '^(Benchmark|ok|FAIL|---)'
go run ./hack/benchtable -file BENCHMARKS.md \
	-method "Activation and runtime rows: 30 iterations each, p50/p95/p99 of one GET from send to full response; control-plane rows: the fake sandbox, 2 s each." < "$out"
echo "bench: BENCHMARKS.md updated"
