#!/usr/bin/env bash
# build-images.sh (`make image`) builds the images `make image-push`
# publishes, as OCI image layouts in build/images (no container engine):
#
#   ate            ONE multi-platform image index, linux/amd64 and
#                  linux/arm64; each image holds
#                    /usr/local/bin/ate   ate, CGO_ENABLED=0 for that
#                                         architecture (the entrypoint)
#                    /opt/ate/bin/runsc   go.mod's gVisor runsc for it
#                                         (ATE_CACHE=/opt/ate: where ate
#                                         looks for it)
#                    /tmp                 an empty, sticky, world-writable dir
#                    /etc/ssl/certs/ca-certificates.crt
#                                         Debian's ca-certificates roots as
#                                         packaged (not local additions),
#                                         where Go looks:
#                                         S3 over https, OIDC discovery and
#                                         registry pulls need system roots
#                  with PATH=/usr/local/bin:/opt/ate/bin:/usr/bin:/bin. The
#                  host's architecture gets hack/install-runsc.sh's runsc
#                  ($ATE_CACHE/bin/runsc, precompiled seccomp programs), the
#                  other one hack/install-runsc-cross.sh's (a plain build,
#                  without them: it compiles its seccomp filter at each
#                  sandbox start, ~22 ms). gzip layers, for a registry.
#   counter        linux/amd64 + linux/arm64 index (hack/build-examples.sh)
#   python-notes   this host's architecture only: a Debian rootfs made
#   node-sessions  here with debootstrap (hack/build-examples.sh; root)
#
# Usage: hack/build-images.sh [ate] [counter] [python-notes] [node-sessions]
# (default: all four)
#
# An image is rebuilt only when one of its inputs is newer than its
# index.json; packing is deterministic, so rebuilding unchanged inputs
# gives the same digest. The first run builds ate for both architectures
# and runsc for the other one: 14 min on 2 cores with an empty Go build
# cache (runsc ~2 of it); then ~30 s when ate changed, 1 s when nothing did.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh
log() { printf 'build-images: %s\n' "$*" >&2; }

CACHE="${ATE_CACHE:-$HOME/.cache/ate}"
# The order of the index; fixed, so every host builds the same one.
arches=(amd64 arm64)
# The roots the image trusts: Debian's ca-certificates package (Mozilla's
# list) as shipped, concatenated in name order, never this machine's
# /etc/ssl/certs, which also holds whatever roots were added locally (a
# corporate proxy's, mkcert's) and would then be trusted in production.
cabundle=build/bin/ca-certificates.crt
cadir=/usr/share/ca-certificates/mozilla

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(ate counter python-notes node-sessions)
examples=()
want_ate=0
for t in "${targets[@]}"; do
	case "$t" in
	ate) want_ate=1 ;;
	counter | python-notes | node-sessions) examples+=("$t") ;;
	*)
		log "unknown image $t (want ate, counter, python-notes or node-sessions)"
		exit 2
		;;
	esac
done

# stale OUT INPUT... succeeds when OUT/index.json is missing or older than
# any input file (directories are searched, test files ignored).
stale() {
	local out=$1
	shift
	[[ -f "$out/index.json" ]] || return 0
	[[ -n "$(find "$@" -type f ! -name '*_test.go' -newer "$out/index.json" -print -quit)" ]]
}

# runsc_for ARCH prints the runsc binary for ARCH, installing it first.
runsc_for() {
	if [[ $1 == "$(go env GOARCH)" ]]; then
		bash hack/install-runsc.sh >&2
		echo "$CACHE/bin/runsc"
	else
		bash hack/install-runsc-cross.sh "$1" | tail -n 1
	fi
}

build_ate() {
	local out=build/images/ate arch
	local -A runsc
	for arch in "${arches[@]}"; do
		runsc[$arch]=$(runsc_for "$arch")
	done
	mkdir -p build/bin
	go build -o build/bin/ocipack ./hack/ocipack
	go build -o build/bin/ociindex ./hack/ociindex
	if ! compgen -G "$cadir/*.crt" >/dev/null; then
		log "installing Debian's ca-certificates (the roots the image carries)"
		apt_install --no-install-recommends ca-certificates >/dev/null
	fi
	# Rewritten only when it changes, so its mtime marks a real change.
	LC_ALL=C cat $(LC_ALL=C ls "$cadir"/*.crt | sort) >"$cabundle.tmp"
	if cmp -s "$cabundle.tmp" "$cabundle"; then
		rm "$cabundle.tmp"
	else
		mv "$cabundle.tmp" "$cabundle"
	fi
	if ! stale "$out" cmd internal api pkg go.mod go.sum hack/ocipack hack/ociindex "${runsc[@]}" "$cabundle"; then
		log "ate: up to date ($(grep -o 'sha256:[0-9a-f]*' "$out/index.json" | head -1))"
		return
	fi
	local tmp start=$SECONDS
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' RETURN
	mkdir -p "$tmp/tmp"
	chmod 1777 "$tmp/tmp"
	for arch in "${arches[@]}"; do
		log "ate: building ate for linux/$arch"
		mkdir -p "$tmp/$arch"
		# -trimpath and no build ID: the same source gives the same binary.
		CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags='-s -w -buildid=' -o "$tmp/$arch/ate" ./cmd/ate
		log "ate: packing linux/$arch (runsc ${runsc[$arch]})"
		build/bin/ocipack --arch "$arch" \
			--add "$tmp/$arch/ate:/usr/local/bin/ate" --add "${runsc[$arch]}:/opt/ate/bin/runsc" \
			--add "$tmp/tmp:/tmp" --add "$cabundle:/etc/ssl/certs/ca-certificates.crt" \
			--env ATE_CACHE=/opt/ate --env PATH=/usr/local/bin:/opt/ate/bin:/usr/bin:/bin \
			--entrypoint /usr/local/bin/ate \
			--compression gzip --tag latest --out "$tmp/layout-$arch"
	done
	local layouts=()
	for arch in "${arches[@]}"; do
		layouts+=("$tmp/layout-$arch")
	done
	build/bin/ociindex --tag latest --out "$out" "${layouts[@]}"
	log "ate: built in $((SECONDS - start)) s ($(grep -o 'sha256:[0-9a-f]*' "$out/index.json" | head -1))"
}

if ((want_ate)); then
	build_ate
fi
if ((${#examples[@]})); then
	bash hack/build-examples.sh "${examples[@]}"
fi
