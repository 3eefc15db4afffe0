#!/usr/bin/env bash
# Installs the pinned gVisor runsc into ${ATE_CACHE:-$HOME/.cache/ate}/bin,
# building it from the Go module proxy (Debian's runsc is too old to run a
# sandbox with a network here; see shared/notes/gvisor-on-these-machines.md).
# Idempotent: a stamp file beside the binary records the installed module
# version, and nothing is rebuilt while it matches. The build takes about
# 4 minutes on a 2-core VM. Also installs iproute2 if `ip` is missing.
#
# Keep RUNSC_VERSION equal to gvisor.RunscVersion in
# internal/sandbox/gvisor/runtime.go.
set -euo pipefail

RUNSC_VERSION="v0.0.0-20260905035102-160fafc42237"
CACHE="${ATE_CACHE:-$HOME/.cache/ate}"
BIN_DIR="$CACHE/bin"
RUNSC="$BIN_DIR/runsc"
# The stamp holds the module version because such a build prints
# VERSION_MISSING for `runsc --version`.
STAMP="$RUNSC.version"

if ! command -v ip >/dev/null 2>&1; then
	echo "install-runsc: installing iproute2 (ip is missing)" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2
fi

if [[ -x "$RUNSC" && -f "$STAMP" && "$(cat "$STAMP")" == "$RUNSC_VERSION" ]]; then
	echo "runsc $RUNSC_VERSION already installed: $RUNSC"
	exit 0
fi

if ! command -v go >/dev/null 2>&1; then
	echo "install-runsc: go is required to build runsc" >&2
	exit 1
fi

mkdir -p "$BIN_DIR"
echo "install-runsc: building gvisor.dev/gvisor/runsc@$RUNSC_VERSION (about 4 minutes)..." >&2
# Remove the stamp first so an interrupted build is never taken as done.
rm -f "$STAMP"
CGO_ENABLED=0 GOBIN="$BIN_DIR" go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
printf '%s\n' "$RUNSC_VERSION" >"$STAMP"
echo "runsc $RUNSC_VERSION installed: $RUNSC"
