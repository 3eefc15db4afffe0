#!/usr/bin/env bash
# Installs the pinned SeaweedFS `weed` binary into
# ${ATE_CACHE:-$HOME/.cache/ate}/bin/weed. The S3 snapshot store's tests
# (internal/snapshot/s3) run against a real SeaweedFS S3 gateway it starts
# (s3test), and fail, never skip, without it.
#
# Not part of hack/install-deps.sh on purpose: `make up` runs that, and the
# quick start must not wait for this build (several minutes on a 2-core VM).
# hack/test.sh calls it.
#
# `go install github.com/seaweedfs/seaweedfs/weed@version` is refused
# because the module's go.mod has replace directives, so the script copies
# the module source out of the module cache into a writable directory and
# builds ./weed inside it, with the module's own go.mod and replaces.
#
# Idempotent: a stamp file beside the binary records the version, and
# nothing is rebuilt while it matches; bumping SEAWEEDFS_VERSION rebuilds.
set -euo pipefail

SEAWEEDFS_VERSION=v0.0.0-20261109003541-7506e5f91cd6
CACHE="${ATE_CACHE:-$HOME/.cache/ate}"
BIN_DIR="$CACHE/bin"
WEED="$BIN_DIR/weed"
STAMP="$WEED.version"

if [[ -x "$WEED" && -f "$STAMP" && "$(cat "$STAMP")" == "$SEAWEEDFS_VERSION" ]]; then
	echo "weed $SEAWEEDFS_VERSION already installed: $WEED"
	exit 0
fi
if ! command -v go >/dev/null 2>&1; then
	echo "install-seaweedfs: go is required to build weed" >&2
	exit 1
fi

mkdir -p "$BIN_DIR"
echo "install-seaweedfs: building github.com/seaweedfs/seaweedfs/weed@$SEAWEEDFS_VERSION (several minutes)..." >&2
# Remove the stamp first so an interrupted build is never taken as done.
rm -f "$STAMP"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Outside any module, so this repository's go.mod and go.sum are untouched.
moddir=$(cd "$work" && go mod download -json "github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [[ -z "$moddir" || ! -d "$moddir" ]]; then
	echo "install-seaweedfs: go mod download gave no source directory" >&2
	exit 1
fi
cp -r "$moddir" "$work/seaweedfs"
chmod -R u+w "$work/seaweedfs"
(cd "$work/seaweedfs" && CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$WEED.tmp" ./weed)
mv "$WEED.tmp" "$WEED"
printf '%s\n' "$SEAWEEDFS_VERSION" >"$STAMP"
echo "weed $SEAWEEDFS_VERSION installed: $WEED"
