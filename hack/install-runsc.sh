#!/usr/bin/env bash
# Installs the pinned gVisor runsc into ${ATE_CACHE:-$HOME/.cache/ate}/bin,
# building it from the Go module proxy (Debian's runsc is too old to run a
# sandbox with a network here; see shared/notes/gvisor-on-these-machines.md).
#
# The build embeds precompiled seccomp programs, as gVisor's own (Bazel)
# release builds do and a plain `go install` does not: without them every
# sandbox start and restore compiles its seccomp filter, ~22 ms on a 2-core
# VM (BENCHMARKS.md). hack/runsc-seccomp generates them from the module's
# own code in a writable copy of its source, which is then built.
#
# Idempotent: a stamp file beside the binary records the module version and
# build flavour, and nothing is rebuilt while it matches. A first build
# takes about 5 minutes on a 2-core VM (about 100 s of it precompiling
# seccomp programs). Also installs iproute2 if `ip` is missing.
#
# Keep RUNSC_VERSION equal to gvisor.RunscVersion in
# internal/sandbox/gvisor/runtime.go and to go.mod's gvisor.dev/gvisor
# requirement: ate drives runsc's own library in process for starts and
# restores (TestLibraryIsRunscVersion checks the two Go-side copies).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNSC_VERSION="v0.0.0-20260905035102-160fafc42237"
FLAVOUR="precompiled-seccomp-1"
CACHE="${ATE_CACHE:-$HOME/.cache/ate}"
BIN_DIR="$CACHE/bin"
RUNSC="$BIN_DIR/runsc"
# The stamp holds the module version because such a build prints
# VERSION_MISSING for `runsc --version`.
STAMP="$RUNSC.version"
WANT="$RUNSC_VERSION $FLAVOUR"

if ! command -v ip >/dev/null 2>&1; then
	echo "install-runsc: installing iproute2 (ip is missing)" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2
fi

if [[ -x "$RUNSC" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
	echo "runsc $WANT already installed: $RUNSC"
	exit 0
fi

if ! command -v go >/dev/null 2>&1; then
	echo "install-runsc: go is required to build runsc" >&2
	exit 1
fi

mkdir -p "$BIN_DIR"
echo "install-runsc: building gvisor.dev/gvisor/runsc@$RUNSC_VERSION with precompiled seccomp programs (about 5 minutes)..." >&2
# Remove the stamp first so an interrupted build is never taken as done.
rm -f "$STAMP"

modjson=$(go mod download -json "gvisor.dev/gvisor@$RUNSC_VERSION")
moddir=$(printf '%s\n' "$modjson" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
if [[ -z "$moddir" || ! -d "$moddir" ]]; then
	echo "install-runsc: cannot find the downloaded module source:" >&2
	printf '%s\n' "$modjson" >&2
	exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$moddir" "$work/gvisor"
chmod -R u+w "$work/gvisor"
mkdir "$work/gvisor/ate-runsc-seccomp"
# The generator imports the gvisor module, so it is built inside it; its
# ignore tag only keeps it out of Substrate's own build.
sed '/^\/\/go:build ignore$/d' hack/runsc-seccomp/main.go >"$work/gvisor/ate-runsc-seccomp/main.go"
(cd "$work/gvisor" && go run ./ate-runsc-seccomp "$work/gvisor")
(cd "$work/gvisor" && CGO_ENABLED=0 go build -o "$RUNSC.tmp" ./runsc)
mv "$RUNSC.tmp" "$RUNSC"
printf '%s\n' "$WANT" >"$STAMP"
echo "runsc $WANT installed: $RUNSC"
