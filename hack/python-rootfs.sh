#!/usr/bin/env bash
# python-rootfs.sh builds (once) a minimal Debian bookworm root filesystem
# with python3 in it, for the python-notes example image: see
# hack/debian-rootfs.sh for how (cached, idempotent, needs root).
#
# Result: ${ATE_CACHE:-$HOME/.cache/ate}/rootfs/python3-bookworm (+ .stamp).
# python3-minimal lacks most of the standard library (no http.server), so
# the full python3 package is included (~330 MB with apt's .deb cache,
# ~170 MB after debian-rootfs.sh removes it; see
# shared/notes/gvisor-on-these-machines.md item 13).
#
# Prints the rootfs path on stdout as its last line; progress goes to stderr.
set -euo pipefail
exec bash "$(dirname "$0")/debian-rootfs.sh" python3 python3
