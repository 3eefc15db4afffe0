#!/usr/bin/env bash
# build-examples.sh builds the example images as OCI image layouts:
#
#   build/images/counter       static Go server, gzip layer; one
#                              multi-platform index of linux/amd64 and
#                              linux/arm64 images (ate resolves it to
#                              this host's; `make image-push` pushes both)
#   build/images/python-notes  Debian python3 rootfs + /app/notes.py,
#                              uncompressed layer (needs root once, for
#                              hack/python-rootfs.sh); this host's
#                              architecture only, like the rootfs
#   build/images/node-sessions Debian nodejs rootfs + /app/server.js,
#                              uncompressed layer (needs root once, for
#                              hack/node-rootfs.sh; 3-4 min the first time)
#
# Usage: hack/build-examples.sh [counter] [python-notes] [node-sessions]
# (default: all three)
#
# An image is repacked only when one of its inputs is newer than its
# index.json (which Pack rewrites), so a second run is quick. Packing is
# deterministic, so a forced rebuild of unchanged inputs gives the same
# digest. Paths are relative to the repository root, where this script runs.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'build-examples: %s\n' "$*" >&2; }

ocipack=build/bin/ocipack
ociindex=build/bin/ociindex
# The packer's own sources are inputs of every image: a change to the
# layer format must repack.
pack_inputs=(hack/ocipack hack/ociindex internal/image)

# stale OUT INPUT... succeeds when OUT/index.json is missing or older than
# any input file (directories are searched, test files ignored).
stale() {
	local out=$1
	shift
	[[ -f "$out/index.json" ]] || return 0
	[[ -n "$(find "$@" -type f ! -name '*_test.go' -newer "$out/index.json" -print -quit)" ]]
}

# digest OUT prints the manifest digest recorded in OUT/index.json.
digest() {
	grep -o '"digest": *"sha256:[0-9a-f]*"' "$1/index.json" | head -1 | cut -d'"' -f4
}

build_ocipack() {
	mkdir -p build/bin
	# go build is itself cached; this costs well under a second when
	# nothing changed.
	go build -o "$ocipack" ./hack/ocipack
	go build -o "$ociindex" ./hack/ociindex
}

build_counter() {
	local out=build/images/counter
	if ! stale "$out" examples/counter "${pack_inputs[@]}" go.mod; then
		log "counter: up to date ($(digest "$out"))"
		return
	fi
	local tmp
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' RETURN
	# -trimpath and no build ID keep the binary (and so the digest) the
	# same across checkouts and machines. One image per architecture,
	# always in this order, so the index is the same on any host.
	log "counter: building and packing for linux/amd64 and linux/arm64 (a few seconds)"
	local start=$SECONDS arch
	for arch in amd64 arm64; do
		mkdir -p "$tmp/$arch"
		CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags='-s -w -buildid=' -o "$tmp/$arch/counter" ./examples/counter
		"$ocipack" --arch "$arch" --add "$tmp/$arch/counter:/counter" --entrypoint /counter \
			--env PORT=8080 --workdir / --port 8080 \
			--compression gzip --tag latest --out "$tmp/layout-$arch"
	done
	"$ociindex" --tag latest --out "$out" "$tmp/layout-amd64" "$tmp/layout-arm64"
	log "counter: packed in $((SECONDS - start)) s ($(digest "$out"))"
}

# pack_on_rootfs NAME ROOTFS_SCRIPT SRC DEST OCIPACK_ARG... packs
# build/images/NAME: the Debian rootfs ROOTFS_SCRIPT prints (built once,
# cached) as /, the application file SRC at DEST, the usual PATH, LANG,
# PORT=8080, workdir /app and port 8080, one uncompressed layer, plus the
# example's own ocipack arguments (its command and env). Uncompressed:
# gzip would shrink ~170-225 MB to ~65-80 MB but turn a 1-3 s pack into
# ~10 s, and slow every unpack, for a local cache.
pack_on_rootfs() {
	local name=$1 script=$2 src=$3 dest=$4
	shift 4
	local out=build/images/$name rootfs
	rootfs=$("$script" | tail -n 1)
	if ! stale "$out" "$rootfs.stamp" "$src" "${pack_inputs[@]}"; then
		log "$name: up to date ($(digest "$out"))"
		return
	fi
	local start=$SECONDS
	log "$name: packing the image (10-30 s)"
	"$ocipack" --add "$rootfs:/" --add "$src:$dest" "$@" \
		--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		--env LANG=C.UTF-8 --env PORT=8080 --workdir /app --port 8080 \
		--compression none --tag latest --out "$out"
	log "$name: packed in $((SECONDS - start)) s ($(digest "$out"))"
}

build_python_notes() {
	# --keep-mtimes: the rootfs is built once, so its times are stable, and
	# Python's .pyc files are validated against the .py files' mtimes.
	pack_on_rootfs python-notes hack/python-rootfs.sh examples/python-notes/notes.py /app/notes.py \
		--cmd /usr/bin/python3 --cmd /app/notes.py \
		--env PYTHONUNBUFFERED=1 --env PYTHONDONTWRITEBYTECODE=1 --keep-mtimes
}

build_node_sessions() {
	# Node keeps no mtime-checked caches: the packer's fixed epoch will do.
	pack_on_rootfs node-sessions hack/node-rootfs.sh examples/node-sessions/server.js /app/server.js \
		--cmd /usr/bin/node --cmd /app/server.js --env NODE_ENV=production
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(counter python-notes node-sessions)
for t in "${targets[@]}"; do
	case "$t" in
	counter | python-notes | node-sessions) ;;
	*)
		log "unknown example $t (want counter, python-notes or node-sessions)"
		exit 2
		;;
	esac
done

build_ocipack
for t in "${targets[@]}"; do
	case "$t" in
	counter) build_counter ;;
	python-notes) build_python_notes ;;
	node-sessions) build_node_sessions ;;
	esac
done
