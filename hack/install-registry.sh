#!/usr/bin/env bash
# Installs the pinned CNCF distribution registry server into
# ${ATE_CACHE:-$HOME/.cache/ate}/bin/registry. hack/ocipush's test pushes
# the multi-architecture images to a real registry it starts (with
# htpasswd authentication and TLS), and fails, never skips, without it.
#
# Not part of hack/install-deps.sh: `make up` runs that and needs no
# registry. hack/test.sh builds it in the background (`need registry`).
#
# The module has no replace directives, so a plain `go install
# MODULE/cmd/registry@VERSION` builds it, outside this repository's module
# (its go.mod and go.sum stay untouched). About 1-2 minutes on a 2-core
# VM the first time.
#
# Idempotent: a stamp file beside the binary records the version, and
# nothing is rebuilt while it matches; bumping REGISTRY_VERSION rebuilds.
set -euo pipefail

REGISTRY_VERSION=v3.1.2
CACHE="${ATE_CACHE:-$HOME/.cache/ate}"
BIN_DIR="$CACHE/bin"
REGISTRY="$BIN_DIR/registry"
STAMP="$REGISTRY.version"

if [[ -x "$REGISTRY" && -f "$STAMP" && "$(cat "$STAMP")" == "$REGISTRY_VERSION" ]]; then
	echo "registry $REGISTRY_VERSION already installed: $REGISTRY"
	exit 0
fi
if ! command -v go >/dev/null 2>&1; then
	echo "install-registry: go is required to build the registry" >&2
	exit 1
fi

mkdir -p "$BIN_DIR"
echo "install-registry: building github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION (1-2 minutes)..." >&2
# Remove the stamp first so an interrupted build is never taken as done.
rm -f "$STAMP"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# GOBIN is a scratch directory so a half-written binary never lands at
# $REGISTRY; `registry --version` prints the version set here.
(cd "$work" && CGO_ENABLED=0 GOBIN="$work/bin" go install -trimpath \
	-ldflags="-s -X github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION" \
	"github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION")
mv "$work/bin/registry" "$REGISTRY"
printf '%s\n' "$REGISTRY_VERSION" >"$STAMP"
echo "registry $REGISTRY_VERSION installed: $REGISTRY"
