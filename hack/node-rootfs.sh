#!/usr/bin/env bash
# node-rootfs.sh builds (once) a minimal Debian bookworm root filesystem
# with Node.js (Debian's nodejs package, v18) in it, for the node-sessions
# example image: see hack/debian-rootfs.sh for how (cached, idempotent,
# needs root).
#
# Result: ${ATE_CACHE:-$HOME/.cache/ate}/rootfs/nodejs-bookworm (+ .stamp).
# nodejs pulls in libnode, libuv, ICU and OpenSSL; npm is not needed (the
# example uses the standard library only) and not installed. ca-certificates
# is: Debian's node reads /etc/ssl/certs/ca-certificates.crt at start (and
# warns on every start without it), and an actor calling HTTPS APIs needs it.
#
# Prints the rootfs path on stdout as its last line; progress goes to stderr.
set -euo pipefail
exec bash "$(dirname "$0")/debian-rootfs.sh" nodejs nodejs ca-certificates
