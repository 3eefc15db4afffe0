#!/usr/bin/env bash
# python-rootfs.sh builds (once) a minimal Debian bookworm root filesystem
# with python3 in it, for the python-notes example image.
#
# Result: ${ATE_CACHE:-$HOME/.cache/ate}/rootfs/python3-bookworm plus a stamp
# file python3-bookworm.stamp beside it (outside, so it is not packed into
# the image; its mtime tells build-examples.sh when the rootfs changed). The
# directory is built under a temporary name next to it and renamed only when
# debootstrap succeeded, and the stamp is written after the rename, so an
# interrupted run never leaves a half-built rootfs that a later run would
# take as done. A second run with the stamp present does nothing.
#
# python3-minimal lacks most of the standard library (no http.server), so
# the full python3 package is included (~330 MB with apt's .deb cache,
# ~170 MB after this script removes it; see
# shared/notes/gvisor-on-these-machines.md item 13). debootstrap needs root.
#
# Prints the rootfs path on stdout as its last line; progress goes to stderr.
set -euo pipefail

cache="${ATE_CACHE:-$HOME/.cache/ate}"
suite=bookworm
dest="$cache/rootfs/python3-$suite"
stamp="$dest.stamp"

log() { printf 'python-rootfs: %s\n' "$*" >&2; }

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
	apt-get update >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y debootstrap >&2
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
exec 9>"$cache/rootfs/.python3-$suite.lock"
flock 9
if [[ -f "$stamp" ]]; then
	log "cached: $dest"
	echo "$dest"
	exit 0
fi
for stale in "$cache/rootfs/.python3-$suite".*; do
	[[ -d "$stale" ]] || continue
	umount -R "$stale/proc" "$stale/sys" 2>/dev/null || true
	rm -rf --one-file-system "$stale"
done

url=$(mirror)
tmp=$(mktemp -d "$cache/rootfs/.python3-$suite.XXXXXX")
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

log "debootstrap --variant=minbase --include=python3 $suite from $url (takes 1-2 min)"
start=$(date +%s)
debootstrap --variant=minbase --include=python3 "$suite" "$tmp" "$url" >&2

# Shrink: downloaded .debs (~160 MB) and package lists are not needed at
# run time.
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
