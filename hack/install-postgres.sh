#!/usr/bin/env bash
# Installs Debian's PostgreSQL server package, whose binaries
# (/usr/lib/postgresql/<major>/bin/initdb, postgres) the PostgreSQL store's
# tests run: internal/store/postgres/pgtest initdbs and starts a private
# server per test binary, and fails, never skips, without them.
#
# No cluster is created or started: the tests start their own, and a
# system-wide server on port 5432 would only be in the way. (Set
# ATE_TEST_POSTGRES=postgres://… to test against an existing server
# instead.)
#
# Idempotent: nothing is done when some initdb is already installed, and
# `apt-get update` runs only when the package must be installed. Needs
# root for that; hack/test.sh calls it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

shopt -s nullglob
found=(/usr/lib/postgresql/*/bin/initdb)
# pgtest runs the server as the postgres OS user when root, which the
# package creates.
if ((${#found[@]} > 0)); then
	if ! id postgres >/dev/null 2>&1; then
		[[ $(id -u) == 0 ]] || { echo "install-postgres: no postgres OS user, and creating it needs root" >&2; exit 1; }
		useradd --system --user-group --home-dir /var/lib/postgresql --shell /usr/sbin/nologin postgres
	fi
	echo "PostgreSQL already installed: ${found[*]}"
	exit 0
fi
if [[ $(id -u) != 0 ]]; then
	echo "install-postgres: PostgreSQL is not installed, and installing it needs root (apt-get)" >&2
	exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-postgres: no apt-get; install the PostgreSQL server binaries (initdb, postgres) by hand, or set ATE_TEST_POSTGRES" >&2
	exit 1
fi

# postgresql-common reads createcluster.d before creating the "main"
# cluster it would otherwise create and start during the install. The
# setting is ours only for this install: it goes afterwards, so the host's
# own PostgreSQL packaging behaves as before.
# (The directory stays: postgresql-common owns it once installed.)
undo=()
trap 'for f in "${undo[@]}"; do rm -f "$f"; done' EXIT
ccd=/etc/postgresql-common/createcluster.d
mkdir -p "$ccd"
conf=$ccd/ate-no-main-cluster.conf
if [[ ! -e $conf ]]; then
	printf '# hack/install-postgres.sh: tests start their own servers\ncreate_main_cluster = false\n' >"$conf"
	undo+=("$conf")
fi
# And no service is started during the install: policy-rc.d exiting 101
# forbids it (invoke-rc.d's protocol). An existing one (Docker images
# ship one) is left alone.
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	undo+=("$policy")
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-postgres: apt-get install postgresql..." >&2
apt_install --no-install-recommends postgresql >/dev/null
found=(/usr/lib/postgresql/*/bin/initdb)
if ((${#found[@]} == 0)); then
	echo "install-postgres: postgresql installed, but no /usr/lib/postgresql/*/bin/initdb" >&2
	exit 1
fi
echo "PostgreSQL installed: ${found[*]}"
