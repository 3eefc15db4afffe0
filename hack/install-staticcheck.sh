#!/usr/bin/env bash
# Installs staticcheck, pinned, into ${ATE_CACHE:-$HOME/.cache/ate}/bin:
# `make check` and `make test` lint with it. Needs no root. Idempotent.
set -euo pipefail
STATICCHECK_VERSION=v0.8.2
cache=${ATE_CACHE:-$HOME/.cache/ate}
if [[ -x $cache/bin/staticcheck ]] && go version -m "$cache/bin/staticcheck" | grep -q "honnef.co/go/tools[[:space:]]*$STATICCHECK_VERSION"; then
	exit 0
fi
echo "install-staticcheck: installing staticcheck $STATICCHECK_VERSION (about a minute, once)" >&2
mkdir -p "$cache/bin"
GOBIN=$cache/bin go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
