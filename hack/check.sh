#!/usr/bin/env bash
# The contributor's loop (`make check`): go vet, staticcheck, and every
# test that needs neither root nor a built component (hack/packages.sh's
# quick list), in a few minutes on a warm Go cache. Runs as any user.
# `make test` runs these and everything else.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${ATE_CACHE:-$HOME/.cache/ate}
bash hack/install-staticcheck.sh
source hack/packages.sh
start=$(date +%s)
go vet ./...
"$cache/bin/staticcheck" ./...
go test -count=1 "${quick_packages[@]}"
echo "check: vet, staticcheck and ${#quick_packages[@]} packages' tests passed in $(($(date +%s) - start))s"
