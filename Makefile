# Gantry's one way to build and test. CI runs `make test` (see .ci/run).
SHELL := /usr/bin/env bash -o pipefail -o errexit

BIN := _output/bin
ARTIFACTS ?= _output/e2e-artifacts
# Number of kwok nodes for `make up`.
NODES ?= 3
# Ginkgo label filter for `make e2e`, e.g. FOCUS=smoke.
FOCUS ?=
# Extra flags for gantry-cluster up, e.g. UP_FLAGS="--port 6443 --retain".
UP_FLAGS ?=
GINKGO := go tool ginkgo
UNIT_PKGS = $(shell go list ./... | grep -v '/e2e/')

.PHONY: all build up down status e2e unit verify test clean update

all: build

## build: every control-plane binary into _output/bin (incremental).
build:
	hack/build.sh

## up: build, then bring up the local cluster (NODES=3).
up: build
	$(BIN)/gantry-cluster up --nodes $(NODES) $(UP_FLAGS)

## down: remove the local cluster and everything made for it.
down:
	go run ./kind down

status:
	go run ./kind status

## unit: unit tests (no cluster).
unit:
	go test $(UNIT_PKGS)

## e2e: ginkgo suites on the cluster of KUBECONFIG, or on a local cluster the suite brings up.
e2e: build
	mkdir -p $(ARTIFACTS)
	$(GINKGO) -v --timeout=40m $(if $(FOCUS),--label-filter='$(FOCUS)') \
		--junit-report=junit.xml --output-dir=$(ARTIFACTS) ./e2e/... -- --artifacts=$(abspath $(ARTIFACTS))

## verify: formatting, vet, tidy modules, generated files and Bazel metadata in sync.
verify:
	hack/verify.sh

## update: regenerate everything verify checks.
update:
	hack/update.sh

## test: what CI runs.
test: verify unit build e2e

clean:
	-go run ./kind down
	rm -rf _output
