# Sourced by hack/test.sh and hack/check.sh: every Go package with tests,
# sorted by what its tests need. A package is in exactly one list; a
# package in none is "quick" (no root, no built component), so a new
# package lands in `make check` by default, and one whose tests need more
# fails there loudly (the tests never skip) until it is listed below.

# Root: network namespaces, runsc sandboxes (hack/install-runsc.sh).
root_packages=(
	./internal/egress/
	./internal/netns/
	./internal/sandbox/gvisor/
)
# The stores, under the race detector: PostgreSQL (Debian's package; pgtest
# starts its own server, as the postgres user).
race_packages=(
	./internal/store/...
	./internal/apidial/
)
# PostgreSQL or SeaweedFS (hack/install-seaweedfs.sh) and root.
component_packages=(
	./internal/bench/
	./internal/identity/
	./internal/snapshot/s3/...
	./internal/up/
)
# A real kube-apiserver and etcd (envtest; hack/install-kube.sh control),
# helm and kustomize.
kube_packages=(
	./deploy/...
	./internal/auth/
	./internal/cli/
	./internal/k8s/...
	./pkg/apis/...
)
# The CNCF distribution registry server (hack/install-registry.sh), which
# hack/ocipush's test runs with TLS and htpasswd authentication.
registry_packages=(
	./hack/ocipush/
)
# Everything, each with its own stage in hack/test.sh.
e2e_packages=(./test/e2e/)
cluster_packages=(./test/cluster/)

# quick_packages: the rest.
mapfile -t _all < <(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./... | sed '/^$/d')
mapfile -t _listed < <(go list -f '{{.ImportPath}}' "${root_packages[@]}" "${race_packages[@]}" "${component_packages[@]}" \
	"${kube_packages[@]}" "${registry_packages[@]}" "${e2e_packages[@]}" "${cluster_packages[@]}")
quick_packages=()
for _p in "${_all[@]}"; do
	_in=0
	for _l in "${_listed[@]}"; do
		[[ $_p == "$_l" ]] && _in=1 && break
	done
	((_in)) || quick_packages+=("$_p")
done
unset _all _listed _p _l _in
