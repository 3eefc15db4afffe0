#!/usr/bin/env bash
# Runs every test (`make test`): lint, the quick tier (`make check`'s
# tests), one iteration of the router's, runtime's and control plane's
# benchmark harnesses (the end-to-end ones run in `make bench`), the stores under the
# race detector, the suites that need root and built components (runsc,
# PostgreSQL, SeaweedFS, kube-apiserver, the registry server, Chromium)
# and, last, the real Kubernetes cluster. Needs root (network namespaces,
# runsc); CI runs as root.
#
# Every stage runs even when an earlier one failed; the run ends with a
# table of the stages and exits non-zero if any failed.
#
# Nothing is cached by hand: each component's install script is
# idempotent. On a cold machine the builds that only later suites need
# (SeaweedFS, PostgreSQL, Chromium, Kubernetes, the registry server,
# containerd, the cluster images) run in the background at low CPU
# priority while the earlier stages test; a stage that needs a component
# waits for it.
#
# The run is hermetic towards the user's own files: HOME is a fresh
# directory holding a deliberately wrong ~/.ate/config.yaml and
# ~/.kube/config (a test that reads them fails), TMPDIR is the run's own,
# and the Go caches stay the user's. After every stage hack/leftovers
# checks that no process, mount, network namespace, runsc state, lock file
# or listening port of the stage survived it (and removes what did); at
# the next start it cleans up after a run that was killed.
#
# Usage: hack/test.sh        (everything)
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
if [[ $(id -u) != 0 ]]; then
	echo "test: must run as root (network namespaces and runsc need it); \`make check\` runs the tests that do not" >&2
	exit 1
fi

# --- the run's own directories and environment ---------------------------
export ATE_CACHE=${ATE_CACHE:-$HOME/.cache/ate}
export PATH=$ATE_CACHE/bin:$PATH
# The Go settings are the user's (a GOPROXY set with `go env -w` lives in
# HOME); fixed here before HOME moves.
for v in GOPATH GOMODCACHE GOCACHE GOPROXY GOSUMDB GOPRIVATE GONOPROXY GONOSUMDB GOFLAGS GOTOOLCHAIN; do
	export "$v=$(go env "$v")"
done
# staticcheck's analysis cache too (it would otherwise start empty in the
# run's fresh HOME and take minutes instead of seconds).
export STATICCHECK_CACHE=${STATICCHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/staticcheck}
state=/var/tmp/ate-test-run
mkdir -p "$state"
leftovers=$state/leftovers
go build -o "$leftovers" ./hack/leftovers || {
	echo "test: cannot build hack/leftovers" >&2
	exit 1
}
if [[ -f $state/run.id ]]; then
	echo "test: an earlier run ($(cat "$state/run.id")) did not finish; removing what it left" >&2
	"$leftovers" check -before "$state/before.json" -run "$(cat "$state/run.id")" -self $$ -clean || true
fi
# The previous run's directory (kept for its evidence) goes now.
rm -rf "$state/home" /tmp/ate-t "$state/logs"
run_id=$(date +%Y%m%dT%H%M%S)-$$
export ATE_TEST_RUN=$run_id
"$leftovers" snapshot -o "$state/before.json"
echo "$run_id" >"$state/run.id"
# TMPDIR is short: tests make unix sockets under t.TempDir().
export HOME=$state/home TMPDIR=/tmp/ate-t
mkdir -p "$HOME/.ate" "$HOME/.kube" "$TMPDIR" "$state/logs"
# A test that reads the user's client config or kubeconfig instead of its
# own dials a closed port with a token that is not any server's.
cat >"$HOME/.ate/config.yaml" <<'EOF'
# hack/test.sh: a wrong config on purpose; no test may read it
server: 127.0.0.1:9
token: not-a-token-of-any-test
insecure: true
EOF
cat >"$HOME/.kube/config" <<'EOF'
# hack/test.sh: a wrong kubeconfig on purpose; no test may read it
apiVersion: v1
kind: Config
clusters: [{name: wrong, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}]
users: [{name: wrong, user: {token: not-a-token-of-any-test}}]
contexts: [{name: wrong, context: {cluster: wrong, user: wrong}}]
current-context: wrong
EOF

