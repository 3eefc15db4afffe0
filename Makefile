# Substrate. `make up` runs the all-in-one demo; `make test` runs every test.
SHELL := /bin/bash
ATE_CACHE ?= $(HOME)/.cache/ate
export ATE_CACHE
export PATH := $(ATE_CACHE)/bin:$(PATH)

.PHONY: all build deps generate up test examples bench

all: build

build:
	go build -o bin/ate ./cmd/ate

deps:
	bash hack/install-deps.sh

examples: build
	bash hack/build-examples.sh

generate:
	bash hack/generate.sh

up: deps examples
	bin/ate up --demo

test: deps examples
	bash hack/test.sh

bench: deps examples
	bash hack/bench.sh
