#!/usr/bin/env bash
# Cross-builds the pinned gVisor runsc for another architecture into
# ${ATE_CACHE:-$HOME/.cache/ate}/cross/linux-ARCH/runsc and prints its
# path. hack/build-images.sh puts it in that architecture's `ate` image;
# the host's own runsc (hack/install-runsc.sh) stays at $ATE_CACHE/bin.
#
# Usage: hack/install-runsc-cross.sh ARCH    (a GOARCH gVisor supports: arm64)
#
# A plain `CGO_ENABLED=0 GOARCH=ARCH go build` of the module's ./runsc,
# WITHOUT the precompiled seccomp programs hack/install-runsc.sh embeds:
# hack/runsc-seccomp must run on the target architecture (it asks the
# module's own code for the programs of the architecture it runs on), and
# this machine cannot run ARCH binaries. Such a runsc works; it compiles
# its seccomp filter at every sandbox start and restore instead (~22 ms on
# a 2-core amd64 VM; BENCHMARKS.md).
#
# The version is go.mod's gvisor.dev/gvisor requirement, as for the host's
# runsc: ate drives runsc's library in process, so both must be one build.
# Idempotent: a stamp beside the binary records version and flavour;
# nothing is rebuilt while it matches. The first build takes about 2
# minutes on a 2-core VM (it compiles all of gVisor for ARCH).
set -euo pipefail
cd "$(dirname "$0")/.."

arch=${1:-}
case "$arch" in
arm64 | amd64) ;;
*)
	echo "usage: hack/install-runsc-cross.sh arm64|amd64" >&2
	exit 2
	;;
esac
if ! command -v go >/dev/null 2>&1; then
	echo "install-runsc-cross: go is required to build runsc" >&2
	exit 1
fi
RUNSC_VERSION=$(go list -m -f '{{.Version}}' gvisor.dev/gvisor)
CACHE="${ATE_CACHE:-$HOME/.cache/ate}"
DIR="$CACHE/cross/linux-$arch"
RUNSC="$DIR/runsc"
STAMP="$RUNSC.version"
WANT="$RUNSC_VERSION plain linux/$arch"

if [[ -x "$RUNSC" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
	echo "$RUNSC"
	exit 0
fi

mkdir -p "$DIR"
echo "install-runsc-cross: building gvisor.dev/gvisor/runsc@$RUNSC_VERSION for linux/$arch (about 2 minutes)..." >&2
# Remove the stamp first so an interrupted build is never taken as done.
rm -f "$STAMP"
go mod download gvisor.dev/gvisor
moddir=$(go list -m -f '{{.Dir}}' gvisor.dev/gvisor)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Built in a copy with the module's own go.mod, as hack/install-runsc.sh
# builds the host's runsc, so both see the same dependency versions.
cp -r "$moddir" "$work/gvisor"
chmod -R u+w "$work/gvisor"
(cd "$work/gvisor" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build -trimpath -o "$RUNSC.tmp" ./runsc)
mv "$RUNSC.tmp" "$RUNSC"
printf '%s\n' "$WANT" >"$STAMP"
echo "install-runsc-cross: runsc $WANT installed" >&2
echo "$RUNSC"
