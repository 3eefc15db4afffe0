#!/usr/bin/env bash
# Installs everything a fresh machine needs to build, run and test Substrate.
# Idempotent and cached under ${ATE_CACHE:-$HOME/.cache/ate}: a second run
# on the same machine does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'install-deps: %s\n' "$*" >&2; }

missing=()
for cmd in ip:iproute2 nsenter:util-linux debootstrap:debootstrap protoc:protobuf-compiler; do
	command -v "${cmd%%:*}" >/dev/null 2>&1 || missing+=("${cmd#*:}")
done
if ((${#missing[@]})); then
	log "apt-get install ${missing[*]} (usually under a minute)"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
bash hack/install-runsc.sh
# staticcheck, pinned; lint runs in `make test`.
cache=${ATE_CACHE:-$HOME/.cache/ate}
if [[ ! -x $cache/bin/staticcheck ]] || ! go version -m "$cache/bin/staticcheck" | grep -q 'honnef.co/go/tools[[:space:]]*v0.8.2'; then
	log "installing staticcheck v0.8.2 (about a minute, once)"
	GOBIN=$cache/bin go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
log "ready (runsc, staticcheck and the system packages are installed)"
