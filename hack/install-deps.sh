#!/usr/bin/env bash
# Installs everything a fresh machine needs to build, run and test Substrate.
# Idempotent and cached under ${ATE_CACHE:-$HOME/.cache/ate}: a second run
# on the same machine does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh

log() { printf 'install-deps: %s\n' "$*" >&2; }

missing=()
# nft, ip and nsenter: the chaos harness (test/e2e/chaos_net_test.go) runs
# each component in a network namespace of its own and drops packets
# between them with nftables rules.
for cmd in ip:iproute2 nsenter:util-linux nft:nftables debootstrap:debootstrap protoc:protobuf-compiler; do
	command -v "${cmd%%:*}" >/dev/null 2>&1 || missing+=("${cmd#*:}")
done
if ((${#missing[@]})); then
	log "apt-get install ${missing[*]} (usually under a minute)"
	apt_install "${missing[@]}"
fi
bash hack/install-runsc.sh
# staticcheck, pinned; lint runs in `make check` and `make test`.
bash hack/install-staticcheck.sh
log "ready (runsc, staticcheck and the system packages are installed)"