# --- stages ---------------------------------------------------------------
declare -a stage_names stage_results
start_all=$(date +%s)
failed=0

# in_dir DIR CMD...: runs CMD in DIR.
in_dir() {
	local d=$1
	shift
	(cd "$d" && "$@")
}

# stage NAME CMD...: runs CMD, records its result and time, then checks
# the host for what it left.
stage() {
	local name=$1 s rc
	shift
	s=$(date +%s)
	echo "=== stage $name: $*" >&2
	# Kept whole in the run's logs; a failure's own lines are repeated
	# in the summary (below), since a failed end-to-end test prints its
	# components' logs after them and a CI log keeps only its tail.
	# Not a pipe: bash would wait for tee, and tee for every process
	# holding the pipe, so a process the stage left behind holding its
	# output would hang the run before the check below could remove it.
	"$@" > >(tee "$state/logs/stage-$name.log") 2>&1
	rc=$?
	local tee_pid=$!
	local secs=$(($(date +%s) - s))
	local left
	if ! left=$("$leftovers" check -before "$state/before.json" -run "$run_id" -self $$ -clean 2>&1); then
		echo "$left" >&2
		echo "test: stage $name left the above on the host (removed now)" >&2
		# The summary repeats what was left: it is the part of the output
		# that survives a CI log's truncation.
		stage_names+=("$name: left processes or host state behind:
$(echo "$left" | head -20 | sed 's/^/             /')")
		stage_results+=("FAIL")
		failed=1
	fi
	wait "$tee_pid" 2>/dev/null
	stage_names+=("$name (${secs}s)")
	if ((rc == 0)); then
		stage_results+=("ok")
	else
		stage_results+=("FAIL ($rc)")
		failed=1
		failure_lines+=("$(failure_lines "$state/logs/stage-$name.log" | sed "s/^/  $name: /")")
	fi
	echo "=== stage $name: $([[ $rc == 0 ]] && echo ok || echo "FAIL ($rc)") in ${secs}s" >&2
}

# failure_lines LOG: what a failed go test run said of its failures,
# from its first failed test on — the tests that failed and their
# messages — without the logs of components the tests print when they
# fail (each line of those is indented under a "... log:" line, or is a
# JSON log record).
failure_lines() {
	local lines
	# A message of several lines (a chaos run's violations) goes on
	# under its .go line, indented deeper: those lines are kept too,
	# unless they are a log record.
	lines=$(awk '/^[[:space:]]*--- FAIL|^panic:/ { failed = 1 }
		!failed { next }
		/^[[:space:]]*(--- FAIL|FAIL|panic:)|^[[:space:]]+[A-Za-z0-9_]+\.go:[0-9]+: / {
			cont = 0
			if ($0 ~ /\.go:[0-9]+: .* log:$/) next
			print
			if ($0 ~ /\.go:[0-9]+: /) { match($0, /^[[:space:]]*/); cont = RLENGTH }
			next
		}
		cont && match($0, /^[[:space:]]*/) && RLENGTH > cont && $0 !~ /^[[:space:]]*\{/ { print; next }
		{ cont = 0 }' "$1" |
		head -n 60)
	# Not a test's failure (vet, staticcheck, a build, an install): the
	# end of what the stage said.
	if [[ -z $lines ]]; then
		lines=$(tail -n 20 "$1")
	fi
	printf '%s\n' "$lines"
}
failure_lines=()

# The background builds: each writes $state/built/NAME.ok or .fail; need
# waits for one.
mkdir -p "$state/built"
rm -f "$state/built/"*
build_bg() {
	local name=$1
	shift
	if nice -n 15 "$@" >"$state/logs/install-$name.log" 2>&1; then
		touch "$state/built/$name.ok"
	else
		touch "$state/built/$name.fail"
	fi
}
need() {
	local name
	for name in "$@"; do
		while [[ ! -e $state/built/$name.ok && ! -e $state/built/$name.fail ]]; do
			sleep 2
		done
		if [[ -e $state/built/$name.fail ]]; then
			echo "test: installing $name failed:" >&2
			tail -n 40 "$state/logs/install-$name.log" >&2
			return 1
		fi
	done
}

# Every package's tests run in exactly one stage below; hack/packages.sh
# sorts them by what they need (the list `make check` runs is "quick").
# shellcheck source=hack/packages.sh
source hack/packages.sh

stage install-deps bash hack/install-deps.sh
stage build-examples bash hack/build-examples.sh
(
	build_bg seaweedfs bash hack/install-seaweedfs.sh
	build_bg postgres bash hack/install-postgres.sh
	build_bg chromium bash hack/install-chromium.sh
	build_bg kube-control bash hack/install-kube.sh control
	# After kube-control, which the foreground waits for first: the
	# registry (~3 min cold) builds while the kube stage runs.
	build_bg registry bash hack/install-registry.sh
	build_bg kube-node bash hack/install-kube.sh node
	build_bg cluster bash hack/install-cluster.sh
	build_bg cluster-images bash hack/build-cluster-images.sh
) &
bg=$!

stage vet go vet ./...
stage staticcheck "$ATE_CACHE/bin/staticcheck" ./...
# go vet ran over every package above: -vet=off skips the subset that
# go test would repeat per package.
stage quick go test -vet=off -count=1 "${quick_packages[@]}"
# One iteration of these benchmark harnesses (~45 s), so none can rot;
# `make bench` runs them in full.
stage bench-router go test -vet=off -run XXX -bench . -benchtime 1x ./internal/router/
stage bench-runtime go test -vet=off -run XXX -bench . -benchtime 1x ./internal/sandbox/gvisor/ ./internal/snapshot/
stage root go test -vet=off -count=1 -p 1 -timeout 30m "${root_packages[@]}"
stage need-postgres need postgres
# The stores' conformance suite (concurrent claimers, leases, fencing)
# under the race detector, on both backends (~20 s).
stage stores-race go test -vet=off -race -count=1 "${race_packages[@]}"
stage bench-control-plane go test -vet=off -run XXX -bench . -benchtime 1x ./internal/bench/ ./internal/store/postgres/
stage need-seaweedfs need seaweedfs
stage components go test -vet=off -count=1 -p 1 -timeout 30m "${component_packages[@]}"
stage need-kube-control need kube-control
stage kube go test -vet=off -count=1 -p 1 -timeout 30m "${kube_packages[@]}"
stage need-registry need registry
# hack/ocipush against a real registry server (TLS, htpasswd; ~1 s).
stage registry go test -vet=off -count=1 "${registry_packages[@]}"
stage need-chromium need chromium
# The e2e test binary runs from its package directory as `go test` would.
# Its benchmarks (3 min even at one iteration each) run in `make bench`
# only: with them the warm run took 30.6 min, over the 30 it must fit.
stage build-e2e go test -vet=off -c -o "$state/e2e.test" ./test/e2e/
stage e2e in_dir test/e2e "$state/e2e.test" -test.count=1 -test.timeout 60m
# One cycle of back-to-back activations (suspend, request, pause,
# request; ~20 s), so the benchmark issue 35 is judged by cannot rot.
stage bench-cycle in_dir test/e2e "$state/e2e.test" -test.run XXX -test.bench 'ActivationCycle$' -test.benchtime 1x -test.timeout 10m
stage need-cluster need kube-node cluster cluster-images registry
stage cluster go test -vet=off -count=1 -timeout 30m ./test/cluster/
wait "$bg"

# --- summary ----------------------------------------------------------------
rm -f "$state/run.id"
echo
echo "test: stages (total $(($(date +%s) - start_all))s; background install logs in $state/logs):"
passed=0 nfailed=0
for i in "${!stage_names[@]}"; do
	printf '  %-8s %s\n' "${stage_results[$i]}" "${stage_names[$i]}"
	if [[ ${stage_results[$i]} == ok ]]; then passed=$((passed + 1)); else nfailed=$((nfailed + 1)); fi
done
((failed)) || rm -rf "$state/home" /tmp/ate-t
# The plain closing line CI reads.
if ((${#failure_lines[@]})); then
	echo
	echo "test: what the failed stages said (whole output in $state/logs/stage-*.log):"
	printf '%s\n' "${failure_lines[@]}"
fi
echo "stages: $passed passed, $nfailed failed"
exit "$failed"
