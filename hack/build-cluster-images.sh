#!/usr/bin/env bash
# Builds the images the real-cluster tests (test/cluster) use:
#
#   build/images/pause.tar  ate.local/pause:1 — the Pod sandbox image, from
#              hack/pause, which the suite imports into containerd
#              (`ctr -n k8s.io images import`: the kubelet's
#              infrastructure, as a node image would carry it; no
#              registry is reachable, so registry.k8s.io/pause is out)
#   build/images/{ate,counter,python-notes}  `make image`'s layouts
#              (hack/build-images.sh), which the suite pushes to its own
#              registry with `make image-push` and pulls from there
#
# Needs hack/build-examples.sh and hack/install-runsc.sh first.
# Rebuilt only when an input is newer than the output.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh
log() { printf 'build-cluster-images: %s\n' "$*" >&2; }

mkdir -p build/bin build/images
go build -o build/bin/ocipack ./hack/ocipack

# stale OUT INPUT...: OUT is missing or older than an input file.
stale() {
	local out=$1
	shift
	[[ -f $out ]] || return 0
	[[ -n "$(find "$@" -type f ! -name '*_test.go' -newer "$out" -print -quit)" ]]
}

# archive NAME TAG OCIPACK_ARG...: packs build/images/NAME.tar.
archive() {
	local name=$1 tag=$2
	shift 2
	local tmp
	tmp=$(mktemp -d)
	quiet build/bin/ocipack "$@" --compression none --tag "$tag" --out "$tmp/layout"
	tar -C "$tmp/layout" -cf "build/images/$name.tar.tmp" .
	mv "build/images/$name.tar.tmp" "build/images/$name.tar"
	rm -rf "$tmp"
	log "$name: $tag packed"
}

if stale build/images/pause.tar hack/pause hack/ocipack internal/image; then
	tmp=$(mktemp -d)
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w -buildid=' -o "$tmp/pause" ./hack/pause
	archive pause ate.local/pause:1 --add "$tmp/pause:/pause" --entrypoint /pause
	rm -rf "$tmp"
fi

bash hack/build-images.sh ate counter python-notes
