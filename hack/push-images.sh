#!/usr/bin/env bash
# push-images.sh (`make image-push REGISTRY=host[:port][/prefix] [TAG=…]`)
# pushes what `make image` built in build/images to REGISTRY/ate/<name>:TAG
# with hack/ocipush: ate and counter (multi-platform indexes, every
# platform's image with them), python-notes and node-sessions (each
# pushed only if built). For each it prints REGISTRY/ate/<name>@sha256:…
# and writes that line to build/images/pushed/<name>.ref, the reference
# to pin in Helm values or a template.
#
# Credentials: Docker's config.json ($DOCKER_CONFIG/config.json, else
# ~/.docker/config.json; `docker login`, `crane auth login` or an "auths"
# entry written by hand). TLS: the system's roots; SSL_CERT_FILE names
# another bundle (a private CA's).
#
# Usage: hack/push-images.sh REGISTRY [TAG]   (TAG defaults to latest)
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf 'push-images: %s\n' "$*" >&2; }

registry=${1:-}
tag=${2:-latest}
if [[ -z $registry ]]; then
	log "no registry: make image-push REGISTRY=registry.example.com[:port][/prefix] [TAG=0.1.0]"
	exit 2
fi
registry=${registry%/}

mkdir -p build/bin
go build -o build/bin/ocipush ./hack/ocipush

pushed=0
for name in ate counter python-notes node-sessions; do
	layout=build/images/$name
	if [[ ! -f $layout/index.json ]]; then
		case $name in
		ate | counter)
			log "no $layout: run \`make image\` first"
			exit 1
			;;
		*)
			log "$name: not built, skipped (\`make image\` builds it)"
			continue
			;;
		esac
	fi
	build/bin/ocipush --layout "$layout" --ref "$registry/ate/$name:$tag" --ref-file "build/images/pushed/$name.ref"
	pushed=$((pushed + 1))
done
log "pushed $pushed images; their references by digest are in build/images/pushed/*.ref"
