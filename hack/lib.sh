# Shared by the hack/ install scripts: sourced, not run.

# apt_install [APT-OPTION...] PKG...: installs Debian packages, waiting for another apt or
# dpkg (unattended-upgrades, a parallel install) to let go of its locks
# instead of failing at once. DPkg::Lock::Timeout covers the dpkg frontend
# lock; `apt-get update` takes the lists lock, which it does not wait for
# on Debian 12's apt 2.6, so update is retried while that lock is held.
apt_install() {
	export DEBIAN_FRONTEND=noninteractive
	local try
	for try in $(seq 1 60); do
		if apt-get -o DPkg::Lock::Timeout=600 update -qq; then
			break
		fi
		if ((try == 60)); then
			echo "apt_install: apt-get update kept failing (is another apt holding /var/lib/apt/lists/lock?)" >&2
			return 1
		fi
		echo "apt_install: apt-get update failed, retrying in 10 s (another apt may hold the lists lock)" >&2
		sleep 10
	done
	apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@"
}

# goproxy_mod MODULE@VERSION: prints the path of the module's go.mod in the
# module cache, fetched through the go command, so GOPROXY, GONOSUMDB,
# GOFLAGS and the checksum database apply as for any other download.
goproxy_mod() {
	local dir
	dir=$(mktemp -d)
	(cd "$dir" && go mod download -json "$1") | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p'
	rm -rf "$dir"
}

# quiet CMD...: runs CMD with its output kept in a file, printed only when
# it fails: a build step that is noisy when it works and never silent
# when it does not.
quiet() {
	local out rc=0
	out=$(mktemp)
	"$@" >"$out" 2>&1 || rc=$?
	if ((rc != 0)); then
		echo "failed ($rc): $*" >&2
		cat "$out" >&2
	fi
	rm -f "$out"
	return "$rc"
}
