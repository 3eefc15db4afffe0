#!/usr/bin/env bash
# Builds the images the real-cluster tests (test/cluster) import into
# containerd (`ctr -n k8s.io images import`), as OCI archives in build/images:
#
#   pause.tar  ate.local/pause:1 — the Pod sandbox image, from hack/pause
#              (no registry is reachable, so registry.k8s.io/pause is out)
#   ate.tar    ate.local/ate:test — the ate binary (entrypoint), the runsc
#              of hack/install-runsc.sh at $ATE_CACHE/bin/runsc
#              (ATE_CACHE=/opt/ate), and the counter example's OCI layout
#              at /images/counter, so templates say image oci:/images/counter
#              (the API server and the worker Pods run this image, and no
#              registry is reachable to pull a template image from)
#
# Needs hack/build-examples.sh counter and hack/install-runsc.sh first.
# Rebuilt only when an input is newer than the archive.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh
log() { printf 'build-cluster-images: %s\n' "$*" >&2; }

CACHE="${ATE_CACHE:-$HOME/.cache/ate}"
runsc="$CACHE/bin/runsc"
[[ -x $runsc ]] || { log "no $runsc: run hack/install-runsc.sh"; exit 1; }
[[ -f build/images/counter/index.json ]] || { log "no build/images/counter: run hack/build-examples.sh counter"; exit 1; }
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

if stale build/images/ate.tar cmd internal api pkg go.mod hack/ocipack build/images/counter "$runsc"; then
	tmp=$(mktemp -d)
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/ate" ./cmd/ate
	mkdir -p "$tmp/tmp"
	archive ate ate.local/ate:test \
		--add "$tmp/ate:/usr/local/bin/ate" --add "$runsc:/opt/ate/bin/runsc" \
		--add "build/images/counter:/images/counter" --add "$tmp/tmp:/tmp" \
		--env ATE_CACHE=/opt/ate --env PATH=/usr/local/bin:/usr/bin:/bin \
		--entrypoint /usr/local/bin/ate
	rm -rf "$tmp"
fi
