#!/usr/bin/env bash
# debian-rootfs.sh NAME PACKAGE... builds (once) a minimal Debian bookworm
# root filesystem with the given packages in it, for an example image.
# hack/python-rootfs.sh (python3) and hack/node-rootfs.sh (nodejs) call it.
#
# Result: ${ATE_CACHE:-$HOME/.cache/ate}/rootfs/NAME-bookworm plus a stamp
# file NAME-bookworm.stamp beside it (outside, so it is not packed into the
# image; its mtime tells build-examples.sh when the rootfs changed). The
# directory is built under a temporary name next to it and renamed only when
# debootstrap succeeded, and the stamp is written after the rename, so an
# interrupted run never leaves a half-built rootfs that a later run would
# take as done. A second run with the stamp present does nothing. The
# package list is part of the stamp's contract: change it and delete the
# stamp (or bump NAME).
#
# debootstrap --variant=minbase plus the packages; apt's .deb cache and
# package lists are removed afterwards (they are about half the download
# and never used at run time). debootstrap needs root.
#
# Prints the rootfs path on stdout as its last line; progress goes to stderr.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

if [[ $# -lt 2 ]]; then
	echo "usage: $0 NAME PACKAGE..." >&2
	exit 2
fi
name=$1
shift
packages=$(
	IFS=,
	echo "$*"
)

cache="${ATE_CACHE:-$HOME/.cache/ate}"
suite=bookworm
dest="$cache/rootfs/$name-$suite"
stamp="$dest.stamp"

log() { printf '%s-rootfs: %s\n' "$name" "$*" >&2; }

if [[ -f "$stamp" ]]; then
	log "cached: $dest"
	echo "$dest"
	exit 0
fi

if [[ $EUID -ne 0 ]]; then
	log "debootstrap needs root"
	exit 1
fi

if ! command -v debootstrap >/dev/null 2>&1; then
	log "installing debootstrap"
	apt_install debootstrap >&2
fi

# mirror prints the Debian archive URL this machine's apt uses (only
# deb.debian.org is reachable here), from one-line or deb822 sources, and
# falls back to deb.debian.org. Security and updates suites are skipped.
mirror() {
	local url
	url=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\/.*\/debian\/?$/) { print $i; exit } }')
	if [[ -z "$url" ]]; then
		url=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
			awk 'tolower($1) == "uris:" && $2 ~ /\/debian\/?$/ { print $2; exit }')
	fi
	echo "${url:-http://deb.debian.org/debian}"
}

mkdir -p "$cache/rootfs"
# One build at a time; the winner's result satisfies the others. Holding the
# lock also makes temp dirs of killed runs safe to delete.
exec 9>"$cache/rootfs/.$name-$suite.lock"
flock 9
if [[ -f "$stamp" ]]; then
	log "cached: $dest"
	echo "$dest"
	exit 0
fi
for stale in "$cache/rootfs/.$name-$suite".*; do
	[[ -d "$stale" ]] || continue
	umount -R "$stale/proc" "$stale/sys" 2>/dev/null || true
	rm -rf --one-file-system "$stale"
done

url=$(mirror)
tmp=$(mktemp -d "$cache/rootfs/.$name-$suite.XXXXXX")
chmod 0755 "$tmp" # mktemp makes it 0700; it becomes the image's /
# debootstrap leaves proc/sys mounts behind on some failures; unmount before
# removing so rm never walks into the host's /proc.
cleanup() {
	if [[ -n "${tmp:-}" && -d "$tmp" ]]; then
		umount -R "$tmp/proc" 2>/dev/null || true
		umount -R "$tmp/sys" 2>/dev/null || true
		rm -rf --one-file-system "$tmp"
	fi
}
trap cleanup EXIT

log "debootstrap --variant=minbase --include=$packages $suite from $url (takes 1-2 min)"
start=$(date +%s)
debootstrap --variant=minbase --include="$packages" "$suite" "$tmp" "$url" >&2

# Shrink: downloaded .debs and package lists are not needed at run time.
rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/cache/apt/*.bin \
	"$tmp"/var/lib/apt/lists/* "$tmp"/var/log/*.log "$tmp"/var/log/apt/*
mkdir -p "$tmp/var/lib/apt/lists/partial"
# debootstrap copies the build host's name and resolver; they describe this
# machine, not the sandbox, which gets its own from the runtime.
rm -f "$tmp/etc/hostname" "$tmp/etc/resolv.conf"

rm -f "$stamp"
rm -rf --one-file-system "$dest"
mv "$tmp" "$dest"
tmp=""
date -u +%Y-%m-%dT%H:%M:%SZ >"$stamp"
log "built $dest in $(($(date +%s) - start)) s ($(du -sh "$dest" | cut -f1))"
echo "$dest"
