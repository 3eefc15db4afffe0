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
# build flavour (a hash of the seccomp generator, so editing it rebuilds),
# and nothing is rebuilt while it matches. A first build takes about 5
# minutes on a 2-core VM (about 100 s of it precompiling seccomp programs).
#
# The version is go.mod's gvisor.dev/gvisor requirement: ate drives runsc's
# own library in process, so the binary must be the same build
# (gvisor.RunscVersion, which TestLibraryIsRunscVersion keeps equal to it).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1; then
	echo "install-runsc: go is required to build runsc" >&2
	exit 1
fi
RUNSC_VERSION=$(go list -m -f '{{.Version}}' gvisor.dev/gvisor)
FLAVOUR="precompiled-seccomp-$(cat hack/runsc-seccomp/*.go | sha256sum | cut -c1-12)"
CACHE="${ATE_CACHE:-$HOME/.cache/ate}"
BIN_DIR="$CACHE/bin"
RUNSC="$BIN_DIR/runsc"
# The stamp holds the module version because such a build prints
# VERSION_MISSING for `runsc --version`.
STAMP="$RUNSC.version"
WANT="$RUNSC_VERSION $FLAVOUR"

if [[ -x "$RUNSC" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
	echo "runsc $WANT already installed: $RUNSC"
	exit 0
fi

mkdir -p "$BIN_DIR"
echo "install-runsc: building gvisor.dev/gvisor/runsc@$RUNSC_VERSION with precompiled seccomp programs (about 5 minutes)..." >&2
# Remove the stamp first so an interrupted build is never taken as done.
rm -f "$STAMP"

go mod download gvisor.dev/gvisor
moddir=$(go list -m -f '{{.Dir}}' gvisor.dev/gvisor)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$moddir" "$work/gvisor"
chmod -R u+w "$work/gvisor"
# The generator links the same gvisor module (our go.mod's) and writes the
# programs into the writable copy, which is then built.
go run ./hack/runsc-seccomp/main.go "$work/gvisor"
(cd "$work/gvisor" && CGO_ENABLED=0 go build -o "$RUNSC.tmp" ./runsc)
mv "$RUNSC.tmp" "$RUNSC"
printf '%s\n' "$WANT" >"$STAMP"
echo "runsc $WANT installed: $RUNSC"
