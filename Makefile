# Substrate. `make up` runs the all-in-one demo; `make test` runs every test;
# `make check` is the quick loop (lint and the tests that need neither root
# nor a built component).
SHELL := /bin/bash
ATE_CACHE ?= $(HOME)/.cache/ate
export ATE_CACHE
export PATH := $(ATE_CACHE)/bin:$(PATH)

.PHONY: all build deps generate up up-banner check test examples image image-push bench chaos

all: build

build:
	go build -o bin/ate ./cmd/ate

deps:
	bash hack/install-deps.sh

examples: build
	bash hack/build-examples.sh

generate:
	bash hack/generate.sh

# The images to publish, as OCI layouts in build/images (hack/build-images.sh):
# `ate` (entrypoint ate, runsc included) as one linux/amd64 + linux/arm64
# index, `counter` likewise, `python-notes` and `node-sessions` for this
# host's architecture. The first run builds ate for both and runsc for the
# other architecture (14 min on 2 cores with an empty Go build cache);
# later runs rebuild what changed.
image:
	bash hack/build-images.sh

# `make image-push REGISTRY=host[:port][/prefix] [TAG=0.1.0]` pushes them as
# REGISTRY/ate/<name>:TAG with Docker's credentials (config.json) and
# writes each REGISTRY/ate/<name>@sha256:… to build/images/pushed/<name>.ref.
REGISTRY ?=
TAG ?= latest
image-push:
	bash hack/push-images.sh "$(REGISTRY)" "$(TAG)"

# The first `make up` installs runsc (built from source, about 5 minutes),
# staticcheck and Debian root filesystems for the Python example (1-2
# minutes) and the Node.js example (3-4 minutes); each step says what it
# installs and how long it usually takes. Later runs find everything
# cached and start in seconds.
up: up-banner deps examples
	bin/ate up --demo

up-banner:
	@echo "make up: installing what is missing (first run about 9-12 minutes: runsc ~5 min, Python example rootfs 1-2 min, Node.js example rootfs 3-4 min; cached afterwards)" >&2

check:
	bash hack/check.sh

# hack/test.sh installs what it needs itself (stage by stage, the slow
# builds in the background) and runs every stage even after a failure.
test:
	bash hack/test.sh

bench: deps examples
	bash hack/bench.sh

# The fault-injection harness for as long as asked: `make chaos
# DURATION=30m SEEDS=1,2,3` (per seed; default 10m, seed 1). `make test`
# runs it for 70 s on seeds 1 and 2.
DURATION ?= 10m
SEEDS ?= 1
FAULTS ?=
chaos:
	bash hack/chaos.sh $(DURATION) $(SEEDS) "$(FAULTS)"
